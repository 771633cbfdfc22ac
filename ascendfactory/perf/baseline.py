"""The performance baseline: a YAML table of figures by model, experiment, sequence length and device.

AscendFactory's `performance` reads a `config/<framework>_performance_baseline.yaml` ("the GP-Ant8 machine
baseline"); its fields are not published, so this file keeps the product's nesting of the old-style cfgs
files (a model block, its experiment blocks) and names every figure in full (README, "Performance against
a baseline")::

    tolerance: 0.05                 # |measured / baseline - 1| <= 5%: within; else above or below
    baselines:
      qwen2.5-0.5b:                 # af_model_name
        pt-2k:                      # exp_name
          - device: h200            # speed.devices / memory_check.device names; cpu for accelerator: cpu
            seq_length: 2048
            backend: torch          # optional: only runs of this backend match the entry
            tokens_per_s_per_device: 76884
            step_time_s: 0.2131
            tflops_per_device: 268.5
            mfu: 0.271
            peak_memory_mb: 56381
            date: '2026-11-25'      # when and at which commit the figures were measured, and how
            commit: 776fd04
            source: one H200, torch 2.11 + CUDA 13.0

A run matches the entry of its model and experiment whose sequence length and device equal the run's (and
backend, when the entry names one). Each figure of the entry is compared: `within` the tolerance, else
`above` or `below` the baseline; whether that is better or worse depends on the figure (higher tokens/s,
TFLOP/s and MFU are better; a higher step time or peak memory is worse). The run's verdict is its tokens/s
(else its step time): `regression` when worse beyond the tolerance, `improvement` when better, `ok` within.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ascendfactory.errors import ConfigError, Problem

# figure -> higher is better
FIGURES: dict[str, bool] = {
    "tokens_per_s_per_device": True,
    "step_time_s": False,
    "tflops_per_device": True,
    "mfu": True,
    "peak_memory_mb": False,
}
DEFAULT_TOLERANCE = 0.05


class BaselineEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str = Field(description="the device the figures were measured on (speed.devices names, or cpu)")
    seq_length: int = Field(gt=0, description="the run's sequence length")
    backend: str | None = Field(default=None, description="only runs of this backend match (default: any)")
    tokens_per_s_per_device: float | None = Field(default=None, gt=0)
    step_time_s: float | None = Field(default=None, gt=0)
    tflops_per_device: float | None = Field(default=None, gt=0)
    mfu: float | None = Field(default=None, gt=0)
    peak_memory_mb: float | None = Field(default=None, gt=0)
    date: str = Field(description="when the figures were measured (YYYY-MM-DD)")
    commit: str = Field(description="the project's commit they were measured at")
    source: str = Field(default="", description="how: the machine, the software, the benchmark")

    def figures(self) -> dict[str, float]:
        return {k: float(v) for k in FIGURES if (v := getattr(self, k)) is not None}


class BaselineFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tolerance: float = Field(default=DEFAULT_TOLERANCE, gt=0, lt=1)
    baselines: dict[str, dict[str, list[BaselineEntry]]] = Field(default_factory=dict)


def load_baseline(path: str | Path) -> BaselineFile:
    import yaml

    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(
            Problem(
                key="--baseline", message=f"cannot read {source}: {e.strerror}", fix="give a baseline YAML"
            )
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(Problem(key="--baseline", message=f"not YAML: {e}", source=source)) from None
    try:
        return BaselineFile.model_validate(data or {})
    except ValidationError as e:
        raise ConfigError(
            [
                Problem(
                    key=".".join(str(p) for p in err["loc"]),
                    message=err["msg"],
                    fix="see the README, 'Performance against a baseline', for the format",
                    source=source,
                )
                for err in e.errors()
            ]
        ) from None


def _norm(name: str | None) -> str:
    return (name or "").strip().lower().replace("_", "-")


def match(
    baseline: BaselineFile,
    *,
    model: str | None,
    experiment: str | None,
    seq_length: int | None,
    device: str | None,
    backend: str | None,
) -> BaselineEntry | None:
    """The entry of this model, experiment, sequence length and device (and backend, if it names one)."""
    if not model or not experiment:
        return None
    exps = next((v for k, v in baseline.baselines.items() if _norm(k) == _norm(model)), None) or {}
    entries = next((v for k, v in exps.items() if _norm(k) == _norm(experiment)), None) or []
    for entry in entries:
        if entry.seq_length != seq_length or _norm(entry.device) != _norm(device):
            continue
        if entry.backend and _norm(entry.backend) != _norm(backend):
            continue
        return entry
    return None


def compare_figure(name: str, measured: float | None, base: float | None, tolerance: float) -> dict[str, Any]:
    """One figure against its baseline: ratio, `within` / `above` / `below`, and `better` / `worse`."""
    if measured is None or base is None:
        return {"figure": name, "measured": measured, "baseline": base, "ratio": None, "flag": None}
    ratio = measured / base
    if abs(ratio - 1) <= tolerance:
        flag, sense = "within", "same"
    else:
        flag = "above" if ratio > 1 else "below"
        sense = "better" if (ratio > 1) == FIGURES[name] else "worse"
    return {
        "figure": name,
        "measured": measured,
        "baseline": base,
        "ratio": ratio,
        "flag": flag,
        "sense": sense,
    }


def verdict(comparisons: list[dict[str, Any]]) -> str:
    """`regression` / `improvement` / `ok` by tokens/s, else step time; `no figure` when neither compares."""
    by_name = {c["figure"]: c for c in comparisons}
    for key in ("tokens_per_s_per_device", "step_time_s"):
        c = by_name.get(key)
        if c and c["flag"] is not None:
            return {"same": "ok", "better": "improvement", "worse": "regression"}[c["sense"]]
    return "no figure"
