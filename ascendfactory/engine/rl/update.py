"""Experience tensors, log-prob passes and the actor update (mini-batches, micro-batches, DP, clipping).

Each sample is its prompt followed by its response, right-padded to the longest one on this rank, so the
causal forward needs no mask and positions are those of the rollout. Response token `j` of a sample
whose prompt has `s` tokens is predicted by the logits at position `s - 1 + j`.

The update follows Megatron's step inside MindSpeed-RL's actor: per mini-batch, the loss of each
micro-batch (a token mean, `algorithms.grpo_loss`) is averaged over the micro-batches and over the
data-parallel ranks (gradients all-reduced), the gradient norm is clipped, AdamW steps, and the
learning-rate schedule advances by the mini-batch's sample count. `actor/entropy` is the policy's entropy
on the response tokens even when `entropy_coeff` is 0 (MindSpeed-RL skips computing it then and logs 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ascendfactory.engine.rl import algorithms as A
from ascendfactory.engine.train import step as train_step


@dataclass
class Experience:
    tokens: torch.Tensor  # [S, L] prompt + response, right-padded
    starts: torch.Tensor  # [S] prompt lengths
    responses: torch.Tensor  # [S, R] response tokens, padded
    mask: torch.Tensor  # [S, R] 1.0 on response tokens
    advantages: torch.Tensor | None = None  # [S]
    old_log_prob: torch.Tensor | None = None  # [S, R]
    ref_log_prob: torch.Tensor | None = None  # [S, R]

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    def tokens_of(self, idx: torch.Tensor) -> torch.Tensor:
        """The rows `idx`, cut to their longest sequence (less padding in a small micro-batch)."""
        width = int((self.starts[idx] + self.mask[idx].sum(1).long()).max())
        return self.tokens[idx, :width]


def build_experience(
    prompts: list[list[int]], responses: list[list[int]], *, pad_id: int, device: torch.device
) -> Experience:
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    longest = max(max(len(r) for r in responses), 1)
    tokens = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    resp = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), longest), dtype=torch.float32)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        tokens[i, : len(p) + len(r)] = torch.tensor(p + r, dtype=torch.long)
        resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1.0
    starts = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    return Experience(tokens.to(device), starts.to(device), resp.to(device), mask.to(device))


def response_logits(model, tokens: torch.Tensor, starts: torch.Tensor, width: int) -> torch.Tensor:
    """The model's last-stage output at the positions that predict each response token [b, width, .]: the
    logits, or the final hidden states of a model with `chunked_loss` (`response_stats` applies lm_head)."""
    out = model(tokens)
    pos = (starts - 1).unsqueeze(1) + torch.arange(width, device=tokens.device)
    pos = pos.clamp(max=out.shape[1] - 1)
    return out.gather(1, pos.unsqueeze(-1).expand(-1, -1, out.shape[-1]))


def _stats_of(
    logits: torch.Tensor, responses: torch.Tensor, entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, ...]:
    log_prob = A.token_log_probs(logits, responses)
    if not entropy:
        return (log_prob,)
    ent = A.entropy_from_logits(logits)
    return log_prob, ent if entropy_grad else ent.detach()


def response_stats(
    model,
    hidden: torch.Tensor,
    responses: torch.Tensor,
    *,
    entropy: bool,
    entropy_grad: bool = False,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs [b, R], entropy [b, R] or None) of the responses from the final hidden states [b, R, H],
    `CHUNK_TOKENS` tokens at a time: each chunk's logits are made by lm_head, turned into its log-probs
    (and entropy) and dropped; with gradients the chunk is recomputed in the backward (activation
    checkpointing), so the logits of every token are never held (`engine/train/cross_entropy.py` does the
    same for the SFT loss). `entropy_grad`: the entropy takes part in the loss (else it is computed without
    gradient, a statistic)."""
    from ascendfactory.engine.train.cross_entropy import chunk_tokens
    from ascendfactory.engine.train.model import local_tensor
    from ascendfactory.engine.train.recompute import checkpointed

    b, r, h = hidden.shape
    flat, ys = hidden.reshape(b * r, h), responses.reshape(b * r)
    chunk = chunk or chunk_tokens(local_tensor(model.lm_head.weight).shape[0] * max(1, _tp(model)))
    # recomputing a chunk in the backward pays one more lm_head matmul: only worth it with several chunks
    recompute = torch.is_grad_enabled() and flat.requires_grad and b * r > chunk
    logps, ents = [], []
    for lo in range(0, b * r, chunk):
        hc, yc = flat[lo : lo + chunk], ys[lo : lo + chunk]

        def piece(hc: torch.Tensor, yc: torch.Tensor = yc) -> tuple[torch.Tensor, ...]:
            return _stats_of(model.lm_head(hc), yc, entropy, entropy_grad)

        out = checkpointed(piece, hc) if recompute else piece(hc)
        logps.append(out[0])
        if entropy:
            ents.append(out[1])
    log_prob = torch.cat(logps).view(b, r)
    return log_prob, (torch.cat(ents).view(b, r) if entropy else None)


