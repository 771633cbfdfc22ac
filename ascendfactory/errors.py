"""Typed errors. The CLI catches `AscendFactoryError` once, in `cli.app.main`, and renders it.

Every message says what is wrong, with which value, and what to do next.
"""

from __future__ import annotations

from dataclasses import dataclass


class AscendFactoryError(Exception):
    """Base of every error the CLI renders without a traceback."""

    exit_code = 1


def printable(text: str) -> str:
    """`text` with control and other non-printable characters escaped (`\\x08`, `\\n`): a message never
    moves the cursor, rings the bell or hides what it names."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


@dataclass(frozen=True)
class Problem:
    """One configuration problem: where (`key`, as the user wrote it), what, and how to fix it."""

    key: str
    message: str
    fix: str = ""
    source: str = ""  # the file (or "command line") the key came from

    def render(self) -> str:
        where = f"{printable(self.source)}: " if self.source else ""
        text = f"{where}{printable(self.key)}: {printable(self.message)}"
        if self.fix:
            text += f"\n    fix: {self.fix}"
        return text


class ConfigError(AscendFactoryError):
    """One or more configuration problems, all reported at once. Exit code 2."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem(key="config", message=problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.problems)
        head = f"{n} configuration problem{'s' if n != 1 else ''}:"
        return "\n".join([head, *(f"  - {p.render()}" for p in self.problems)])


class ParallelismError(ConfigError):
    """A parallel layout that cannot run (TP/PP/CP/DP vs world size, heads, layers, batch sizes)."""


class BackendNotFoundError(AscendFactoryError):
    """The backend name is unknown, or its framework is not installed on this machine."""


class ConversionKeyError(AscendFactoryError):
    """A checkpoint tensor the converter has no mapping for (never silently dropped)."""


class StageFailedError(AscendFactoryError):
    """A pipeline step (subprocess) failed."""

    def __init__(
        self,
        stage: str,
        returncode: int,
        log_path: str | None = None,
        tail: str = "",
        rank: int | None = None,
        *,
        what: str = "",
    ):
        """`what`: how the step failed when its exit code does not say it (`trained nothing`)."""
        self.stage, self.returncode, self.log_path, self.tail, self.rank = (
            stage,
            returncode,
            log_path,
            tail,
            rank,
        )
        where = f" (first failing rank: {rank})" if rank is not None else ""
        text = f"step '{stage}' {what or f'failed with exit code {returncode}'}{where}"
        if log_path:
            text += f"\n  log: {log_path}"
        if tail:
            text += "\n  last lines:\n" + "\n".join("    " + line for line in tail.splitlines())
        super().__init__(text)
        self.exit_code = returncode if 0 < returncode < 256 else 1


class InterruptedRunError(AscendFactoryError):
    """The run was stopped by Ctrl-C (exit 130) or SIGTERM (exit 143)."""

    def __init__(self, signum: int, hint: str = ""):
        """`hint`: what running the same command again does (resume from which checkpoint)."""
        import signal

        self.signum = signum
        self.exit_code = 128 + signum
        text = f"run interrupted by {signal.Signals(signum).name}; every child process was stopped"
        super().__init__(text + (f"; {hint}" if hint else ""))


class MissingDependencyError(AscendFactoryError):
    """An optional Python package a command needs is not installed; the message says what to install."""


class BackendNotRunnableError(AscendFactoryError):
    """The experiment is valid, but this version cannot run the backend's steps (validated by --dry-run)."""


class SchedulerError(AscendFactoryError):
    """A scheduler's own command (sbatch, squeue, scancel) failed or is missing; the message quotes it."""


class DeviceMismatchError(AscendFactoryError):
    """A training process found no device of its own (more processes per node than devices visible)."""
