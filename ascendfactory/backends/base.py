"""What a backend is, and what it receives.

A backend is one `Backend` subclass per framework, registered with `@register_backend`. Its class
attributes are the registry record (name, description, stages, ...); its methods are everything the rest of
the tool asks of it:

    plan(ctx, strict_paths=...) -> Plan      validate (every problem at once, ConfigError) and plan the steps
    checks(environ) -> list[Check]           `doctor --backend <name>`: what this machine lacks for it
    install_steps(environ) -> list[...]      `install.sh <name>` / `doctor --install-plan <name>`
    template_values(arch, devices) -> dict   values its experiment templates (`experiments/*.yaml`) use
    memory_target(run) -> MemoryTarget       the job the pre-launch memory estimate models, from `plan.run`
    legacy_keys                              old-style flat keys (TP, GBS, ...) -> dotted destinations
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ascendfactory.config.devices import DeviceCount
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.config.schema import ExperimentConfig
from ascendfactory.config.yamlio import SafeDumper
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.output_tree import EXP_CONFIG
from ascendfactory.plan import CheckpointSpec, LogSpec, Plan, RunPolicy, safe_name
from ascendfactory.secrets import mask_secrets


@dataclass(frozen=True)
class OwnedKey:
    """A framework key the plan sets itself: its planned value, the generic key a user changes instead, and
    the refusal's message (default: `the plan sets it to <value>`)."""

    value: Any
    decided_by: str
    message: str = ""


def owned_key_problems(
    ctx: PlanContext, prefix: str, given: Mapping[str, Any], owned: Mapping[str, OwnedKey]
) -> list[Problem]:
    """The one owned-key rule every backend applies: a user value for a key the plan owns is accepted when
    it is the planned value (paths compared absolute) and refused otherwise, naming the key that decides it.
    Never dropped silently."""
    problems = []
    for key, own in owned.items():
        value = given.get(key)
        if value in (None, "") or _same(value, own.value):
            continue
        problems.append(
            ctx.problem(
                prefix + key,
                own.message or f"the plan sets it to {own.value}",
                fix=f"remove {prefix}{key}, or change {own.decided_by}",
            )
        )
    return problems


def _same(value: Any, planned: Any) -> bool:
    if isinstance(value, str) and isinstance(planned, str):
        return os.path.abspath(os.path.expanduser(value)) == os.path.abspath(planned)
    return bool(value == planned)


@dataclass
class PlanContext:
    """Facts about this machine, gathered by the planner (not by the backend): the experiment, the devices
    per node, the python that runs our programs, the environment, the logical CPUs and the working directory
    (relative paths in the experiment are relative to it)."""

    loaded: LoadedExperiment
    devices: DeviceCount
    python: str
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    cwd: str = field(default_factory=os.getcwd)

    @property
    def config(self) -> ExperimentConfig:
        return self.loaded.config

    def problem(self, key: str, message: str, fix: str = "") -> Problem:
        return Problem(key=key, message=message, fix=fix, source=self.loaded.source_of(key))

    @property
    def world_size(self) -> int:
        return self.config.env.NNODES * self.devices.count

    def collective_timeout_s(self) -> int | None:
        """The collective timeout a framework's own knob gets (`--distributed-timeout-minutes`,
        LLaMA-Factory's `ddp_timeout`): `RunPolicy.collective_timeout_s` when the experiment sets
        `node_wait_timeout_s`, else None (the framework keeps its own default: Megatron 10 minutes,
        LLaMA-Factory 30). A value the user gives the framework's knob in backend_config wins."""
        if "node_wait_timeout_s" not in self.config.model_fields_set:
            return None
        return self.run_policy().collective_timeout_s

    def run_policy(self) -> RunPolicy:
        """The runner's policy for this experiment (node place, waits, auto-resume)."""
        cfg = self.config
        return RunPolicy(
            node_rank=cfg.env.NODE_RANK,
            nnodes=cfg.env.NNODES,
            node_wait_timeout_s=cfg.node_wait_timeout_s,
            auto_resume=cfg.train_auto_resume,
            max_attempts=cfg.auto_resume.max_attempts,
            backoff_s=cfg.auto_resume.backoff_s,
            shared_filesystem=cfg.shared_filesystem,
        )

    @property
    def log_prefix(self) -> str:
        """`<model>-<exp>`, file-name safe: how most frameworks' run logs are named."""
        return f"{safe_name(self.config.af_model_name)}-{safe_name(self.config.exp_name)}"

    def new_plan(
        self,
        output_dir: str,
        logs: LogSpec,
        *,
        checkpoints: CheckpointSpec | None = None,
        facts: Mapping[str, Any] | None = None,
        warnings: list[str] | None = None,
        files: Mapping[str, str] | None = None,
    ) -> Plan:
        """The plan shell every backend fills, before its steps: identity, run policy, experiment file,
        `env` variables and `{output_dir}/exp-config.yaml` (a path in `files` replaces it; the other `files`
        follow it). `warnings` is kept, not copied. The facts: the common ones first (world_size, nnodes,
        devices_per_node, devices_source), then `facts`, whose values win (a backend whose run uses another
        device count gives its own)."""
        cfg = self.config
        shell_files = dict([self.exp_config_file(output_dir)])
        shell_files.update(files or {})
        common = {
            "world_size": self.world_size,
            "nnodes": cfg.env.NNODES,
            "devices_per_node": self.devices.count,
            "devices_source": self.devices.source,
        }
        return Plan(
            backend=cfg.backend,
            exp_name=cfg.exp_name,
            model_name=cfg.af_model_name,
            output_dir=output_dir,
            logs=logs,
            checkpoints=checkpoints,
            policy=self.run_policy(),
            files=shell_files,
            source=self.loaded.source,
            warnings=[] if warnings is None else warnings,
            env=cfg.env.extra_vars(),
            facts={**common, **(facts or {})},
        )

    def exp_config_file(self, output_dir: str) -> tuple[str, str]:
        """(path, text) of `{af_output_dir}/exp-config.yaml`: the resolved experiment, secrets masked."""
        text = (
            "# Resolved by ascendfactory-cli train (defaults, experiment file and overrides merged; "
            "secrets masked)\n"
            + yaml.dump(
                mask_secrets(self.config.model_dump(mode="json")),
                Dumper=SafeDumper,
                sort_keys=False,
                allow_unicode=True,
            )
        )
        return os.path.join(output_dir, EXP_CONFIG), text


