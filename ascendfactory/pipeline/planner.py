"""Experiment -> Plan: gather the machine facts, then let the backend adapter plan (no process started)."""

from __future__ import annotations

import os
import sys

from ascendfactory.backends import get_adapter
from ascendfactory.backends.base import PlanContext
from ascendfactory.checkpoints import inspect
from ascendfactory.config.devices import resolve_devices_per_node
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.layout import OutputLayout
from ascendfactory.pipeline.plan import Plan


def build_context(loaded: LoadedExperiment, environ: dict[str, str] | None = None) -> PlanContext:
    environ = dict(os.environ if environ is None else environ)
    cfg = loaded.config
    devices = resolve_devices_per_node(cfg.env.NPUS_PER_NODE, environ)
    saved = OutputLayout(cfg.af_output_dir).saved_checkpoints
    return PlanContext(loaded=loaded, devices=devices, python=sys.executable, environ=environ,
                       saved_checkpoints=inspect(saved) if os.path.isdir(saved) else None)


def make_plan(loaded: LoadedExperiment, *, dry_run: bool, environ: dict[str, str] | None = None) -> Plan:
    """Validate and plan. On a dry run, input paths that do not exist here are warnings, not errors."""
    ctx = build_context(loaded, environ)
    adapter = get_adapter(loaded.config.backend.value)
    plan = adapter.plan(ctx, strict_paths=not dry_run)
    plan.facts.setdefault("devices_source", ctx.devices.source)
    return plan
