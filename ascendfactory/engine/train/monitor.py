"""Training monitors: MindFormers-style `monitor_config` / `tensorboard` keys, per-phase time and memory in
AscendFactory's RL metric names (docs/sources.md: Training monitor, RL phase metrics) (`time/{phase}/total`,
`memory/cpu/{phase}/start/rss`, `system/tps`, ...).

Event files go to `<tensorboard_dir>/rank_{id}/`, written with torch.utils.tensorboard's SummaryWriter.
With no
tensorboard configured, a `'tensorboard'` format in monitor_config falls back to `'log'`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.monitors import MonitorConfig, TensorboardConfig, formats
from ascendfactory.trackers import Sink

FORMATS = (
    "local_loss_format",
    "local_norm_format",
    "device_local_norm_format",
    "optimizer_state_format",
    "weight_state_format",
)
# scalars with a `-vs-samples` twin (docs/sources.md#training-monitor): all but model-flops-throughput-per-npu
# and B-samples-per-day
WITH_SAMPLES_TWIN = (
    "learning-rate",
    "batch-size",
    "loss",
    "loss-scale",
    "grad-norm",
    "iteration-time",
    "throughput",
)


def _section(raw: dict, key: str, model: type[BaseModel], source: str) -> tuple[dict, list[Problem]]:
    """The section validated by its model (`ascendfactory.monitors`), as a dict of every key."""
    given = raw.get(key) or {}
    try:
        return model.model_validate(given).model_dump(), []
    except ValidationError as e:
        problems = [
            Problem(
                key=".".join([key, *map(str, err["loc"])]),
                message=err["msg"],
                fix=f"valid keys: {', '.join(model.model_fields)}"
                if err["type"] == "extra_forbidden"
                else "",
                source=source,
            )
            for err in e.errors()
        ]
        return model().model_dump(), problems


def read_config_file(path: str | None) -> dict[str, Any]:
    """The `--af-monitor-config` file (YAML or JSON; e.g. the experiment's resolved config), {} when none."""
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)
    import yaml

    return yaml.safe_load(text) or {}


def load_monitor_config(args: Any) -> tuple[dict, dict | None]:
    """(monitor_config, tensorboard or None) from `--af-monitor-config`, the Megatron tensorboard flags and
    `MA_SUMMARY_LOG_DIR` (flags win over the file; the env var only fills a missing directory)."""
    raw = read_config_file(args.af_monitor_config)
    source = args.af_monitor_config or "command line"
    monitor, problems = _section(raw, "monitor_config", MonitorConfig, source)
    tensorboard, more = _section(raw, "tensorboard", TensorboardConfig, source)
    problems += more
    if args.tensorboard_dir:
        tensorboard["tensorboard_dir"] = args.tensorboard_dir
    for flag in ("log_loss_scale_to_tensorboard", "log_timers_to_tensorboard"):
        tensorboard[flag] = tensorboard[flag] or getattr(args, flag)
    if args.tensorboard_queue_size != 10:
        tensorboard["tensorboard_queue_size"] = args.tensorboard_queue_size
    tensorboard["tensorboard_dir"] = tensorboard["tensorboard_dir"] or os.environ.get("MA_SUMMARY_LOG_DIR")
    for key in FORMATS:
        values = formats(monitor[key])
        if not tensorboard["tensorboard_dir"]:
            values = sorted({"log" if v == "tensorboard" else v for v in values})
        monitor[key] = values
    if problems:
        raise ConfigError(problems)
    return monitor, (tensorboard if tensorboard["tensorboard_dir"] else None)


@functools.lru_cache(maxsize=None)
def _process(pid: int | None = None) -> Any:
    """This process's psutil handle, made once (`pid` only keys the cache)."""
    import psutil

    return psutil.Process(pid)


