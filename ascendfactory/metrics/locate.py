"""Which log `logs summary` reads, and the run facts beside it (the output tree's own files).

- A directory (an output directory or its `logs/`): LLaMA-Factory's `trainer_log.jsonl` when it is there,
  else, among the newest run's `run_log` files (and MindSpeed-RL's `grpo_metrics-*.log`), the one with the
  most training steps (a Megatron run prints them on its last rank).
- A run log without training steps: the sibling of the same run that has them (Megatron: the last rank).
- `exp-config.yaml` beside `logs/`: the sequence length, the device count and the backend of the run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ascendfactory.metrics.formats import parse_file
from ascendfactory.output_tree import EXP_CONFIG, LOGS

TRAINER_LOG = "trainer_log.jsonl"
_RUN_LOG = re.compile(r"^(?P<run>.+)-run_log-(?P<tail>.+)\.txt$")


def _train_steps(path: Path) -> int:
    try:
        return sum(1 for r in parse_file(path) if r.kind == "train")
    except Exception:  # noqa: BLE001 - a log no parser reads has no steps for this purpose
        return 0


def _runs(folder: Path) -> dict[str, list[Path]]:
    runs: dict[str, list[Path]] = {}
    for p in sorted(folder.glob("*run_log-*.txt")):
        m = _RUN_LOG.match(p.name)
        if m:
            runs.setdefault(m.group("run"), []).append(p)
    return runs


def training_log(folder: Path) -> Path | None:
    """The log of `folder` (an output directory or its `logs/`) that holds the training steps."""
    for base in (folder, folder.parent):
        if (base / TRAINER_LOG).is_file():
            return base / TRAINER_LOG
    logs = folder / LOGS if (folder / LOGS).is_dir() else folder
    metrics = sorted(logs.glob("grpo_metrics-*.log"))
    if metrics:
        return metrics[-1]
    runs = _runs(logs)
    for run in sorted(runs, reverse=True):  # the newest run (the names start with the time stamp)
        best = max(runs[run], key=_train_steps)
        if _train_steps(best) > 0:
            return best
    return None


def has_train_steps(path: Path) -> bool:
    """Whether the log holds at least one training step (False for a file no parser reads)."""
    try:
        return any(r.kind == "train" for r in parse_file(path))
    except Exception:  # noqa: BLE001 - as `_train_steps`
        return False


def loss_sibling(path: Path) -> Path | None:
    """For a run log without training steps: the log of the same run that has them (else None)."""
    m = _RUN_LOG.match(path.name)
    if not m:
        return None
    siblings = [p for p in _runs(path.parent).get(m.group("run"), []) if p != path]
    found = [p for p in siblings if _train_steps(p) > 0]
    return found[-1] if found else None


def run_facts(path: Path) -> dict[str, Any]:
    """`seq_length`, `devices` and `backend` from the `exp-config.yaml` of the output directory `path` lies
    in."""
    import yaml

    for base in (path.parent, path.parent.parent):
        cfg_path = base / EXP_CONFIG
        if cfg_path.is_file():
            try:
                cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError):
                return {}
            return _facts(cfg, str(cfg_path))
    return {}


def _facts(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    bc = cfg.get("backend_config") or {}
    sections = [bc.get("training"), bc.get("megatron_training"), bc]
    seq = next(
        (s.get(k) for s in sections if isinstance(s, dict) for k in ("seq-length", "seq_length") if s.get(k)),
        None,
    )
    env = cfg.get("env") or {}
    nnodes, per_node = env.get("NNODES"), env.get("NPUS_PER_NODE")
    devices = nnodes * per_node if isinstance(nnodes, int) and isinstance(per_node, int) else None
    backend = cfg.get("backend")
    return {
        "seq_length": seq if isinstance(seq, int) else None,
        "devices": devices,
        "backend": backend if isinstance(backend, str) else None,
        "source": source,
    }
