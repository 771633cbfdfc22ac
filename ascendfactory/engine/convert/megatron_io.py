"""Megatron checkpoint layout: tracker, `iter_%07d/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt`, PP layer split.

torch is imported inside the functions that load or save, so the layout helpers stay light.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ascendfactory import parallel
from ascendfactory.checkpoints.megatron import (  # the layout names live in one place
    SHARD_FILE,
    TRACKER,
    iteration_name,
    parse_tracker,
    tracker_text,
    write_tracker,
)
from ascendfactory.errors import ConfigError, Problem

__all__ = ["SHARD_FILE", "TRACKER", "write_tracker"]  # re-exported for the converter and the trainer
_RANK_DIR = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?$")


def iteration_dir(root: str | Path, iteration: int) -> Path:
    """`<root>/iter_%07d`."""
    return Path(root) / iteration_name(iteration)


def checkpoint_dir(
    root: str | Path,
    iteration: int,
    tp_rank: int,
    pp_rank: int,
    pp_size: int,
    ep_rank: int = 0,
    ep_size: int = 1,
) -> Path:
    """The folder of one shard: `iter_%07d/mp_rank_{tp:02d}`, plus `_{pp:03d}` when PP > 1 and `_{ep:03d}`
    when EP > 1 (Megatron's `get_checkpoint_name`, core_r0.8.0 megatron/training/checkpointing.py;
    MindSpeed-LLM's `Convert.generate_mg_weights_dir`)."""
    name = f"mp_rank_{tp_rank:02d}" if pp_size == 1 else f"mp_rank_{tp_rank:02d}_{pp_rank:03d}"
    if ep_size > 1:
        name += f"_{ep_rank:03d}"
    return iteration_dir(root, iteration) / name


def read_tracker(root: str | Path) -> int:
    """The iteration in `<root>/latest_checkpointed_iteration.txt`; ConfigError if missing or not > 0."""
    path = Path(root) / TRACKER
    text = tracker_text(root)
    if text is None:
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"{root} is not a Megatron checkpoint: {TRACKER} is missing",
                fix="point --load-dir at the folder that holds latest_checkpointed_iteration.txt and iter_*/",
                source="command line",
            )
        )
    value = parse_tracker(text)
    if not isinstance(value, int):
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"{path} holds '{text}', expected an iteration number > 0",
                fix="write the iteration of the iter_* folder to load into that file",
                source="command line",
            )
        )
    return value


def parse_layer_list(num_layer_list: str | Sequence[int] | None) -> list[int] | None:
    """`"3,5"` or `[3, 5]` -> [3, 5]; None / "" -> None. ConfigError on anything else."""
    try:
        return parallel.parse_layer_list(num_layer_list)
    except (TypeError, ValueError):
        raise ConfigError(
            Problem(
                key="--num-layer-list",
                message=f"'{num_layer_list}' is not a comma-separated list of integers",
                fix="write it like 3,5 (layers of each pipeline stage)",
                source="command line",
            )
        ) from None


def layers_per_stage(
    num_layers: int, pp: int, num_layer_list: str | Sequence[int] | None = None
) -> list[int]:
    """Layers of each pipeline stage: an even split, or `num_layer_list`. ConfigError with a fix otherwise."""
    if pp < 1:
        raise ConfigError(
            Problem(
                key="--target-pipeline-parallel-size",
                message=f"PP must be >= 1, got {pp}",
                fix="use 1 or more",
                source="command line",
            )
        )
    layers = parse_layer_list(num_layer_list)
    if layers is None:
        if num_layers % pp:
            valid = [p for p in range(1, num_layers + 1) if num_layers % p == 0]
            raise ConfigError(
                Problem(
                    key="--target-pipeline-parallel-size",
                    message=f"number of layers ({num_layers}) is not divisible by the pipeline parallel size "
                    f"({pp})",
                    fix=f"use PP in {valid}, or give --num-layer-list with {pp} counts summing to "
                    f"{num_layers}",
                    source="command line",
                )
            )
        return [num_layers // pp] * pp
    problems = []
    if len(layers) != pp:
        problems.append(f"it has {len(layers)} entries but the pipeline parallel size is {pp}")
    if sum(layers) != num_layers:
        problems.append(f"its sum ({sum(layers)}) is not the number of layers ({num_layers})")
    if any(n < 1 for n in layers):
        problems.append("every stage needs at least one layer")
    if problems:
        example = ",".join(map(str, parallel.even_split(num_layers, pp)))
        raise ConfigError(
            Problem(
                key="--num-layer-list",
                message=f"'{','.join(map(str, layers))}': " + "; ".join(problems),
                fix=f"give {pp} positive counts summing to {num_layers}, e.g. {example}",
                source="command line",
            )
        )
    return layers


def layer_offsets(counts: Sequence[int]) -> list[int]:
    """First global layer of each stage: [3, 5] -> [0, 3]."""
    out, acc = [], 0
    for n in counts:
        out.append(acc)
        acc += n
    return out


def model_key(chunk: int, vpp: int) -> str:
    """The shard dict's key of model chunk `chunk`: `model` without virtual pipeline, else `model0`,
    `model1`, ... (Megatron's checkpointing.py saves `model%d` for each chunk when there are several)."""
    return "model" if vpp == 1 else f"model{chunk}"


def virtual_stages(num_layers: int, pp: int, per_chunk: int) -> list[list[tuple[int, int]]]:
    """Per PP rank, per model chunk: (first global layer, layer count) with a virtual pipeline of
    `per_chunk` layers per chunk (Megatron's --num-layers-per-virtual-pipeline-stage).

    Megatron's layer offset (core_r0.8.0 `get_transformer_layer_offset`): chunk c of PP rank r is virtual
    stage c * PP + r and holds layers (c * PP + r) * per_chunk ... + per_chunk - 1. ConfigError unless the
    layers divide by PP and the layers per stage by `per_chunk` (Megatron's validate_args rules)."""
    if per_chunk < 1 or num_layers % pp or (num_layers // pp) % per_chunk:
        raise ConfigError(
            Problem(
                key="--num-layers-per-virtual-pipeline-stage",
                message=f"{per_chunk} with {num_layers} layers over PP {pp}: the number of layers must be "
                "divisible by the pipeline parallel size, and the layers per pipeline stage by the layers "
                "per virtual pipeline stage",
                fix="choose a value dividing num_layers / PP"
                + (f" ({num_layers // pp})" if num_layers % pp == 0 else ", and a PP dividing num_layers"),
                source="command line",
            )
        )
    vpp = num_layers // pp // per_chunk
    return [[((c * pp + r) * per_chunk, per_chunk) for c in range(vpp)] for r in range(pp)]


def discover_layout(root: str | Path, iteration: int) -> tuple[int, int]:
    """(TP, PP) of a checkpoint without expert parallelism (`discover_parallel` for EP too); ConfigError if
    incomplete or expert-parallel."""
    tp, pp, ep = discover_parallel(root, iteration)
    if ep > 1:
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"{iteration_dir(root, iteration)} is an expert-parallel checkpoint (EP {ep})",
                fix="convert it to EP 1 first (python -m ascendfactory.engine.convert --load-model-type mg "
                "--save-model-type mg --target-expert-parallel-size 1 ...)",
                source="command line",
            )
        )
    return tp, pp


