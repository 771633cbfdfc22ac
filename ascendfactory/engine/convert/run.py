"""The three conversions (hf->mg, mg->hf, mg->mg), streamed one pipeline stage at a time."""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.engine.convert import verify
from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.convert.families import family_for
from ascendfactory.engine.convert.hf_io import (
    HFReader,
    HFShardWriter,
    copy_model_files,
    parse_size,
    read_config,
)
from ascendfactory.engine.convert.megatron_source import LoraMerge, MegatronSource
from ascendfactory.engine.convert.shard_map import hf_full_to_local, hf_local_to_megatron, v1_mla_names
from ascendfactory.engine.convert.streaming import BufferPool, threads
from ascendfactory.errors import ConfigError, ConversionKeyError, Problem

log = logging.getLogger("ascendfactory.convert")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CONVERTED_ITERATION = 1  # MindSpeed-LLM's converters write iter_0000001 and tracker "1"
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _owned(t: torch.Tensor) -> torch.Tensor:
    """`t`, or a copy when it is a view into a larger storage (so saving writes only its own bytes)."""
    t = t.contiguous()
    return t if t.untyped_storage().nbytes() == t.numel() * t.element_size() else t.clone()


_ALL_THREADS: list[int] = []  # the count before `run` took it down to one; logit checks restore it


def _verify_logits(*args: Any, **kwargs: Any) -> None:
    with threads(_ALL_THREADS[-1] if _ALL_THREADS else None):
        verify.verify_logits(*args, **kwargs)


def _stage_names(
    names: list[str], dims: ModelDims, first: int, count: int, pp_rank: int, pp: int
) -> list[str]:
    """HF names that belong to a pipeline stage: its layers, the embedding (first), norm and head (last)."""
    fam, out = dims.fam, []
    for n in names:
        _, layer, _ = fam.lookup_hf(n)
        if layer is not None:
            keep = first <= layer < first + count
        elif n == "model.embed_tokens.weight":
            keep = pp_rank == 0
        else:
            keep = pp_rank == pp - 1
        if keep:
            out.append(n)
    return out


def tied_output_stage(dims: ModelDims, pp_rank: int, pp: int) -> bool:
    """Does this stage hold `output_layer.weight` as a copy of the embedding? Yes on the last stage of a tied
    model with PP > 1: MindSpeed-LLM's convert_ckpt_v2.py (`convert_hf2mg.py` `set_model_postprocess`) writes
    the embedding's TP chunks there, and Megatron's last stage has its own `output_layer.weight`."""
    return dims.tie_word_embeddings and pp > 1 and pp_rank == pp - 1


def resolve_family(hf_cfg: dict[str, Any] | None, model_type_hf: str | None) -> str:
    """Family from config.json, `--model-type-hf` winning unless it is v1's catch-all `llama2` for Qwen2."""
    if hf_cfg is None or not model_type_hf:
        return family_for(hf_cfg, model_type_hf).name
    by_config = family_for(hf_cfg).name
    chosen = family_for(hf_cfg, model_type_hf).name
    if chosen != by_config:
        if chosen == "llama2":
            log.info(
                "--model-type-hf llama2 (the v1 converter's name for Llama-3 and Qwen2): using '%s' from "
                "config.json model_type '%s'",
                by_config,
                hf_cfg.get("model_type"),
            )
            return by_config
        raise ConfigError(
            Problem(
                key="--model-type-hf",
                message=f"'{model_type_hf}' does not match config.json "
                f"model_type '{hf_cfg.get('model_type')}' (family '{by_config}')",
                fix=f"use --model-type-hf {by_config}, or leave it out",
                source="command line",
            )
        )
    return chosen


