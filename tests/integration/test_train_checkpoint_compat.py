"""Checkpoints of an earlier embedded trainer (`tests/data/ckpt_compat`, written at commit 776fd04 when
`--bf16` / `--fp16` ran under autocast over fp32 weights) resume in the current one (16-bit weights, fp32
masters in the optimizer): loading one and saving it again gives the same files tensor for tensor (model
shard, Adam's moments, the fp32 masters, distrib_optim.pt), and training on from it continues the losses
the earlier trainer logged (fp32: to print precision; bf16: 1e-3 relative, its forward now runs in bf16
instead of under autocast; fp16: 1e-4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import training as T

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "ckpt_compat"
RUNS = {
    "fp32": ([], 1e-6),
    "bf16": (["--bf16"], 1e-3),
    "bf16_distopt": (["--bf16", "--use-distributed-optimizer"], 1e-3),
    "fp16": (["--fp16", "--initial-loss-scale", "1024"], 1e-4),
}
SHARD = "iter_0000003/mp_rank_00"


def _flags(iters: int, *extra: str) -> list[str]:
    data = str(FIXTURE / "data" / "pt_text_document")
    return [
        *("--tokenizer-name-or-path", str(FIXTURE / "hf"), "--data-path", data, "--seq-length", "16"),
        *("--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(iters)),
        *("--lr", "1e-2", "--min-lr", "1e-3", "--lr-decay-style", "cosine", "--lr-warmup-iters", "1"),
        *("--lr-decay-iters", "6", "--log-interval", "1", "--seed", "5", "--split", "100,0,0"),
        *("--eval-iters", "0", *extra),
    ]


def _train(argv: list[str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.train", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "fp16" else n for n in RUNS]
)
def test_an_earlier_trainers_checkpoint_resumes(name, tmp_path):
    extra, rel = RUNS[name]
    old = FIXTURE / name
    # load at iteration 3, nothing left to train: the final save writes back what was loaded
    out = _train(_flags(3, *extra, "--load", str(old), "--save", str(tmp_path / "again")))
    assert f" loading checkpoint from {old} at iteration 3" in out
    x = torch.load(old / SHARD / "model_optim_rng.pt", weights_only=False)
    y = torch.load(tmp_path / "again" / SHARD / "model_optim_rng.pt", weights_only=False)
    assert _equal(x["model"], y["model"])
    assert {v.dtype for v in y["model"].values()} == {
        {"fp32": torch.float32, "fp16": torch.float16}.get(name, torch.bfloat16)
    }
    assert _equal(x["optimizer"], y["optimizer"])  # moments, param groups, loss scaler, fp32 masters
    if name.startswith("bf16") and "state" in x["optimizer"]:
        masters = y["optimizer"]["fp32_from_fp16_params"]
        assert {v.dtype for v in masters.values()} == {torch.float32}
        assert any(not torch.equal(m, m.to(torch.bfloat16).float()) for m in masters.values())  # not rounded
    if name == "bf16_distopt":
        a = torch.load(old / SHARD / "distrib_optim.pt", weights_only=False)
        b = torch.load(tmp_path / "again" / SHARD / "distrib_optim.pt", weights_only=False)
        assert _equal(a, b)
    # training on continues the earlier trainer's losses
    want = {int(k): v for k, v in json.loads((FIXTURE / "losses.json").read_text())[name].items()}
    got = T.losses_from_log(_train(_flags(6, *extra, "--load", str(old), "--save", str(tmp_path / "on"))))
    assert sorted(got) == [4, 5, 6]
    assert got == pytest.approx({k: want[k] for k in got}, rel=rel)
