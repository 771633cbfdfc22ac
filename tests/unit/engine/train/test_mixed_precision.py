"""Mixed precision as Megatron runs it (`mixed_precision.py`): 16-bit weights for compute, fp32 main
gradients, fp32 master weights; checked against the fp32 path and against torch's AdamW on the masters.

Tolerances (bf16 compute of a tiny Qwen2 stage, 6 AdamW steps at lr 1e-3 from the same weights; measured
worst cases in brackets): losses within 1e-3 relative of the fp32 run's [2e-4]; each weight's total update
(master - start) within 6% (relative L2) of the fp32 run's [3.4%], except the key bias, whose gradient is
zero in exact arithmetic (softmax is invariant to it) so both runs move it by noise; the optimizer arithmetic
itself is exact (bit for bit against AdamW on fp32 copies of the masters and main gradients)."""

from __future__ import annotations

import argparse

import pytest
import torch
import transformers

from ascendfactory.engine.train import step
from ascendfactory.engine.train.mixed_precision import MixedPrecisionOptimizer, cast_params
from ascendfactory.engine.train.model import build_stage, init_random


class _Dim:
    def size(self) -> int:
        return 1


MESH = {"tp": _Dim(), "pp": _Dim()}
ARGS = argparse.Namespace(
    weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8, bf16=True, fp16=False
)
CPU = torch.device("cpu")


def _stage(tied: bool = False):
    cfg = transformers.Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=96,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )
    stage = build_stage(cfg, layers=[2], pp_rank=0, device=CPU)
    init_random(stage, std=0.02, num_layers=2, seed=3, rank_seed=0)
    return stage


