"""What every tracker is: one `Tracker` record (its settings, client, environment, how its run is opened and
closed, how each framework reaches it), and its run as a metric sink.

A sink is torchtitan's `BaseLogger` / `LoggerContainer` pattern: `Sink` is the null object (no tracker asked
for), `Sinks` several as one. A tracker never stops training: a sink whose client fails is reported once
through `warn` and dropped. A run ends in one of three states (`RunState`): finished, failed (the training
failed) or killed (interrupted: Ctrl-C, SIGTERM); each record says how its client writes each state.
"""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ascendfactory.errors import AscendFactoryError
from ascendfactory.output_tree import OutputTree
from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.keys import TrackerKeys

log = logging.getLogger("ascendfactory.trackers")
RunState = Literal["finished", "failed", "killed"]
_CREDENTIAL_KEYS = ("api_key", "apikey", "token", "password", "key")


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

    def close(self, *, state: RunState = "finished") -> None:
        """End this process's part of the run in `state`."""


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

    def close(self, *, state: RunState = "finished") -> None:
        self._each("close", state=state)


def import_client(tracker: str, module: str, install: str) -> Any:
    """The tracker's client module, or a TrackerError naming what installs it (`install`)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise TrackerError(
            f"{tracker}: the {module} package is not installed in this environment ({e}); "
            f"install it with: {install}"
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


class TrackerSettings(BaseModel):
    """A tracker's section of `report_to` (its record's `settings` subclasses this). Credentials are never
    settings: a key that looks like one is refused, naming the variable to export instead."""

    model_config = ConfigDict(extra="forbid")
    credentials: ClassVar[str] = "the tracker's credential variable"

    project: str | None = Field(
        None, min_length=1, description="Project (W&B, SwanLab) or experiment (MLflow); default `project`."
    )
    run_name: str | None = Field(None, min_length=1, description="The run's name; default `run_name`.")

    @model_validator(mode="before")
    @classmethod
    def _no_credentials(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if str(key).lower() in _CREDENTIAL_KEYS:
                    raise ValueError(
                        f"'{key}': credentials are read from the environment only; remove it and export "
                        f"{cls.credentials}"
                    )
        return data


@dataclass(frozen=True)
class RunNames:
    """What a tracker's defaults are made of: the output tree (absolute), the project and the run's name
    (the experiment's `report_to` names, else the model and the experiment), TensorBoard's folder key."""

    output_dir: str
    project: str
    run_name: str
    tensorboard_dir: str | None = None

    @property
    def tree(self) -> OutputTree:
        """The run's output tree (`ascendfactory.output_tree`): where a tracker's default store goes."""
        return OutputTree(self.output_dir)


def new_run_id() -> str:
    """A run id chosen by the caller (lowercase letters and digits: W&B accepts one)."""
    return uuid.uuid4().hex[:12]


def _no_env(spec: TrackerSpec) -> dict[str, str]:
    return {}


def _no_resume(spec: TrackerSpec, run_id: str) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Tracker:
    """One tracker, registered once (`trackers.registry.register_tracker`); everything else is derived.

    - `settings`: its section of `report_to` (pydantic); `resolve(settings, names)`: the `TrackerSpec`
      with its offline defaults filled in (paths absolute);
    - `client` / `packages`: the modules a framework's own integration imports (checked in that
      framework's environment before launch) and the pip requirements that install them (`AF_TRACKERS`);
      `extra`: the extra of ascendfactory-cli that installs them here;
    - `env(spec)`: its own variables, which every framework's integration reads; `run_env(spec, id)`: what
      makes an integration continue the run `id`;
    - `open(spec, run_id)`: a sink on its run (None: the framework writes it alone, as TensorBoard);
      `run_ids`: whether the pipeline holds the run's id across segments and hands it to the train step
      (`run_env`): `create` (it opens the run before training, with the parameters: MLflow), `choose`
      (it picks the id, `new_run_id`, and the framework's integration creates the run: W&B), or None (each
      segment is a run of its own: SwanLab's local mode);
      `states`: how its client writes each `RunState` (shown by `doctor`, used by its sink);
    - `from_env(environ)`: (spec, run id) as the embedded trainer rebuilds them from the variables above,
      when that trainer can open it itself (`--af-report-to <name>`);
    - `export(dest, project, run_name)`: the spec `logs export --to <name> DEST` writes;
    - `keys`: how each backend's framework reaches it, for backends whose own `tracker_keys` do not name it
      (a tracker brought by a plugin adds its rows here, touching no backend)."""

    name: str
    description: str
    settings: type[TrackerSettings]
    resolve: Callable[[Any, RunNames], TrackerSpec]
    client: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    extra: str | None = None
    env: Callable[[TrackerSpec], dict[str, str]] = _no_env
    run_env: Callable[[TrackerSpec, str], dict[str, str]] = _no_resume
    open: Callable[..., Sink] | None = None
    run_ids: Literal["create", "choose"] | None = None
    states: Mapping[str, str] = field(default_factory=dict)
    from_env: Callable[[Mapping[str, str]], tuple[TrackerSpec, str | None]] | None = None
    export: Callable[[str, str, str], TrackerSpec] | None = None
    keys: Mapping[str, TrackerKeys] = field(default_factory=dict)

    @property
    def credentials(self) -> str:
        return self.settings.credentials

    def install_hint(self) -> str:
        """How to install the client into this environment."""
        if self.extra:
            return f'pip install "ascendfactory-cli[{self.extra}]"'
        return "pip install " + " ".join(shlex.quote(p) for p in self.packages)


def sdk_tracker(
    name: str,
    *,
    version: str,
    offline_mode: str,
    description: str,
    settings: type[TrackerSettings],
    resolve: Callable[[Any, RunNames], TrackerSpec],
    env: Callable[[TrackerSpec], dict[str, str]],
    open: Callable[..., Sink],
    states: Mapping[str, str],
    run_env: Callable[[TrackerSpec, str], dict[str, str]] = _no_resume,
    run_ids: Literal["create", "choose"] | None = None,
    from_env: Callable[[Mapping[str, str]], tuple[TrackerSpec, str | None]] | None = None,
) -> Tracker:
    """The record of a tracker reached through its own SDK, the module `name` (pip `name>=version`, the
    extra `name` of ascendfactory-cli), whose runs can be written to a local folder in `offline_mode`:
    `logs export --to <name> DEST` writes that folder (W&B: `offline`, uploaded later by `wandb sync`;
    SwanLab: `local`, shown by `swanlab watch`)."""

    def export(dest: str, project: str, run_name: str) -> TrackerSpec:
        return TrackerSpec(name, project, run_name, location=os.path.abspath(dest), mode=offline_mode)

    return Tracker(
        name=name,
        description=description,
        settings=settings,
        resolve=resolve,
        client=(name,),
        packages=(f"{name}>={version}",),
        extra=name,
        env=env,
        run_env=run_env,
        open=open,
        run_ids=run_ids,
        states=states,
        from_env=from_env,
        export=export,
    )
