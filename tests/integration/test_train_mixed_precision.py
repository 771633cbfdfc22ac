"""`--bf16` (16-bit weights, fp32 main gradients and masters: engine/train/mixed_precision.py) under tensor,
pipeline and data parallelism, against one process and against the fp32 run.

Tolerances: bf16 layouts against one bf16 process, per-step loss within 2e-3 relative (TP and PP sum the
16-bit matmuls in another order) and the final fp32 masters within 2e-3 absolute (the bf16 path against
the fp32 one: tests/unit/engine/train/test_mixed_precision.py)."""

from __future__ import annotations

import pytest
import torch

from tests.support import training as T

pytestmark = pytest.mark.integration

ITERS = 4


def flags(root, *extra, model="hf"):
    return [
        *("--tokenizer-name-or-path", str(root / model), "--data-path", str(root / "sft")),
        *("--is-instruction-dataset", "--seq-length", "32", "--micro-batch-size", "1"),
        *("--global-batch-size", "4", "--train-iters", str(ITERS), "--lr", "1e-2", "--min-lr", "1e-3"),
        *("--lr-decay-style", "cosine", "--log-interval", "1", "--seed", "7", "--split", "100,0,0"),
        *("--eval-iters", "0", "--finetune"),
        *extra,
    ]


def run(nproc, argv):
    proc = T.torchrun(nproc, [str(a) for a in argv], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def masters(root, pp: int = 1) -> dict[str, torch.Tensor]:
    out = {}
    for p in range(pp):
        name = "mp_rank_00" if pp == 1 else f"mp_rank_00_{p:03d}"
        shard = torch.load(root / f"iter_{ITERS:07d}" / name / "model_optim_rng.pt", weights_only=False)
        assert {v.dtype for v in shard["model"].values()} == {torch.bfloat16}
        out.update({f"{p}:{k}": v for k, v in shard["optimizer"]["fp32_from_fp16_params"].items()})
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    T.make_tiny_model(root / "hf", family="qwen2")
    T.make_tiny_model(root / "tied", family="llama", tie_word_embeddings=True)
    T.make_sft_data(root / "sft", samples=48)
    T.hf_to_megatron(root / "hf", root / "mg")
    T.hf_to_megatron(root / "hf", root / "mg_tp2", tp=2)
    T.hf_to_megatron(root / "tied", root / "tied_pp1")
    T.hf_to_megatron(root / "tied", root / "tied_pp2", pp=2)
    return root


def test_bf16_tensor_and_data_parallel_follow_one_process(root):
    one = run(1, flags(root, "--load", root / "mg", "--bf16", "--save", root / "one"))
    tp = run(2, flags(root, "--load", root / "mg_tp2", "--bf16", "--tensor-model-parallel-size", "2"))
    dp = run(2, flags(root, "--load", root / "mg", "--bf16", "--save", root / "dp"))
    want = T.losses_from_log(one)
    assert sorted(want) == list(range(1, ITERS + 1))
    assert T.losses_from_log(tp) == pytest.approx(want, rel=2e-3)
    assert T.losses_from_log(dp) == pytest.approx(want, rel=2e-3)
    a, b = masters(root / "one"), masters(root / "dp")
    assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) < 2e-3


def test_bf16_tied_embeddings_under_a_pipeline_keep_equal_copies(root):
    """PP 2 with a tied embedding: the last stage's output copy gets the summed gradient into its own fp32
    master, so both copies (weights and masters) stay equal, and the losses follow PP 1."""
    one = run(1, flags(root, "--load", root / "tied_pp1", "--bf16", "--save", root / "t1", model="tied"))
    two = run(
        2,
        flags(root, "--load", root / "tied_pp2", "--bf16", "--pipeline-model-parallel-size", "2",
              "--save", root / "t2", model="tied"),
    )  # fmt: skip
    assert T.losses_from_log(two) == pytest.approx(T.losses_from_log(one), rel=2e-3)
    m = masters(root / "t2", pp=2)
    assert torch.equal(m["0:model.embed_tokens.weight"], m["1:lm_head.weight"])
    first, last = (
        torch.load(
            root / "t2" / f"iter_{ITERS:07d}" / f"mp_rank_00_00{p}" / "model_optim_rng.pt", weights_only=False
        )
        for p in (0, 1)
    )
    assert torch.equal(
        first["model"]["embedding.word_embeddings.weight"], last["model"]["output_layer.weight"]
    )
