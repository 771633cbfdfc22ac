"""The memory job of a MindSpeed-MM experiment: the LLM and the vision encoder of the model.json the plan
writes (`--mm-model`), laid out by the flags pretrain_vlm.py parses (`run.launch`).

The LLM: model.json's `text_decoder` (layers, hidden, ffn, heads, query groups, untied output layer, QKV
bias), its vocabulary from `--vocab-size`, its layers per pipeline stage from `pipeline_num_layers`; the
vision encoder: `image_encoder.vision_encoder` on the first stage, trained unless `freeze` (the examples
freeze it). TP, PP, CP, micro and global batch, sequence length, precision, the distributed optimizer and
recompute: the launch's flags (the example's GPT_ARGS merged with the experiment's).
"""

from __future__ import annotations

from typing import Any

from ascendfactory.backends.common.megatron.memory import KEYS, megatron_job, spelling
from ascendfactory.backends.common.megatron.read import MegatronRun
from ascendfactory.backends.mindspeed_mm.read import MMRun, get
from ascendfactory.memory.shape import ModelShape, VisionShape
from ascendfactory.memory.target import MemoryTarget

# PP moves layers between stages only with model.json's pipeline_num_layers: not a change the fixes make.
MM_KEYS = {k: v for k, v in KEYS.items() if k not in ("pp", "vpp")}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def mm_shape(mm: MMRun, vocab: int | None) -> ModelShape:
    llm = get(mm.model, "text_decoder") or {}
    vit = get(mm.model, "image_encoder.vision_encoder") or {}
    heads = _int(llm.get("num_attention_heads"), mm.arch.heads)
    vision = None
    if vit:
        hidden = _int(vit.get("hidden_size"), 1280)
        vision = VisionShape(
            layers=_int(vit.get("num_layers"), 0),
            hidden=hidden,
            ffn=_int(vit.get("ffn_hidden_size"), 4 * hidden),
            heads=_int(vit.get("num_attention_heads"), 16),
            frozen=bool(vit.get("freeze")),
        )
    return ModelShape(
        name=mm.arch.name,
        layers=_int(llm.get("num_layers"), mm.arch.layers),
        hidden=_int(llm.get("hidden_size"), mm.arch.hidden),
        ffn=_int(llm.get("ffn_hidden_size"), mm.arch.ffn),
        heads=heads,
        kv_heads=_int(llm.get("num_query_groups"), heads) if llm.get("group_query_attention") else heads,
        vocab=vocab or _int(llm.get("vocab_size"), mm.arch.vocab),
        tied=not llm.get("untie_embeddings_and_output_weights", not mm.arch.tied),
        qkv_bias=bool(llm.get("add_qkv_bias")),
        vision=vision,
    )


def mm_target(run: MegatronRun[MMRun]) -> MemoryTarget | None:
    args = run.launch
    if args is None:
        return None
    mm = run.framework
    shape = mm_shape(mm, args.number("vocab-size"))
    job = megatron_job(args, shape, dp=run.dp, engine="megatron")
    stages = list(mm.llm_layers)  # model.json's text_decoder.pipeline_num_layers
    if len(stages) == job.pp and sum(stages) == shape.layers:
        job = job.with_(num_layer_list=tuple(stages))
    notes: tuple[str, ...] = ()
    if shape.vision is not None:
        notes = (
            f"vision encoder: {shape.vision.layers} blocks on the first stage"
            + (
                ", frozen (16-bit weights only)"
                if shape.vision.frozen
                else f", trained, {shape.vision.patches} patches per sample (an image of ~900x900 pixels)"
            ),
        )
    return MemoryTarget(job=job, spell=spelling(args, MM_KEYS), world_size=run.world_size, notes=notes)
