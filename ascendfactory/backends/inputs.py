"""Input paths that are not on this machine: an error on a real run, a warning on `--dry-run`.

Every backend reports a missing input the same way: the message says what a relative path is relative
to (the current directory, not the experiment file's folder), and when the path lies inside the output
directory of another experiment file beside this one (the GRPO quickstart's warm-up model), the fix names
that file and says to run it first.
"""

from __future__ import annotations

import functools
import glob
import os
from typing import TYPE_CHECKING

from ascendfactory.errors import AscendFactoryError, Problem

if TYPE_CHECKING:
    from ascendfactory.backends.base import PlanContext

DRY_RUN_NOTE = "a real run stops here"


def where(path: str) -> str:
    """`path` as the user wrote it, with the directory a relative path is resolved against."""
    if os.path.isabs(os.path.expanduser(path)):
        return path
    return f"{path} (relative to the current directory {os.getcwd()})"


def producer(ctx: PlanContext, path: str) -> str | None:
    """The experiment file beside this one whose `af_output_dir` holds `path` (None when none does)."""
    target = os.path.abspath(os.path.expanduser(path))
    source = ctx.loaded.source
    for candidate, written in _experiments_beside(os.path.abspath(source)):
        if written is not None and not _inside(target, written):
            continue  # its output directory, as written, cannot hold the path: not loaded at all
        out = _output_dir(candidate)
        if out is not None and _inside(target, out):
            return os.path.relpath(candidate) if not os.path.isabs(source) else candidate
    return None


def _inside(target: str, directory: str) -> bool:
    return target == directory or target.startswith(directory + os.sep)


def _experiments_beside(source: str) -> tuple[tuple[str, str | None], ...]:
    """(file, its `af_output_dir` as an absolute path when the file writes it as a plain path, else None)
    for each YAML file in `source`'s folder but itself."""
    return tuple(f for f in _experiments_in(os.path.dirname(source)) if os.path.abspath(f[0]) != source)


@functools.lru_cache(maxsize=8)
def _experiments_in(folder: str) -> tuple[tuple[str, str | None], ...]:
    """Each YAML file of `folder` with its plain `af_output_dir`: read once per process and folder, without
    validation (a `train --dry-run` over a whole folder reads each file once, not once per experiment)."""
    from ascendfactory.config.yamlio import load_file

    found: list[tuple[str, str | None]] = []
    for candidate in sorted(glob.glob(os.path.join(folder, "*.y*ml"))):
        try:
            tree = load_file(candidate)
        except (AscendFactoryError, OSError, ValueError):
            continue  # unreadable: not a producer we can name
        written = tree.get("af_output_dir") if isinstance(tree, dict) else None
        if isinstance(written, str) and "${" not in written and written.strip() == written != "":
            found.append((candidate, os.path.abspath(os.path.expanduser(written))))
        else:
            found.append((candidate, None))
    return tuple(found)


@functools.lru_cache(maxsize=32)
def _output_dir(candidate: str) -> str | None:
    """The absolute output directory of the experiment file `candidate`, loaded and validated as `train`
    would; None when it is not a valid experiment (an old-style file, a broken one)."""
    from ascendfactory.config.load import load_experiment

    try:
        return os.path.abspath(load_experiment(candidate).config.af_output_dir)
    except (AscendFactoryError, OSError, ValueError):
        return None


def missing(ctx: PlanContext, key: str, path: str, message: str, fix: str) -> Problem:
    """A missing input: `message` with `{path}` replaced by the path and what it is relative to."""
    text = message.replace("{path}", where(path))
    made_by = producer(ctx, path)
    if made_by:
        text += f"; it is an output of {made_by}, which has not run (or wrote elsewhere)"
        fix = f"run `ascendfactory-cli train {made_by}` first, or {fix}"
    return ctx.problem(key, text, fix)


def route(found: list[Problem], *, strict: bool, problems: list[Problem], warnings: list[str]) -> None:
    """A real run (`strict`): the findings are problems; a dry run: warnings that say so."""
    if strict:
        problems += found
    else:
        warnings += [as_warning(p) for p in found]


def as_warning(p: Problem) -> str:
    fix = f"; fix: {p.fix}" if p.fix else ""
    return f"{p.key}: {p.message} ({DRY_RUN_NOTE}{fix})"
