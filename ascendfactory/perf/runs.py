"""The runs under a result folder and what each one measured.

A run is a folder holding `exp-config.yaml` (the resolved experiment every backend's run writes) or, for a
tree made by hand, `.af/summary.json`, `trainer_log.jsonl` or `logs/*run_log-*.txt`. For each run:

- who: backend, model (`af_model_name`), experiment (`exp_name`), sequence length and device count from
  `exp-config.yaml` (`metrics.locate.run_facts` reads the same keys `logs summary` does);
- the device: `accelerator: cpu` -> `cpu`, else the device the plan's time estimate named
  (`.af/summary.json` `predicted.device`: `memory_check.device` or the probe's), else
  `memory_check.device`;
- measured (the training log found by `metrics.locate.training_log`, parsed by the format's own parser, the
  throughput by the formula the log's content calls for, `metrics.summary.auto_throughput`, over its
  steady-state window): tokens/s per device, the step time over the same window (Megatron's `elapsed time
  per iteration`, LLaMA-Factory's elapsed-time deltas, verl's `perf/time_per_step`, MindSpeed-RL's
  `timing/all`), TFLOP/s per device (the log's own figure where it prints one, else tokens/s x Megatron's
  FLOPs per token for the model's shape), MFU against the device's dense peak (`metrics.hardware`; on CPU
  against the calibrated profile's matmul rate, said so), peak memory (the largest `max allocated` of the
  log's memory reports, else of every rank's report the run summary kept);
- predicted: the step time and tokens/s the plan's time model gave before the run (`.af/summary.json`
  `predicted`), and the error against the measured step time.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ascendfactory.metrics.formats import detect_format, parse_file
from ascendfactory.metrics.hardware import peak_for
from ascendfactory.metrics.locate import EXP_CONFIG, TRAINER_LOG, _facts, _runs
from ascendfactory.metrics.megatron import ELAPSED_MS, GBS
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.summary import auto_throughput, memory_by_rank
from ascendfactory.metrics.table import StepTable
from ascendfactory.metrics.throughput import TFLOPS_KEYS
from ascendfactory.output_tree import OutputTree
from ascendfactory.speed.devices import device_speed
from ascendfactory.speed.flops import megatron_flops
from ascendfactory.speed.report import unsupported

NO_PREDICTION = "no predicted step time:"  # the note of a run whose plan had no supported figure

# where an experiment names its HF model folder (config.json): embedded / MindSpeed-LLM tokenizer, the
# top-level model_name_or_path, LLaMA-Factory's and verl's own keys
MODEL_KEYS = (
    ("backend_config", "training", "tokenizer-name-or-path"),
    ("model_name_or_path",),
    ("backend_config", "training", "model_name_or_path"),
    ("backend_config", "actor_rollout_ref", "model", "path"),
    ("backend_config", "data", "dataset_param", "preprocess_parameters", "model_name_or_path"),
)


@dataclass
class RunFigures:
    path: str
    backend: str | None = None
    model: str | None = None
    experiment: str | None = None
    seq_length: int | None = None
    devices: int | None = None
    device: str | None = None
    log: str | None = None
    format: str | None = None
    steps: int = 0
    tokens_per_s_per_device: float | None = None
    throughput_metric: str | None = None
    throughput_unit: str | None = None
    formula: str | None = None
    window: list[int] | None = None
    step_time_s: float | None = None
    tflops_per_device: float | None = None
    tflops_source: str | None = None
    mfu: float | None = None
    mfu_against: str | None = None
    peak_memory_mb: float | None = None
    predicted_step_s: float | None = None
    predicted_tokens_per_s: float | None = None
    prediction_error: float | None = None
    calibration_error: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_run(folder: Path) -> bool:
    return (
        (folder / EXP_CONFIG).is_file()
        or Path(OutputTree(str(folder)).summary).is_file()
        or (folder / TRAINER_LOG).is_file()
        or any(Path(OutputTree(str(folder)).logs_dir).glob("*run_log-*.txt"))
    )


def find_runs(root: Path, *, max_depth: int = 4) -> list[Path]:
    """Every run folder under `root` (itself included), not looking inside a run (its checkpoints)."""
    found: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        if is_run(folder):
            found.append(folder)
            return
        if depth >= max_depth:
            return
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for child in children:
            walk(child, depth + 1)

    walk(root, 0)
    return found


def _dig(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(key)
    return tree


def seq_of(cfg: dict[str, Any]) -> int | None:
    """The sequence length of a backend whose key `metrics.locate` does not read: LLaMA-Factory's
    `cutoff_len`, verl's prompt + response lengths (`data.max_prompt_length + data.max_response_length`)."""
    cutoff = _dig(cfg, ("backend_config", "training", "cutoff_len"))
    if isinstance(cutoff, int):
        return cutoff
    prompt = _dig(cfg, ("backend_config", "data", "max_prompt_length"))
    response = _dig(cfg, ("backend_config", "data", "max_response_length"))
    if isinstance(prompt, int) and isinstance(response, int):
        return prompt + response
    return None


