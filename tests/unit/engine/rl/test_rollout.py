"""Rollout: inverse-CDF sampling with vLLM's knobs, and the KV-cached batched decode against HF generate."""

from __future__ import annotations

import pytest
import torch

from ascendfactory.engine.rl.rollout import Sampling, generate, sample


def test_greedy_and_degenerate_filters_pick_the_argmax():
    logits = torch.tensor([[0.1, 2.0, 0.3, 1.9], [5.0, 0.0, 0.0, 0.0]])
    u = torch.tensor([0.99, 0.5])
    for s in (Sampling(8, temperature=0), Sampling(8, top_k=1), Sampling(8, top_p=1e-6)):
        assert sample(logits, u, s, 4).tolist() == [1, 0]


def test_vocab_limit_and_top_k_exclude_tokens():
    logits = torch.zeros(1, 6)
    logits[0, 5] = 10.0  # a padding row of the vocabulary
    us = torch.linspace(0, 0.999, 200)
    drawn = {int(sample(logits, u.view(1), Sampling(8), 5)) for u in us}
    assert drawn == {0, 1, 2, 3, 4}
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    drawn = {int(sample(logits, u.view(1), Sampling(8, top_k=2), 4)) for u in us}
    assert drawn == {0, 1}


def test_inverse_cdf_matches_the_softmax_with_temperature():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    n = 4000
    u = (torch.arange(n) + 0.5) / n  # a stratified grid: frequencies equal the probabilities to 1/n
    tokens = torch.stack([sample(logits, x.view(1), Sampling(8, temperature=2.0), 3) for x in u]).view(-1)
    freq = torch.bincount(tokens, minlength=3).float() / n
    assert torch.allclose(freq, torch.softmax(logits[0] / 2.0, -1), atol=1e-3)


def test_min_p_drops_unlikely_tokens():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    us = torch.linspace(0, 0.999, 100)
    drawn = {int(sample(logits, u.view(1), Sampling(8, min_p=0.2), 3)) for u in us}
    assert drawn == {0, 1}


@pytest.fixture(scope="module")
def models():
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config

    from ascendfactory.engine.train.model import build_stage

    cfg = Qwen2Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    stage = build_stage(
        AutoConfig.for_model(**cfg.to_dict()), layers=[2], pp_rank=0, device=torch.device("cpu")
    )
    stage.load_state_dict(hf.state_dict(), strict=False)
    return hf, stage


def test_batched_left_padded_decode_equals_hf_generate_one_by_one(models):
    hf, stage = models
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20]]
    out = generate(
        stage,
        prompts,
        sampling=Sampling(max_tokens=10, temperature=0),
        uniforms=torch.rand(3, 10),
        stop_ids=(1,),
        pad_id=0,
        vocab_limit=96,
        device=torch.device("cpu"),
    )
    for p, r in zip(prompts, out.responses):
        ref = hf.generate(
            torch.tensor([p]), max_new_tokens=10, do_sample=False, eos_token_id=1, pad_token_id=0
        )
        assert r == ref[0, len(p) :].tolist()[: len(r)]
        assert len(r) == 10 or r[-1] == 1  # a response ends at its stop token (kept) or at max_tokens


def test_a_sample_does_not_depend_on_its_batch(models):
    _, stage = models
    u = torch.rand(3, 12, generator=torch.Generator().manual_seed(3))
    kw = dict(
        sampling=Sampling(max_tokens=12, temperature=1.0),
        stop_ids=(1,),
        pad_id=0,
        vocab_limit=96,
        device=torch.device("cpu"),
    )
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [20]]
    together = generate(stage, prompts, uniforms=u, **kw).responses
    alone = [generate(stage, [p], uniforms=u[i : i + 1], **kw).responses[0] for i, p in enumerate(prompts)]
    assert together == alone


def _greedy_without_cache(stage, prompt: list[int], max_tokens: int, stop: int) -> list[int]:
    """The reference: the whole sequence through the stage at every step (no cache), argmax."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(max_tokens):
            token = int(stage(torch.tensor([seq]))[0, -1].argmax())
            seq.append(token)
            if token == stop:
                break
    return seq[len(prompt) :]


@pytest.mark.parametrize("sync_every", [None, 4])
def test_cached_batched_greedy_equals_the_uncached_decode_token_for_token(models, sync_every):
    """The preallocated cache, left padding, batching, and reading `done` back only every few steps give the
    tokens of decoding each prompt alone without any cache; a cache kept from an earlier rollout (other
    prompt widths) is reused and changes nothing."""
    from ascendfactory.engine.rl.rollout import StaticKVCache

    _, stage = models
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20], [30, 31]]
    kw = dict(
        sampling=Sampling(max_tokens=14, temperature=0),
        uniforms=torch.rand(4, 14),
        stop_ids=(1,),
        pad_id=0,
        vocab_limit=96,
        device=torch.device("cpu"),
        sync_every=sync_every,
    )
    cache = StaticKVCache()
    generate(stage, [[40, 41, 42, 43, 44, 45, 46, 47, 48, 49], [3], [4], [5]], cache=cache, **kw)
    held = cache.keys[0].data_ptr()
    out = generate(stage, prompts, cache=cache, **kw)
    assert cache.keys[0].data_ptr() == held  # the earlier buffers had room: reused
    want = [_greedy_without_cache(stage, p, 14, stop=1) for p in prompts]
    assert out.responses == want
    assert out.steps == max(len(r) for r in want)