class Backend:
    """Base class of every backend; subclasses set the class attributes and implement `plan`."""

    name: ClassVar[str]
    description: ClassVar[str]
    stages: ClassVar[tuple[str, ...]]
    launcher: ClassVar[str]  # how its training launches: torchrun | ray | process (shown by `experiments`)
    order: ClassVar[int] = 100  # where it is listed (help texts, `experiments`, messages)
    # Top-level keys `config` writes for this backend, and their values; each is commented with its line in
    # `run_option_comments` (what the key means for this framework), else the schema's description.
    run_options: ClassVar[dict[str, Any]] = {}
    run_option_comments: ClassVar[dict[str, str]] = {}
    # Old-style flat keys -> dotted destinations; other flat keys go to `legacy_rest` (None: an error).
    legacy_keys: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    legacy_rest: ClassVar[str | None] = None
    # Lines its training prints for errors a restart cannot fix (bad flags, bad config): auto-resume
    # stops instead of retrying them (the planner puts them into the plan's RunPolicy).
    unretryable: ClassVar[tuple[str, ...]] = ()
    # `report_to`: the trackers its framework reaches, each as the framework's own keys (data; see
    # `backends.report_to.TrackerKeys`). A tracker left out is a configuration error naming the backend.
    tracker_keys: ClassVar[Mapping[str, Any]] = {}
    # The names its framework gives logged values in a tracker where they differ from the log format's
    # (`LogFormat.tracker_name`): `logs export --to <tracker>` of its run uses them (training values).
    tracker_names: ClassVar[Mapping[str, str]] = {}
    # Whether its training programs run on CPU processes: `accelerator: cpu` is refused otherwise
    # (`backends.device_fit`).
    trains_on_cpu: ClassVar[bool] = False

    def trackers_for(self, stage: str | None) -> Mapping[str, Any]:
        """`tracker_keys` for a stage (a backend whose stages run different programs overrides it)."""
        return self.tracker_keys

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:  # pragma: no cover - interface
        """`strict_paths`: missing input paths are errors (a real run) or warnings (`--dry-run`)."""
        raise NotImplementedError

    def memory_target(self, run: Any) -> MemoryTarget | None:
        """The job the pre-launch memory estimate models (None: this backend has no model yet), built from
        `run`: the typed run `plan` left in `Plan.run` (the values the framework will parse, never
        `plan.facts`). Called after `plan` succeeded, so the values it reads are validated."""
        return None

    def prepare_bulk(self, environ: Mapping[str, str]) -> None:
        """Called once before a bulk dry run (`cli/_bulk.py`) plans experiments of this backend: start now
        what its plans will ask (a helper process), so that its start overlaps the planning of the others.
        Nothing by default; it decides nothing (each plan asks as it would alone)."""

    def checks(self, environ: Mapping[str, str]) -> list[Any]:
        """Doctor checks specific to this backend (`backends.environment.Check` records)."""
        return []

    def install_steps(self, environ: Mapping[str, str]) -> list[Any]:
        """The installation plan (`environment.InstallStep` records); empty: nothing beyond the core."""
        return []

    def model_problem(self, arch: Any, experiment: str | None = None) -> str | None:
        """Why this backend cannot run the catalog model `arch` (in its experiment template `experiment`, when
        given; `config` then does not offer the pair)."""
        return None

    def template_values(self, arch: Any, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        """Extra values for this backend's experiment templates."""
        return {}

    @property
    def experiments_dir(self) -> Path:
        """`experiments/` inside the backend's package: the templates `config` renders."""
        import sys

        return Path(sys.modules[type(self).__module__].__file__ or "").resolve().parent / "experiments"

    def experiments(self) -> list[str]:
        d = self.experiments_dir
        return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []

    def stage_problems(self, ctx: PlanContext, stage: str | None) -> list[Problem]:
        if stage is None or stage in self.stages:
            return []
        return [
            ctx.problem(
                "stage",
                f"'{stage}' is not a stage of backend {self.name}",
                fix="use one of: " + ", ".join(self.stages),
            )
        ]

    def option_problems(self, ctx: PlanContext, known: Iterable[str]) -> list[Problem]:
        """A problem for each `backend_config` key that is not in `known`: the check of a backend whose
        options are a flat list of its own rather than a framework's key lists (the backends of
        `tests/integration/plugin_backend/`, `plugin_rl/` and `ray_contract/`)."""
        names = list(known)
        return [
            ctx.problem(
                f"backend_config.{key}", f"not an option of {self.name}", fix="use: " + ", ".join(names)
            )
            for key in ctx.config.backend_config
            if key not in names
        ]

    @staticmethod
    def raise_if(problems: list[Problem]) -> None:
        if problems:
            raise ConfigError(problems)
