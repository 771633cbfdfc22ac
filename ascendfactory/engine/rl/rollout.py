"""Batched sampling from the policy: the Hugging Face decoder layers with a KV cache (my own decode loop).

The stage model (`engine.train.model.StageModel`, PP == 1, TP sharded or not) runs a prefill over the
left-padded prompts, then one token per step, reusing each layer's keys and values from a preallocated
cache (HF attention modules call `past_key_values.update(k, v, layer_idx)`; `StaticKVCache` answers it).
The cache's buffers are made once for prompt width + max_tokens and kept by the trainer from one rollout to
the next while they are large enough (an accelerator's allocator never sees them again). Position ids
count from each prompt's first real token, so a left-padded prompt sees the positions it would see alone;
padding keys are masked out.

Host synchronisations: the loop runs on the device without reading it back, except to ask whether every
response has ended, once every `SYNC_EVERY` tokens on an accelerator (a decode step after all have ended
only writes padding that the answer drops; on the CPU, where reading is free, after every token); the
tokens come back in one copy at the end.

Sampling is vLLM's `SamplingParams` subset MindSpeed-RL passes (`temperature`, `top_k`, `top_p`,
`min_p`, `max_tokens`; temperature 0 = greedy), drawn by inverse CDF from uniforms the caller provides:
one per (sample, step), made from (seed, iteration) for the whole global batch. A sample's tokens
therefore do not depend on which rank generates it, nor on the rest of its batch, and TP ranks agree
without a broadcast. A response ends with its first stop token (included) or at `max_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendfactory.engine.rl.subset import Sampling

SYNC_EVERY = 16  # decode steps between two checks (host reads) of whether every response has ended


class StaticKVCache:
    """Preallocated keys/values per layer; `begin(offset, length)` before each forward of `length` tokens.

    `reset(capacity)` keeps the buffers of an earlier rollout when they have the room (the same batch and
    heads, at least `capacity` positions): positions are always written before they are read, so their old
    contents never matter."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.capacity = 0
        self.offset = 0
        self.length = 0

    def reset(self, capacity: int) -> None:
        self.capacity, self.offset, self.length = capacity, 0, 0

    def begin(self, offset: int, length: int) -> None:
        self.offset, self.length = offset, length

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        held = self.keys.get(layer_idx)
        fits = (
            held is not None
            and held.shape[:2] == key.shape[:2]
            and held.shape[3] == key.shape[3]
            and held.shape[2] >= self.capacity
            and held.dtype == key.dtype
            and held.device == key.device
        )
        if not fits:
            shape = (*key.shape[:2], self.capacity, key.shape[3])
            self.keys[layer_idx] = key.new_zeros(shape)
            self.values[layer_idx] = value.new_zeros(shape)
        end = self.offset + self.length
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[:, :, self.offset : end] = key
        v[:, :, self.offset : end] = value
        return k[:, :, :end], v[:, :, :end]


def sample(logits: torch.Tensor, u: torch.Tensor, s: Sampling, vocab_limit: int) -> torch.Tensor:
    """Token ids [B] from logits [B, V] and uniforms u [B] in [0, 1); ids >= vocab_limit never drawn."""
    logits = logits.float()
    if vocab_limit < logits.shape[-1]:
        logits[:, vocab_limit:] = float("-inf")
    if s.temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits / s.temperature
    if 0 < s.top_k < logits.shape[-1]:
        kth = torch.topk(logits, s.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if s.min_p > 0:
        probs = probs.masked_fill(probs < s.min_p * probs.max(dim=-1, keepdim=True).values, 0.0)
    order = None
    if s.top_p < 1.0:
        probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above
        probs = probs.masked_fill(before >= s.top_p * probs.sum(-1, keepdim=True), 0.0)
    cdf = probs.cumsum(dim=-1)
    pick = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).clamp(max=cdf.shape[-1] - 1)
    return pick.squeeze(-1) if order is None else order.gather(-1, pick).squeeze(-1)


@dataclass
class Rollout:
    responses: list[list[int]]  # each ends with its stop token, or has max_tokens tokens
    steps: int  # decode steps run (the longest response)


def _step(model, ids, mask4d, position_ids, cache: StaticKVCache) -> torch.Tensor:
    """Last-position logits [B, V] after running `ids` [B, T] through the stage with the cache."""
    h = model.model.embed_tokens(ids)
    position_embeddings = model.model.rotary_emb(h, position_ids)
    for layer in model.model.layers.values():
        h = layer(
            h,
            attention_mask=mask4d,
            position_ids=position_ids,
            past_key_values=cache,
            position_embeddings=position_embeddings,
        )
    return model.lm_head(model.model.norm(h[:, -1:]))[:, -1]


@torch.no_grad()
def generate(
    model,
    prompts: list[list[int]],
    *,
    sampling: Sampling,
    uniforms: torch.Tensor,
    stop_ids: tuple[int, ...],
    pad_id: int,
    vocab_limit: int,
    device: torch.device,
    cache: StaticKVCache | None = None,
    sync_every: int | None = None,
) -> Rollout:
    """Sample one response per prompt; `uniforms` [len(prompts), max_tokens]. `sync_every`: decode steps
    between two checks of whether all responses ended (default: 1 on the CPU, SYNC_EVERY elsewhere)."""
    b, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    valid = torch.zeros((b, width + sampling.max_tokens), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        valid[i, width - len(p) : width] = True
    ids, valid, uniforms = ids.to(device), valid.to(device), uniforms.to(device)
    lengths = valid[:, :width].sum(1)
    position_ids = (valid[:, :width].long().cumsum(1) - 1).clamp(min=0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    mask = (causal.unsqueeze(0) & valid[:, None, :width]) | torch.eye(width, dtype=torch.bool, device=device)
    cache = cache or StaticKVCache()
    cache.reset(width + sampling.max_tokens)
    cache.begin(0, width)
    logits = _step(model, ids, mask.unsqueeze(1), position_ids, cache)
    stops = torch.tensor(stop_ids, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    out = torch.full((b, sampling.max_tokens), pad_id, dtype=torch.long, device=device)
    pad = torch.full((b,), pad_id, dtype=torch.long, device=device)
    every = sync_every or (1 if device.type == "cpu" else SYNC_EVERY)
    for t in range(sampling.max_tokens):
        token = sample(logits, uniforms[:, t], sampling, vocab_limit)
        token = torch.where(done, pad, token)
        out[:, t] = token
        done = done | torch.isin(token, stops)
        if t + 1 == sampling.max_tokens or ((t + 1) % every == 0 and bool(done.all())):
            break
        valid[:, width + t] = True
        cache.begin(width + t, 1)
        logits = _step(
            model,
            token.unsqueeze(1),
            valid[:, None, None, : width + t + 1],
            (lengths + t).unsqueeze(1),
            cache,
        )
    responses = []
    rows = out[:, : t + 1].tolist()  # the one copy back
    stop_set = set(stop_ids)
    for row in rows:
        end = next((j + 1 for j, tok in enumerate(row) if tok in stop_set), len(row))
        responses.append(row[:end])
    return Rollout(responses=responses, steps=max(len(r) for r in responses))
