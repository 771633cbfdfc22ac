"""The HF transformers model cut into one pipeline stage, and its TP plan (torchtitan style).

A stage keeps HF names (`model.embed_tokens`, `model.layers.{global i}`, `model.norm`, `lm_head`) so its local
state dict is what `shard_map.megatron_to_hf_local` produces. Modules are built on the meta device from the
HF class and only this stage's part is materialised.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ascendfactory.engine.train.recompute import RecomputePlan, checkpointed
from ascendfactory.errors import ConfigError, Problem

IGNORE_INDEX = -100


class StageModel(nn.Module):
    """Embeddings (first stage), decoder layers `layer_ids`, final norm + lm_head (last stage).

    With `moe` (a `MoESpec`), every HF MoE block of the stage is replaced by the trainer's `MoELayer`
    holding expert-parallel rank `ep_rank`'s experts; `moe_context` is shared by them (aux-loss scale and
    log)."""

    def __init__(
        self,
        cfg: Any,
        *,
        layer_ids: Any,
        first: bool,
        last: bool,
        device: torch.device,
        moe: Any = None,
        ep_rank: int = 0,
    ):
        super().__init__()
        from transformers import AutoModelForCausalLM

        from ascendfactory.engine.train.moe.layer import MoEContext, MoELayer, is_moe_block

        with torch.device("meta"):
            full = AutoModelForCausalLM.from_config(cfg)
            for i in layer_ids if moe is not None else ():
                layer = full.model.layers[i]
                if is_moe_block(layer.mlp):
                    layer.mlp = MoELayer(moe, hidden=cfg.hidden_size, layer=i, ep_rank=ep_rank)
        self.first, self.last, self.tied = first, last, bool(getattr(cfg, "tie_word_embeddings", False))
        # PP == 1: lm_head *is* the embedding; PP > 1: the last stage holds its own copy (Megatron's
        # output_layer.weight), kept equal to the first stage's by `step.all_reduce_tied_grads`
        self.shares_output = self.tied and first and last
        self.model = nn.Module()
        self.model.embed_tokens = full.model.embed_tokens if first else None
        self.model.layers = nn.ModuleDict({str(i): full.model.layers[i] for i in layer_ids})
        self.model.norm = full.model.norm if last else None
        self.lm_head = full.lm_head if last else None
        self.to_empty(device=device)
        with torch.device(device):
            self.model.rotary_emb = type(full.model.rotary_emb)(config=cfg)
        if self.shares_output:
            self.lm_head.weight = self.model.embed_tokens.weight
        self._rotary_cache: dict[tuple, tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = {}
        # sequence parallelism: the hidden states between the TP regions hold 1/TP of the sequence
        self.sequence_shards = 1
        self.recompute = RecomputePlan()  # full recompute of the layers (`recompute.py`), set by the trainer
        # the head's output is the final norm's (the hidden states); `loss` applies lm_head and the
        # cross-entropy in chunks (`cross_entropy.py`): never the full-vocabulary logits. Set by the SFT
        # trainer; the GRPO actor and the sampler read logits.
        self.chunked_loss = False
        # packed sequences (`packed.py`): each forward takes the next micro-batch's layout, counted per model
        # chunk (a pipeline runs each chunk's micro-batches in order)
        self._packings: list[Any] = []
        self._packing_next: dict[Any, int] = {}
        self.moe_context = MoEContext(cfg.num_hidden_layers)
        self.moe_layers = [m for m in self.modules() if isinstance(m, MoELayer)]
        for m in self.moe_layers:
            m.bind(context=self.moe_context, ep_group=None)

    def bind_experts(self, ep_group: Any) -> None:
        """The expert-parallel group the MoE layers exchange tokens over (None with EP 1)."""
        for m in self.moe_layers:
            m.bind(context=self.moe_context, ep_group=ep_group)

    def rotary(self, h: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(position_ids, (cos, sin)) for the whole sequence `h` is (part of): constants (no gradient),
        computed once per (length, dtype, device, autocast on/off) and reused by every later micro-batch."""
        meta = h.device.type == "meta"  # pipelining's shape inference: never cached
        length = h.shape[1] * self.sequence_shards
        key = (length, h.dtype, h.device, not meta and torch.is_autocast_enabled(h.device.type))
        hit = None if meta else self._rotary_cache.get(key)
        if hit is None:
            position_ids = torch.arange(length, device=h.device).unsqueeze(0)
            with torch.no_grad():
                hit = position_ids, self.model.rotary_emb(h, position_ids)
            if not meta:
                self._rotary_cache = {key: hit}  # one entry: a run's sequences have one length
        return hit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run_part(x, list(self.model.layers.values()), embed=self.first, head=self.last)

    def set_packing(self, packings: list[Any]) -> None:
        """The packed layouts (`packed.Packing`) of the micro-batches the next forwards run, in order (empty:
        plain causal rows)."""
        self._packings, self._packing_next = list(packings), {}

    def _packing(self, key: Any, h: torch.Tensor) -> Any:
        if not self._packings or h.device.type == "meta":  # pipelining's shape inference takes none
            return None
        i = self._packing_next.get(key, 0)
        self._packing_next[key] = i + 1
        return self._packings[i % len(self._packings)]

    def run_part(self, x: torch.Tensor, layers: list[nn.Module], *, embed: bool, head: bool) -> torch.Tensor:
        """Embedding (`embed`), then `layers` (with the recompute plan), then the final norm and lm_head
        (`head`): the whole stage, or one model chunk of it (`StageChunk`)."""
        h = self.model.embed_tokens(x) if embed else x
        packing = self._packing((embed, head, id(layers[0]) if layers else None), h)
        if packing is None:
            position_ids, position_embeddings = self.rotary(h)
            extra: dict[str, Any] = {"attention_mask": None}
        else:
            position_ids = packing.position_ids
            with torch.no_grad():
                position_embeddings = self.model.rotary_emb(h, position_ids)
            extra = packing.layer_kwargs()

        def run(start: int, end: int) -> Callable[[torch.Tensor], torch.Tensor]:
            def layers_forward(h: torch.Tensor) -> torch.Tensor:
                for layer in layers[start:end]:
                    h = layer(h, position_ids=position_ids, position_embeddings=position_embeddings, **extra)
                return h

            return layers_forward

        # Megatron recomputes only in training; pipelining's shape inference runs on meta tensors
        training = self.training and torch.is_grad_enabled() and h.device.type != "meta"
        for start, end, recomputed in self.recompute.chunks(len(layers)):
            h = checkpointed(run(start, end), h) if recomputed and training else run(start, end)(h)
        if head:
            h = self.model.norm(h)
            if not self.chunked_loss:
                h = self.lm_head(h)
        return h

    def loss(self, output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The micro-batch's token-mean loss from the last stage's output (logits, or with `chunked_loss`
        the final hidden states)."""
        if self.chunked_loss:
            from ascendfactory.engine.train.cross_entropy import linear_cross_entropy

            return linear_cross_entropy(output, self.lm_head.weight, labels)
        return loss_fn(output, labels)

    def chunks(self, spans: list[tuple[int, int]]) -> list[StageChunk]:
        """The stage's model chunks of a virtual pipeline: (first global layer, count) each, in order; the
        embedding goes with the first chunk, the norm and lm_head with the last (Megatron's pre/post
        process of virtual stages 0 and PP x VPP - 1)."""
        return [
            StageChunk(
                self, range(o, o + n), embed=self.first and c == 0, head=self.last and c == len(spans) - 1
            )
            for c, (o, n) in enumerate(spans)
        ]


class StageChunk(nn.Module):
    """One model chunk of a virtual pipeline (interleaved 1F1B): some of a `StageModel`'s layers (and its
    embedding or head), sharing their parameters, so the stage's optimizer, TP plan, LoRA and checkpoint
    see one model; `parameters()` are this chunk's only, as pipelining scales and steps them per chunk."""

    def __init__(self, stage: StageModel, layer_ids: range, *, embed: bool, head: bool):
        super().__init__()
        self.embed, self.head = embed, head
        self.layers = nn.ModuleList([stage.model.layers[str(i)] for i in layer_ids])
        self.embed_tokens = stage.model.embed_tokens if embed else None
        self.norm = stage.model.norm if head else None
        self.lm_head = stage.lm_head if head else None
        self.__dict__["stage"] = stage  # not a submodule: its other chunks' parameters are not this one's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage.run_part(x, list(self.layers), embed=self.embed, head=self.head)