def write_stage(
    save_dir: Path,
    parts: list[tuple[dict[str, torch.Tensor], int, bool]],
    *,
    dims: ModelDims,
    tp: int,
    pp: int,
    pp_rank: int,
    padded: int,
    args: argparse.Namespace,
    pool: BufferPool | None = None,
    ep: int = 1,
    grouped_gemm: bool = False,
    v1_mla: bool = False,
) -> None:
    """Cut one PP rank's full HF tensors into TP (and EP) shards and save each as soon as it is built.
    `v1_mla`: MLA tensors under MindSpeed-LLM 2.1.0's names (`--target-mindspeed-llm 2.1.0`).

    `parts`: one (full HF tensors, first global layer, holds a tied output copy) per model chunk: one chunk
    is saved as `model`, several (virtual pipeline) as `model0`, `model1`, ... (`mio.model_key`).
    Fused tensors are built in place and cut ones copied into `pool` buffers, reused by the next shard;
    tensors that own their storage (e.g. memory-mapped from the safetensors files) are saved as they are.
    """
    pool = pool or BufferPool()
    for full, _, keep_output in parts:
        if keep_output and "lm_head.weight" not in full:
            raise ConversionKeyError(
                "internal: the last stage of a tied model with PP > 1 needs the embedding as lm_head.weight"
            )
    for e in range(ep):
        for r in range(tp):
            payload: dict[str, Any] = {}
            for c, (full, offset, keep_output) in enumerate(parts):
                local = hf_full_to_local(
                    full, cfg=dims, tp=tp, tp_rank=r, padded_vocab_size=padded, ep=ep, ep_rank=e
                )
                model = hf_local_to_megatron(
                    local,
                    cfg=dims,
                    tp=tp,
                    tp_rank=r,
                    layer_offset=offset,
                    alloc=pool.take,
                    keep_tied_output=keep_output,
                    ep=ep,
                    ep_rank=e,
                    grouped_gemm=grouped_gemm,
                )
                if v1_mla:
                    model = v1_mla_names(model)
                payload[mio.model_key(c, len(parts))] = {k: pool.own(v) for k, v in model.items()}
                del model, local
            payload |= {"args": args, "checkpoint_version": 3.0, "iteration": CONVERTED_ITERATION}
            mio.save_shard(save_dir, CONVERTED_ITERATION, r, pp_rank, pp, payload, e, ep)
            del payload
            pool.release()


def _remove_stale_shards(save_dir: Path, tp: int, pp: int, ep: int = 1) -> None:
    it_dir = mio.iteration_dir(save_dir, CONVERTED_ITERATION)
    keep = {
        mio.checkpoint_dir(save_dir, CONVERTED_ITERATION, t, p, pp, e, ep).name
        for t in range(tp)
        for p in range(pp)
        for e in range(ep)
    }
    for d in it_dir.glob("mp_rank_*"):
        if d.is_dir() and d.name not in keep:
            log.info("removing %s (left from an earlier conversion with another layout)", d)
            shutil.rmtree(d)


def _target_layout(dims: ModelDims, a: argparse.Namespace) -> tuple[int, int, list[int], int]:
    tp, pp = a.target_tensor_parallel_size, a.target_pipeline_parallel_size
    dims.check_tp(tp)
    dims.check_ep(a.target_expert_parallel_size)
    counts = mio.layers_per_stage(dims.num_layers, pp, a.num_layer_list)
    return tp, pp, counts, dims.padded_vocab_size(tp, a.make_vocab_size_divisible_by)


def _chunks(
    dims: ModelDims, a: argparse.Namespace, pp: int, counts: list[int]
) -> list[list[tuple[int, int]]]:
    """Per PP rank, per model chunk: (first layer, count); one chunk per rank without a virtual pipeline."""
    per_chunk = getattr(a, "num_layers_per_virtual_pipeline_stage", None)
    if per_chunk is None:
        return [[(o, n)] for o, n in zip(mio.layer_offsets(counts), counts)]
    return mio.virtual_stages(dims.num_layers, pp, per_chunk)


def _v1_mla(dims: ModelDims, a: argparse.Namespace) -> bool:
    """MindSpeed-LLM 2.1.0's MLA names: its deepseek_spec.py builds MLA with `linear_qb`, `linear_kvb` and
    `k_layernorm` (mindspeed_llm/tasks/models/spec/deepseek_spec.py at v2.1.0), where 26.1.0 and Megatron core
    have `linear_q_up_proj`, `linear_kv_up_proj` and `kv_layernorm`."""
    return dims.mla and getattr(a, "target_mindspeed_llm", None) == "2.1.0"


def _progress(what: str, i: int, n: int, t0: float, detail: str) -> None:
    log.info("%s: stage %d/%d %s (%.1fs)", what, i + 1, n, detail, time.perf_counter() - t0)


