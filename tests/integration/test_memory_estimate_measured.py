"""The estimate against the embedded trainer's measured peak (the memory line's `max allocated`, from the
tensor-level tracker on CPU) on small layouts; `benchmarks/bench_memory_estimate.py measured` runs the
whole grid."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MEM_LINE = re.compile(
    r"\[Rank (\d+)\] \(after \d+ iterations\) memory \(MB\) \| allocated: [\d.]+ \| max allocated: ([\d.]+)"
)
T = "backend_config.training."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("memest-model")
    demo = REPO / "demo_assets" / "tiny-qwen2"
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (demo / name).exists():
            shutil.copy(demo / name, out / name)
    cfg = json.loads((demo / "config.json").read_text())
    cfg.update(
        hidden_size=256,
        intermediate_size=704,
        num_attention_heads=8,
        num_key_value_heads=2,
        num_hidden_layers=4,
        layer_types=["full_attention"] * 4,
        vocab_size=4096,
    )
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def _args(model: Path, out: Path, nproc: int, extra: dict) -> list[str]:
    flags = {
        "tokenizer-name-or-path": model,
        "train-iters": 2,
        "log-interval": 2,
        "save-interval": 1000,
        "eval-iters": 0,
        "eval-interval": 1000,
        "micro-batch-size": 1,
        "global-batch-size": 2 * nproc,
        "seq-length": 256,
        "untie-embeddings-and-output-weights": "true",
        **extra,
    }
    return [
        f"--af_output_dir={out}",
        f"--env.NPUS_PER_NODE={nproc}",
        f"--env.MASTER_PORT={free_port()}",
        "--ckpt_load_type=0",
        "--train_auto_resume=false",
        "--convert_mg2hf_at_last=false",
        *(f"--{T}{k}={v}" for k, v in flags.items()),
    ]


@pytest.mark.parametrize(
    ("name", "nproc", "extra"),
    [
        pytest.param("dp1", 1, {}, marks=pytest.mark.slow),  # pp2 (two processes, two stages) stays in CI
        ("pp2", 2, {"pipeline-model-parallel-size": 2, "global-batch-size": 4}),
    ],
)
def test_estimate_within_15_percent_of_the_measured_peak(model_dir, tmp_path, name, nproc, extra):
    out = tmp_path / name
    args = _args(model_dir, out, nproc, extra)
    dry = subprocess.run(
        [
            sys.executable,
            "-m",
            "ascendfactory.cli.app",
            "train",
            "cfgs/quickstart.yaml",
            *args,
            "--dry-run",
            "--format",
            "json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    stages = plan["memory"]["stages"]
    run = subprocess.run(
        [sys.executable, "-m", "ascendfactory.cli.app", "train", "cfgs/quickstart.yaml", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    peaks = {}
    for log in (out / "logs").glob("*run_log*"):
        for m in MEM_LINE.finditer(log.read_text(errors="replace")):
            peaks[int(m.group(1))] = float(m.group(2)) * 2**20
    assert len(peaks) == nproc  # every stage's data-parallel rank 0 reports
    for rank, measured in peaks.items():
        estimate = stages[rank]["total"]  # TP 1, DP 1: the rank is the stage
        assert abs(estimate - measured) / measured < 0.15, (rank, estimate, measured)