def build_stage(
    cfg: Any,
    *,
    layers: list[int],
    pp_rank: int,
    device: torch.device,
    spans: list[tuple[int, int]] | None = None,
    moe: Any = None,
    ep_rank: int = 0,
) -> StageModel:
    """This PP rank's stage. With tied embeddings and PP > 1 the last stage has its own lm_head (Megatron).
    `spans`: the (first layer, count) of each model chunk with a virtual pipeline (all held by the stage).
    `moe`/`ep_rank`: the MoE layers' spec and this rank's expert-parallel rank."""
    pp = len(layers)
    offset = sum(layers[:pp_rank])
    cfg._attn_implementation = "sdpa"  # causal SDPA without a mask tensor
    ids = [i for o, n in spans for i in range(o, o + n)] if spans else range(offset, offset + layers[pp_rank])
    return StageModel(
        cfg,
        layer_ids=ids,
        first=pp_rank == 0,
        last=pp_rank == pp - 1,
        device=device,
        moe=moe,
        ep_rank=ep_rank,
    )


def tp_plan(*, sequence_parallel: bool = False, dense_mlp_layers: list[int] | None = None) -> dict[str, Any]:
    """Module FQN pattern -> DTensor style. Embeddings, lm_head: vocab-sharded (logits gathered).

    `sequence_parallel` (Megatron's --sequence-parallel, torchtitan's plan): between the TP regions the
    hidden states are split along the sequence (Shard(1)): the embedding's output is reduce-scattered,
    the norms run on the local part (SequenceParallel), attention and MLP all-gather their input
    (PrepareModuleInput) and their row-parallel outputs are reduce-scattered instead of all-reduced.

    `dense_mlp_layers`: the layers whose MLP is dense when some are MoE (the MoE layers shard themselves,
    `MoELayer.shard`); None: every layer's."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    layer = "model.layers.*."
    between = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, Any] = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
        layer + "self_attn.q_proj": ColwiseParallel(),
        layer + "self_attn.k_proj": ColwiseParallel(),
        layer + "self_attn.v_proj": ColwiseParallel(),
        layer + "self_attn.o_proj": RowwiseParallel(output_layouts=between),
        "lm_head": ColwiseParallel(input_layouts=between, output_layouts=Replicate()),
    }
    mlps = [layer] if dense_mlp_layers is None else [f"model.layers.{i}." for i in dense_mlp_layers]
    for mlp in mlps:
        plan[mlp + "mlp.gate_proj"] = ColwiseParallel()
        plan[mlp + "mlp.up_proj"] = ColwiseParallel()
        plan[mlp + "mlp.down_proj"] = RowwiseParallel(output_layouts=between)
    if sequence_parallel:
        plan.update(
            {
                layer + "input_layernorm": SequenceParallel(),
                layer + "self_attn": PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Shard(1)},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()},
                ),
                layer + "post_attention_layernorm": SequenceParallel(),
                "model.norm": SequenceParallel(),
            }
        )
        for mlp in mlps:
            plan[mlp + "mlp"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
    return plan


def parallelize_hf_decoder(
    model: StageModel, *, tp_mesh: Any, tp: int, sequence_parallel: bool = False
) -> StageModel:
    """Apply `tp_plan()` to the modules this stage has (Llama / Qwen2 / Qwen3 share one plan)."""
    if tp == 1:
        return model
    from torch.distributed.tensor.parallel import parallelize_module

    present = {name for name, _ in model.named_modules()}
    dense = None
    if model.moe_layers:
        dense = [int(i) for i, layer in model.model.layers.items() if layer.mlp not in model.moe_layers]
    plan = {
        k: v
        for k, v in tp_plan(sequence_parallel=sequence_parallel, dense_mlp_layers=dense).items()
        if k.split(".*.")[0] in present and (k.split(".*.")[0] != "model.layers" or len(model.model.layers))
    }
    parallelize_module(model, tp_mesh, plan)
    for moe in model.moe_layers:
        moe.shard(tp_mesh)
    if sequence_parallel:
        model.sequence_shards = tp
    if model.shares_output:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def local_state(model: StageModel) -> dict[str, torch.Tensor]:
    """This rank's local HF tensors (DTensor local shards), detached."""
    return {name: local_tensor(p).detach() for name, p in model.named_parameters()}


