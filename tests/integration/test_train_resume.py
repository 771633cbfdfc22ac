"""Resume: stop after the save at step 3, resume with --load: same per-step losses and bit-identical weights,
optimizer and data position as an uninterrupted run. Atomic saves: a crash mid-save keeps the old tracker."""

from __future__ import annotations

import pytest
import torch

from ascendfactory.engine.train.checkpoint import CRASH_ENV
from tests.support import training as T

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    T.make_tiny_model(root / "hf", family="llama", num_hidden_layers=2)
    T.hf_to_megatron(root / "hf", root / "mg_pp2", pp=2)
    T.hf_to_megatron(root / "hf", root / "mg", pp=1)
    data = T.make_pretrain_data(root / "data" / "pt")

    def flags(*extra, iters=6):
        return [
            "--tokenizer-name-or-path",
            str(root / "hf"),
            "--data-path",
            data,
            "--seq-length",
            "32",
            "--micro-batch-size",
            "1",
            "--global-batch-size",
            "4",
            "--train-iters",
            str(iters),
            "--lr",
            "5e-3",
            "--lr-decay-style",
            "linear",
            "--min-lr",
            "1e-4",
            "--lr-warmup-iters",
            "2",
            "--log-interval",
            "1",
            "--split",
            "100,0,0",
            "--seed",
            "3",
            *extra,
        ]

    return root, flags


def _run(nproc, flags, **kw):
    proc = T.torchrun(nproc, flags, **kw)
    return proc


def _state(root, it, rank_dir):
    return torch.load(root / f"iter_{it:07d}" / rank_dir / "model_optim_rng.pt", weights_only=False)


def test_resume_is_bit_identical_with_pipeline(setup):
    root, flags = setup
    pp = ["--pipeline-model-parallel-size", "2"]
    full = _run(2, flags("--load", str(root / "mg_pp2"), "--finetune", "--save", str(root / "full"), *pp))
    assert full.returncode == 0, full.stderr[-3000:]
    first = _run(
        2,
        flags(
            "--load",
            str(root / "mg_pp2"),
            "--finetune",
            "--save",
            str(root / "part"),
            *pp,
            "--save-interval",
            "3",
            "--exit-interval",
            "3",
        ),
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert (root / "part" / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert sorted(T.losses_from_log(first.stdout)) == [1, 2, 3]
    second = _run(2, flags("--load", str(root / "part"), "--save", str(root / "part"), *pp))
    assert second.returncode == 0, second.stderr[-3000:]
    assert f" loading checkpoint from {root / 'part'} at iteration 3" in second.stdout
    ref, a, b = (T.losses_from_log(p.stdout) for p in (full, first, second))
    assert sorted(b) == [4, 5, 6]
    assert {**a, **b} == ref  # identical printed losses, every step
    for rank_dir in ("mp_rank_00_000", "mp_rank_00_001"):
        x, y = _state(root / "full", 6, rank_dir), _state(root / "part", 6, rank_dir)
        assert x["model"].keys() == y["model"].keys()
        assert all(torch.equal(x["model"][k], y["model"][k]) for k in x["model"])
        for name, s in x["optimizer"]["state"].items():
            assert all(torch.equal(v, y["optimizer"]["state"][name][k]) for k, v in s.items())
        assert x["opt_param_scheduler"] == y["opt_param_scheduler"]
        assert x["args"].consumed_train_samples == y["args"].consumed_train_samples == 24


def test_finetune_from_training_checkpoint_restarts_at_zero(setup):
    root, flags = setup
    src = root / "ft_src"
    assert (
        _run(1, flags("--load", str(root / "mg"), "--finetune", "--save", str(src), iters=2)).returncode == 0
    )
    proc = _run(1, flags("--load", str(src), "--finetune", "--save", str(root / "ft"), iters=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(T.losses_from_log(proc.stdout)) == [1, 2]
    assert (root / "ft" / "latest_checkpointed_iteration.txt").read_text() == "2"


def test_crash_during_save_never_commits_a_partial_checkpoint(setup):
    root, flags = setup
    out = root / "crash"
    args = flags(
        "--load", str(root / "mg"), "--finetune", "--save", str(out), "--save-interval", "2", iters=4
    )
    crashed = _run(1, args, env={CRASH_ENV: "4"})
    assert crashed.returncode != 0
    assert "simulated crash" in crashed.stderr
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert not (out / "iter_0000004").exists() and (out / "iter_0000004.tmp").exists()
    resumed = _run(1, flags("--load", str(out), "--save", str(out), "--save-interval", "2", iters=4))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(T.losses_from_log(resumed.stdout)) == [3, 4]
    assert T.losses_from_log(resumed.stdout) == {
        k: v for k, v in T.losses_from_log(crashed.stdout).items() if k > 2
    }
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert sorted(p.name for p in out.iterdir()) == [
        "iter_0000002",
        "iter_0000004",
        "latest_checkpointed_iteration.txt",
    ]


def test_missing_checkpoint_warns_or_fails(setup):
    root, flags = setup
    empty = root / "empty"
    empty.mkdir()
    proc = _run(1, flags("--load", str(empty), iters=1))
    assert proc.returncode == 0 and "will not load any checkpoints and will start from random" in proc.stdout
    proc = _run(1, flags("--load", str(empty), "--exit-on-missing-checkpoint", iters=1))
    assert proc.returncode != 0 and "latest_checkpointed_iteration.txt" in proc.stderr  # torchrun: 1
