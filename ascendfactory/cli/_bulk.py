"""`train --dry-run` over many experiments in one process: a folder (its `*.yaml` / `*.yml`), a glob, several
files, or an old-style file named without a model and an experiment (every model/experiment pair it holds).

Each experiment gets its own verdict (`ok`, or `refused` with every problem, or `error` for an internal
failure), in the order given; the overrides after the experiments apply to each. One exit status: 0 when
every experiment plans, 2 when any is refused, 1 when any fails otherwise.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.errors import ConfigError, Problem

YAML = (".yaml", ".yml")
GLOB = ("*", "?", "[")


@dataclass(frozen=True)
class Target:
    """One experiment: a file, and for an old-style file the model and experiment it picks."""

    path: str
    names: tuple[str, str] | None = None
    backend: str | None = field(default=None, compare=False)  # a new-style file's (`Backend.prepare_bulk`)

    @property
    def label(self) -> str:
        return f"{self.path} {' '.join(self.names)}" if self.names else self.path


@dataclass
class Verdict:
    target: Target
    state: str  # ok | refused | error
    lines: list[str] = field(default_factory=list)  # the plan's summary, or the problems
    plan: Any = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.target.path, "state": self.state}
        if self.target.names:
            out["model"], out["exp"] = self.target.names
        if self.plan is not None:
            out["plan"] = self.plan
        else:
            out["problems"] = self.lines
        return out


def _is_target(arg: str) -> bool:
    return os.path.isdir(arg) or any(c in arg for c in GLOB) or (arg.endswith(YAML) and os.path.isfile(arg))


def bulk_targets(positional: list[str], *, expand_one: bool = False) -> list[Target] | None:
    """The experiments the positionals name when they name several (or a folder, a glob, an old-style file
    without names); None for one experiment (`CONFIG` or `CONFIG MODEL EXP`), planned as always.
    `expand_one`: one old-style file alone is its every model/experiment pair too."""
    if not positional or not all(_is_target(p) for p in positional):
        return None
    files: list[str] = []
    grouped = False
    for arg in positional:
        if os.path.isdir(arg):
            grouped = True
            files += sorted(p for p in glob.glob(os.path.join(arg, "*")) if p.endswith(YAML))
        elif any(c in arg for c in GLOB):
            grouped = True
            files += sorted(p for p in glob.glob(arg, recursive=True) if p.endswith(YAML))
        else:
            files.append(arg)
    targets: list[Target] = []
    for path in files:
        pairs, backend = _read(path)
        grouped = grouped or bool(pairs)
        targets += [Target(path, pair) for pair in pairs] or [Target(path, backend=backend)]
    if not targets:
        raise ConfigError(
            Problem(
                "CONFIG_YAML",
                f"no experiment file in {' '.join(positional)} (*.yaml, *.yml)",
                fix="name a folder of experiment files, a glob such as 'cfgs/*.yaml', or files",
            )
        )
    return targets if grouped or len(targets) > 1 or (expand_one and targets[0].names) else None


def _read(path: str) -> tuple[list[tuple[str, str]], str | None]:
    """Every (model, experiment) of an old-style file ([] for a new-style one, or one that does not load: its
    own verdict says why), and the backend a new-style file names."""
    from ascendfactory.config.oldstyle import experiment_names, is_old_style, model_names
    from ascendfactory.config.yamlio import load_file

    try:
        data = load_file(path)
    except (ConfigError, OSError):
        return [], None
    if not isinstance(data, dict):
        return [], None
    if not is_old_style(data):
        return [], data["backend"] if isinstance(data.get("backend"), str) else None
    return [(m, e) for m in model_names(data) for e in experiment_names(data, m)], None


def _prepare(targets: list[Target]) -> None:
    """`Backend.prepare_bulk` of each backend the files name (a name that is not one: its verdicts say so)."""
    from ascendfactory.backends.registry import get_backend

    for name in dict.fromkeys(t.backend for t in targets if t.backend):
        try:
            backend = get_backend(name)
        except ConfigError:
            continue
        backend.prepare_bulk(os.environ)


def plan_one(target: Target, overrides: list[str], *, as_json: bool, verbose: bool = False) -> Verdict:
    """Load and plan one experiment as `train --dry-run` does; its verdict."""
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.backends.registry import directory
    from ascendfactory.config.load import load_experiment
    from ascendfactory.pipeline.manifest import annotate_plan

    model, exp = target.names or (None, None)
    try:
        loaded = load_experiment(
            target.path, overrides, model_name=model, exp_name=exp, backends=directory(), collect=True
        )
        plan = annotate_plan(make_plan(loaded, dry_run=True))
    except ConfigError as e:
        return Verdict(target, "refused", [p.render() for p in e.problems])
    except Exception as e:  # noqa: BLE001 - one experiment's failure is its verdict, the others still plan
        return Verdict(target, "error", [f"{type(e).__name__}: {e}"])
    if as_json:
        from ascendfactory.secrets import mask_secrets

        return Verdict(target, "ok", plan=mask_secrets(plan.to_dict()))
    running = [s.name for s in plan.steps if not s.skipped]
    summary = f"backend {plan.backend}: {', '.join(running) or 'no steps to run'}"
    if plan.warnings and not verbose:
        n = len(plan.warnings)
        return Verdict(target, "ok", [f"{summary}; {n} warning{'s' if n > 1 else ''} (--verbose shows them)"])
    return Verdict(target, "ok", [summary, *(f"warning: {w}" for w in plan.warnings)])


def dry_run_all(targets: list[Target], overrides: list[str], *, as_json: bool, verbose: bool = False) -> int:
    """Plan every target; print one verdict each; the exit status (module docstring)."""
    from ascendfactory.cli._output import escape, out

    _prepare(targets)
    verdicts = []
    for target in targets:
        verdict = plan_one(target, overrides, as_json=as_json, verbose=verbose)
        verdicts.append(verdict)
        if not as_json:
            style = {"ok": "green", "refused": "red", "error": "red"}[verdict.state]
            out.markup(f"[{style}]{verdict.state:7s}[/{style}] {escape(verdict.target.label)}")
            for line in verdict.lines:
                out.markup("        " + escape(line).replace("\n", "\n        "))
    counts = {s: sum(v.state == s for v in verdicts) for s in ("ok", "refused", "error")}
    if as_json:
        out.json({"experiments": [v.to_dict() for v in verdicts], **counts})
    else:
        out.markup(
            f"{len(verdicts)} experiments: {counts['ok']} ok, {counts['refused']} refused, "
            f"{counts['error']} failed"
        )
    return 1 if counts["error"] else 2 if counts["refused"] else 0
