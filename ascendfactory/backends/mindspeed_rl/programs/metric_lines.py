"""Run a program and copy the lines of its output that match a pattern into a file of their own.

    metric_lines.py --match REGEX --to PATH [--time-format FMT] -- PROGRAM ARGS...

Every line of the program's stdout and stderr passes through to this program's stdout unchanged; the lines
matching REGEX (searched anywhere in the line, after colour codes are removed) are also appended to PATH,
in which `{time}` is replaced by the start time (`--time-format`, default %Y%m%d_%H%M%S). The file is
created when the program starts. SIGINT and SIGTERM are passed on to the program; the exit code is the
program's (128 + N when a signal N ended it).

The `mindspeed-rl` backend wraps MindSpeed-RL's driver with it: AscendFactory's `logs/grpo_metrics-<time>.log`
holds the driver's per-iteration metric lines. Runs in the framework's environment: standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("metric_lines.py: the program to run follows --", file=sys.stderr)
        return 2
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="metric_lines.py")
    parser.add_argument("--match", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--time-format", default="%Y%m%d_%H%M%S")
    args = parser.parse_args(argv[:cut])
    program = argv[cut + 1 :]
    if not program:
        parser.error("no program after --")
    pattern = re.compile(args.match)
    path = args.to.replace("{time}", time.strftime(args.time_format))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    child = subprocess.Popen(
        program, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    out = sys.stdout.buffer
    assert child.stdout is not None
    with open(path, "a", encoding="utf-8", buffering=1) as copy:
        for raw in iter(child.stdout.readline, b""):
            out.write(raw)
            out.flush()
            line = ANSI.sub("", raw.decode("utf-8", errors="replace")).rstrip("\r\n")
            if pattern.search(line):
                copy.write(line + "\n")
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
