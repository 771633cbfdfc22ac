"""Metric sinks: a null object, one sink per tracker client, and a container (torchtitan's `BaseLogger` /
`LoggerContainer` pattern). A tracker never stops training: a sink whose client fails is reported once
through `warn` and dropped."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ascendfactory.errors import AscendFactoryError
from ascendfactory.plan import TrackerSpec

log = logging.getLogger("ascendfactory.trackers")
EXTRA = {"mlflow": "mlflow", "wandb": "wandb", "swanlab": "swanlab"}  # pip extra of ascendfactory-cli


class TrackerError(AscendFactoryError):
    """A tracker's client is missing or its store cannot be opened."""


class Sink:
    """The null sink: no tracker. Subclasses override what their client supports."""

    name = "null"
    run_id: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        """The run's parameters (the resolved configuration)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Scalars at a training step."""

    def log_summary(self, values: Mapping[str, float | str]) -> None:
        """Figures about the whole run (throughput, first and last loss, ...)."""

    def log_artifact(self, path: str) -> None:
        """A file of the run (the loss plot, the resolved config)."""

    def close(self, *, ok: bool = True) -> None:
        """End this process's part of the run (`ok`: finished, else failed)."""


class Sinks(Sink):
    """Several sinks as one. A sink whose call raises is reported once (`warn`) and no longer called."""

    name = "sinks"

    def __init__(self, sinks: Iterable[Sink] = (), *, warn: Callable[[str], None] | None = None) -> None:
        self.sinks = [s for s in sinks if type(s) is not Sink]
        self.warn = warn or log.warning

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def _each(self, method: str, *args: Any, **kwargs: Any) -> None:
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - a tracker never stops the run
                self.sinks.remove(sink)
                self.warn(
                    f"{sink.name}: {method} failed ({type(e).__name__}: {e}); no more reports to {sink.name}"
                )

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._each("log_params", params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if metrics:
            self._each("log_metrics", metrics, step)

    def log_summary(self, values: Mapping[str, float | str]) -> None:
        self._each("log_summary", values)

    def log_artifact(self, path: str) -> None:
        self._each("log_artifact", path)

    def close(self, *, ok: bool = True) -> None:
        self._each("close", ok=ok)


def client(name: str) -> Any:
    """The tracker's client module, or a TrackerError naming the extra that installs it."""
    module = {"mlflow": "mlflow", "wandb": "wandb", "swanlab": "swanlab"}[name]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise TrackerError(
            f"{name}: the {module} package is not installed in this environment ({e}); "
            f'install it with: pip install "ascendfactory-cli[{EXTRA[name]}]"'
        ) from None


def finite(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries as floats (NaN and inf kept: a tracker should show a diverged loss)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        out[k] = float(v)
    return out


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """A nested mapping as `a.b.c` -> text (lists and scalars as their text, None as `null`)."""
    if isinstance(tree, Mapping):
        out: dict[str, str] = {}
        for k, v in tree.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): "null" if tree is None else str(tree)}


def open_run(spec: TrackerSpec, *, run_id: str | None = None, quiet: bool = True) -> Sink:
    """A sink on the tracker's run `run_id` (continued), or on a new run when None. TensorBoard has no run
    to open here (the framework writes its event files): the null sink."""
    if spec.name == "mlflow":
        from ascendfactory.trackers.mlflow_sink import MlflowSink

        return MlflowSink(spec, run_id=run_id)
    if spec.name == "wandb":
        from ascendfactory.trackers.wandb_sink import WandbSink

        return WandbSink(spec, run_id=run_id, quiet=quiet)
    if spec.name == "swanlab":
        from ascendfactory.trackers.swanlab_sink import SwanlabSink

        return SwanlabSink(spec)
    return Sink()
