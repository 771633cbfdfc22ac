"""The frozen reference policy: where it comes from, and how a resumed run gets exactly the same one.

A fresh run's reference is the actor's starting point: the weights `load` gave the actor (a converted or
finetune checkpoint), or `rl_config.integrated_mode_config.ref_model_load_path` when set, or the random
initialisation of `seed` when nothing was loaded. Its source and a SHA-256 of this rank's reference
weights are saved in every checkpoint's `args` (`af_reference`). A resumed run (loading a training
checkpoint) reloads the reference from `ref_model_load_path` when set, else from the recorded source, and
refuses to continue when the weights' hash differs from the recorded one: the reference is restored
bit for bit, never taken from the trained actor (MindSpeed-RL's trap when ref_model_load_path is unset).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

import torch

from ascendfactory.engine.convert import megatron_io
from ascendfactory.engine.train.model import local_tensor
from ascendfactory.errors import ConfigError, Problem

RANDOM = "random-init"
KEY = "rl_config.integrated_mode_config.ref_model_load_path"


def fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 over this rank's local parameter values as fp32 bytes, in name order (a bf16 model hashes as
    the earlier trainer's fp32 weights holding the same bf16 values did)."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        t = local_tensor(p).detach().to("cpu").float().contiguous()
        h.update(name.encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def copy_weights(dst: torch.nn.Module, src: torch.nn.Module) -> None:
    with torch.no_grad():
        for (_, d), (_, s) in zip(sorted(dst.named_parameters()), sorted(src.named_parameters())):
            local_tensor(d).copy_(local_tensor(s))


def freeze(model: torch.nn.Module) -> torch.nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def saved_record(load: str, iteration: int, tp_rank: int) -> dict[str, Any] | None:
    """`af_reference` from the `args` of this rank's shard of a training checkpoint (memory-mapped: the
    tensors are not read)."""
    path = megatron_io.checkpoint_dir(load, iteration, tp_rank, 0, 1) / megatron_io.SHARD_FILE
    state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return getattr(state.get("args"), "af_reference", None)


def load_into(model: torch.nn.Module, source: str, *, checkpointer_for, init_random) -> None:
    """Fill `model` from `source`: a Megatron checkpoint folder (weights only) or RANDOM."""
    if source == RANDOM:
        init_random(model)
        return
    if not (Path(source) / megatron_io.TRACKER).is_file():
        raise ConfigError(
            Problem(
                key=KEY,
                message=f"the reference weights at {source} are gone (no {megatron_io.TRACKER})",
                fix=f"set {KEY} to the converted weights the run started from",
            )
        )
    checkpointer_for(source).load(model, None, None, None)


def reference_args(args: argparse.Namespace, source: str) -> argparse.Namespace:
    """The actor's flags with `load` = source, weights only (no optimizer, RNG or iteration)."""
    return argparse.Namespace(
        **{**vars(args), "load": source, "finetune": True, "no_load_optim": True, "no_load_rng": True}
    )


def check_same(record: dict[str, Any], now: str, source: str) -> None:
    if record.get("fingerprint") != now:
        raise ConfigError(
            Problem(
                key=KEY,
                message=f"the reference loaded from {source} is not the one this run started with "
                f"(recorded source: {record.get('source')})",
                fix=f"set {KEY} to the weights the run started from, or start a new run",
            )
        )
