"""The demo assets: shipped datasets match their generator; the demo model builds offline and loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascendfactory.engine.data.demo_data import (
    GRPO_FORMAT_SHARE,
    grpo_records,
    grpo_warmup_records,
    pretrain_records,
    sft_records,
)

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(
    ("name", "records"),
    [
        ("demo_sft.jsonl", sft_records),
        ("demo_pretrain.jsonl", pretrain_records),
        ("demo_grpo.jsonl", grpo_records),
        ("demo_grpo_warmup.jsonl", grpo_warmup_records),
    ],
)
def test_shipped_datasets_are_the_generator_output(name: str, records) -> None:
    shipped = [json.loads(line) for line in (ROOT / "cfgs" / "data" / name).read_text().splitlines()]
    assert shipped == records(), "regenerate with: python scripts/make_demo_assets.py --data-only"


def test_sft_records_are_well_formed_and_varied() -> None:
    records = sft_records()
    assert 300 <= len(records) <= 1000
    assert all(set(r) == {"instruction", "input", "output"} for r in records)
    assert all(r["instruction"] and r["output"] for r in records)
    assert len({r["instruction"] + r["input"] for r in records}) > 150  # small task spaces repeat a bit


def test_grpo_task_answers_are_numbers_and_warmup_teaches_them_in_both_formats() -> None:
    from ascendfactory.engine.rl.verifiers import base_acc, boxed_acc, format_reward

    prompts = grpo_records()
    assert all(set(r) == {"problem", "answer"} and r["answer"].isdigit() for r in prompts)
    questions = {r["problem"]: r["answer"] for r in prompts}
    warm = grpo_warmup_records()
    for r in warm:  # every warm-up answer is right for its question (and scores with math_17k_acc)
        answer = questions.get(r["instruction"])
        assert answer is None or boxed_acc(r["output"], answer) == 1.0
    r1 = [r for r in warm if base_acc(r["output"], r["output"].split("{")[-1].split("}")[0]) == 1.0]
    assert all(format_reward(r["output"], "") == 1.0 for r in r1)
    assert abs(len(r1) / len(warm) - GRPO_FORMAT_SHARE) < 0.06  # the R1 format is the rare one
    assert set(questions) <= {r["instruction"] for r in warm}  # the warm-up covers every GRPO prompt


def test_tokenizer_round_trips_the_demo_data(tokenizer) -> None:
    texts = [v for r in sft_records() + pretrain_records() for v in r.values() if v]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert [tokenizer.decode(x) for x in ids] == texts
    assert 500 <= len(tokenizer) <= 2000
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>")  # special tokens stay whole
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>") and ids[-1] == tokenizer.eos_token_id


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ascendfactory.engine.demo import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("demo") / "qwen2")


def test_demo_model_loads_and_runs(demo_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ascendfactory.engine.demo import count_parameters

    tok = AutoTokenizer.from_pretrained(demo_model)
    model = AutoModelForCausalLM.from_pretrained(demo_model)
    cfg = model.config
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers) == ("qwen2", 64, 2)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (4, 2)
    assert cfg.vocab_size % 64 == 0 and cfg.vocab_size >= len(tok)
    assert 100_000 <= count_parameters(demo_model) == sum(p.numel() for p in model.parameters()) <= 1_000_000
    assert (demo_model / "model.safetensors").is_file()
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 plus 3?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], cfg.vocab_size) and torch.isfinite(logits).all()
    assert not model.get_output_embeddings().weight[len(tok) :].any()  # padding rows are zero


def test_unknown_family_is_a_config_error(tmp_path: Path) -> None:
    from ascendfactory.engine.demo import make_demo_model
    from ascendfactory.errors import ConfigError

    with pytest.raises(ConfigError, match="qwen2"):
        make_demo_model(tmp_path, family="gpt2")