def memory_snapshot(device: Any) -> dict[str, float]:
    """CPU rss/vms (bytes) and, on an accelerator, allocated/reserved/max (bytes)."""
    import torch

    info = _process(os.getpid()).memory_info()
    out = {"rss": float(info.rss), "vms": float(info.vms)}
    acc = getattr(torch, device.type, None) if device.type in ("cuda", "npu") else None
    if acc is not None:
        out.update(
            allocated=float(acc.memory_allocated()),
            reserved=float(acc.memory_reserved()),
            max_allocated=float(acc.max_memory_allocated()),
            max_reserved=float(acc.max_memory_reserved()),
        )
    return out


@dataclass
class PhaseRecord:
    phase: str
    device: Any
    metrics: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def execute(self):
        t0 = time.perf_counter()
        yield
        self.metrics[f"time/{self.phase}/execute"] = time.perf_counter() - t0


@contextmanager
def phase(name: str, device: Any, *, memory: bool = True):
    """Time and memory of one phase (`train_step`, `checkpoint`) in AscendFactory's RL metric names
    (docs/sources.md#rl-phase-metrics).

    memory=False skips the memory probes (two process-stat reads); the trainer takes them only on the
    iterations whose metrics it logs."""
    rec = PhaseRecord(name, device)
    start = memory_snapshot(device) if memory else None
    t0 = time.perf_counter()
    yield rec
    rec.metrics[f"time/{name}/total"] = time.perf_counter() - t0
    if start is None:
        return
    end = memory_snapshot(device)
    for when, snap in (("start", start), ("end", end)):
        for k in ("rss", "vms"):
            rec.metrics[f"memory/cpu/{name}/{when}/{k}"] = snap[k]
        for k in ("allocated", "reserved", "max_allocated", "max_reserved"):
            if k in snap:
                rec.metrics[f"memory/{name}/{when}/onload/{k}/{device.index or 0}"] = snap[k]


