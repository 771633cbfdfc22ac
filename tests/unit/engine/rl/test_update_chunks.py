"""The GRPO actor's log-probs and entropy from the final hidden states in chunks (`update.response_stats`,
lm_head per chunk, recomputed in the backward) against the full logits: the same values and gradients
(fp32: values within 1e-6, gradients within 1e-5 of each one's largest entry: the same operators, the
logits' gradients summed per chunk)."""

from __future__ import annotations

import pytest
import torch

from ascendfactory.engine.rl import algorithms as A
from ascendfactory.engine.rl.update import response_logits, response_stats


@pytest.fixture(scope="module")
def stage():
    from transformers import Qwen2Config

    from ascendfactory.engine.train.model import build_stage, init_random

    cfg = Qwen2Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = build_stage(cfg, layers=[2], pp_rank=0, device=torch.device("cpu"))
    init_random(model, std=0.2, num_layers=2, seed=4, rank_seed=0)
    return model


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_chunked_log_probs_and_entropy_equal_the_full_logits(stage, entropy_grad):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 96, (3, 20), generator=g)
    starts = torch.tensor([5, 8, 3])
    responses = torch.randint(3, 96, (3, 9), generator=g)
    weight = torch.rand(3, 9, generator=g)

    def run(chunked: bool):
        stage.zero_grad(set_to_none=True)
        stage.chunked_loss = chunked
        out = response_logits(stage, tokens, starts, 9)
        if chunked:
            logp, ent = response_stats(
                stage, out, responses, entropy=True, entropy_grad=entropy_grad, chunk=4
            )
        else:
            logp, ent = A.token_log_probs(out, responses), A.entropy_from_logits(out)
            ent = ent if entropy_grad else ent.detach()
        loss = (logp * weight).sum() + (ent * weight).sum() * 0.1
        loss.backward()
        return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in stage.named_parameters()}

    try:
        want, got = run(False), run(True)
    finally:
        stage.chunked_loss = False
    assert torch.allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    assert torch.allclose(got[1], want[1], rtol=1e-6, atol=1e-6)
    for n, gr in want[2].items():
        assert (got[2][n] - gr).abs().max() <= 1e-5 * gr.abs().max(), n