def load_local_state(
    model: StageModel,
    local_sd: dict[str, torch.Tensor],
    *,
    missing_ok: Callable[[str], bool] | None = None,
) -> list[str]:
    """Copy `megatron_to_hf_local` output into the (possibly DTensor) parameters; every name must match.

    A LoRA-wrapped projection's `X.base_layer.weight` reads the checkpoint's `X.weight`. Parameters for
    which `missing_ok(name)` holds may be absent (returned, untouched). With PP == 1 a tied model's
    `lm_head.weight` is the embedding, so a checkpoint entry for it is ignored."""
    params = {n.replace(".base_layer.", "."): p for n, p in model.named_parameters()}
    if model.shares_output:
        local_sd = {k: v for k, v in local_sd.items() if k != "lm_head.weight"}
    skipped = sorted(n for n in set(params) - set(local_sd) if missing_ok and missing_ok(n))
    missing = sorted(set(params) - set(local_sd) - set(skipped))
    unexpected = sorted(set(local_sd) - set(params))
    problems = [Problem(key=n, message="in the model but not in the checkpoint shard") for n in missing[:5]]
    problems += [
        Problem(key=n, message="in the checkpoint shard but not in this stage") for n in unexpected[:5]
    ]
    with torch.no_grad():
        for name, p in params.items():
            if name in local_sd:
                dst, src = local_tensor(p), local_sd[name]
                if dst.shape != src.shape:
                    problems.append(
                        Problem(
                            key=name,
                            message=f"checkpoint shard {tuple(src.shape)} vs model {tuple(dst.shape)}",
                        )
                    )
                else:
                    dst.copy_(src)
    if problems:
        raise ConfigError(
            problems
            + [
                Problem(
                    key="--load",
                    message="the checkpoint does not fit this model/layout",
                    fix="convert it for this --tensor/--pipeline-model-parallel-size "
                    "and the config.json in --tokenizer-name-or-path",
                )
            ]
        )
    return skipped


def init_random(model: StageModel, *, std: float, num_layers: int, seed: int, rank_seed: int) -> None:
    """Megatron-style init of local shards: N(0, std), output projections std / sqrt(2 L), norms 1, bias 0."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank_seed)
    moe_params = {id(p) for m in model.moe_layers for p in m.parameters()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in moe_params:  # their own generators: the same experts whatever the layout
                continue
            t = local_tensor(p)
            if name.endswith("norm.weight"):
                t.fill_(1.0)
            elif name.endswith(".bias"):
                t.zero_()
            else:
                s = (
                    std / math.sqrt(2.0 * num_layers)
                    if name.endswith(("o_proj.weight", "down_proj.weight"))
                    else std
                )
                t.copy_(torch.randn(t.shape, generator=gen) * s)
    for m in model.moe_layers:
        m.init_experts(std=std, out_std=std / math.sqrt(2.0 * num_layers), seed=seed)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Token mean over labels != -100 of one micro-batch (Megatron's masked mean)."""
    return nn.functional.cross_entropy(
        logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX
    )
