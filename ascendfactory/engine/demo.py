"""Demo assets made offline: a tiny Hugging Face causal LM and a byte-level BPE tokenizer trained locally.

    python -m ascendfactory.engine.demo OUT_DIR [--family qwen2|qwen3|llama|qwen3_moe|deepseek_v2_lite]

`make_demo_model` writes a directory that `AutoTokenizer.from_pretrained` and
`AutoModelForCausalLM.from_pretrained` load: `config.json`, `generation_config.json`, `model.safetensors`,
`tokenizer.json`, `tokenizer_config.json` (with a ChatML chat template), `special_tokens_map.json`. The
tokenizer is trained on the demo datasets (`engine/data/demo_data.py`), so they tokenize compactly. The
same seed gives the same bytes. Special tokens follow Qwen2-Instruct: `<|endoftext|>` (bos/pad),
`<|im_start|>`, `<|im_end|>` (eos); the model vocabulary is the tokenizer's rounded up to a multiple of 64,
as real checkpoints pad theirs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ascendfactory.engine.data.demo_data import corpus, pretrain_records, sft_records
from ascendfactory.errors import ConfigError, Problem

TOKENIZER_VOCAB = 1000
# The pre-tokenizer split pattern of Qwen2's tokenizer.json, so that transformers' Qwen2Tokenizer (which
# rebuilds its pre-tokenizer from this pattern) and the saved tokenizer.json tokenize identically.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Shared sizes: hidden 64, 2 layers, 4 query heads over 2 KV groups (GQA), head dim 16.
_COMMON: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    initializer_range=0.02,
    torch_dtype="float32",
)
# Mixture of experts, shaped like the real models scaled down (and routed as they route): Qwen3-30B-A3B
# (every layer MoE, top-k renormalised, q/k norm) and DeepSeek-V2-Lite (a dense first layer, shared experts,
# multi-head latent attention without a query latent, softmax top-k not renormalised, YaRN rotary scaling,
# the sequence-level balance loss of its config.json)
_MOE: dict[str, Any] = dict(
    moe_intermediate_size=32, num_experts_per_tok=2, rms_norm_eps=1e-6, tie_word_embeddings=False,
    initializer_range=0.02, torch_dtype="float32", hidden_size=64, intermediate_size=176,
    max_position_embeddings=512, num_attention_heads=4,
)  # fmt: skip
_QWEN3_MOE: dict[str, Any] = dict(
    num_hidden_layers=2, num_key_value_heads=2, head_dim=16, num_experts=4, decoder_sparse_step=1,
    mlp_only_layers=[], norm_topk_prob=True, router_aux_loss_coef=0.001, rope_theta=10000.0,
    attention_bias=False,
)  # fmt: skip
_DEEPSEEK_V2_LITE: dict[str, Any] = dict(
    num_hidden_layers=3, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=2,
    first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16,
    qk_rope_head_dim=8, v_head_dim=16, norm_topk_prob=False, routed_scaling_factor=1.0, topk_method="greedy",
    n_group=1, topk_group=1, aux_loss_alpha=0.001, seq_aux=True,
    rope_scaling={"type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "beta_fast": 32, "beta_slow": 1,
                  "original_max_position_embeddings": 64, "mscale": 0.707, "mscale_all_dim": 0.707},
)  # fmt: skip
FAMILIES = ("qwen2", "qwen3", "llama", "qwen3_moe", "deepseek_v2_lite")


def train_tokenizer(vocab_size: int = TOKENIZER_VOCAB) -> Any:
    """A byte-level BPE `tokenizers.Tokenizer` trained on the demo datasets (deterministic)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [  # Qwen2's: digits one by one, then byte-level
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    texts = list(corpus(sft_records())) + list(corpus(pretrain_records()))
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def _hf_tokenizer(tok: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=_COMMON["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def save_demo_tokenizer(out_dir: str | Path) -> Any:
    """Write only the demo tokenizer to `out_dir` (no torch needed); returns the HF tokenizer."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf_tok = _hf_tokenizer(train_tokenizer())
    hf_tok.save_pretrained(out)
    _normalize_json(out)
    return hf_tok


def _config(family: str, vocab_size: int, *, bos_id: int, eos_id: int, pad_id: int) -> Any:
    ids = dict(bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id)
    if family == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(vocab_size=vocab_size, **_COMMON, **ids)
    if family == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(vocab_size=vocab_size, head_dim=16, attention_bias=False, **_COMMON, **ids)
    if family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(vocab_size=vocab_size, attention_bias=False, mlp_bias=False, **_COMMON, **ids)
    if family == "qwen3_moe":
        from transformers import Qwen3MoeConfig

        return Qwen3MoeConfig(vocab_size=vocab_size, **_MOE, **_QWEN3_MOE, **ids)
    if family == "deepseek_v2_lite":
        from transformers import DeepseekV2Config

        return DeepseekV2Config(vocab_size=vocab_size, **_MOE, **_DEEPSEEK_V2_LITE, **ids)
    raise ConfigError(
        Problem(
            key="family", message=f"unknown demo family {family!r}", fix=f"use one of: {', '.join(FAMILIES)}"
        )
    )


def make_demo_model(out_dir: str | Path, *, family: str = "qwen2", seed: int = 0) -> Path:
    """Write a tiny model + tokenizer to `out_dir` (created; files in it are overwritten); returns it."""
    if family not in FAMILIES:
        _config(family, 0, bos_id=0, eos_id=0, pad_id=0)  # raises the ConfigError
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf_tok = save_demo_tokenizer(out)
    bos, eos = hf_tok.convert_tokens_to_ids("<|endoftext|>"), hf_tok.convert_tokens_to_ids("<|im_end|>")
    pad = bos
    vocab = -(-len(hf_tok) // 64) * 64
    config = _config(family, vocab, bos_id=bos, eos_id=eos, pad_id=pad)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # padding rows of the embeddings are zero, as in converted checkpoints
        model.get_input_embeddings().weight[len(hf_tok) :].zero_()
        model.get_output_embeddings().weight[len(hf_tok) :].zero_()
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=[eos, bos], pad_token_id=pad)
    model.save_pretrained(out, safe_serialization=True)
    _normalize_json(out)
    return out


def _normalize_json(out: Path) -> None:
    """Sort keys of the JSON files, so the bytes do not depend on dict insertion order across versions.

    The tokenizer class is pinned to Qwen2Tokenizer for every family, so AutoTokenizer does not pick the
    model family's own tokenizer class (which would rebuild a different pre-tokenizer).
    """
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        path = out / name
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            if name == "tokenizer_config.json":
                data["tokenizer_class"] = "Qwen2Tokenizer"
            if name == "config.json" and data.get("model_type") == "qwen3_moe":
                # the Hub's name, which MindSpeed-LLM's converter reads (transformers 5: num_local_experts)
                data.setdefault("num_experts", data.get("num_local_experts"))
            path.write_text(
                json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
            )


def count_parameters(out_dir: str | Path) -> int:
    """Number of parameters stored in `out_dir/model.safetensors`."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(Path(out_dir) / "model.safetensors"), framework="numpy") as f:
        for name in f.keys():
            shape = f.get_slice(name).get_shape()
            n = 1
            for d in shape:
                n *= d
            total += n
    return total


def main(argv: list[str] | None = None) -> int:
    """`python -m ascendfactory.engine.demo OUT_DIR`: write the demo model; prints its path and size."""
    p = argparse.ArgumentParser(
        prog="python -m ascendfactory.engine.demo", description=(__doc__ or "").splitlines()[0]
    )
    p.add_argument("out_dir")
    p.add_argument("--family", choices=FAMILIES, default="qwen2")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = make_demo_model(args.out_dir, family=args.family, seed=args.seed)
    print(f"wrote a {args.family} demo model ({count_parameters(out):,} parameters) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
