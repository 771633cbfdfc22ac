"""The embedded trainer's MoE layer activation bytes (`memory.megatron.moe_activation`, engine "embedded")
re-measured: autograd's saved-tensor hooks count what one `engine/train/moe` MoE layer keeps for backward
(routed experts only; the shared experts are the dense MLP term), in fp32 and held in bf16."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from ascendfactory.memory.megatron import MegatronJob, moe_activation  # noqa: E402
from ascendfactory.memory.shape import ModelShape  # noqa: E402


def saved_bytes(*, hidden: int, ffn: int, experts: int, topk: int, seq: int, dtype) -> int:
    from ascendfactory.engine.train.moe.layer import MoEContext, MoELayer
    from tests.unit.engine.train.test_moe_routing import SPEC

    spec = dataclasses.replace(
        SPEC, ffn_hidden_size=ffn, num_experts=experts, topk=topk, aux_loss_coeff=0.001, norm_topk_prob=True
    )
    layer = MoELayer(spec, hidden=hidden, layer=0, ep_rank=0)
    layer.init_experts(std=0.2, out_std=0.1, seed=0)
    layer.bind(context=MoEContext(1), ep_group=None)
    layer.to(dtype).train()
    x = torch.randn(1, seq, hidden, dtype=dtype, requires_grad=True)
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {x.untyped_storage().data_ptr()}
    return sum(n for ptr, n in seen.items() if ptr not in skip)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("dims", [(64, 32, 4, 2), (128, 32, 4, 2), (64, 64, 4, 2), (64, 32, 8, 4)])
def test_embedded_moe_bytes_match_the_moe_layer(precision, dims):
    hidden, ffn, experts, topk = dims
    seq = 128
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    measured = saved_bytes(hidden=hidden, ffn=ffn, experts=experts, topk=topk, seq=seq, dtype=dtype)
    shape = ModelShape(
        name="t", layers=1, hidden=hidden, ffn=176, heads=4, kv_heads=2, vocab=128, tied=False,
        experts=experts, moe_topk=topk, moe_ffn=ffn,
    )  # fmt: skip
    job = MegatronJob(shape=shape, seq=seq, mbs=1, engine="embedded", precision=precision)
    assert moe_activation(job, seq) == pytest.approx(measured, rel=0.01)
