"""The MoE layer: the dispatcher against a hand-worked example, the layer against the HF models' own MoE
blocks (Qwen3-MoE, DeepSeek-V2 with shared experts), the auxiliary-loss gradient and its log record,
expert parallelism over two gloo processes against one, and the per-expert names of the checkpoint."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ascendfactory.engine.train.moe import state
from ascendfactory.engine.train.moe.dispatch import TokenDispatcher
from ascendfactory.engine.train.moe.layer import MoEContext, MoELayer
from ascendfactory.engine.train.moe.routing import DROPPED, Routing
from tests.unit.engine.train.test_moe_routing import SPEC


def _times_expert_number(x: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Fake experts: expert e multiplies its tokens by e + 1."""
    return torch.cat([chunk * (e + 1) for e, chunk in enumerate(x.split(counts))])


def test_dispatch_combines_weighted_expert_outputs():
    tokens = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    routing = Routing(
        probs=torch.tensor([[0.5, 0.5], [0.9, 0.1], [1.0, 0.0]]),
        indices=torch.tensor([[0, 3], [2, 1], [1, DROPPED]]),
        tokens_per_expert=torch.tensor([1, 2, 1, 1]),
    )
    out = TokenDispatcher(4).run(tokens, routing, _times_expert_number)
    # token 0: 0.5 x 1 + 0.5 x 4 = 2.5; token 1: 0.9 x 3 + 0.1 x 2 = 2.9; token 2: 1.0 x 2 (slot 2 dropped)
    assert torch.allclose(out, torch.tensor([[2.5, 5.0], [8.7, 11.6], [10.0, 12.0]]))


def test_padded_dispatch_scatter_adds():
    tokens = torch.tensor([[1.0], [2.0], [3.0]])
    routing = Routing(
        probs=torch.tensor([[0.5, 0.0], [1.0, 0.25]]),  # [experts, capacity]
        indices=torch.tensor([[0, 2], [1, 0]]),
        tokens_per_expert=torch.tensor([1, 2]),
        padded=True,
    )
    out = TokenDispatcher(2).run(tokens, routing, _times_expert_number)
    # token 0: 0.5 x 1 (expert 0) + 0.25 x 2 (expert 1); token 1: 1.0 x 2 x 2; token 2: 0 (a padding slot)
    assert out[:, 0].tolist() == pytest.approx([1.0, 4.0, 0.0])


def _layer(spec, *, seed=0, ep_rank=0) -> MoELayer:
    layer = MoELayer(spec, hidden=16, layer=0, ep_rank=ep_rank)
    layer.init_experts(std=0.2, out_std=0.1, seed=seed)
    layer.bind(context=MoEContext(1), ep_group=None)
    return layer


def test_layer_equals_the_hf_qwen3_moe_block():
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    cfg = Qwen3MoeConfig(hidden_size=16, moe_intermediate_size=8, num_experts=4, num_experts_per_tok=2,
                         norm_topk_prob=True)  # fmt: skip
    spec = dataclasses.replace(SPEC, ffn_hidden_size=8)  # Megatron's default: softmax of the top-k logits
    ours, hf = _layer(spec), Qwen3MoeSparseMoeBlock(cfg)
    with torch.no_grad():
        hf.gate.weight.copy_(ours.gate.weight)
        hf.experts.gate_up_proj.copy_(ours.experts.gate_up_proj)
        hf.experts.down_proj.copy_(ours.experts.down_proj)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(ours(x), hf(x), atol=1e-6)


def test_layer_equals_the_hf_deepseek_v2_block_with_shared_experts():
    from transformers import DeepseekV2Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Moe

    cfg = DeepseekV2Config(hidden_size=16, moe_intermediate_size=8, n_routed_experts=4, num_experts_per_tok=2,
                           n_shared_experts=2, norm_topk_prob=False, routed_scaling_factor=1.0,
                           num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    spec = dataclasses.replace(SPEC, ffn_hidden_size=8, shared_ffn_hidden_size=16, pre_softmax=True)
    ours, hf = _layer(spec), DeepseekV2Moe(cfg)
    with torch.no_grad():
        hf.gate.weight.copy_(ours.gate.weight)
        hf.experts.gate_up_proj.copy_(ours.experts.gate_up_proj)
        hf.experts.down_proj.copy_(ours.experts.down_proj)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(hf.shared_experts, name).weight.copy_(getattr(ours.shared_experts, name).weight)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2))
    assert torch.allclose(ours(x), hf(x), atol=1e-6)