def _tp(model) -> int:
    weight = model.lm_head.weight
    return weight.device_mesh.size() if hasattr(weight, "device_mesh") else 1


@torch.no_grad()
def log_probs(model, exp: Experience, micro: int) -> torch.Tensor:
    """Per-token log-probs [S, R] of the responses under `model` (no gradient), `micro` rows at a time."""
    out = torch.zeros_like(exp.mask)
    width = exp.mask.shape[1]
    for lo in range(0, exp.size, micro):
        idx = torch.arange(lo, min(lo + micro, exp.size), device=exp.tokens.device)
        hidden = response_logits(model, exp.tokens_of(idx), exp.starts[idx], width)
        out[idx] = response_stats(model, hidden, exp.responses[idx], entropy=False)[0] * exp.mask[idx]
    return out


@dataclass
class UpdateStats:
    values: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.values[key] = self.values.get(key, 0.0) + value
        self.counts[key] = self.counts.get(key, 0) + 1

    def means(self) -> dict[str, float]:
        return {k: v / self.counts[k] for k, v in self.values.items()}


class Updater:
    """The actor's optimizer steps over one rollout."""

    def __init__(self, *, model, optimizer, scheduler, mesh, dp: int, args: Any, rl: dict[str, Any]) -> None:
        self.model, self.optimizer, self.scheduler, self.mesh = model, optimizer, scheduler, mesh
        self.dp, self.args, self.rl = dp, args, rl
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.sharded: list[bool] | None = None
        self.kl_coef = float(rl["init_kl_coef"])

    def update(self, exp: Experience, *, mini_local: int, order: torch.Tensor | None) -> dict[str, float]:
        """Every epoch over `exp` in mini-batches of `mini_local` rows; `order` a permutation or None."""
        stats = UpdateStats()
        rows = order if order is not None else torch.arange(exp.size, device=exp.tokens.device)
        micro = self.args.micro_batch_size
        for _ in range(int(self.rl["epochs"])):
            for lo in range(0, exp.size, mini_local):
                self._step(exp, rows[lo : lo + mini_local], micro, stats)
        out = stats.means()
        out["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    def _step(self, exp: Experience, idx: torch.Tensor, micro: int, stats: UpdateStats) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        chunks = idx.split(micro)
        width = exp.mask.shape[1]
        for chunk in chunks:
            hidden = response_logits(self.model, exp.tokens_of(chunk), exp.starts[chunk], width)
            log_prob, entropy = response_stats(
                self.model,
                hidden,
                exp.responses[chunk],
                entropy=True,
                entropy_grad=float(self.rl["entropy_coeff"]) != 0.0,
            )
            mask = exp.mask[chunk]
            loss, s = A.grpo_loss(
                log_prob=log_prob,
                old_log_prob=None if exp.old_log_prob is None else exp.old_log_prob[chunk],
                ref_log_prob=exp.ref_log_prob[chunk],
                advantages=exp.advantages[chunk].unsqueeze(1) * mask,
                mask=mask,
                entropy=entropy,
                clip_ratio=float(self.rl["clip_ratio"]),
                kl_coef=self.kl_coef,
                kl_kind=str(self.rl["kl_penalty"]),
                entropy_coeff=float(self.rl["entropy_coeff"]),
            )
            (loss / len(chunks)).backward()
            for key in ("pg_loss", "pg_clipfrac", "ppo_kl", "kl_loss", "entropy"):
                stats.add(f"actor/{key}", getattr(s, key))
        norm, found_inf = self._reduce_and_clip()
        if not found_inf:
            self.optimizer.step()
            self.scheduler.step(self.optimizer, len(idx) * self.dp)
        stats.add("actor/grad_norm", norm)

    def _reduce_and_clip(self) -> tuple[float, bool]:
        """DP mean of the gradients (the weights' `.grad`, or the mixed-precision optimizer's fp32 main
        gradients), then the global norm and clipping."""
        opt = self.optimizer
        if hasattr(opt, "reduce_grads"):
            opt.reduce_grads()
            sharded, _ = opt.owned_masks(None)
            return train_step.norm_and_clip(
                opt.owned_grads(),
                mesh=self.mesh,
                clip=self.args.clip_grad,
                unscale=1.0,
                sharded=sharded,
                counted=None,
            )
        train_step.all_reduce_grads(self.params, self.mesh["dp"].get_group(), self.dp)
        if self.sharded is None:
            self.sharded = train_step.shard_mask([p.grad for p in self.params])
        return train_step.grad_norm_and_clip(
            self.params, mesh=self.mesh, clip=self.args.clip_grad, sharded=self.sharded
        )
