"""LoRA, tied embeddings under PP > 1, bf16 checkpoints and evaluation in the embedded trainer, as
MindSpeed-LLM / Megatron do them (tiny models, a few iterations each).

Tolerances as test_train_layouts.py (fp32): per-step `lm loss` relative 1e-5, grad norm 2e-3 absolute.
"""

from __future__ import annotations

import pytest
import torch

from ascendfactory.engine.convert import lora
from ascendfactory.metrics import parse_lines
from tests.support import training as T

pytestmark = pytest.mark.integration

TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
LORA = ["--lora-target-modules", *TARGETS, "--lora-r", "4", "--lora-alpha", "8"]


def flags(root, *extra, iters=6, model="hf"):
    return [
        *("--tokenizer-name-or-path", str(root / model), "--data-path", str(root / "sft")),
        *("--is-instruction-dataset", "--seq-length", "32", "--micro-batch-size", "1"),
        *("--global-batch-size", "4", "--train-iters", str(iters), "--lr", "5e-2", "--min-lr", "5e-3"),
        *("--lr-decay-style", "cosine", "--lr-warmup-iters", "1", "--log-interval", "1", "--seed", "7"),
        *extra,
    ]


def run(nproc, argv):
    proc = T.torchrun(nproc, [str(a) for a in argv], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def norms(stdout):
    from ascendfactory.engine.train.logline import parse_log_line

    return [float(parse_log_line(x)["grad norm"]) for x in stdout.splitlines() if "grad norm:" in x]


def evals(stdout):
    return {
        (r.kind, r.step): r.metrics["lm loss value"]
        for r in parse_lines(stdout.splitlines())
        if r.kind in ("eval", "test")
    }


def shard(root, it, rank_dir):
    return torch.load(root / f"iter_{it:07d}" / rank_dir / "model_optim_rng.pt", weights_only=False)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_tied_bf16")
    T.make_tiny_model(root / "hf", family="qwen2")
    T.make_tiny_model(root / "tied", family="llama", tie_word_embeddings=True)
    T.make_sft_data(root / "sft", samples=48)
    for tp, pp in ((1, 1), (2, 2)):
        T.hf_to_megatron(root / "hf", root / f"mg_tp{tp}pp{pp}", tp=tp, pp=pp)
    for pp in (1, 2):
        T.hf_to_megatron(root / "tied", root / f"tied_pp{pp}", pp=pp)
    return root


def test_lora_tp2_pp2_matches_one_process_and_lora_load_resumes_exactly(root):
    """LoRA under TP 2 x PP 2 trains the same adapters as one process; a run saved with
    --lora-ckpt-filter resumes from `--load <base> --lora-load <its output>` (MindSpeed-LLM's LoRA resume:
    the adapters, optimizer, scheduler, RNG and data position come from --lora-load) to the same losses."""
    base = ["--load", root / "mg_tp1pp1", *LORA, "--split", "100,0,0"]
    ref = run(1, flags(root, *base, "--finetune", "--save", root / "ref"))
    par = run(
        4,
        flags(root, "--load", root / "mg_tp2pp2", *LORA, "--split", "100,0,0", "--finetune")
        + ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"],
    )
    assert "trainable params:" in ref
    want, got = T.losses_from_log(ref), T.losses_from_log(par)
    assert sorted(got) == list(range(1, 7)) and got == pytest.approx(want, rel=1e-5)
    assert norms(par) == pytest.approx(norms(ref), abs=2e-3)
    # the PEFT layout of MindSpeed-LLM's LoRA checkpoints: base_layer + lora_A/B per target module
    model = shard(root / "ref", 6, "mp_rank_00")["model"]
    stem = "decoder.layers.1.self_attention.linear_qkv"
    assert {f"{stem}.base_layer.weight", f"{stem}.base_layer.bias", stem + lora.A_SUFFIX} <= set(model)
    assert model[stem + lora.A_SUFFIX].shape == (4, 64) and model[stem + lora.B_SUFFIX].shape == (128, 4)
    assert lora.adapter_targets(model) == set(TARGETS) and f"{stem}.weight" not in model
    # resume through --lora-load from a filtered save at step 3
    part = root / "part"
    first = run(1, flags(root, *base, "--finetune", "--save", part, "--save-interval", "3",
                         "--exit-interval", "3", "--lora-ckpt-filter"))  # fmt: skip
    saved = shard(part, 3, "mp_rank_00")["model"]
    assert set(saved) == {k for k in saved if "lora" in k} and lora.adapter_targets(saved) == set(TARGETS)
    second = run(1, flags(root, *base, "--lora-load", part, "--save", part, "--lora-ckpt-filter"))
    assert f" loading checkpoint from {part} at iteration 3" in second
    assert {**T.losses_from_log(first), **T.losses_from_log(second)} == want
    final, ref_final = shard(part, 6, "mp_rank_00")["model"], shard(root / "ref", 6, "mp_rank_00")["model"]
    assert all(torch.equal(final[k], ref_final[k]) for k in final)


def test_tied_embeddings_pp2_train_as_pp1_and_keep_the_copies_equal(root):
    """The converter gave the last stage its own output_layer.weight; training keeps it equal to the
    embedding (gradients all-reduced in the embedding group), counts it once in the grad norm, and the
    losses and validation losses are PP 1's."""
    common = ["--finetune", "--split", "80,20,0", "--eval-interval", "3", "--eval-iters", "2"]
    one = run(
        1, flags(root, "--load", root / "tied_pp1", *common, "--save", root / "tied_out1", model="tied")
    )
    two = run(2, flags(root, "--load", root / "tied_pp2", *common, "--save", root / "tied_out2",
                       "--pipeline-model-parallel-size", "2", model="tied"))  # fmt: skip
    want, got = T.losses_from_log(one), T.losses_from_log(two)
    assert sorted(got) == list(range(1, 7)) and got == pytest.approx(want, rel=1e-5)
    assert norms(two) == pytest.approx(norms(one), abs=2e-3)
    assert set(evals(two)) == {("eval", 3), ("eval", 6)} and evals(two) == pytest.approx(evals(one), rel=1e-5)
    first, last = (shard(root / "tied_out2", 6, f"mp_rank_00_00{p}")["model"] for p in (0, 1))
    assert torch.equal(first["embedding.word_embeddings.weight"], last["output_layer.weight"])
    start = T.megatron_to_hf_full(root / "tied_pp1")["model.embed_tokens.weight"]
    assert not torch.equal(first["embedding.word_embeddings.weight"], start)  # it trained
    a, b = T.megatron_to_hf_full(root / "tied_out1"), T.megatron_to_hf_full(root / "tied_out2")
    assert "lm_head.weight" not in b and a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 2e-5


def test_bf16_resume_is_bit_identical_with_bf16_shards(root):
    """--bf16: shards in bf16, fp32 masters in the optimizer state; a resume continues the losses, the
    validation losses (Megatron's consumed_valid_samples) and the weights bit for bit."""
    common = ["--bf16", "--split", "70,20,10", "--eval-interval", "2", "--eval-iters", "2"]
    full = run(
        1, flags(root, "--load", root / "mg_tp1pp1", "--finetune", *common, "--save", root / "bf_full")
    )
    part = root / "bf_part"
    a = run(1, flags(root, "--load", root / "mg_tp1pp1", "--finetune", *common, "--save", part,
                     "--save-interval", "3", "--exit-interval", "3"))  # fmt: skip
    b = run(1, flags(root, "--load", part, *common, "--save", part))
    assert {**T.losses_from_log(a), **T.losses_from_log(b)} == T.losses_from_log(full)
    assert {**evals(a), **evals(b)} == evals(full)
    assert set(evals(full)) == {("eval", 2), ("eval", 4), ("eval", 6), ("test", 6)}
    x, y = shard(root / "bf_full", 6, "mp_rank_00"), shard(part, 6, "mp_rank_00")
    assert {v.dtype for v in x["model"].values()} == {torch.bfloat16}
    assert all(torch.equal(x["model"][k], y["model"][k]) for k in x["model"])
    masters = x["optimizer"]["fp32_from_fp16_params"]
    assert {v.dtype for v in masters.values()} == {torch.float32}
    assert all(torch.equal(v, y["optimizer"]["fp32_from_fp16_params"][k]) for k, v in masters.items())
    assert x["args"].consumed_valid_samples == y["args"].consumed_valid_samples == 24