def _hf_names(reader: HFReader, dims: ModelDims) -> list[str]:
    """The HF tensors the conversion reads: FP8 checkpoints refused, multi-token-prediction layers
    (DeepSeek-V3's `model.layers.<num_hidden_layers>.*`) left out as MindSpeed-LLM's convert_ckpt_v2.py does
    without `--mtp-num-layers`; unknown names raise here, before anything is written."""
    names = reader.keys()
    scales = [n for n in names if n.endswith(".weight_scale_inv")]
    if scales:
        raise ConfigError(
            Problem(
                key="--load-dir",
                message=f"holds FP8 weights with block scales ({scales[0]}, ...)",
                fix="cast them to bf16 first (DeepSeek-V3's inference/fp8_cast_bf16.py, as MindSpeed-LLM's "
                "examples/mcore/deepseek3/README.md does), then convert the bf16 folder",
                source="command line",
            )
        )
    mtp = [n for n in names if (m := _LAYER.match(n)) and int(m.group(1)) >= dims.num_layers]
    if mtp:
        log.info(
            "leaving out %d tensors of the multi-token-prediction layer(s) (model.layers.%d.* and later): "
            "Megatron's decoder has %d layers",
            len(mtp),
            dims.num_layers,
            dims.num_layers,
        )
    kept = [n for n in names if n not in set(mtp) and dims.fam.lookup_hf(n)[2] is not None]
    if dims.tie_word_embeddings:
        kept = [n for n in kept if n != "lm_head.weight"]
    elif "lm_head.weight" not in names:
        raise ConversionKeyError(
            "config.json says tie_word_embeddings = false but there is no 'lm_head.weight'"
        )
    return kept


def hf_to_mg(a: argparse.Namespace) -> None:
    """HF safetensors folder -> Megatron checkpoint (iter_0000001, tracker 1), one target stage at a time."""
    hf_cfg = read_config(a.load_dir)
    family = resolve_family(hf_cfg, a.model_type_hf)
    dims = ModelDims.from_hf_config(hf_cfg, family)
    tp, pp, counts, padded = _target_layout(dims, a)
    ep, grouped = a.target_expert_parallel_size, a.moe_grouped_gemm and dims.fam.moe
    chunks = _chunks(dims, a, pp, counts)
    reader = HFReader(a.load_dir)
    kept = _hf_names(reader, dims)
    # no --params-dtype: every tensor keeps its own dtype (DeepSeek-V3's fp32 e_score_correction_bias beside
    # bf16 weights, as convert_ckpt_v2.py keeps it)
    dtype = DTYPES[a.params_dtype] if a.params_dtype else None
    expected = {
        n: (reader.meta(n)[0], verify.dtype_name(dtype) if dtype else reader.meta(n)[1]) for n in kept
    }
    args = dims.megatron_args(
        tp=tp,
        pp=pp,
        num_layer_list=counts if a.num_layer_list else None,
        padded_vocab_size=padded,
        params_dtype=dtype or reader.get("model.norm.weight").dtype,
        make_vocab_size_divisible_by=a.make_vocab_size_divisible_by,
        virtual_stage_layers=chunks[0][0][1] if len(chunks[0]) > 1 else None,
        ep=ep,
        grouped_gemm=grouped,
    )
    save = Path(a.save_dir)
    save.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pool = BufferPool()
    stages = pp * len(chunks[0])
    for s, rank_chunks in enumerate(chunks):
        parts = []
        for c, (offset, count) in enumerate(rank_chunks):
            v = c * pp + s  # the virtual stage: its place in the whole model
            full = reader.read(_stage_names(kept, dims, offset, count, v, stages), dtype)
            if tied_output_stage(dims, v, stages):
                full["lm_head.weight"] = reader.get("model.embed_tokens.weight", dtype)
            parts.append((full, offset, tied_output_stage(dims, v, stages)))
        write_stage(
            save,
            parts,
            dims=dims,
            tp=tp,
            pp=pp,
            pp_rank=s,
            padded=padded,
            args=args,
            pool=pool,
            ep=ep,
            grouped_gemm=grouped,
            v1_mla=_v1_mla(dims, a),
        )
        spans = ", ".join(f"{o}-{o + n - 1}" for o, n in rank_chunks)
        _progress("hf->mg", s, pp, t0, f"layers {spans}: {tp * ep} TP x EP shards written")
        del parts, full
    _remove_stale_shards(save, tp, pp, ep)
    mio.write_tracker(save, CONVERTED_ITERATION)
    if a.verify:
        out = MegatronSource(save, model_type_hf=family)
        verify.compare_signatures(
            expected, _collect(out.stages(meta=True)), what=f"{save} (TP {tp}, PP {pp}, EP {ep})"
        )
    if a.verify_logits:
        ref = reader.read(kept)
        _verify_logits(hf_cfg, ref, MegatronSource(save, model_type_hf=family).full_state(), what="hf->mg")


