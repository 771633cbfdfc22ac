"""What the three Megatron-family workers share around the framework's own code: running one verdict with
the stand-ins armed, naming a refusal, and the request/verdict loop over stdin/stdout. Imports nothing from
ascendfactory or the tests (the workers run in a framework's environment).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import standins

Verdict = tuple[bool | None, str | None]


def where(error: BaseException) -> str:
    """For an assertion without a message: the framework's line that failed."""
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{os.path.basename(frame.filename)}:{frame.lineno}: {frame.line}"


def places(error: BaseException) -> list[str]:
    """The traceback of a refusal as `file:line` places, innermost last: which statement refused. The
    exceptions it was raised while handling come first (a check whose exception the framework catches
    and turns into another still refused there)."""
    out: list[str] = []
    seen: set[int] = set()
    chain: list[BaseException] = []
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    for e in reversed(chain):
        out += [f"{f.filename}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)]
    return out


# The places of the last refusal `refusal()` or `judge_argv` named; serve() sends them as the verdict's `at`.
LAST_AT: list[str] = []


def refusal(error: BaseException) -> str:
    LAST_AT[:] = places(error)
    # MindSpeed-MM's ensure_valid raises IsNotValidError, whose message is in _error_message (str() is empty)
    message = str(error).strip() or str(getattr(error, "_error_message", None) or "")
    text = [t for t in message.splitlines() if t.strip()] or [where(error)]
    return f"{type(error).__name__}: {' | '.join(text[:2])}"[:300]


def judge_argv(judge: Callable[[], None], env: dict[str, Any]) -> Verdict:
    """`judge()` (the framework's own argument handling on one argv) under `env`, stand-ins armed: accepted,
    refused with the framework's words, or undecided when a stand-in or a device query was reached."""
    err = io.StringIO()
    saved = dict(os.environ)
    os.environ.update({k: str(v) for k, v in env.items()})
    standins.Placeholder.active = True
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            judge()
    except standins.StandInCalled as e:
        return None, f"undecided: {e}"
    except Exception as e:  # noqa: BLE001
        if any("/torch/cuda/" in f.filename for f in traceback.extract_tb(e.__traceback__)):
            return None, f"undecided: a device query ({type(e).__name__}: {str(e)[:120]})"
        return False, refusal(e)
    except SystemExit as e:  # argparse: usage and the message on stderr
        LAST_AT[:] = places(e)
        lines = [t for t in err.getvalue().strip().splitlines() if t.strip()]
        return False, f"SystemExit({e.code}): {lines[-1] if lines else ''}"[:300]
    finally:
        standins.Placeholder.active = False
        os.environ.clear()
        os.environ.update(saved)
    return True, None


def serve(
    stand_ins: tuple[tuple[str, str, str], ...],
    framework: Callable[[], Any],
    verdict: Callable[[Any, dict], Verdict],
) -> int:
    """The worker's process: `--stand-ins` prints the table; otherwise one verdict per stdin line
    (`{"id", "args"}`) as one stdout line (`{"id", "ok", "error"}`), the framework's own output silenced."""
    if sys.argv[1:2] == ["--stand-ins"]:  # (a worker of several versions takes the version after it)
        print(json.dumps([{"module": m, "why": w, "stands_in": s} for m, w, s in stand_ins]))
        return 0
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    # the requests are read from a copy of stdin: the `exit()` a framework calls on a refusal (Megatron's
    # validate_args on --checkpoint-activations) closes sys.stdin before it raises SystemExit
    requests = os.fdopen(os.dup(sys.stdin.fileno()), "r")
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        warnings.simplefilter("ignore")
        judged = framework()
        for line in requests:
            if not line.strip():
                continue
            request = json.loads(line)
            LAST_AT.clear()
            ok, error = verdict(judged, request["args"])
            at = list(LAST_AT) if ok is False else []
            out.write(json.dumps({"id": request["id"], "ok": ok, "error": error, "at": at}) + "\n")
            out.flush()
    return 0
