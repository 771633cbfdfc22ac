"""`--sequence-parallel` with TP 2: the same training as TP 2 without it (losses relative 1e-5, final weights
max |diff| <= 2e-5, as test_train_layouts; measured 2.8e-6), the norm weights equal on both TP ranks, and a
lower peak of the memory line (the residual stream and the norms hold half of the sequence)."""

from __future__ import annotations

import pytest
import torch

from tests.support import training as T

pytestmark = pytest.mark.integration


def _memory(stdout: str) -> dict[str, float]:
    line = next(x for x in stdout.splitlines() if x.startswith("[Rank 0] (after 1 iterations) memory"))
    return {k.strip(): float(v) for k, v in (f.split(": ") for f in line.split(" | ")[1:])}


def test_sequence_parallel_matches_tp_and_lowers_the_peak(tmp_path):
    T.make_tiny_model(tmp_path / "hf", family="qwen2", num_hidden_layers=2, tie_word_embeddings=True)
    T.hf_to_megatron(tmp_path / "hf", tmp_path / "mg", tp=2)
    data = T.make_pretrain_data(tmp_path / "pt")
    runs = {}
    for name, extra in (("tp2", []), ("sp", ["--sequence-parallel"])):
        flags = [
            "--tokenizer-name-or-path", str(tmp_path / "hf"), "--data-path", data, "--seq-length", "64",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3", "--lr", "5e-3",
            "--log-interval", "1", "--split", "100,0,0", "--seed", "5", "--tensor-model-parallel-size", "2",
            "--load", str(tmp_path / "mg"), "--finetune", "--save", str(tmp_path / name), *extra,
        ]  # fmt: skip
        proc = T.torchrun(2, flags, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = proc.stdout
    ref, got = (T.losses_from_log(runs[n]) for n in ("tp2", "sp"))
    assert sorted(got) == [1, 2, 3] and got == pytest.approx(ref, rel=1e-5)
    a, b = T.megatron_to_hf_full(tmp_path / "tp2"), T.megatron_to_hf_full(tmp_path / "sp")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 2e-5
    ranks = [
        torch.load(tmp_path / "sp" / "iter_0000003" / d / "model_optim_rng.pt", weights_only=False)["model"]
        for d in ("mp_rank_00", "mp_rank_01")
    ]
    norms = [k for k in ranks[0] if "layernorm" in k]
    assert norms and all(torch.equal(ranks[0][k], ranks[1][k]) for k in norms)
    assert _memory(runs["sp"])["max allocated"] < _memory(runs["tp2"])["max allocated"]


def test_sequence_parallel_is_off_with_tp1(tmp_path):
    T.make_tiny_model(tmp_path / "hf", family="qwen2", num_hidden_layers=1)
    data = T.make_pretrain_data(tmp_path / "pt")
    flags = [
        "--tokenizer-name-or-path", str(tmp_path / "hf"), "--data-path", data, "--seq-length", "16",
        "--train-iters", "1", "--lr", "1e-3", "--log-interval", "1", "--split", "100,0,0",
        "--sequence-parallel",
    ]  # fmt: skip
    proc = T.torchrun(1, flags, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING: --sequence-parallel has no effect with tensor-model-parallel size 1" in proc.stdout
    assert sorted(T.losses_from_log(proc.stdout)) == [1]


def test_sequence_parallel_on_instruction_rows_of_odd_length(tmp_path):
    """Instruction samples are seq_length - 1 tokens once shifted (odd here): the trainer pads each row to a
    multiple of TP with ignored tokens, so sequence parallelism runs and the losses are TP 2's (1e-5)."""
    T.make_tiny_model(tmp_path / "hf", family="qwen2", num_hidden_layers=2)
    T.hf_to_megatron(tmp_path / "hf", tmp_path / "mg", tp=2)
    T.make_sft_data(tmp_path / "sft", samples=24)
    base = [
        "--tokenizer-name-or-path", str(tmp_path / "hf"), "--data-path", str(tmp_path / "sft"),
        "--is-instruction-dataset", "--seq-length", "32", "--micro-batch-size", "1",
        "--global-batch-size", "2", "--train-iters", "3", "--lr", "1e-3", "--log-interval", "1",
        "--split", "100,0,0", "--eval-iters", "0", "--tensor-model-parallel-size", "2",
        "--load", str(tmp_path / "mg"), "--finetune",
    ]  # fmt: skip
    runs = [T.torchrun(2, base + extra, timeout=240) for extra in ([], ["--sequence-parallel"])]
    assert all(p.returncode == 0 for p in runs), runs[1].stdout[-2000:] + runs[1].stderr[-2000:]
    ref, got = (T.losses_from_log(p.stdout) for p in runs)
    assert sorted(got) == [1, 2, 3] and got == pytest.approx(ref, rel=1e-5)
