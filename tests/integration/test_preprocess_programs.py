"""The preprocess and demo programs as subprocesses: workers byte-identical, demo assets deterministic."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _run(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "a"
    proc = _run("-m", "ascendfactory.engine.demo", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "parameters" in proc.stdout
    return out


def test_demo_model_is_byte_identical_across_runs(demo_dir: Path, tmp_path: Path) -> None:
    proc = _run("-m", "ascendfactory.engine.demo", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    assert _files(tmp_path / "b") == _files(demo_dir)


@pytest.mark.parametrize(
    ("data", "flags"),
    [
        ("demo_pretrain.jsonl", ["--append-eod"]),
        ("demo_sft.jsonl", ["--handler-name", "AlpacaStyleInstructionHandler", "--prompt-type", "qwen"]),
    ],
)
def test_workers_1_and_3_write_identical_bytes(
    demo_dir: Path, tmp_path: Path, data: str, flags: list[str]
) -> None:
    results = []
    for workers in ("1", "3"):
        out = tmp_path / f"w{workers}"
        proc = _run(
            "-m",
            "ascendfactory.engine.data.preprocess",
            "--input",
            str(ROOT / "cfgs" / "data" / data),
            "--tokenizer-name-or-path",
            str(demo_dir),
            "--output-prefix",
            str(out / "ds"),
            "--workers",
            workers,
            "--log-interval",
            "64",
            *flags,
        )
        assert proc.returncode == 0, proc.stderr
        assert "docs/s" in proc.stderr and "tokens/s" in proc.stderr
        results.append(_files(out))
    assert results[0] == results[1] and len(results[0]) in (2, 6)


def test_bad_record_exit_code_and_message(demo_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "ok"}\n{"text": 1}\n')
    proc = _run(
        "-m",
        "ascendfactory.engine.data.preprocess",
        "--input",
        str(src),
        "--tokenizer-name-or-path",
        str(demo_dir),
        "--output-prefix",
        str(tmp_path / "out" / "ds"),
        "--workers",
        "2",
    )
    assert proc.returncode == 1
    assert f"{src}:2: bad record (line 2): field 'text' must be a string" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_help_is_fast_and_light() -> None:
    proc = _run(
        "-c",
        "import sys; from ascendfactory.engine.data.preprocess import main; "
        "rc = main(['--help']); "
        "heavy = [m for m in ('numpy', 'tokenizers', 'transformers', 'torch') if m in sys.modules]; "
        "print('HEAVY', heavy); sys.exit(rc)",
    )
    assert proc.returncode == 0, proc.stderr
    assert "--tokenizer-name-or-path" in proc.stdout and "HEAVY []" in proc.stdout
