"""The MoE layer that replaces an HF model's MoE block (Qwen3-MoE's `Qwen3MoeSparseMoeBlock`, DeepSeek-V2's
`DeepseekV2Moe`): Megatron core_r0.8.0's `MoELayer` (`transformer/moe/moe_layer.py`) as MindSpeed-LLM 2.1.0
runs it (`core/transformer/moe/moe_layer.py`: shared experts added to the routed output).

Parameters keep the HF model's module names, so the layer's local state reads like the HF model's:
`gate.weight` [E, H] (the router, replicated), `experts.gate_up_proj` [E/EP, 2F/TP, H] (each expert's
`[gate_r; up_r]`, Megatron's fc1 on TP rank r) and `experts.down_proj` [E/EP, H, F/TP] for this rank's
experts only, `shared_experts.{gate,up,down}_proj.weight` (DeepSeek; sharded as a dense MLP).

Tensor parallelism (Megatron requires sequence parallelism with MoE and TP): the layer gets this rank's
part of the sequence, all-gathers it, routes every token (the same decision on every TP rank), runs its
slice of each expert's FFN, and reduce-scatters the partial sums back to sequence parts, as Megatron's
alltoall dispatcher's all-gather / reduce-scatter over TP do. The router sees the same tokens on every TP
rank, so its gradient is a partial sum (summed over TP before the optimizer, `grad_placements=Partial`) and
the load-balancing coefficient is divided by TP (`MoESpec.effective_aux_coeff`).

Auxiliary losses are not added to the LM loss: `AuxLossScaler` (Megatron's `MoEAuxLossAutoScaler`) passes
the routing probabilities through unchanged and gives the loss a gradient of `MoEContext.backward_scale`
(the loss scale over the micro-batch count, as Megatron's schedule sets it) in the backward, where it also
records the loss value for the log line (once per micro-batch, also under activation recompute).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ascendfactory.engine.train.moe.dispatch import TokenDispatcher
from ascendfactory.engine.train.moe.routing import route
from ascendfactory.engine.train.moe.spec import MoESpec


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


class MoEContext:
    """Shared by the MoE layers of a stage: the auxiliary losses' backward scale, set every step, and the
    values of the logged losses (Megatron's `save_to_aux_losses_tracker`: loss / coefficient per layer and
    micro-batch, summed over the micro-batches of an iteration by `take`)."""

    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self.backward_scale = 1.0
        self.records: dict[str, dict[int, list[torch.Tensor]]] = {}

    def record(self, name: str, layer: int, value: torch.Tensor) -> None:
        """Kept on the value's device (no host synchronisation in the backward)."""
        self.records.setdefault(name, {}).setdefault(layer, []).append(value.detach().float())

    def take(self, micro_batches: int | None = None) -> dict[str, torch.Tensor]:
        """The iteration's per-layer sums (and a fresh start). `micro_batches`: keep each layer's last that
        many records: torch's pipeline schedule runs each stage's forward and backward once more on
        placeholder tensors at its first step (metadata inference, torch.distributed.pipelining
        `stage.py` `_backward_metadata_inference`), before the real micro-batches."""
        out = {}
        for name, layers in self.records.items():
            sums = torch.zeros(
                self.num_layers, dtype=torch.float32, device=next(iter(layers.values()))[0].device
            )
            for layer, values in layers.items():
                kept = values[-micro_batches:] if micro_batches else values
                sums[layer] = torch.stack(kept).sum()
            out[name] = sums
        self.records = {}
        return out


class AuxLossScaler(torch.autograd.Function):
    """Identity on `activation`; in the backward the loss gets the gradient `ctx.backward_scale` and its
    value / coefficient is recorded for the log line."""

    @staticmethod
    def forward(ctx: Any, activation: torch.Tensor, loss: torch.Tensor, moe: MoEContext, key: Any) -> Any:
        ctx.save_for_backward(loss)
        ctx.moe, ctx.key = moe, key
        return activation

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (loss,) = ctx.saved_tensors
        name, layer, coeff = ctx.key
        if not getattr(ctx, "recorded", False):  # a node whose backward runs twice counts once
            ctx.recorded = True
            ctx.moe.record(name, layer, loss.detach() / coeff)
        return grad, torch.ones_like(loss) * ctx.moe.backward_scale, None, None


