"""Megatron-layout checkpoints: save atomically, load with Megatron's resume semantics (spec section 5).

Save: every (tp, pp) shard is written by its DP-rank-0 process under `iter_%07d.tmp/`; after a barrier global
rank 0 renames the folder to `iter_%07d/` and only then writes the tracker, so a crash mid-save never
leaves the
tracker pointing at a partial checkpoint. Load: a training checkpoint (optimizer inside) resumes iteration,
data
position, optimizer, scheduler and RNG; `--finetune` or a converted checkpoint (no optimizer) restarts at 0.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ascendfactory.checkpoints.megatron import parse_tracker, tracker_text
from ascendfactory.engine.convert import megatron_io
from ascendfactory.engine.convert.shard_map import hf_local_to_megatron, megatron_to_hf_local
from ascendfactory.errors import ConfigError, ParallelismError, Problem

CHECKPOINT_VERSION = 3.0
CRASH_ENV = "AF_TRAIN_CRASH_IN_SAVE_AT"  # test hook: raise after the shards are written, before the rename


@dataclass
class Position:
    iteration: int = 0
    consumed_train_samples: int = 0
    floating_point_operations: float = 0.0


@dataclass(frozen=True)
class Topology:
    tp: int
    pp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    layer_offset: int
    dp_group: Any


def _rng_state(device: torch.device) -> dict[str, Any]:
    state = {
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda_rng_state"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["random_rng_state"])
    np.random.set_state(state["np_rng_state"])
    torch.set_rng_state(state["torch_rng_state"])
    if "cuda_rng_state" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_rng_state"])


def _optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Adam moments by HF parameter name, as this rank's local shards."""
    state = {}
    for name, p in model.named_parameters():
        s = optimizer.state.get(p)
        if s:
            state[name] = {
                k: (v.to_local() if hasattr(v, "to_local") else v).detach().cpu().clone()
                for k, v in s.items()
            }
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    return {"state": state, "param_groups": groups}


def _load_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any]
) -> None:
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        if name not in saved["state"]:
            continue
        entry = {}
        for k, v in saved["state"][name].items():
            v = v if k == "step" else v.to(p.device)  # AdamW keeps `step` on the CPU
            if isinstance(p, DTensor) and v.ndim:
                v = DTensor.from_local(v, p.device_mesh, p.placements, run_check=False)
            entry[k] = v
        optimizer.state[p] = entry
    for group, saved_group in zip(optimizer.param_groups, saved["param_groups"]):
        group.update({k: v for k, v in saved_group.items() if k in group and k != "params"})