def _batch(n: int = 4, length: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, 96, (n, length + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _train(model, optimizer, steps: int, micro: int = 2, lr: float = 1e-3) -> list[float]:
    """`steps` iterations of the trainer's step: micro-batches, main gradients, norm and clip, AdamW."""
    tokens, labels = _batch()
    runner = step.StepRunner(model, mesh=MESH, num_microbatches=micro, device=CPU, pp=1, pp_rank=0)
    for g in optimizer.param_groups:
        g["lr"] = lr
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(runner.forward_backward(tokens, labels)))
        if isinstance(optimizer, MixedPrecisionOptimizer):
            optimizer.reduce_grads()
            sharded, counted = optimizer.owned_masks(None)
            step.norm_and_clip(
                optimizer.owned_grads(), mesh=MESH, clip=1.0, unscale=1.0, sharded=sharded, counted=counted
            )
        else:
            step.grad_norm_and_clip([p for p in model.parameters()], mesh=MESH, clip=1.0)
        optimizer.step()
    return losses


def _mixed(model) -> MixedPrecisionOptimizer:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return MixedPrecisionOptimizer(named, args=ARGS, dp_group=None, dp=1, device=CPU)


def test_cast_params_holds_weights_in_bf16_keeps_buffers_fp32_and_ties():
    model = _stage(tied=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cast_params(model, torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32  # RoPE frequencies stay fp32
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still one tensor
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n].to(torch.bfloat16))  # round to nearest
    cast_params(model, torch.float32)  # fp32 runs keep their weights as they are
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_bf16_training_follows_the_fp32_path_within_tolerance():
    ref = _stage()
    mixed = _stage()
    cast_params(mixed, torch.bfloat16)
    # both start from the same (bf16-representable) weights, as Megatron's masters start from the bf16 model
    with torch.no_grad():
        for p, q in zip(ref.parameters(), mixed.parameters()):
            p.copy_(q.float())
    opt_ref = step.build_optimizer(ref, ARGS, CPU)
    opt = _mixed(mixed)
    start = {n: p.detach().float().clone() for n, p in mixed.named_parameters()}
    want, got = _train(ref, opt_ref, 6), _train(mixed, opt, 6)
    assert got == pytest.approx(want, rel=1e-3)
    assert got[-1] < got[0]  # it trained
    masters = dict(zip([n for n, _ in opt.named], opt.views))
    for n, p in ref.named_parameters():
        if n.endswith("k_proj.bias"):
            continue
        update, ref_update = masters[n] - start[n], p.detach() - start[n]
        assert float((update - ref_update).norm() / ref_update.norm()) < 0.06, n
    # the 16-bit weights are the masters rounded
    for (n, p), v in zip(opt.named, opt.views):
        assert p.dtype == torch.bfloat16 and torch.equal(p.detach(), v.to(torch.bfloat16)), n


def test_main_gradients_accumulate_micro_batches_in_fp32():
    model = _stage()
    cast_params(model, torch.bfloat16)
    opt = _mixed(model)
    opt.zero_grad()
    tokens, labels = _batch()
    want = {n: torch.zeros(p.shape) for n, p in opt.named}
    for x, y in zip(tokens.chunk(2), labels.chunk(2)):
        grads = torch.autograd.grad(
            model.loss(model(x), y) / 2, [p for _, p in opt.named], retain_graph=False
        )
        for (n, _), g in zip(opt.named, grads):
            assert g.dtype == torch.bfloat16
            want[n] += g.float()
    runner = step.StepRunner(model, mesh=MESH, num_microbatches=2, device=CPU, pp=1, pp_rank=0)
    runner.forward_backward(tokens, labels)
    assert all(p.grad is None for p in model.parameters())  # moved into the fp32 buffer
    for (n, _), g in zip(opt.named, opt.owned_grads()):
        assert g.dtype == torch.float32 and torch.equal(g, want[n]), n


def test_the_step_is_adamw_on_the_fp32_masters_bit_for_bit():
    model = _stage()
    cast_params(model, torch.bfloat16)
    opt = _mixed(model)
    twins = [torch.nn.Parameter(v.detach().clone()) for v in opt.views]
    groups: dict[bool, list] = {}
    for (n, p), t in zip(opt.named, twins):
        groups.setdefault(n.endswith(".bias") or p.ndim == 1, []).append(t)
    ref = step.adamw(
        [
            {"params": ps, "weight_decay": 0.0 if nd else ARGS.weight_decay}
            for nd, ps in sorted(groups.items())
        ],
        ARGS,
        CPU,
    )
    tokens, labels = _batch()
    runner = step.StepRunner(model, mesh=MESH, num_microbatches=1, device=CPU, pp=1, pp_rank=0)
    for g in [*opt.param_groups, *ref.param_groups]:
        g["lr"] = 1e-2
    for _ in range(3):
        opt.zero_grad()
        runner.forward_backward(tokens, labels)
        for t, g in zip(twins, opt.owned_grads()):
            t.grad = g.clone()
        opt.step()
        ref.step()
        assert all(torch.equal(v, t.detach()) for v, t in zip(opt.views, twins))


def test_checkpoint_state_round_trips_by_name():
    model = _stage()
    cast_params(model, torch.bfloat16)
    opt = _mixed(model)
    _train(model, opt, 2)
    state, masters = opt.named_state(), opt.masters_by_name()
    assert set(masters) == {n for n, _ in opt.named} and {v.dtype for v in masters.values()} == {
        torch.float32
    }
    assert set(state["model.layers.0.mlp.up_proj.weight"]) == {"step", "exp_avg", "exp_avg_sq"}
    other = _stage()
    cast_params(other, torch.bfloat16)
    fresh = _mixed(other)
    fresh.load_masters(masters)
    fresh.load_named_state(state)
    assert all(torch.equal(a, b) for a, b in zip(fresh.views, opt.views))
    for (n, _), v in zip(fresh.named, fresh.views):
        assert all(torch.equal(fresh.state[v][k], state[n][k]) for k in state[n])
    # after loading weights without masters, the masters follow the (rounded) weights
    with torch.no_grad():
        for p in other.parameters():
            p.fill_(0.5)
    fresh.sync_from_model()
    assert all(torch.equal(v, torch.full_like(v, 0.5)) for v in fresh.views)