def _collect(stages: Iterator[tuple[int, int, dict[str, torch.Tensor]]]) -> verify.Signature:
    sig: verify.Signature = {}
    for _, _, sd in stages:
        sig.update(verify.signature(sd))
    return sig


def lora_merge(a: argparse.Namespace) -> LoraMerge | None:
    """The LoRA merge the flags ask for (MindSpeed-LLM v2: any of --lora-r / --lora-load), or None."""
    if getattr(a, "lora_r", None) is None and getattr(a, "lora_load", None) is None:
        return None
    return LoraMerge(
        r=a.lora_r, alpha=a.lora_alpha, load=a.lora_load, targets=tuple(a.lora_target_modules or ())
    )


def _source(a: argparse.Namespace) -> tuple[MegatronSource, dict[str, Any] | None]:
    hf_cfg = read_config(a.hf_cfg_dir) if a.hf_cfg_dir else None
    family = resolve_family(hf_cfg, a.model_type_hf) if (hf_cfg or a.model_type_hf) else None
    vocab = int(hf_cfg["vocab_size"]) if hf_cfg else None
    src = MegatronSource(a.load_dir, model_type_hf=family, vocab_size=vocab, lora=lora_merge(a))
    if src.lora is not None:
        where = f"{src.lora.load} into {a.load_dir}" if src.lora.load else f"in {a.load_dir}"
        log.info("merging LoRA adapters %s: W + %s/%s * B @ A", where, src.lora.alpha, src.lora.r)
    return src, hf_cfg


def mg_to_hf(a: argparse.Namespace) -> None:
    """Megatron checkpoint (any TP/PP/EP, converted or trained) -> HF safetensors + config/tokenizer files."""
    src, hf_cfg = _source(a)
    if src.dims.fam.moe and not a.hf_cfg_dir:
        raise ConfigError(
            Problem(
                key="--hf-cfg-dir",
                message=f"is required for the mixture-of-experts family '{src.dims.family}': a checkpoint's "
                "args do not carry the HF router settings (norm_topk_prob, n_group, topk_group, "
                "routed_scaling_factor, ...)",
                fix="pass --hf-cfg-dir <the HF model folder the checkpoint was converted from>",
                source="command line",
            )
        )
    dtype = DTYPES[a.params_dtype] if a.params_dtype else None
    save = Path(a.save_dir)
    writer = HFShardWriter(save, parse_size(a.max_shard_size))
    expected: verify.Signature = {}
    t0 = time.perf_counter()
    log.info(
        "mg->hf: %s iteration %d, TP %d, PP %d, EP %d, %d model chunk(s) per stage",
        src.root,
        src.iteration,
        src.tp,
        src.pp,
        src.ep,
        src.vpp,
    )
    try:
        for s, (offset, n, full) in enumerate(src.stages(dtype)):
            for name, t in full.items():
                writer.add(name, _owned(t))
            expected.update(verify.signature(full))
            _progress(
                "mg->hf", s, src.pp * src.vpp, t0, f"layers {offset}-{offset + n - 1}: {len(full)} tensors"
            )
        files = writer.finish()
    except BaseException:
        writer.abort()
        raise
    out_dtype = verify.dtype_name(dtype or next(iter(_dtypes(expected))))
    if a.hf_cfg_dir:
        copied = copy_model_files(
            a.hf_cfg_dir, save, config_updates={"torch_dtype": out_dtype} if dtype else None
        )
        log.info("copied %s from %s", ", ".join(copied), a.hf_cfg_dir)
    else:
        import json

        (save / "config.json").write_text(json.dumps(src.dims.hf_config_dict(out_dtype), indent=2) + "\n")
        log.info("no --hf-cfg-dir: wrote config.json from the checkpoint args (no tokenizer files copied)")
    log.info("mg->hf: wrote %d weight file(s) to %s", len(files), save)
    if a.verify:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(str(save))
        reader = HFReader(save)
        verify.compare_signatures(expected, {k: reader.meta(k) for k in reader.keys()}, what=str(save))
    if a.verify_logits:
        reader = HFReader(save)
        src2 = MegatronSource(
            a.load_dir, model_type_hf=src.dims.family, vocab_size=src.dims.vocab_size, lora=src.lora
        )
        _verify_logits(read_config(save), reader.read(reader.keys()), src2.full_state(dtype), what="mg->hf")


