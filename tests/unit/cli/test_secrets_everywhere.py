"""A secret given as an override never appears in what --dry-run prints (text, json, shell) or manifests."""

from __future__ import annotations

import json

import pytest

from ascendfactory.cli.app import main
from ascendfactory.pipeline import manifest
from ascendfactory.plan import Process, Role, Step
from tests.conftest import REPO

SECRET = "hf_SECRETVALUE123"
QUICK = str(REPO / "cfgs" / "quickstart.yaml")


@pytest.mark.parametrize("fmt", ["text", "json", "shell"])
def test_dry_run_output_masks_env_secrets(tmp_path, capsys, fmt):
    argv = [
        "train",
        QUICK,
        f"--af_output_dir={tmp_path}",
        f"--env.HF_TOKEN={SECRET}",
        "--env.OBS_SECRET_ACCESS_KEY=ak1",
        "--dry-run",
        "--format",
        fmt,
    ]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert SECRET not in printed.out + printed.err and "ak1" not in printed.out
    assert "HF_TOKEN" in printed.out
    if fmt == "shell":
        assert 'export HF_TOKEN="${HF_TOKEN:?set HF_TOKEN in the environment first}"' in printed.out


def test_manifests_fingerprint_secrets_without_storing_them(tmp_path):
    step = Step(name="s", role=Role.PREPROCESS, launch=Process(("true",)), env={"API_KEY": "k-123"})
    path = manifest.write(str(tmp_path), step, {"HF_TOKEN": SECRET, "A": "1"}, wall_s=0.1, node_rank=0)
    text = open(path).read()
    assert SECRET not in text and "k-123" not in text
    assert json.loads(text)["env"]["A"] == "1"
    other, _ = manifest.step_fingerprint(step, {"HF_TOKEN": "another", "A": "1"})
    same, _ = manifest.step_fingerprint(step, {"HF_TOKEN": SECRET, "A": "1"})
    assert other != same  # a changed secret still re-runs the step


def test_show_masks_secret_values(capsys):
    assert main(["show", QUICK, f"--env.HF_TOKEN={SECRET}"]) == 0
    printed = capsys.readouterr().out
    assert SECRET not in printed and "HF_TOKEN: '***'" in printed


@pytest.mark.parametrize(
    "override",
    [
        f"--backend_config.training.hf_token={SECRET}",  # an unknown flag quoting its value
        f"--backend_config.training.api_key=[1,{SECRET}]",
        f"--backend_config.bogus.password={SECRET}",  # an unknown section
    ],
)
@pytest.mark.parametrize("fmt", ["text", "json", "shell", None])
def test_error_messages_never_quote_a_secret_value(tmp_path, capsys, override, fmt):
    argv = ["train", QUICK, f"--af_output_dir={tmp_path}", override]
    argv += ["--dry-run", "--format", fmt] if fmt else []  # None: the real run, refused before it starts
    assert main(argv) == 2
    printed = capsys.readouterr()
    assert SECRET not in printed.out + printed.err
    assert "backend_config." in printed.err


def test_mask_known_leaves_short_values_and_other_words_alone():
    from ascendfactory import secrets

    secrets.remember({"env": {"HF_TOKEN": "abcd1234", "API_KEY": "x1"}, "lr": "abcd1234"})
    try:
        assert secrets.mask_known("got 'abcd1234' and abcd12345") == "got '***' and abcd12345"
        assert secrets.mask_known("world size x1 is fine") == "world size x1 is fine"
    finally:
        secrets.forget_known()
