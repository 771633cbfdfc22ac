"""Secrets planted everywhere a user can put one never come out: a real run of the quickstart (every file it
leaves, its console output) and the dry run in all three formats, for the torch and llamafactory backends.

Planted: an env value with a secret name given as an override (HF_TOKEN), one taken from the environment by
interpolation (DB_PASSWORD: ${env:...}), and LLaMA-Factory's own credential keys (hf_hub_token goes to the
environment as HF_TOKEN; ms_hub_token stays in llamafactory_train.yaml, which is written 0600 and masked
wherever it is shown).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
SECRETS = {
    "hf": "hf_PLANTED1secret",
    "db": "db-PLANTED2secret",
    "lf": "hf_PLANTED3secret",
    "ms": "ms-PLANTED4",
}


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )


def _leaks(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def _tree_leaks(root: Path) -> dict[str, list[str]]:
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            leaks = _leaks(path.read_bytes().decode("utf-8", "replace"))
            if leaks:
                found[str(path.relative_to(root))] = leaks
    return found


def test_a_real_run_and_its_files_hold_no_secret(tmp_path, demo_model):
    out = tmp_path / "run"
    args = [
        "train",
        str(REPO / "cfgs" / "quickstart.yaml"),
        f"--af_output_dir={out}",
        f"--backend_config.training.tokenizer-name-or-path={demo_model}",
        "--backend_config.training.train-iters=4",
        "--backend_config.training.save-interval=2",
        "--env.NPUS_PER_NODE=1",
        f"--env.HF_TOKEN={SECRETS['hf']}",
        "--env.DB_PASSWORD=${env:AF_AUDIT_SECRET}",
    ]
    proc = _run(args, AF_AUDIT_SECRET=SECRETS["db"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 20  # logs, manifests, checkpoints, HF weights, the plot, the summary
    assert _tree_leaks(out) == {}
    assert _leaks(proc.stdout + proc.stderr) == []
    assert "HF_TOKEN" in (out / "exp-config.yaml").read_text()  # the key is recorded, its value masked


@pytest.mark.parametrize("fmt", ["text", "json", "shell"])
def test_dry_runs_of_both_backends_show_no_secret(tmp_path, demo_model, fmt):
    lf = [
        "train",
        str(REPO / "cfgs" / "quickstart_llamafactory.yaml"),
        f"--af_output_dir={tmp_path / 'lf'}",
        f"--backend_config.training.model_name_or_path={demo_model}",
        f"--backend_config.training.hf_hub_token={SECRETS['lf']}",
        f"--backend_config.training.ms_hub_token={SECRETS['ms']}",
        f"--env.HF_TOKEN={SECRETS['hf']}",
        "--dry-run",
        "--format",
        fmt,
    ]
    proc = _run(lf)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _leaks(proc.stdout + proc.stderr) == []
    if fmt == "shell":
        assert "secret values are masked" in proc.stdout


def test_plan_files_with_a_credential_are_private(tmp_path):
    from ascendfactory.pipeline.results import write_file

    secret = write_file(str(tmp_path / "a.yaml"), "ms_hub_token: x\nlr: 1\n")
    plain = write_file(str(tmp_path / "b.yaml"), "lr: 1\nadd_eos_token: true\n")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(plain).st_mode) & 0o044
