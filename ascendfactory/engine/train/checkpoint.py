"""Megatron-layout checkpoints: save atomically, load with Megatron's resume semantics
(docs/sources.md#resume-and-fault-recovery).

Save: every (tp, pp) shard is written by its DP-rank-0 process under `iter_%07d.tmp/`; after a barrier global
rank 0 renames the folder to `iter_%07d/` and only then writes the tracker, so a crash mid-save never leaves
the tracker pointing at a partial checkpoint. Load: a training checkpoint (optimizer inside) resumes
iteration, data position, optimizer, scheduler and RNG; `--finetune` or a converted checkpoint (no optimizer)
restarts at 0.

As MindSpeed-LLM writes them:
- `--bf16` / `--fp16`: model tensors in that dtype (Megatron's Float16Module params); the fp32 master
  weights the optimizer updates (`mixed_precision.py`) go into `optimizer[MASTER_PARAMS]`, and a resume puts
  them back, so it is exact. Loading rounds every weight to the run's dtype, as Megatron's bf16 model does,
  and the masters start from those rounded weights when the checkpoint has none.
- Tied embeddings with PP > 1: the last stage's `output_layer.weight` (its own copy of the embedding).
- LoRA: PEFT's layout (`engine.convert.lora`): `X.base_layer.*` + `X.lora_A/B.default.weight`, only the
  LoRA keys with `--lora-ckpt-filter`; `--lora-load` overlays that checkpoint's tensors and takes its
  iteration, optimizer, scheduler and RNG (MindSpeed-LLM merges the two state dicts).
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
from ascendfactory.engine.convert import lora, megatron_io
from ascendfactory.engine.convert.shard_map import hf_local_to_megatron, megatron_to_hf_local
from ascendfactory.engine.train import distopt_file, megatron_buffer
from ascendfactory.engine.train.distopt import DISTRIB_OPTIM_FILE
from ascendfactory.engine.train.moe.state import split_experts, stack_experts
from ascendfactory.errors import ConfigError, ParallelismError, Problem

CHECKPOINT_VERSION = 3.0
# In the `optimizer` entry of a bf16/fp16 run: the fp32 weights of the trained parameters, by name
# (Megatron's Float16OptimizerWithFloat16Params keeps them as `fp32_from_fp16_params`); the model shard
# holds them rounded.
MASTER_PARAMS = "fp32_from_fp16_params"
CRASH_ENV = "AF_TRAIN_CRASH_IN_SAVE_AT"  # test hook: raise after the shards are written, before the rename


@dataclass
class Position:
    iteration: int = 0
    consumed_train_samples: int = 0
    floating_point_operations: float = 0.0
    consumed_valid_samples: int = 0  # Megatron's args.consumed_valid_samples: where validation continues


@dataclass(frozen=True)
class Topology:
    tp: int
    pp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    layer_offset: int
    dp_group: Any
    chunks: tuple[tuple[int, int], ...] = ()  # virtual pipeline: (first layer, count) of each model chunk
    ep: int = 1  # expert parallelism: this rank holds experts ep_rank x E/ep .. (ep_rank + 1) x E/ep - 1
    ep_rank: int = 0
    num_local_experts: int = 0  # 0: a dense model

    @property
    def saves(self) -> bool:
        """This rank writes its (tp, pp, ep) shard: data-modulo-expert-parallel rank 0 (DP rank 0 without
        EP; Megatron's `get_data_modulo_expert_parallel_rank() == 0`)."""
        return self.dp_rank < self.ep

    @property
    def first_expert(self) -> int:
        return self.ep_rank * self.num_local_experts

    def chunk_spans(self) -> list[tuple[int | None, int]]:
        """(first layer, count) per model chunk; one chunk (count unknown: -1) without a virtual pipeline."""
        return list(self.chunks) or [(self.layer_offset, -1)]


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


def _optimizer_state(model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """Adam moments by HF parameter name, as this rank's local shards."""
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    if hasattr(optimizer, "named_state"):  # mixed precision: the moments of the fp32 masters
        return {"state": optimizer.named_state(), "param_groups": groups}
    state = {}
    for name, p in model.named_parameters():
        s = optimizer.state.get(p)
        if s:
            state[name] = {
                k: (v.to_local() if hasattr(v, "to_local") else v).detach().cpu().clone()
                for k, v in s.items()
            }
    return {"state": state, "param_groups": groups}


def _load_optimizer_state(model: torch.nn.Module, optimizer: Any, saved: dict[str, Any]) -> None:
    if hasattr(optimizer, "load_named_state"):  # mixed precision: the moments of the fp32 masters
        optimizer.load_named_state(saved["state"])
    else:
        _load_weight_state(model, optimizer, saved["state"])
    for group, saved_group in zip(optimizer.param_groups, saved["param_groups"]):
        group.update({k: v for k, v in saved_group.items() if k in group and k != "params"})


def _load_weight_state(model: torch.nn.Module, optimizer: Any, state: dict[str, Any]) -> None:
    """Adam's state by name into torch AdamW over the (fp32, possibly DTensor) weights."""
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        if name not in state:
            continue
        entry = {}
        for k, v in state[name].items():
            v = v if k == "step" else v.to(p.device)  # AdamW keeps `step` on the CPU
            if isinstance(p, DTensor) and v.ndim:
                v = DTensor.from_local(v, p.device_mesh, p.placements, run_check=False)
            entry[k] = v
        optimizer.state[p] = entry


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
        self.loaded = False  # a checkpoint's weights were loaded
        self.tied_output_loaded = False  # ... and they held this rank's tied output copy (PP > 1)

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
        param_state = None  # the distributed optimizer's shards, gathered on DP rank 0 (a collective)
        if is_distributed(optimizer) and not args.no_save_optim:
            named = optimizer.gather_state()
            if named is not None:
                param_state = distopt_file.to_file(named, self._fp32_chunks, self.distopt_layout())
        if topo.saves:
            payload = self._payload(model, optimizer, scheduler, scaler, pos, rng)
            shard_dir = tmp / self._shard_name(root, pos.iteration)
            shard_dir.mkdir(parents=True, exist_ok=True)
            torch.save(payload, shard_dir / megatron_io.SHARD_FILE)
            if param_state is not None:
                torch.save(param_state, shard_dir / DISTRIB_OPTIM_FILE)
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

    def _shard_name(self, root: str | Path, iteration: int) -> str:
        topo = self.topo
        return megatron_io.checkpoint_dir(
            root, iteration, topo.tp_rank, topo.pp_rank, topo.pp, topo.ep_rank, topo.ep
        ).name

    def _payload(
        self, model, optimizer, scheduler, scaler, pos: Position, rng: list | None
    ) -> dict[str, Any]:
        from ascendfactory.engine.train.model import local_state

        local = {k: v.detach().cpu().clone() for k, v in local_state(model).items()}
        models = self.chunked_to_megatron(local)
        saved_args = argparse.Namespace(**{**vars(self.args), **vars(self.mg_args)})
        saved_args.consumed_train_samples = pos.consumed_train_samples
        saved_args.consumed_valid_samples = pos.consumed_valid_samples
        saved_args.iteration = pos.iteration
        payload: dict[str, Any] = {
            "args": saved_args,
            "checkpoint_version": CHECKPOINT_VERSION,
            "iteration": pos.iteration,
            **models,
            "num_floating_point_operations_so_far": pos.floating_point_operations,
        }
        if not self.args.no_save_optim and is_distributed(optimizer):  # the rest is in distrib_optim.pt
            payload["optimizer"] = {**optimizer.state_dict(), "grad_scaler": scaler.state_dict()}
            payload["opt_param_scheduler"] = scheduler.state_dict()
        elif not self.args.no_save_optim:
            opt = _optimizer_state(model, optimizer)
            opt["grad_scaler"] = scaler.state_dict()
            if hasattr(optimizer, "masters_by_name"):  # the model shard is rounded: keep the fp32 masters
                opt[MASTER_PARAMS] = optimizer.masters_by_name()
            payload["optimizer"] = opt
            payload["opt_param_scheduler"] = scheduler.state_dict()
        if rng is not None:
            payload["rng_state"] = rng
        return payload

    @property
    def params_dtype(self) -> torch.dtype:
        return self.mg_args.params_dtype

    @property
    def tied_output(self) -> bool:
        """This rank holds the last-stage copy of tied embeddings (`output_layer.weight`, PP > 1)."""
        topo = self.topo
        tied = not self.mg_args.untie_embeddings_and_output_weights
        return tied and topo.pp > 1 and topo.pp_rank == topo.pp - 1

    @property
    def lora_targets(self) -> list[str]:
        return list(getattr(self.args, "lora_target_modules", None) or [])

    def chunked_to_megatron(
        self, local: dict[str, torch.Tensor], *, cast: bool = True
    ) -> dict[str, dict[str, torch.Tensor]]:
        """{'model': shard}, or with a virtual pipeline {'model0': ..., 'model1': ...} (Megatron's keys),
        each chunk's layers numbered from 0, the embedding in the first chunk and the head in the last.
        `cast`: in the run's params dtype (the model entry), else as given (the optimizer's fp32 state)."""
        spans = self.topo.chunk_spans()
        if len(spans) == 1:
            return {"model": self.to_megatron(local, cast=cast)}
        return {
            megatron_io.model_key(c, len(spans)): self.to_megatron(
                _chunk_part(local, spans, c),
                layer_offset=offset,
                tied_output=self.tied_output and c == len(spans) - 1,
                cast=cast,
            )
            for c, (offset, _) in enumerate(spans)
        }

    def _fp32_chunks(self, local: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
        return self.chunked_to_megatron(local, cast=False)

    def distopt_layout(self) -> distopt_file.FileLayout:
        """What Megatron's buffers depend on for this rank: dtypes, DP, bucket sizes (one bucket unless
        --overlap-grad-reduce) and the tied embedding's own bucket with PP > 1 (`megatron_buffer`)."""
        topo = self.topo
        n = len(topo.chunk_spans())
        dp = dist.get_world_size(topo.dp_group) if dist.is_initialized() else 1
        tied = not self.mg_args.untie_embeddings_and_output_weights and topo.pp > 1
        shared: list[str | None] = [None] * n
        if tied and topo.pp_rank == 0:
            shared[0] = "embedding.word_embeddings.weight"
        if tied and topo.pp_rank == topo.pp - 1:
            shared[-1] = "output_layer.weight"
        overlap = bool(getattr(self.args, "overlap_grad_reduce", False))
        sizes = tuple(
            megatron_buffer.bucket_size_for(overlap_grad_reduce=overlap, dp=dp, pp_rank=topo.pp_rank, chunk=c)
            for c in range(n)
        )
        return distopt_file.FileLayout(distopt_file.buffer_key(self.params_dtype), dp, sizes, tuple(shared))

    def to_megatron(
        self,
        local: dict[str, torch.Tensor],
        *,
        layer_offset: int | None = None,
        tied_output: bool | None = None,
        cast: bool = True,
    ) -> dict[str, torch.Tensor]:
        """This rank's local parameters -> its Megatron shard, in the run's params dtype (bf16 with --bf16).

        LoRA (MindSpeed-LLM's PEFT layout): target modules' weights as `X.base_layer.*`, then the adapters
        `X.lora_A/B.default.weight`; with --lora-ckpt-filter only the keys that contain 'lora'."""
        from ascendfactory.engine.train.lora import checkpoint_name, is_adapter

        topo = self.topo
        offset = topo.layer_offset if layer_offset is None else layer_offset
        base = {checkpoint_name(k): v for k, v in local.items() if not is_adapter(k)}
        if topo.num_local_experts:  # the 3-D expert tensors -> one HF tensor per (global) expert
            base = split_experts(base, first_expert=topo.first_expert)
        shard = hf_local_to_megatron(
            base,
            cfg=self.mg_args,
            tp=topo.tp,
            tp_rank=topo.tp_rank,
            layer_offset=offset,
            keep_tied_output=self.tied_output if tied_output is None else tied_output,
            **self._expert_kwargs(grouped=True),
        )
        if self.lora_targets:
            adapters = lora.local_to_megatron(
                {k: v for k, v in local.items() if is_adapter(k)},
                cfg=self.mg_args,
                tp=topo.tp,
                tp_rank=topo.tp_rank,
                layer_offset=offset,
            )
            if shard or not adapters:
                shard = lora.with_adapters(lora.to_peft_layout(shard, self.lora_targets), adapters)
            else:  # only adapters (the optimizer state of a LoRA run): in their PEFT names
                shard = adapters
            if self.args.lora_ckpt_filter:
                shard = lora.filter_lora(shard)
        dtype = self.params_dtype
        if not cast:
            return shard
        return {k: v.to(dtype) if v.is_floating_point() and v.dtype != dtype else v for k, v in shard.items()}

    def _expert_kwargs(self, *, grouped: bool = False) -> dict[str, Any]:
        """The bridge's expert-parallel arguments (none for a dense model); `grouped`: the layout to write
        (`--moe-grouped-gemm`: Megatron's GroupedMLP weight1 / weight2; reading takes either)."""
        topo = self.topo
        if not topo.num_local_experts:
            return {}
        out: dict[str, Any] = {"ep": topo.ep, "ep_rank": topo.ep_rank}
        if grouped:
            out["grouped_gemm"] = bool(getattr(self.args, "moe_grouped_gemm", False))
        return out

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
        ckpt = (
            megatron_io.discover_parallel(args.load, iteration)
            if not release
            else (topo.tp, topo.pp, topo.ep)
        )
        if ckpt != (topo.tp, topo.pp, topo.ep):
            ep_fix = f" --target-expert-parallel-size {topo.ep}" if topo.num_local_experts else ""
            raise ParallelismError(
                Problem(
                    key="--load",
                    message=f"{args.load} was saved with TP={ckpt[0]}, PP={ckpt[1]}"
                    + (f", EP={ckpt[2]}" if ckpt[2] > 1 or topo.ep > 1 else "")
                    + f" but this run uses TP={topo.tp}, PP={topo.pp}"
                    + (f", EP={topo.ep}" if ckpt[2] > 1 or topo.ep > 1 else ""),
                    fix="reshard it: ascendfactory-cli convert --load-model-type mg --save-model-type mg "
                    f"--load-dir "
                    f"{args.load} --save-dir <new> --target-tensor-parallel-size {topo.tp} "
                    f"--target-pipeline-parallel-size {topo.pp}" + ep_fix,
                    source="command line",
                )
            )
        shard_dir = folder / self._shard_name(args.load, 1)
        state = torch.load(shard_dir / megatron_io.SHARD_FILE, map_location="cpu", weights_only=False)
        self.log(f" loading checkpoint from {args.load} at iteration {iteration}")
        if getattr(args, "lora_load", None):
            state, shard_dir = self._overlay_lora(state)
        self._load_model(model, state)
        if hasattr(optimizer, "sync_from_model"):  # fp32 masters from the loaded (rounded) weights, unless
            optimizer.sync_from_model()  # the checkpoint's own masters are loaded below
        converted = "optimizer" not in state and "opt_param_scheduler" not in state
        if args.finetune or release or converted:
            return Position()
        if not args.no_load_optim:
            self._load_optimizer(model, optimizer, state, shard_dir)
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
            consumed_valid_samples=int(getattr(saved, "consumed_valid_samples", 0) or 0),
            floating_point_operations=float(state.get("num_floating_point_operations_so_far", 0)),
        )

    def _load_optimizer(self, model: Any, optimizer: Any, state: dict[str, Any], shard_dir: Path) -> None:
        """The optimizer state, of the kind this run uses. Megatron (legacy format) cannot switch between the
        distributed optimizer and the replicated one on a resume (its load fails: a KeyError, or no
        distrib_optim.pt); only the weights carry over, with --no-load-optim or --finetune."""
        distributed_file = shard_dir / DISTRIB_OPTIM_FILE
        saved_distributed = distributed_file.is_file() or "state" not in state.get("optimizer", {})
        if is_distributed(optimizer) != saved_distributed:
            raise ConfigError(switch_problem(saved_distributed=saved_distributed, where=str(shard_dir)))
        if is_distributed(optimizer):
            if not distributed_file.is_file():
                raise ConfigError(
                    Problem(
                        key="--load",
                        message=f"{distributed_file} is missing (its model_optim_rng.pt was saved with "
                        "--use-distributed-optimizer)",
                        fix="restore the file, or add --no-load-optim to take the weights only",
                        source="command line",
                    )
                )
            self._load_distributed(optimizer, distributed_file, state["optimizer"])
        else:
            _load_optimizer_state(model, optimizer, state["optimizer"])
            _load_master_params(model, optimizer, state["optimizer"].get(MASTER_PARAMS))

    def _load_distributed(self, optimizer: Any, path: Path, state: dict[str, Any]) -> None:
        """Megatron's `distrib_optim.pt` -> the distributed optimizer (each rank reads it, mmapped, and takes
        its own slices, where Megatron scatters them from DP rank 0)."""
        from ascendfactory.engine.train.model import local_tensor

        saved = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        current = self._fp32_chunks({n: local_tensor(p).detach().cpu() for n, p in optimizer.named})
        spans = self.topo.chunk_spans()
        named = distopt_file.from_file(
            saved,
            current,
            lambda chunk, c: self._chunk_local(chunk, spans[c][0] or 0),
            self.distopt_layout(),
            where=str(path.parent),
        )
        optimizer.load_state(named, state)

    def _overlay_lora(self, state: dict[str, Any]) -> tuple[dict[str, Any], Path]:
        """MindSpeed-LLM's `--lora-load`: that checkpoint's tensors over the base's, and its iteration,
        optimizer, scheduler, RNG and args (`training/checkpointing.py` merges the two state dicts)."""
        args, topo = self.args, self.topo
        root = Path(args.lora_load)
        text = tracker_text(root)
        value = parse_tracker(text) if text is not None else None
        if not isinstance(value, int):
            raise ConfigError(
                Problem(
                    key="--lora-load",
                    message=f"{root} holds no {megatron_io.TRACKER} with an iteration",
                    fix="point --lora-load at the --save folder of a LoRA run",
                    source="command line",
                )
            )
        layout = megatron_io.discover_layout(root, value)
        if layout != (topo.tp, topo.pp):
            raise ParallelismError(
                Problem(
                    key="--lora-load",
                    message=f"{root} was saved with TP={layout[0]}, PP={layout[1]} but this run uses "
                    f"TP={topo.tp}, PP={topo.pp}",
                    fix="train with the layout the adapters were saved with",
                    source="command line",
                )
            )
        shard_dir = megatron_io.checkpoint_dir(root, value, topo.tp_rank, topo.pp_rank, topo.pp)
        extra = torch.load(shard_dir / megatron_io.SHARD_FILE, map_location="cpu", weights_only=False)
        keys = [k for k in extra if k == "model" or (k.startswith("model") and k[5:].isdigit())]
        if not any(lora.adapter_targets(extra[k]) for k in keys):
            raise ConfigError(
                Problem(
                    key="--lora-load",
                    message=f"{shard_dir} holds no LoRA adapters",
                    fix="point --lora-load at the --save folder of a LoRA run",
                    source="command line",
                )
            )
        self.log(f" loading checkpoint from {root} at iteration {value}")
        merged = {**state, **{k: v for k, v in extra.items() if k not in keys}}
        for k in keys:  # `model`, or each chunk's `model0`, `model1`, ...
            merged[k] = {**state.get(k, {}), **extra[k]}
        return merged, shard_dir

    def _chunk_states(self, state: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
        """(Megatron model dict, first global layer) per model chunk this run holds; ConfigError when the
        checkpoint's chunks (`model` or `model0`, `model1`, ...) are not this run's virtual pipeline."""
        spans = self.topo.chunk_spans()
        keys = [megatron_io.model_key(c, len(spans)) for c in range(len(spans))]
        if all(k in state for k in keys) and not (len(spans) == 1 and "model0" in state):
            return [(state[k], offset) for k, (offset, _) in zip(keys, spans)]
        saved = sorted(k for k in state if k == "model" or (k.startswith("model") and k[5:].isdigit()))
        raise ConfigError(
            Problem(
                key="--load",
                message=f"{self.args.load} holds model chunks {', '.join(saved) or 'none'} but this run "
                f"has {', '.join(keys)} (virtual pipeline: {len(spans)} chunk(s) per stage)",
                fix="resume with the --num-layers-per-virtual-pipeline-stage it was saved with, or convert "
                "it (mg -> hf, then hf -> mg with this run's layout)",
                source="command line",
            )
        )

    def _load_model(self, model: torch.nn.Module, state: dict[str, Any]) -> None:
        from ascendfactory.engine.train.lora import is_adapter
        from ascendfactory.engine.train.model import load_local_state

        local: dict[str, torch.Tensor] = {}
        for chunk, offset in self._chunk_states(state):
            local.update(self._chunk_local(chunk, offset))
        tied_output = self.tied_output
        load_local_state(
            model, local, missing_ok=lambda n: is_adapter(n) or (tied_output and n == "lm_head.weight")
        )
        self.loaded = True
        self.tied_output_loaded = tied_output and "lm_head.weight" in local

    def _chunk_local(self, chunk: dict[str, Any], offset: int) -> dict[str, torch.Tensor]:
        """One model chunk's Megatron tensors (PEFT layout with LoRA) -> this rank's local HF tensors."""
        topo = self.topo
        base, adapters = lora.from_peft_layout(chunk)
        if adapters and not self.lora_targets:
            raise ConfigError(
                Problem(
                    key="--load",
                    message=f"{self.args.load} holds LoRA adapters "
                    f"({', '.join(sorted(lora.adapter_targets(adapters)))}) but LoRA is off",
                    fix="add the run's --lora-target-modules/--lora-r/--lora-alpha to continue it, or merge "
                    "the adapters first (convert --load-model-type mg with --lora-r/--lora-alpha)",
                    source="command line",
                )
            )
        found = lora.adapter_targets(adapters)
        if found - set(self.lora_targets):
            raise ConfigError(
                Problem(
                    key="--lora-target-modules",
                    message=f"{' '.join(self.lora_targets)}, but the checkpoint has adapters on "
                    f"{' '.join(sorted(found))}",
                    fix="give the --lora-target-modules the adapters were trained with",
                    source="command line",
                )
            )
        local = megatron_to_hf_local(
            base,
            cfg=self.mg_args,
            tp=topo.tp,
            tp_rank=topo.tp_rank,
            layer_offset=offset,
            **self._expert_kwargs(),
        )
        if topo.num_local_experts:  # one HF tensor per expert -> this rank's 3-D expert tensors
            local = stack_experts(local, first_expert=topo.first_expert, num_local=topo.num_local_experts)
        local.update(
            lora.megatron_to_local(
                adapters, cfg=self.mg_args, tp=topo.tp, tp_rank=topo.tp_rank, layer_offset=offset
            )
        )
        return local


def _chunk_part(local: dict[str, torch.Tensor], spans: list[tuple[int, int]], chunk: int) -> dict[str, Any]:
    """The local HF tensors of model chunk `chunk`: its layers, the embedding (first chunk), the final norm
    and lm_head (last chunk)."""
    offset, count = spans[chunk]
    out = {}
    for name, t in local.items():
        if name.startswith("model.layers."):
            keep = offset <= int(name.split(".")[2]) < offset + count
        elif name.startswith("model.embed_tokens."):
            keep = chunk == 0
        else:
            keep = chunk == len(spans) - 1
        if keep:
            out[name] = t
    return out


def is_distributed(optimizer: Any) -> bool:
    from ascendfactory.engine.train.distopt import DistributedOptimizer

    return isinstance(optimizer, DistributedOptimizer)


def switch_problem(*, saved_distributed: bool, where: str) -> Problem:
    """Megatron's rule for a resume across --use-distributed-optimizer: not with the optimizer state."""
    if saved_distributed:
        message = (
            f"{where} was saved with --use-distributed-optimizer (its optimizer state is in "
            f"{DISTRIB_OPTIM_FILE}) and this run does not use it: Megatron cannot load that state into the "
            "replicated optimizer"
        )
    else:
        message = (
            f"{where} holds the replicated optimizer's state (no {DISTRIB_OPTIM_FILE}) and this run uses "
            "--use-distributed-optimizer: Megatron cannot load that state into the distributed optimizer"
        )
    return Problem(
        key="--use-distributed-optimizer",
        message=message,
        fix="resume with the same --use-distributed-optimizer setting, or add --no-load-optim (or "
        "--finetune) to take the weights only",
        source="command line",
    )


def _load_master_params(
    model: torch.nn.Module, optimizer: Any, masters: dict[str, torch.Tensor] | None
) -> None:
    """The fp32 master weights of a bf16/fp16 run (an exact resume): into the mixed-precision optimizer's
    masters, or (an fp32 run continuing a 16-bit checkpoint) over the model's fp32 weights."""
    if not masters:
        return
    if hasattr(optimizer, "load_masters"):
        optimizer.load_masters(masters)
        return
    from ascendfactory.engine.train.model import local_tensor

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in masters:
                local_tensor(p).copy_(masters[name])
