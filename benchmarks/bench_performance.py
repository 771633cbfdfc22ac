"""`ascendfactory-cli performance` on a folder of 20 finished runs of mixed backends, with a planted 20%
regression: the wall time of the command (median over `--repeats`), and whether it flags exactly the planted
run (exit 3, the run named). Goal (issue 40): under 2 s, the regression flagged.

The runs (tests/support/perf_runs.py, each backend's own log format): 8 embedded-trainer runs and 4
MindSpeed-LLM runs (Megatron run logs of `--iterations` iterations each, a memory report, the plan's
prediction in .af/summary.json), 4 LLaMA-Factory runs (trainer_log.jsonl) and 4 verl runs (console metrics
lines); every run's model and experiment has a baseline entry at its nominal throughput, and one
embedded-trainer run is 20% slower than its entry.

Peer, measured in the same loop (interleaved): what a user runs today for the same answer, `ascendfactory-cli
logs summary` once per run (20 processes), each printing that run's throughput.

    python benchmarks/bench_performance.py [--repeats 5] [--iterations 500]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import perf_runs as P  # noqa: E402

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]


def make_folder(root: Path, iterations: int) -> tuple[Path, Path, str]:
    runs, entries = root / "runs", []
    planted = ""
    for i in range(20):
        model, exp, nominal = f"model-{i}", "exp", 1000.0 + 50 * i
        measured = nominal * (0.8 if i == 3 else 1.0)
        if i < 8:
            path = P.megatron_run(
                runs / f"torch-{i}",
                tokens_per_s=measured,
                model=model,
                exp=exp,
                iterations=iterations,
                predicted_step_s=16.0,
            )
            backend = "torch"
        elif i < 12:
            path = P.megatron_run(
                runs / f"mindspeed-{i}",
                tokens_per_s=measured,
                model=model,
                exp=exp,
                backend="mindspeed-llm",
                devices=8,
                gbs=64,
                device="ascend-910b3",
                iterations=iterations,
            )
            backend = "mindspeed-llm"
        elif i < 16:
            path = P.llamafactory_run(
                runs / f"lf-{i}", tokens_per_s=measured, model=model, exp=exp, steps=iterations
            )
            backend = "llamafactory"
        else:
            path = P.verl_run(
                runs / f"verl-{i}", tokens_per_s=measured, model=model, exp=exp, steps=iterations
            )
            backend = "verl"
        if i == 3:
            planted = str(path)
        device = "ascend-910b3" if backend == "mindspeed-llm" else "h200"
        seq = 1024 if backend == "verl" else 2048
        entries.append(
            f"  {model}:\n    {exp}:\n      - {{device: {device}, seq_length: {seq}, backend: {backend}, "
            f"tokens_per_s_per_device: {nominal}, date: '2026-11-27', commit: bench}}\n"
        )
    baseline = root / "baseline.yaml"
    baseline.write_text("tolerance: 0.05\nbaselines:\n" + "".join(entries), encoding="utf-8")
    return runs, baseline, planted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=500, help="logged steps per run")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs, baseline, planted = make_folder(Path(tmp), a.iterations)
        logs = sorted(p for p in runs.rglob("*") if p.name == "trainer_log.jsonl" or "run_log" in p.name)
        ours, peer, flagged = [], [], None
        for rep in range(a.repeats):
            t0 = time.perf_counter()
            proc = subprocess.run(
                [
                    *CLI,
                    "performance",
                    f"--result_dir={runs}",
                    f"--baseline={baseline}",
                    f"--output_dir={Path(tmp) / f'out{rep}'}",
                    "--json",
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            ours.append(time.perf_counter() - t0)
            if proc.returncode not in (0, 3):
                raise SystemExit(proc.stderr[-2000:])
            import json

            flagged = (proc.returncode, json.loads(proc.stdout)["regressions"])
            t0 = time.perf_counter()
            for log in logs:
                subprocess.run([*CLI, "logs", "summary", str(log), "--json"], capture_output=True, cwd=ROOT)
            peer.append(time.perf_counter() - t0)
    mine, theirs = statistics.median(ours), statistics.median(peer)
    print(
        f"20 runs ({a.iterations} logged steps each): performance {mine:.2f} s median of {a.repeats} "
        f"(min {min(ours):.2f}); peer, `logs summary` x 20: {theirs:.2f} s; ratio {mine / theirs:.2f}x"
    )
    assert flagged is not None
    code, regressions = flagged
    print(f"exit {code}; flagged: {regressions}; planted: {planted}")
    ok = code == 3 and regressions == [planted]
    print(
        f"goal: under 2 s: {'yes' if mine < 2 else 'NO'}; "
        f"planted regression flagged alone: {'yes' if ok else 'NO'}"
    )


if __name__ == "__main__":
    main()