class LocalExperts(nn.Module):
    """This rank's experts, SwiGLU MLPs: down(silu(gate x) * up x), looped over the experts (Megatron's
    SequentialMLP; the grouped GEMM computes the same products)."""

    def __init__(self, num_local: int, hidden: int, ffn_local: int):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(num_local, 2 * ffn_local, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_local, hidden, ffn_local))

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        w1, w2 = _local(self.gate_up_proj), _local(self.down_proj)
        outs = []
        for e, chunk in enumerate(x.split(counts)):
            gate, up = F.linear(chunk, w1[e]).chunk(2, dim=-1)
            outs.append(F.linear(F.silu(gate) * up, w2[e]))
        return torch.cat(outs)


class SharedExperts(nn.Module):
    """DeepSeek's shared experts: one SwiGLU MLP of n_shared x moe_intermediate_size, on every token."""

    def __init__(self, hidden: int, ffn_local: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn_local, bias=False)
        self.up_proj = nn.Linear(hidden, ffn_local, bias=False)
        self.down_proj = nn.Linear(ffn_local, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = F.linear(x, _local(self.gate_proj.weight))
        up = F.linear(x, _local(self.up_proj.weight))
        return F.linear(F.silu(gate) * up, _local(self.down_proj.weight))


class MoELayer(nn.Module):
    """Router + token dispatcher + this rank's experts (+ shared experts). `layer` is the global layer index
    (0-based). Call `bind` once the process groups exist, before the first forward."""

    def __init__(self, spec: MoESpec, *, hidden: int, layer: int, ep_rank: int):
        super().__init__()
        self.spec, self.hidden, self.layer, self.ep_rank = spec, hidden, layer, ep_rank
        self.gate = nn.Linear(hidden, spec.num_experts, bias=False)
        self.experts = LocalExperts(spec.num_local_experts, hidden, spec.ffn_hidden_size // spec.tp)
        self.shared_experts = (
            SharedExperts(hidden, spec.shared_ffn_hidden_size // spec.tp)
            if spec.shared_ffn_hidden_size
            else None
        )
        self.dispatcher = TokenDispatcher(spec.num_experts, ep=spec.ep, ep_rank=ep_rank)
        self.context = MoEContext(0)  # replaced by the stage's shared one in bind()
        self.tp_mesh: Any = None

    @property
    def first_expert(self) -> int:
        return self.ep_rank * self.spec.num_local_experts

    def bind(self, *, context: MoEContext, ep_group: Any) -> None:
        self.context = context
        self.dispatcher.group = ep_group

    def shard(self, tp_mesh: Any) -> None:
        """TP > 1: the parameters become DTensors of this rank's slices (experts and shared experts split
        along the FFN dimension, the router replicated) so the trainer's gradient norm, optimizer and
        checkpoint treat them like the rest of the TP plan."""
        from torch.distributed.tensor import DTensor, Replicate, Shard

        self.tp_mesh = tp_mesh

        def wrap(module: nn.Module, name: str, placement: Any) -> None:
            local = getattr(module, name).data
            setattr(
                module, name, nn.Parameter(DTensor.from_local(local, tp_mesh, [placement], run_check=False))
            )

        wrap(self.gate, "weight", Replicate())
        wrap(self.experts, "gate_up_proj", Shard(1))
        wrap(self.experts, "down_proj", Shard(2))
        if self.shared_experts is not None:
            wrap(self.shared_experts.gate_proj, "weight", Shard(0))
            wrap(self.shared_experts.up_proj, "weight", Shard(0))
            wrap(self.shared_experts.down_proj, "weight", Shard(1))

    def forward(self, x: Any) -> Any:
        if x.device.type == "meta":  # pipelining's shape inference: the output has the input's shape
            return torch.empty_like(_local(x))
        full = self._gather(x)
        if self.spec.layer_recompute and self.training and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            out = checkpoint(self._moe, full, use_reentrant=False)
        else:
            out = self._moe(full)
        return self._scatter(out)

    def _gather(self, x: Any) -> torch.Tensor:
        """This rank's sequence part -> the whole sequence (TP > 1; its backward sums the partial gradients
        of the TP ranks and keeps this rank's part)."""
        if self.tp_mesh is None or not hasattr(x, "redistribute"):
            return x
        from torch.distributed.tensor import Partial, Replicate

        return x.redistribute(self.tp_mesh, [Replicate()]).to_local(grad_placements=[Partial()])

    def _scatter(self, out: torch.Tensor) -> torch.Tensor:
        """The TP ranks' partial outputs -> their sum, this rank's part of the sequence."""
        if self.tp_mesh is None:
            return out
        from torch.distributed.tensor import DTensor, Partial, Shard

        partial = DTensor.from_local(out, self.tp_mesh, [Partial()], run_check=False)
        return partial.redistribute(self.tp_mesh, [Shard(1)]).to_local()

    def _moe(self, x: torch.Tensor) -> torch.Tensor:
        spec, shape = self.spec, x.shape
        tokens = x.reshape(-1, shape[-1])
        training = self.training and torch.is_grad_enabled()
        routed_in = tokens
        if spec.input_jitter_eps is not None and training:
            eps = spec.input_jitter_eps
            routed_in = tokens * torch.empty_like(tokens).uniform_(1.0 - eps, 1.0 + eps)
        logits = self.gating(routed_in)
        routing = route(logits, spec, batch=shape[0], training=training)
        for name, loss, coeff in routing.losses:  # Megatron attaches the z-loss to the logits: the same
            routing.probs = AuxLossScaler.apply(routing.probs, loss, self.context, (name, self.layer, coeff))
        out = self.dispatcher.run(tokens, routing, self.experts)
        if self.shared_experts is not None:
            out = out + self.shared_experts(tokens)
        return out.view(shape)

    def gating(self, tokens: torch.Tensor) -> torch.Tensor:
        """Router logits [N, E]; in fp32 with --router-gating-in-fp32 (MindSpeed-LLM)."""
        weight = self.gate.weight
        if hasattr(weight, "to_local"):
            from torch.distributed.tensor import Partial

            weight = weight.to_local(grad_placements=[Partial()])
        if self.spec.gating_fp32:
            with torch.autocast(tokens.device.type, enabled=False):
                return F.linear(tokens.float(), weight.float())
        return F.linear(tokens, weight)

    # ------------------------------------------------------------------ initialisation
    def init_experts(self, *, std: float, out_std: float, seed: int) -> None:
        """Megatron-style random experts that do not depend on the parallel layout: expert X of this layer
        is drawn from its own generator (seed, layer, X) in full, and this rank keeps its TP slice; fc1 and
        the shared experts' gate/up N(0, std), fc2 N(0, out_std); the router N(0, std) from (seed, layer)."""
        spec, tp = self.spec, self.spec.tp
        tp_rank = 0 if self.tp_mesh is None else self.tp_mesh.get_local_rank()
        f, h = spec.ffn_hidden_size, self.hidden
        w1, w2 = _local(self.experts.gate_up_proj), _local(self.experts.down_proj)
        with torch.no_grad():
            for i in range(spec.num_local_experts):
                gen = _generator(seed, self.layer, self.first_expert + i)
                gate = torch.randn(f, h, generator=gen) * std
                up = torch.randn(f, h, generator=gen) * std
                down = torch.randn(h, f, generator=gen) * out_std
                w1[i].copy_(torch.cat([gate.chunk(tp)[tp_rank], up.chunk(tp)[tp_rank]]))
                w2[i].copy_(down.chunk(tp, dim=1)[tp_rank])
            gen = _generator(seed, self.layer, -1)
            _local(self.gate.weight).copy_(torch.randn(spec.num_experts, h, generator=gen) * std)
            if self.shared_experts is not None:
                s = spec.shared_ffn_hidden_size
                se = self.shared_experts
                gen = _generator(seed, self.layer, -2)
                for lin in (se.gate_proj, se.up_proj):
                    _local(lin.weight).copy_((torch.randn(s, h, generator=gen) * std).chunk(tp)[tp_rank])
                down = torch.randn(h, s, generator=gen) * out_std
                _local(se.down_proj.weight).copy_(down.chunk(tp, dim=1)[tp_rank])


def _generator(seed: int, layer: int, expert: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + layer * 10_007 + expert + 3) % (2**63 - 1))


def is_moe_block(module: nn.Module) -> bool:
    """An HF MoE block (Qwen3-MoE, DeepSeek-V2): it has routed experts and a router called `gate`."""
    return hasattr(module, "experts") and hasattr(module, "gate") and not isinstance(module, MoELayer)


def moe_layers(model: nn.Module) -> list[MoELayer]:
    return [m for m in model.modules() if isinstance(m, MoELayer)]


def output_std(std: float, num_layers: int) -> float:
    """Megatron's output-layer init: std / sqrt(2 x layers)."""
    return std / math.sqrt(2.0 * num_layers)
