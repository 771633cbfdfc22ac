"""Megatron's recompute rules and its layer chunks (`_checkpointed_forward`), without a model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ascendfactory.engine.train import flags
from ascendfactory.engine.train.recompute import RecomputePlan, problems, unused
from ascendfactory.errors import ConfigError

BASE = [
    "--seq-length",
    "32",
    "--train-iters",
    "2",
    "--lr",
    "1e-3",
    "--tokenizer-name-or-path",
    "m",
    "--data-path",
    "d",
]


def ns(granularity=None, method=None, num=None, activations=False):
    return SimpleNamespace(
        recompute_granularity=granularity,
        recompute_method=method,
        recompute_num_layers=num,
        recompute_activations=activations,
    )


def test_uniform_chunks_cut_at_the_end_of_the_stage():
    plan = RecomputePlan("full", "uniform", 3)
    assert plan.chunks(7) == [(0, 3, True), (3, 6, True), (6, 7, True)]
    assert RecomputePlan("full", "uniform", 1).chunks(2) == [(0, 1, True), (1, 2, True)]


def test_block_recomputes_the_first_layers_of_each_stage():
    assert RecomputePlan("full", "block", 2).chunks(4) == [
        (0, 1, True),
        (1, 2, True),
        (2, 3, False),
        (3, 4, False),
    ]
    assert RecomputePlan("full", "block", 9).chunks(2) == [(0, 1, True), (1, 2, True)]  # more than the stage


def test_no_and_selective_recompute_run_the_layers_in_one_plain_chunk():
    assert RecomputePlan().chunks(3) == [(0, 3, False)]
    assert RecomputePlan("selective").chunks(3) == [(0, 3, False)]
    assert RecomputePlan().chunks(0) == []


def test_recompute_activations_means_selective():
    assert RecomputePlan.from_args(ns(activations=True)).selective
    assert RecomputePlan.from_args(ns("full", "block", 1, activations=True)).selective  # Megatron overrides
    assert RecomputePlan.from_args(ns()).granularity is None


@pytest.mark.parametrize(
    ("args", "keys"),
    [
        (ns("full"), {"--recompute-method", "--recompute-num-layers"}),
        (ns("full", "uniform"), {"--recompute-num-layers"}),
        (ns("full", "block", 0), {"--recompute-num-layers"}),
        (ns("selective", "uniform"), {"--recompute-method"}),
        (ns("selective", None, 2), {"--recompute-num-layers"}),
        (ns(None, None, None, True), set()),
        (ns("partial"), {"--recompute-granularity"}),
        (ns("full", "every", 1), {"--recompute-method"}),
        (ns("full", "uniform", 1), set()),
    ],
)
def test_megatron_rules(args, keys):
    assert {p.key for p in problems(args)} == keys


def test_flags_report_the_rules_at_parse_time():
    with pytest.raises(ConfigError) as e:
        flags.parse_args([*BASE, "--recompute-granularity", "full", "--recompute-num-layers", "2"])
    assert "--recompute-method" in str(e.value) and "uniform" in str(e.value)
    args, ignored = flags.parse_args([*BASE, "--recompute-activations"])
    assert args.recompute_activations and not ignored


def test_method_without_granularity_is_named():
    assert unused(ns(None, "block", 2)) == ["--recompute-method", "--recompute-num-layers"]
    assert unused(ns("full", "block", 2)) == []


@pytest.mark.parametrize(
    "plan",
    [RecomputePlan("full", "uniform", 2), RecomputePlan("full", "block", 1), RecomputePlan("selective")],
)
def test_stage_gradients_bit_identical_with_dropout(plan):
    """A 3-layer stage with attention dropout: the recomputed backward redraws the same masks."""
    import torch
    import transformers

    from ascendfactory.engine.train.model import build_stage, loss_fn
    from ascendfactory.engine.train.recompute import use_selective

    def grads(recompute, seed=5):
        cfg = transformers.Qwen2Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=96,
            attention_dropout=0.2,
        )
        stage = build_stage(cfg, layers=[3], pp_rank=0, device=torch.device("cpu"))
        torch.manual_seed(0)
        with torch.no_grad():
            for p in stage.parameters():
                p.copy_(torch.randn_like(p) * 0.1)
        if recompute is not None:
            stage.recompute = recompute
            if recompute.selective:
                use_selective(cfg)
        x = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(1))
        torch.manual_seed(seed)
        loss = loss_fn(stage(x), x)
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in stage.named_parameters()}

    ref_loss, ref = grads(None)
    loss, got = grads(plan)
    assert torch.equal(loss, ref_loss)
    assert ref.keys() == got.keys() and all(torch.equal(ref[n], got[n]) for n in ref)
    assert not torch.equal(grads(None, seed=6)[0], ref_loss)  # dropout is on: the masks matter
