"""`benchmarks/bench_gpu.py run --small`: the GPU benchmark's every part on the CPU with tiny shapes, so the
script a GPU session runs unchanged is known to work end to end (figures are not checked for speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_the_gpu_benchmark_runs_every_part_on_cpu(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_gpu.py", "run", "--small", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads((tmp_path / "bench_gpu.json").read_text())
    checks = res["checks"]
    assert checks["chunked_ce"]["loss_rel_diff"] < 1e-5 and checks["fused_rmsnorm_max_rel"] < 1e-2
    row = res["train"]["shapes"]["tiny"]
    assert all(r["rc"] == 0 for r in row["ours"] + row["hf"] + row["variants"])
    assert row["ratio"] > 0 and row["ours_tokens_per_s"] > 0 and row["hf_tokens_per_s"] > 0
    assert {tuple(r["flags"]) for r in row["variants"]} == {("--use-fused-rmsnorm",), ("--af-torch-compile",)}
    rollout = res["rollout"]["shapes"]["tiny"]["tokens_per_s"]
    assert rollout["ours"] > 0 and rollout["hf"] > 0
    assert any(line.startswith("train tiny") and "ratio" in line for line in res["text"])
