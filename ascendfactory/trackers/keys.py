"""How a framework reaches a tracker, as data (`TrackerKeys`): what every backend's `tracker_keys` is made of.
A module of its own, without the tracker records, so that a backend's import loads no tracker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANY_TRACKER = "*"  # a backend's `tracker_keys` row for every tracker the embedded trainer opens itself


@dataclass(frozen=True)
class TrackerKeys:
    """How a framework reaches one tracker. `set`: dotted `backend_config` key -> value, a text formatted
    with the tracker's `{name}`, `{project}`, `{run_name}`, `{location}`, `{mode}` (or any other value, as
    is); `append`: dotted list key -> the item added to it (LLaMA-Factory's `report_to`, verl's
    `trainer.logger`); `run_id`: the id the framework gives the tracker's run itself (a template), when
    it does; `resume_env`: variables for a train step that continues an existing run
    (`TrackerSpec.resume_env`)."""

    set: Mapping[str, Any] = field(default_factory=dict)
    append: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None
    resume_env: Mapping[str, str] = field(default_factory=dict)