def _dtypes(sig: verify.Signature) -> Iterator[torch.dtype]:
    for _, d in sig.values():
        yield getattr(torch, d)


def mg_to_mg(a: argparse.Namespace) -> None:
    """Reshard a Megatron checkpoint to a new TP/PP (weights only: writes iter_0000001, tracker 1)."""
    src, hf_cfg = _source(a)
    dims = src.dims
    tp, pp, counts, padded = _target_layout(dims, a)
    dtype = DTYPES[a.params_dtype] if a.params_dtype else None
    ep, grouped = a.target_expert_parallel_size, a.moe_grouped_gemm and dims.fam.moe
    first = next(iter(src._model(0, 0).values()))
    args = dims.megatron_args(
        tp=tp,
        pp=pp,
        num_layer_list=counts if a.num_layer_list else None,
        padded_vocab_size=padded,
        params_dtype=dtype or first.dtype,
        make_vocab_size_divisible_by=a.make_vocab_size_divisible_by,
        ep=ep,
        grouped_gemm=grouped,
    )
    save = Path(a.save_dir)
    if save.resolve() == src.root.resolve():
        raise ConfigError(
            Problem(
                key="--save-dir",
                message="is the same folder as --load-dir",
                fix="write the resharded checkpoint to a new folder",
                source="command line",
            )
        )
    offsets = mio.layer_offsets(counts)
    pool = BufferPool()
    pending: dict[str, torch.Tensor] = {}
    expected: verify.Signature = {}
    target, t0 = 0, time.perf_counter()
    embedding: list[torch.Tensor] = []  # for the last stage of a tied model with PP > 1

    def flush(final: bool) -> None:
        nonlocal target, pending
        while target < pp and (final or _has_layers(pending, offsets[target] + counts[target])):
            names = _stage_names(list(pending), dims, offsets[target], counts[target], target, pp)
            stage = {n: pending.pop(n) for n in names}
            if target == 0 and "model.embed_tokens.weight" in stage:
                embedding.append(stage["model.embed_tokens.weight"])
            if tied_output_stage(dims, target, pp):
                stage["lm_head.weight"] = embedding[0]
            write_stage(
                save,
                [(stage, offsets[target], tied_output_stage(dims, target, pp))],
                dims=dims,
                tp=tp,
                pp=pp,
                pp_rank=target,
                padded=padded,
                args=args,
                pool=pool,
                ep=ep,
                grouped_gemm=grouped,
                v1_mla=_v1_mla(dims, a),
            )
            _progress("mg->mg", target, pp, t0, f"{tp * ep} TP x EP shards written")
            target += 1

    for _, _, full in src.stages(dtype):
        expected.update(verify.signature(full))
        pending.update(full)
        flush(final=False)
    flush(final=True)
    _remove_stale_shards(save, tp, pp, ep)
    mio.write_tracker(save, CONVERTED_ITERATION)
    if a.verify:
        out = MegatronSource(save, model_type_hf=dims.family)
        verify.compare_signatures(
            expected, _collect(out.stages(meta=True)), what=f"{save} (TP {tp}, PP {pp}, EP {ep})"
        )
    if a.verify_logits:
        cfg = hf_cfg or dims.hf_config_dict()
        ref = MegatronSource(
            a.load_dir, model_type_hf=dims.family, vocab_size=dims.vocab_size, lora=src.lora
        ).full_state(dtype)
        _verify_logits(cfg, ref, MegatronSource(save, model_type_hf=dims.family).full_state(), what="mg->mg")


def _has_layers(pending: dict[str, torch.Tensor], end: int) -> bool:
    """True when layer `end - 1` is read (source stages come in order, so every earlier layer is too)."""
    return any(n.startswith(f"model.layers.{end - 1}.") for n in pending) or end == 0


def run(a: argparse.Namespace) -> None:
    """Dispatch on --load-model-type / --save-model-type."""
    pair = (a.load_model_type, a.save_model_type)
    _ALL_THREADS.append(torch.get_num_threads())
    try:
        with threads(1):
            {("hf", "mg"): hf_to_mg, ("mg", "hf"): mg_to_hf, ("mg", "mg"): mg_to_mg}[pair](a)
    finally:
        _ALL_THREADS.pop()
