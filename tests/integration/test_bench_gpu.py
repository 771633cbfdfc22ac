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
    memory = res["memory"]
    assert memory["rc"] == 0 and memory["measured_bytes"] > 0 and memory["estimate_bytes"] > 0


def test_run_all_rehearses_every_part_from_an_archive_copy(tmp_path):
    """`benchmarks/gpu/run_all.sh` with SMALL=1 from a copy of the tracked files (as the device gets a `git
    archive`): every part ends with exit 0 and its figures land in summary.json."""
    proj = tmp_path / "proj"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for f in files:
        src = REPO / f
        if src.is_file() and not src.is_symlink():
            (proj / f).parent.mkdir(parents=True, exist_ok=True)
            (proj / f).write_bytes(src.read_bytes())
    if (REPO / "demo_assets" / "tiny-qwen2" / "config.json").exists():  # built by install.sh: reuse it
        (proj / "demo_assets").mkdir()
        (proj / "demo_assets" / "tiny-qwen2").symlink_to(REPO / "demo_assets" / "tiny-qwen2")
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", "benchmarks/gpu/run_all.sh"],
        cwd=proj,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "OUT": str(out), "SMALL": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    parts = summary["parts"]
    want = {"quickstart", "grpo_warmup", "grpo_cpu", "env_checks", "train", "rollout", "memory", "grpo_gpu"}
    assert want <= set(parts), parts
    assert all(parts[p]["rc"] == 0 for p in want), parts
    assert summary["figures"]["train"]["train"]["shapes"]["tiny"]["ratio"] > 0
    assert summary["figures"]["memory"]["memory"]["measured_bytes"] > 0
    assert {"run_all.log", "bench.log", "quickstart.log", "grpo.log", "runs.tar.gz"} <= {
        p.name for p in out.iterdir()
    }