def test_aux_loss_gets_the_backward_scale_and_is_recorded():
    spec = dataclasses.replace(SPEC, ffn_hidden_size=8, aux_loss_coeff=0.1)
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(3))
    grads = {}
    for scale in (0.0, 1.0, 2.0):
        layer = _layer(spec)
        layer.context.backward_scale = scale
        layer(x).sum().backward()
        grads[scale] = layer.gate.weight.grad.clone()
        [(name, values)] = layer.context.take().items()
        assert name == "load_balancing_loss" and values[0] > 0  # loss / coeff: about 1 when balanced
    aux_only = grads[1.0] - grads[0.0]
    assert aux_only.abs().max() > 0
    assert torch.allclose(grads[2.0] - grads[0.0], 2 * aux_only, atol=1e-6)


def test_expert_init_does_not_depend_on_the_expert_parallel_layout():
    whole = _layer(dataclasses.replace(SPEC, ffn_hidden_size=8))
    halves = [_layer(dataclasses.replace(SPEC, ffn_hidden_size=8, ep=2), ep_rank=r) for r in (0, 1)]
    assert torch.equal(torch.cat([h.experts.gate_up_proj for h in halves]), whole.experts.gate_up_proj)
    assert all(torch.equal(h.gate.weight, whole.gate.weight) for h in halves)


def test_state_splits_and_stacks_per_expert_names():
    layer = _layer(dataclasses.replace(SPEC, ffn_hidden_size=8, ep=2), ep_rank=1)
    local = {f"model.layers.3.mlp.{k}": v for k, v in layer.state_dict().items()}
    hf = state.split_experts(local, first_expert=2)
    assert sorted(k for k in hf if ".experts." in k) == [
        f"model.layers.3.mlp.experts.{e}.{p}.weight"
        for e in (2, 3)
        for p in ("down_proj", "gate_proj", "up_proj")
    ]
    assert hf["model.layers.3.mlp.experts.3.up_proj.weight"].shape == (8, 16)
    back = state.stack_experts(hf, first_expert=2, num_local=2)
    assert back.keys() == local.keys() and all(torch.equal(back[k], local[k]) for k in local)
    with pytest.raises(KeyError, match=r"expert 2 is not one of this rank's \(0\.\.1\)"):
        state.stack_experts(hf, first_expert=0, num_local=2)


def _ep_worker(rank: int, world: int, init: str, queue) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    spec = dataclasses.replace(SPEC, ffn_hidden_size=8, ep=world, aux_loss_coeff=0.01)
    layer = MoELayer(spec, hidden=16, layer=0, ep_rank=rank)
    layer.init_experts(std=0.2, out_std=0.1, seed=0)
    layer.bind(context=MoEContext(1), ep_group=dist.group.WORLD)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(10 + rank), requires_grad=True)
    out = layer(x)
    out.pow(2).sum().backward()
    tensors = (out.detach(), x.grad, layer.experts.gate_up_proj.grad, layer.gate.weight.grad)
    queue.put((rank, *(t.numpy().copy() for t in tensors)))  # plain arrays: no shared-memory handles
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.integration  # two processes (spawned): the integration tier
def test_expert_parallel_over_two_processes_matches_one(tmp_path):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    init = f"file://{tmp_path / 'store'}"
    procs = [ctx.Process(target=_ep_worker, args=(r, 2, init, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = {}
    for _ in range(2):
        rank, *rest = queue.get(timeout=120)
        got[rank] = [torch.from_numpy(a) for a in rest]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # the same two ranks' tokens through one layer holding all four experts (EP 1)
    spec = dataclasses.replace(SPEC, ffn_hidden_size=8, aux_loss_coeff=0.01)
    whole = _layer(spec)
    expert_grad = torch.zeros_like(whole.experts.gate_up_proj)
    router_grad = torch.zeros_like(whole.gate.weight)
    for rank in (0, 1):
        whole.zero_grad()
        x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(10 + rank), requires_grad=True)
        out = whole(x)
        out.pow(2).sum().backward()
        assert torch.allclose(out, got[rank][0], atol=1e-6)
        assert torch.allclose(x.grad, got[rank][1], atol=1e-6)
        expert_grad += whole.experts.gate_up_proj.grad
        router_grad += whole.gate.weight.grad
        assert torch.allclose(whole.gate.weight.grad, got[rank][3], atol=1e-6)  # the router: per rank
    # each rank's experts got the gradient of both ranks' tokens
    assert torch.allclose(torch.cat([got[0][2], got[1][2]]), expert_grad, atol=1e-5)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(threads)