def _saved_pp_ep(folder: Path) -> tuple[int, int] | None:
    """(PP, EP) from the args of the shard in `folder`; None without args (`mp_rank_TT_XXX` is then PP)."""
    import torch

    try:
        args = torch.load(folder / SHARD_FILE, map_location="cpu", weights_only=False, mmap=True).get("args")
    except Exception:  # an unreadable shard: the names decide, as for checkpoints without args
        return None
    pp = getattr(args, "pipeline_model_parallel_size", None)
    ep = getattr(args, "expert_model_parallel_size", None)
    return (int(pp or 1), int(ep or 1)) if pp or ep else None


def discover_parallel(root: str | Path, iteration: int) -> tuple[int, int, int]:
    """(TP, PP, EP) of a checkpoint from its `mp_rank_*` folder names; ConfigError if incomplete.

    `mp_rank_TT_XXX` is a PP rank or an EP rank (Megatron appends `_PPP` only when PP > 1 and `_EEE` only when
    EP > 1): the saved args' pipeline / expert parallel sizes decide, PP when they say nothing."""
    it_dir = iteration_dir(root, iteration)
    if not it_dir.is_dir():
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"{it_dir} does not exist (the tracker points at it)",
                fix="check the checkpoint folder or its tracker file",
                source="command line",
            )
        )
    found: dict[tuple[int, ...], Path] = {}
    for d in it_dir.iterdir():
        m = _RANK_DIR.match(d.name)
        if m and (d / SHARD_FILE).is_file():
            found[tuple(int(g) for g in m.groups() if g is not None)] = d
    if not found:
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"no mp_rank_*/{SHARD_FILE} under {it_dir}",
                fix="point --load-dir at a Megatron checkpoint",
                source="command line",
            )
        )
    arity = {len(k) for k in found}
    if len(arity) > 1:
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"{it_dir} mixes mp_rank_* folder layouts: "
                f"{sorted(d.name for d in found.values())[:4]}",
                fix="keep the folders of one checkpoint only",
                source="command line",
            )
        )
    n = arity.pop()
    tp = max(k[0] for k in found) + 1
    if n == 1:
        pp, ep = 1, 1
    elif n == 3:
        pp, ep = max(k[1] for k in found) + 1, max(k[2] for k in found) + 1
    else:
        second = max(k[1] for k in found) + 1
        saved = _saved_pp_ep(next(iter(found.values())))
        pp, ep = (1, second) if saved is not None and saved[0] == 1 and saved[1] > 1 else (second, 1)
    expected = {
        (t,) + ((p,) if pp > 1 else ()) + ((e,) if ep > 1 else ())
        for t in range(tp)
        for p in range(pp)
        for e in range(ep)
    }
    if set(found) != expected:
        missing = sorted(expected - set(found))
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"incomplete checkpoint under {it_dir}: missing shards {missing[:4]}",
                fix="copy every mp_rank_* folder",
                source="command line",
            )
        )
    return tp, pp, ep


def load_shard(
    root: str | Path,
    iteration: int,
    tp_rank: int,
    pp_rank: int,
    pp_size: int,
    ep_rank: int = 0,
    ep_size: int = 1,
) -> dict[str, Any]:
    """`torch.load` one `model_optim_rng.pt` (memory-mapped; the dict holds args, so not weights-only)."""
    import torch

    path = checkpoint_dir(root, iteration, tp_rank, pp_rank, pp_size, ep_rank, ep_size) / SHARD_FILE
    if not path.is_file():
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"missing checkpoint shard {path}",
                fix="check the checkpoint folder",
                source="command line",
            )
        )
    return torch.load(path, map_location="cpu", weights_only=False, mmap=True)


def save_shard(
    root: str | Path,
    iteration: int,
    tp_rank: int,
    pp_rank: int,
    pp_size: int,
    payload: dict[str, Any],
    ep_rank: int = 0,
    ep_size: int = 1,
) -> Path:
    """`torch.save` one shard dict to its folder (temp name, then rename); returns the file path."""
    import torch

    folder = checkpoint_dir(root, iteration, tp_rank, pp_rank, pp_size, ep_rank, ep_size)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SHARD_FILE
    tmp = folder / (SHARD_FILE + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path
