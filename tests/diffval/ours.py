"""Our verdict on one case, in-process: the experiment loaded and planned exactly as `train` does before its
first step (input paths must exist; the bases point at real ones), without starting anything.

`--dry-run` differs from it only in turning missing input paths and device problems into warnings.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.diffval.cases import Case


@dataclass
class Ours:
    accepted: bool
    keys: list[str] = field(default_factory=list)  # the keys our problems name
    messages: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)  # each problem's fix, as the user reads it
    plan: Any = None
    seconds: float = 0.0

    def names(self, key: str) -> bool:
        """A problem names the key, a key inside it, or the mapping it sits in."""
        key = key.replace("+", "")  # a child of an open map is written `+name` (verl's Hydra append)
        if any(k == key or k.startswith(key + ".") or key.startswith(k + ".") for k in self.keys):
            return True
        if any(key in m for m in self.messages):  # named inside a message about another key
            return True
        short = key.removeprefix("backend_config.").removeprefix("training.")  # as messages name keys
        bounded = rf"(?<![\w.-]){re.escape(short)}(?![\w-])"
        if "." in short and any(re.search(bounded, m) for m in self.messages):
            return True
        leaf = key.rsplit(".", 1)[-1]  # a rule across keys names the other key in its message
        spellings = {leaf, leaf.replace("-", "_")}  # Megatron's layout messages use its attribute names
        return any(
            re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", m)
            for m in self.messages
            for word in spellings
        )


def verdict(case: Case, workdir: Path, *, dry_run: bool = False) -> Ours:
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.cli._experiment_args import load_from_args
    from ascendfactory.errors import AscendFactoryError, ConfigError

    path = workdir / (re.sub(r"[^\w.-]", "_", case.id) + ".yaml")
    path.write_text(yaml.safe_dump(case.tree, sort_keys=False, allow_unicode=True), encoding="utf-8")
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            loaded = load_from_args([str(path)], collect=True)
            plan = make_plan(loaded, dry_run=dry_run)
    except ConfigError as e:
        return Ours(
            False,
            [p.key for p in e.problems],
            [f"{p.key}: {p.message}" for p in e.problems],
            [p.fix for p in e.problems],
            seconds=time.perf_counter() - t0,
        )
    except AscendFactoryError as e:  # a backend that cannot run here (verl on CPU) after its checks passed
        return Ours(True, messages=[str(e)[:200]], seconds=time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - a crash of our checks is a defect the harness reports
        return Ours(
            False, ["(crash)"], [f"(crash) {type(e).__name__}: {e}"], seconds=time.perf_counter() - t0
        )
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
    return Ours(True, plan=plan, seconds=time.perf_counter() - t0)