class Monitor:
    """TensorBoard writer (null when not configured) + TrainingStateMonitor-style per-rank metrics. The
    training, validation and phase scalars go to `sinks` too (the trackers of `report_to`; the null sink on
    every rank but the one that logs the loss), with the step as their x axis."""

    def __init__(
        self,
        monitor: dict,
        tensorboard: dict | None,
        *,
        rank: int,
        print_fn: Callable[[str], None],
        sinks: Sink | None = None,
    ):
        self.cfg, self.tb, self.rank, self.print = monitor, tensorboard, rank, print_fn
        self.sinks = sinks or Sink()
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(
                log_dir=os.path.join(tensorboard["tensorboard_dir"], f"rank_{rank}"),
                max_queue=int(tensorboard["tensorboard_queue_size"]),
            )
        self.dump_dir = None
        if monitor["monitor_on"]:
            self.dump_dir = os.path.join(monitor["dump_path"], f"rank_{rank}")
            shutil.rmtree(self.dump_dir, ignore_errors=True)
            os.makedirs(self.dump_dir, exist_ok=True)
        self._targets = [re.compile(t) for t in monitor["target"]]

    def write_config(self, config: dict[str, Any]) -> None:
        """The TEXT page: one tag per configuration entry."""
        if self.writer:
            for key, value in config.items():
                self.writer.add_text(key, str(value), 0)

    def scalars(self, values: dict[str, float], iteration: int, samples: int) -> None:
        self.sinks.log_metrics(values, iteration)
        if not self.writer:
            return
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, iteration)
            if tag in WITH_SAMPLES_TWIN:
                self.writer.add_scalar(f"{tag}-vs-samples", value, samples)

    def training_scalars(
        self,
        *,
        iteration: int,
        samples: int,
        lr: float,
        gbs: int,
        loss: float | None,
        loss_scale: float,
        grad_norm: float | None,
        iter_time_s: float,
        samples_per_s: float,
        tflops: float,
    ) -> None:
        """MFLossMonitor's scalars; `loss` only where it is known (the last pipeline stage)."""
        tb = self.tb or {}
        values = {
            "learning-rate": lr,
            "batch-size": gbs,
            "grad-norm": grad_norm,
            "model-flops-throughput-per-npu": tflops,
        }
        if loss is not None:
            values["loss"] = loss
        if tb.get("log_loss_scale_to_tensorboard"):
            values["loss-scale"] = loss_scale
        if tb.get("log_timers_to_tensorboard"):
            values.update(
                {
                    "iteration-time": iter_time_s,
                    "throughput": samples_per_s,
                    "B-samples-per-day": samples_per_s * 86400 / 1e9,
                }
            )
        self.scalars({k: v for k, v in values.items() if v is not None}, iteration, samples)

    def moe_scalars(self, name: str, value: float, per_layer: list[float] | None, iteration: int) -> None:
        """Megatron's track_moe_metrics tags: `<name>` (the mean over the layers) and, with
        --moe-per-layer-logging, `moe/<name>_layer_<i>`."""
        values = {name: value}
        if per_layer is not None:
            values.update({f"moe/{name}_layer_{i}": v for i, v in enumerate(per_layer)})
        self.sinks.log_metrics(values, iteration)
        if self.writer:
            for tag, v in values.items():
                self.writer.add_scalar(tag, v, iteration)

    def validation_scalars(self, key: str, value: float, *, iteration: int, samples: int) -> None:
        """Megatron's `evaluate_and_print_results` tags: `<key> validation` (and `... vs samples`)."""
        self.sinks.log_metrics({f"{key} validation": value}, iteration)
        if self.writer:
            self.writer.add_scalar(f"{key} validation", value, iteration)
            self.writer.add_scalar(f"{key} validation vs samples", value, samples)

    def phase_metrics(self, metrics: dict[str, float], iteration: int, *, log: bool) -> None:
        self.sinks.log_metrics(metrics, iteration)
        if self.writer:
            for tag, value in metrics.items():
                self.writer.add_scalar(tag, value, iteration)
        if log:
            self.print(
                f" [metrics] iteration {iteration:8d} | "
                + " | ".join(f"{k}: {v:.6g}" for k, v in metrics.items())
                + " |"
            )

    def wanted(self, name: str) -> bool:
        hit = any(t.search(name) for t in self._targets)
        return hit != bool(self.cfg["invert"])

    def state(
        self,
        *,
        iteration: int,
        local_loss: float | None,
        local_norms: dict[str, float],
        device_norm: float,
        adam: dict[str, tuple[float, float]],
        weights: dict[str, float],
        throughput: float,
    ) -> None:
        """TrainingStateMonitor metrics of this rank, to the log and/or TensorBoard as configured."""
        c = self.cfg
        if not c["monitor_on"] or iteration % int(c["step_interval"]):
            return
        rows: list[tuple[str, str, float]] = []  # (format key, tag, value)
        if local_loss is not None:
            rows.append(("local_loss_format", "local_loss", local_loss))
        rows += [
            ("local_norm_format", f"local_norm/{n}", v) for n, v in local_norms.items() if self.wanted(n)
        ]
        rows.append(("device_local_norm_format", "device_local_norm", device_norm))
        for n, (m, v) in adam.items():
            if self.wanted(n):
                rows += [
                    ("optimizer_state_format", f"adam_m_norm/{n}", m),
                    ("optimizer_state_format", f"adam_v_norm/{n}", v),
                ]
        rows += [("weight_state_format", f"weight_norm/{n}", v) for n, v in weights.items() if self.wanted(n)]
        if c["throughput_baseline"]:
            rows.append(("always", "throughput_linearity", throughput / float(c["throughput_baseline"])))
        logged = []
        for fmt, tag, value in rows:
            targets = ["log", "tensorboard"] if fmt == "always" else c[fmt]
            if "tensorboard" in targets and self.writer:
                self.writer.add_scalar(tag, value, iteration)
            if "log" in targets:
                logged.append(f"{tag}: {value:.6g}")
        if logged:
            self.print(
                f"[Rank {self.rank}] iteration {iteration} | " + " | ".join(logged) + " |",
            )
        if self.dump_dir:
            with open(os.path.join(self.dump_dir, "monitor.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps({"iteration": iteration, **{t: v for _, t, v in rows}}) + "\n")

    def close(self, *, ok: bool = True) -> None:
        self.sinks.close(state="finished" if ok else "failed")
        if self.writer:
            self.writer.flush()
            self.writer.close()
