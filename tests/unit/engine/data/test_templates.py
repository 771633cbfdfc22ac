"""Prompt templates render the real chat formats of their model families."""

from __future__ import annotations

import pytest

from ascendfactory.engine.data.templates import BOS, EOS, TEMPLATES, get_template, list_templates
from ascendfactory.errors import ConfigError

QA = [("What is 2 plus 3?", "5.")]


def test_qwen_matches_chatml_with_default_system() -> None:
    assert get_template("qwen").render(QA) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n<|im_start|>assistant\n5.<|im_end|>"
    )


def test_chatml_has_no_default_system_and_separates_turns() -> None:
    text = get_template("chatml").render([("a", "b"), ("c", "d")], system="S")
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n"
        "b<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\nd<|im_end|>"
    )
    assert get_template("chatml").render([("a", "b")]).startswith("<|im_start|>user\n")


def test_llama3_format() -> None:
    text = get_template("llama3").render(QA, system="Be brief.", bos="<|begin_of_text|>")
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 plus 3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n5.<|eot_id|>"
    )


def test_llama2_puts_system_in_first_user_turn() -> None:
    pairs = [("hi", "hello"), ("bye", "ciao")]
    text = get_template("llama2").render(pairs, system="SYS", bos="<s>", eos="</s>")
    assert text == ("<s>[INST] <<SYS>>\nSYS\n<</SYS>>\n\nhi [/INST]hello</s><s>[INST] bye [/INST]ciao</s>")


def test_alpaca_format() -> None:
    text = get_template("alpaca").render(QA, eos="</s>")
    assert text == (
        "Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\nWhat is 2 plus 3?\n\n### Response:\n5.</s>"
    )


def test_empty_template_is_the_bare_text() -> None:
    assert get_template("empty").render(QA, eos="</s>") == "What is 2 plus 3?5."


def test_turns_split_prompt_and_response() -> None:
    turns = get_template("llama3").turns([("q1", "a1"), ("q2", "a2")])
    assert turns[0].prompt[0] is BOS and turns[1].prompt[0] != BOS
    assert all(t.response[-1] is EOS for t in turns)
    assert turns[1].response == ("a2", EOS)


def test_unknown_template_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="qwen"):
        get_template("nope")
    assert list_templates() == sorted(TEMPLATES) and {
        "qwen",
        "chatml",
        "llama3",
        "llama2",
        "alpaca",
        "empty",
    } <= set(TEMPLATES)


def test_qwen_template_equals_the_demo_tokenizer_chat_template(tokenizer) -> None:
    pairs = [("What is 2 plus 3?", "2 plus 3 is 5."), ("And 1 plus 1?", "2.")]
    messages = [{"role": r, "content": c} for q, a in pairs for r, c in (("user", q), ("assistant", a))]
    # The HF chat template ends every message with "<|im_end|>\n"; the training format ends at <|im_end|>.
    rendered = get_template("qwen").render(pairs)
    assert tokenizer.apply_chat_template(messages, tokenize=False) == rendered + "\n"
