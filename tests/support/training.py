"""Helpers for the trainer's tests and benchmark: a tiny HF model, its Megatron checkpoint, tiny datasets,
and a torchrun launcher on a free port. Uses the converter's and preprocess's public functions only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.ports import free_port

TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
CLASSES = {"qwen2": "Qwen2Config", "llama": "LlamaConfig", "qwen3": "Qwen3Config"}


def make_tiny_model(out_dir: str | Path, *, family: str = "qwen2", seed: int = 0, **overrides: Any) -> Any:
    """Write config.json + model.safetensors of a tiny randomly initialised HF model; returns the model."""
    import torch
    import transformers

    cfg = getattr(transformers, CLASSES[family])(**{**TINY, **overrides})
    if family == "qwen3":
        cfg.head_dim = cfg.hidden_size // cfg.num_attention_heads
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(out_dir)
    return model


def hf_to_megatron(
    hf_dir: str | Path,
    out_dir: str | Path,
    *,
    tp: int = 1,
    pp: int = 1,
    num_layer_list: list[int] | None = None,
) -> None:
    """A converted checkpoint (`iter_0000001`, tracker 1, no optimizer) via the converter's functions."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from ascendfactory.engine.convert import megatron_io
    from ascendfactory.engine.convert.dims import ModelDims
    from ascendfactory.engine.convert.shard_map import hf_full_to_local, hf_local_to_megatron

    cfg = AutoConfig.from_pretrained(hf_dir)
    dims = ModelDims.from_hf_config(cfg)
    padded = dims.padded_vocab_size(tp)
    full = load_file(str(Path(hf_dir) / "model.safetensors"))
    if dims.tie_word_embeddings:
        full.pop("lm_head.weight", None)
    counts = megatron_io.layers_per_stage(dims.num_layers, pp, num_layer_list)
    offsets = megatron_io.layer_offsets(counts)
    args = dims.megatron_args(
        tp=tp, pp=pp, num_layer_list=num_layer_list, padded_vocab_size=padded, params_dtype=torch.float32
    )
    for tp_rank in range(tp):
        local = hf_full_to_local(full, cfg=dims, tp=tp, tp_rank=tp_rank, padded_vocab_size=padded)
        for pp_rank in range(pp):
            lo, hi = offsets[pp_rank], offsets[pp_rank] + counts[pp_rank]
            stage = {}
            for name, t in local.items():
                m = re.match(r"model\.layers\.(\d+)\.", name)
                if m:
                    keep = lo <= int(m.group(1)) < hi
                else:
                    keep = (name == "model.embed_tokens.weight" and pp_rank == 0) or (
                        name in ("model.norm.weight", "lm_head.weight") and pp_rank == pp - 1
                    )
                if keep:
                    stage[name] = t
            keep = dims.tie_word_embeddings and pp > 1 and pp_rank == pp - 1
            if keep:  # the last stage's own copy of tied embeddings (convert_ckpt_v2.py)
                stage["lm_head.weight"] = local["model.embed_tokens.weight"]
            shard = hf_local_to_megatron(
                stage, cfg=dims, tp=tp, tp_rank=tp_rank, layer_offset=lo, keep_tied_output=keep
            )
            megatron_io.save_shard(
                out_dir,
                1,
                tp_rank,
                pp_rank,
                pp,
                {"model": shard, "args": args, "checkpoint_version": 3.0, "iteration": 1},
            )
    megatron_io.write_tracker(out_dir, 1)


def make_pretrain_data(prefix: str | Path, *, vocab: int = 256, docs: int = 64, seed: int = 0) -> str:
    """`<prefix>_text_document.{bin,idx}` with random documents of 20..120 tokens; returns the data path."""
    from ascendfactory.engine.data.indexed import IndexedDatasetBuilder

    rng = np.random.default_rng(seed)
    path = f"{prefix}_text_document"
    builder = IndexedDatasetBuilder(path, dtype=np.uint16)
    for _ in range(docs):
        builder.add_document(rng.integers(1, vocab, size=int(rng.integers(20, 120))))
    builder.finalize()
    return path


def make_sft_data(prefix: str | Path, *, vocab: int = 256, samples: int = 32, seed: int = 0) -> str:
    """`<prefix>_packed_{input_ids,attention_mask,labels}_document`, prompt labels -100; returns prefix."""
    from ascendfactory.engine.data.indexed import IndexedDatasetBuilder

    rng = np.random.default_rng(seed)
    builders = {
        k: IndexedDatasetBuilder(f"{prefix}_packed_{k}_document", dtype=np.int32)
        for k in ("input_ids", "attention_mask", "labels")
    }
    for _ in range(samples):
        n, prompt = int(rng.integers(10, 40)), int(rng.integers(3, 8))
        ids = rng.integers(1, vocab, size=n)
        labels = ids.copy()
        labels[:prompt] = -100
        builders["input_ids"].add_document(ids)
        builders["attention_mask"].add_document(np.ones(n, dtype=np.int64))
        builders["labels"].add_document(labels)
    for b in builders.values():
        b.finalize()
    return str(prefix)


def torchrun(
    nproc: int,
    flags: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: int = 300,
) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run --nproc-per-node N -m ascendfactory.engine.train <flags>`."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--nnodes",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "-m",
        "ascendfactory.engine.train",
        *flags,
    ]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)


def losses_from_log(stdout: str) -> dict[int, float]:
    """iteration -> lm loss from the training_log lines."""
    from ascendfactory.engine.train.logline import parse_log_line

    out = {}
    for line in stdout.splitlines():
        if "elapsed time per iteration (ms):" in line:
            fields = parse_log_line(line)
            out[int(fields["iteration"].split("/")[0])] = float(fields.get("lm loss", "nan"))
    return out


def megatron_to_hf_full(root: str | Path, iteration: int | None = None) -> dict[str, Any]:
    """All shards of a Megatron checkpoint glued back into full HF tensors (vocab kept padded)."""
    from ascendfactory.engine.convert import megatron_io
    from ascendfactory.engine.convert.shard_map import hf_locals_to_full, megatron_to_hf_local

    iteration = iteration or megatron_io.read_tracker(root)
    tp, pp = megatron_io.discover_layout(root, iteration)
    full: dict[str, Any] = {}
    offset = 0
    for pp_rank in range(pp):
        shards = [megatron_io.load_shard(root, iteration, t, pp_rank, pp) for t in range(tp)]
        args = shards[0]["args"]
        locals_ = [
            megatron_to_hf_local(s["model"], cfg=args, tp=tp, tp_rank=t, layer_offset=offset)
            for t, s in enumerate(shards)
        ]
        from ascendfactory.engine.convert.dims import as_dims

        dims = as_dims(args)
        if dims.tie_word_embeddings:  # the last stage's copy of a tied embedding (PP > 1) is not a weight
            for local in locals_:
                local.pop("lm_head.weight", None)
        full.update(hf_locals_to_full(locals_, cfg=dims))
        offset += len({k.split(".")[2] for k in shards[0]["model"] if k.startswith("decoder.layers.")})
    return full