def _load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_dims(cfg: dict[str, Any], run: Path) -> dict[str, Any] | None:
    """The HF `config.json` of the model the experiment names (paths relative to the run's folder or the
    folder it was started from are tried), or None."""
    for key in MODEL_KEYS:
        value = _dig(cfg, key)
        if not isinstance(value, str) or not value:
            continue
        for base in (Path(value), run / value, run.parent / value):
            data = _load_json(base / "config.json")
            if data.get("hidden_size"):
                return data
    return None


def flops_per_token(dims: dict[str, Any], seq: int) -> float:
    """Megatron's FLOPs per token (forward + backward) for an HF config.json's shape at `seq`."""
    text = dims.get("text_config")
    d: dict[str, Any] = text if isinstance(text, dict) else dims
    heads = int(d["num_attention_heads"])
    hidden = int(d["hidden_size"])
    experts = int(d.get("num_experts") or d.get("n_routed_experts") or 0)
    return (
        megatron_flops(
            batch=1,
            seq=seq,
            layers=int(d["num_hidden_layers"]),
            hidden=hidden,
            ffn=int(d.get("moe_intermediate_size") or d["intermediate_size"])
            if experts
            else int(d["intermediate_size"]),
            heads=heads,
            kv_heads=int(d.get("num_key_value_heads") or heads),
            kv_channels=int(d.get("head_dim") or hidden // heads),
            padded_vocab=int(math.ceil(int(d["vocab_size"]) / 128) * 128),
            routed_experts=int(d.get("num_experts_per_tok") or 1) if experts else 1,
        )
        / seq
    )


def _workload_flops(workload: dict[str, Any], seq: int) -> float:
    padded = int(math.ceil(workload["vocab"] / 128) * 128)
    return (
        megatron_flops(
            batch=1,
            seq=seq,
            layers=workload["layers"],
            hidden=workload["hidden"],
            ffn=workload["ffn"],
            heads=workload["heads"],
            kv_heads=workload["kv_heads"],
            kv_channels=workload["kv_channels"],
            padded_vocab=padded,
            swiglu=workload.get("swiglu", True),
            routed_experts=workload.get("routed_experts", 1),
        )
        / seq
    )


# What the figures read from a Megatron-format log (its parser keeps only these labels: a multi-GB log is
# scanned, not parsed whole); the loss keys tell MindSpeed-MM's log from MindSpeed-LLM's.
MEGATRON_FIELDS = (
    ELAPSED_MS,
    GBS,
    "lm loss",
    "loss",
    "tokens per sample",
    "actual seqlen",
    "consumed tokens",
    *TFLOPS_KEYS,
)


def training_records(folder: Path) -> tuple[Path | None, list[Record]]:
    """The run's training log and its records, each candidate parsed once (`metrics.locate.training_log`'s
    choice: LLaMA-Factory's trainer_log.jsonl, else MindSpeed-RL's metrics file, else among the newest run's
    run logs the one with the most training steps, Megatron's last rank)."""
    if (folder / TRAINER_LOG).is_file():
        return folder / TRAINER_LOG, list(parse_file(folder / TRAINER_LOG))
    tree_logs = Path(OutputTree(str(folder)).logs_dir)
    logs = tree_logs if tree_logs.is_dir() else folder
    metrics = sorted(logs.glob("grpo_metrics-*.log"))
    if metrics:
        return metrics[-1], list(parse_file(metrics[-1]))
    runs = _runs(logs)
    for run in sorted(runs, reverse=True):  # the newest run first (the names start with the time stamp)
        best: tuple[int, Path | None, list[Record]] = (0, None, [])
        for path in reversed(runs[run]):  # the last rank first: a Megatron run prints its steps there
            fmt = detect_format(path)
            fields = MEGATRON_FIELDS if fmt == "megatron" else None
            records = list(parse_file(path, fmt, fields=fields)) if fmt else []
            steps = sum(1 for r in records if r.kind == "train")
            if steps > best[0]:
                best = (steps, path, records)
        if best[1] is not None:
            return best[1], best[2]
    return None, []


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


def step_time(table: StepTable, used: list[int], details: dict[str, Any]) -> float | None:
    """Seconds per training step over the throughput's window."""
    if details.get("mean_elapsed_ms"):
        return float(details["mean_elapsed_ms"]) / 1000
    wanted = set(used)
    for key in ("perf/time_per_step", "timing/all"):
        steps, values = table.series(key)
        found = _mean([v for s, v in zip(steps, values) if s in wanted] or values)
        if found is not None:
            return found
    points = [(s, w) for s, w in zip(table.steps, table.wall) if s in wanted and math.isfinite(w)]
    if len(points) >= 2 and points[-1][0] > points[0][0] and points[-1][1] > points[0][1]:
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
    return None


def read_run(folder: Path) -> RunFigures:
    cfg = _load_yaml(folder / EXP_CONFIG)
    summary = _load_json(Path(OutputTree(str(folder)).summary))
    facts = _facts(cfg, str(folder / EXP_CONFIG)) if cfg else {}
    fig = RunFigures(
        path=str(folder),
        backend=cfg.get("backend"),
        model=cfg.get("af_model_name"),
        experiment=cfg.get("exp_name"),
        seq_length=facts.get("seq_length") or seq_of(cfg),
        devices=facts.get("devices"),
    )
    if not cfg:
        fig.notes.append(f"no {EXP_CONFIG}: model, experiment and sequence length unknown")
    predicted = summary.get("predicted") if isinstance(summary.get("predicted"), dict) else None
    checked = cfg.get("memory_check")
    memory_check: dict[str, Any] = checked if isinstance(checked, dict) else {}
    if cfg.get("accelerator") == "cpu":
        fig.device = "cpu"
    elif predicted and predicted.get("device"):
        fig.device = str(predicted["device"])
    elif memory_check.get("device"):
        fig.device = str(memory_check["device"])
    if fig.seq_length is None and predicted:
        fig.seq_length = (predicted.get("workload") or {}).get("seq")
    log, records = training_records(folder)
    if log is None:
        fig.notes.append("no training log with steps (trainer_log.jsonl, logs/*run_log-*.txt)")
        return fig
    fig.log = str(log)
    table = StepTable.from_records(records)
    fig.steps = len(table)
    fig.format = detect_format(log)
    found = auto_throughput(table, seq_length=fig.seq_length, devices=fig.devices)
    if found:
        tp = found[0]
        fig.throughput_metric, fig.throughput_unit, fig.formula = tp.metric, tp.unit, tp.formula
        fig.window = [tp.steps_used[0], tp.steps_used[-1]] if tp.steps_used else None
        if tp.unit == "tokens/s/device":
            fig.tokens_per_s_per_device = tp.value
        if tp.note:
            fig.notes.append(tp.note)
        fig.step_time_s = step_time(table, tp.steps_used, tp.details)
        for key in TFLOPS_KEYS:
            steps, values = table.series(key)
            logged = _mean([v for s, v in zip(steps, values) if s in set(tp.steps_used)])
            if logged is not None:
                fig.tflops_per_device, fig.tflops_source = logged, f"logged ({key})"
                break
    else:
        fig.notes.append("no throughput figure in the log")
    if fig.tflops_per_device is None and fig.tokens_per_s_per_device and not fig.seq_length:
        fig.notes.append("sequence length unknown (exp-config.yaml): no TFLOP/s or MFU")
    if fig.tflops_per_device is None and fig.tokens_per_s_per_device and fig.seq_length:
        workload = (predicted or {}).get("workload")
        dims = None if workload else model_dims(cfg, folder)
        if workload:
            per_token = _workload_flops(workload, fig.seq_length)
        elif dims:
            per_token = flops_per_token(dims, fig.seq_length)
        else:
            per_token = None
            fig.notes.append("model shape unknown (no config.json found): no TFLOP/s or MFU")
        if per_token:
            fig.tflops_per_device = fig.tokens_per_s_per_device * per_token / 1e12
            fig.tflops_source = "tokens/s x Megatron's FLOPs per token"
    _mfu(fig)
    peaks = [
        float(m["max_allocated_mb"])
        for m in memory_by_rank(table.all_others("memory")).values()
        if m.get("max_allocated_mb") is not None
    ]
    if not peaks:  # the loss rank printed none: every rank's report the run summary kept
        kept = summary.get("memory")
        by_rank: dict[str, Any] = kept if isinstance(kept, dict) else {}
        peaks = [
            float(m["max_allocated_mb"])
            for m in by_rank.values()
            if isinstance(m, dict) and m.get("max_allocated_mb")
        ]
    if not peaks and summary.get("peak_memory_mb") is not None:
        peaks = [float(summary["peak_memory_mb"])]
    fig.peak_memory_mb = max(peaks) if peaks else None
    why = unsupported(predicted) if predicted and predicted.get("step_s") else None
    if why:  # the run summary and the estimate print no figure either (docs/time-to-train.md)
        fig.notes.append(f"{NO_PREDICTION} {why}")
    elif predicted and predicted.get("step_s"):
        fig.predicted_step_s = float(predicted["step_s"])
        fig.predicted_tokens_per_s = predicted.get("tokens_per_s_per_device")
        fig.calibration_error = predicted.get("calibration_error")
        if fig.step_time_s:
            fig.prediction_error = fig.predicted_step_s / fig.step_time_s - 1
    return fig


def _mfu(fig: RunFigures) -> None:
    if fig.tflops_per_device is None or not fig.device:
        return
    peak = peak_for(fig.device.removesuffix("-80gb").removesuffix("-40gb"))
    if peak is not None:
        fig.mfu, fig.mfu_against = fig.tflops_per_device / peak.bf16_tflops, f"{peak.name} dense bf16 peak"
        return
    speed = device_speed(fig.device)
    if speed is not None and speed.name == "cpu":
        rate = speed.rate("fp32") / 1e12
        fig.mfu, fig.mfu_against = fig.tflops_per_device / rate, "one CPU thread's measured fp32 matmul rate"
