"""The converter as a subprocess (`python -m ascendfactory.engine.convert`, `ascendfactory-cli convert`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def qwen3_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.tiny_model import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("hf") / "qwen3", "qwen3", seed=3, num_heads=8, num_kv_heads=4
    )


def run(argv: list[str], *, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )


def convert(*flags: str | Path) -> subprocess.CompletedProcess[str]:
    return run(["-m", "ascendfactory.engine.convert", *map(str, flags)])


def test_subprocess_round_trip_with_logits_check(qwen3_model, tmp_path):
    from safetensors.torch import load_file

    mg, hf = tmp_path / "mg", tmp_path / "hf"
    p = convert(
        "--load-model-type",
        "hf",
        "--save-model-type",
        "mg",
        "--load-dir",
        qwen3_model,
        "--save-dir",
        mg,
        "--target-tensor-parallel-size",
        "4",
        "--target-pipeline-parallel-size",
        "2",
        "--num-layer-list",
        "1,3",
        "--model-type-hf",
        "qwen3",
        "--verify-logits",
    )
    assert p.returncode == 0, p.stderr
    assert "max abs difference 0.000e+00" in p.stderr and "stage 2/2" in p.stderr
    p = convert(
        "--load-model-type",
        "mg",
        "--save-model-type",
        "hf",
        "--load-dir",
        mg,
        "--save-dir",
        hf,
        "--hf-cfg-dir",
        qwen3_model,
        "--verify-logits",
    )
    assert p.returncode == 0, p.stderr
    a, b = load_file(str(hf / "model.safetensors")), load_file(str(qwen3_model / "model.safetensors"))
    assert sorted(a) == sorted(b) and all(a[k].equal(b[k]) for k in a)


def test_subprocess_error_exit_codes(qwen3_model, tmp_path):
    p = convert("--load-dir", qwen3_model, "--save-dir", tmp_path, "--target-tensor-parallel-size", "3")
    assert p.returncode == 2 and "use a TP size in [1, 2, 4]" in p.stderr and "Traceback" not in p.stderr
    p = convert(
        "--load-model-type",
        "mg",
        "--save-model-type",
        "hf",
        "--load-dir",
        tmp_path,
        "--save-dir",
        tmp_path / "x",
    )
    assert p.returncode == 2 and "latest_checkpointed_iteration.txt is missing" in p.stderr


def test_ascendfactory_cli_convert_forwards(qwen3_model, tmp_path):
    code = "import sys; from ascendfactory.cli.app import main; sys.exit(main(sys.argv[1:]))"
    p = run(
        [
            "-c",
            code,
            "convert",
            "--load-model-type",
            "hf",
            "--save-model-type",
            "mg",
            "--load-dir",
            str(qwen3_model),
            "--save-dir",
            str(tmp_path / "mg"),
            "--target-tensor-parallel-size",
            "2",
        ]
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "mg" / "iter_0000001" / "mp_rank_01" / "model_optim_rng.pt").is_file()
    p = run(["-c", code, "convert", "--help"])
    assert p.returncode == 0 and "--target-pipeline-parallel-size" in p.stdout