class Checkpointer:
    def __init__(
        self,
        *,
        args: argparse.Namespace,
        megatron_args: argparse.Namespace,
        topo: Topology,
        device: torch.device,
        log: Any,
    ):
        self.args, self.mg_args, self.topo, self.device, self.log = args, megatron_args, topo, device, log

    # ---------------------------------------------------------------- save
    def save(
        self, model: torch.nn.Module, optimizer: Any, scheduler: Any, scaler: Any, pos: Position
    ) -> None:
        args, topo = self.args, self.topo
        root = Path(args.save)
        final = megatron_io.iteration_dir(root, pos.iteration)
        tmp = final.with_name(final.name + ".tmp")
        rank = dist.get_rank()
        self.log(f"saving checkpoint at iteration {pos.iteration:7d} to {args.save} in torch format")
        if rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        dist.barrier()
        rng = None
        if not args.no_save_rng:
            rng = [None] * dist.get_world_size(topo.dp_group)
            dist.all_gather_object(rng, _rng_state(self.device), group=topo.dp_group)
        if topo.dp_rank == 0:
            payload = self._payload(model, optimizer, scheduler, scaler, pos, rng)
            shard_dir = (
                tmp
                / megatron_io.checkpoint_dir(root, pos.iteration, topo.tp_rank, topo.pp_rank, topo.pp).name
            )
            shard_dir.mkdir(parents=True, exist_ok=True)
            torch.save(payload, shard_dir / megatron_io.SHARD_FILE)
        dist.barrier()
        if os.environ.get(CRASH_ENV) == str(pos.iteration):
            raise RuntimeError(
                f"{CRASH_ENV}={pos.iteration}: simulated crash before the checkpoint is committed"
            )
        if rank == 0:
            old = final.with_name(final.name + ".old")
            if final.exists():
                final.rename(old)
            tmp.rename(final)
            megatron_io.write_tracker(root, pos.iteration)
            shutil.rmtree(old, ignore_errors=True)
        dist.barrier()
        self.log(f"  successfully saved checkpoint from iteration {pos.iteration:7d} to {args.save}")

    def _payload(
        self, model, optimizer, scheduler, scaler, pos: Position, rng: list | None
    ) -> dict[str, Any]:
        from ascendfactory.engine.train.model import local_state

        topo = self.topo
        local = {k: v.detach().cpu().clone() for k, v in local_state(model).items()}
        shard = hf_local_to_megatron(
            local, cfg=self.mg_args, tp=topo.tp, tp_rank=topo.tp_rank, layer_offset=topo.layer_offset
        )
        saved_args = argparse.Namespace(**{**vars(self.args), **vars(self.mg_args)})
        saved_args.consumed_train_samples = pos.consumed_train_samples
        saved_args.iteration = pos.iteration
        payload: dict[str, Any] = {
            "args": saved_args,
            "checkpoint_version": CHECKPOINT_VERSION,
            "iteration": pos.iteration,
            "model": shard,
            "num_floating_point_operations_so_far": pos.floating_point_operations,
        }
        if not self.args.no_save_optim:
            opt = _optimizer_state(model, optimizer)
            opt["grad_scaler"] = scaler.state_dict()
            payload["optimizer"] = opt
            payload["opt_param_scheduler"] = scheduler.state_dict()
        if rng is not None:
            payload["rng_state"] = rng
        return payload

    # ---------------------------------------------------------------- load
    def load(self, model: torch.nn.Module, optimizer: Any, scheduler: Any, scaler: Any) -> Position | None:
        """Load `--load` into the model (and state unless finetuning); None when there is nothing to load."""
        args, topo = self.args, self.topo
        tracker = Path(args.load) / megatron_io.TRACKER
        text = tracker_text(args.load)
        if text is None:
            if args.exit_on_missing_checkpoint:
                raise ConfigError(
                    Problem(
                        key="--load",
                        message=f"no {megatron_io.TRACKER} in {args.load}",
                        fix="point --load at a Megatron checkpoint folder, or drop "
                        "--exit-on-missing-checkpoint to start from random weights",
                        source="command line",
                    )
                )
            self.log(f"WARNING: could not find the metadata file {tracker} ")
            self.log("    will not load any checkpoints and will start from random")
            return None
        value = parse_tracker(text)
        release = value == "release"
        if value is None:
            raise ConfigError(
                Problem(
                    key="--load",
                    message=f"ERROR: Invalid metadata file {tracker}: '{text}'",
                    fix="the tracker must hold an iteration > 0 or 'release'",
                    source="command line",
                )
            )
        iteration = 0 if release else int(value)
        folder = Path(args.load) / "release" if release else megatron_io.iteration_dir(args.load, iteration)
        ckpt_tp, ckpt_pp = (
            megatron_io.discover_layout(args.load, iteration) if not release else (topo.tp, topo.pp)
        )
        if (ckpt_tp, ckpt_pp) != (topo.tp, topo.pp):
            raise ParallelismError(
                Problem(
                    key="--load",
                    message=f"{args.load} was saved with TP={ckpt_tp}, PP={ckpt_pp} but this run uses "
                    f"TP={topo.tp}, PP={topo.pp}",
                    fix="reshard it: ascendfactory-cli convert --load-model-type mg --save-model-type mg "
                    f"--load-dir "
                    f"{args.load} --save-dir <new> --target-tensor-parallel-size {topo.tp} "
                    f"--target-pipeline-parallel-size {topo.pp}",
                    source="command line",
                )
            )
        shard_dir = (
            folder / megatron_io.checkpoint_dir(args.load, 1, topo.tp_rank, topo.pp_rank, topo.pp).name
        )
        state = torch.load(shard_dir / megatron_io.SHARD_FILE, map_location="cpu", weights_only=False)
        self.log(f" loading checkpoint from {args.load} at iteration {iteration}")
        from ascendfactory.engine.train.model import load_local_state

        local = megatron_to_hf_local(
            state["model"], cfg=self.mg_args, tp=topo.tp, tp_rank=topo.tp_rank, layer_offset=topo.layer_offset
        )
        load_local_state(model, local)
        converted = "optimizer" not in state and "opt_param_scheduler" not in state
        if args.finetune or release or converted:
            return Position()
        if not args.no_load_optim:
            _load_optimizer_state(model, optimizer, state["optimizer"])
            scheduler.load_state_dict(state["opt_param_scheduler"])
            if "grad_scaler" in state["optimizer"]:
                scaler.load_state_dict(state["optimizer"]["grad_scaler"])
        if not args.no_load_rng:
            if "rng_state" not in state:
                raise ConfigError(
                    Problem(
                        key="--load",
                        message=f"{shard_dir} has no RNG state",
                        fix="add --no-load-rng, or --finetune",
                        source="command line",
                    )
                )
            rng = state["rng_state"]
            _set_rng_state(rng[topo.dp_rank] if len(rng) > topo.dp_rank else rng[0])
        saved = state.get("args")
        return Position(
            iteration=int(state.get("iteration", iteration)),
            consumed_train_samples=int(getattr(saved, "consumed_train_samples", 0) or 0),
            floating_point_operations=float(state.get("num_floating_point_operations_so_far", 0)),
        )
