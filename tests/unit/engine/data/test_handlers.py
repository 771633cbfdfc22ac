"""What each handler writes: decoded tokens, label masks, attention masks, packing and truncation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from data_helpers import read, write_jsonl

from ascendfactory.engine.data.handlers import IGNORE_INDEX, split_budget
from ascendfactory.engine.data.indexed import IndexedDataset
from ascendfactory.engine.data.templates import get_template

ALPACA = [
    {"instruction": "What is 2 plus 3?", "input": "", "output": "2 plus 3 is 5."},
    {"instruction": "Reverse the letters of the word.", "input": "cat", "output": "tac"},
    {"instruction": "Say hi.", "output": "hi", "system": "Be terse.", "history": [["Who?", "Me."]]},
]


def _instruction(tmp_path: Path) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    base = tmp_path / "out" / "ds_packed"
    return tuple(read(Path(f"{base}_{k}_document")) for k in ("input_ids", "attention_mask", "labels"))


def test_pretrain_text_document_with_eod(preprocess, tmp_path: Path, tokenizer) -> None:
    texts = ["The capital of Peru is Lima.", "9 plus 1 is 10.", ""]
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    assert preprocess(src, "--append-eod") == 0
    ds = IndexedDataset(tmp_path / "out" / "ds_text_document")
    assert ds.dtype == np.uint16 and ds.num_documents == 3
    for i, text in enumerate(texts):
        assert ds[i].tolist() == tokenizer.encode(text) + [tokenizer.eos_token_id]
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["ds_text_document.bin", "ds_text_document.idx"]


def test_pretrain_one_output_per_json_key(preprocess, tmp_path: Path, tokenizer) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"title": "Oslo", "body": "The capital of Norway is Oslo."}])
    assert preprocess(src, "--json-keys", "title", "body") == 0
    assert read(tmp_path / "out" / "ds_title_document") == [tokenizer.encode("Oslo")]
    assert read(tmp_path / "out" / "ds_body_document") == [tokenizer.encode("The capital of Norway is Oslo.")]


def test_alpaca_masks_prompt_tokens(preprocess, tmp_path: Path, tokenizer) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", ALPACA)
    assert preprocess(src, "--handler-name", "AlpacaStyleInstructionHandler", "--prompt-type", "qwen") == 0
    ids, masks, labels = _instruction(tmp_path)
    qwen = get_template("qwen")
    expected_pairs = [
        [("What is 2 plus 3?", "2 plus 3 is 5.")],
        [("Reverse the letters of the word.\ncat", "tac")],
        [("Who?", "Me."), ("Say hi.", "hi")],
    ]
    for i, pairs in enumerate(expected_pairs):
        system = "Be terse." if i == 2 else None
        assert tokenizer.decode(ids[i]) == qwen.render(pairs, system)
        assert masks[i] == [1] * len(ids[i])
        trained = [t for t, lab in zip(ids[i], labels[i]) if lab != IGNORE_INDEX]
        assert all(lab in (IGNORE_INDEX, t) for t, lab in zip(ids[i], labels[i]))
        # exactly the responses, each closed by <|im_end|>, are trained on
        assert tokenizer.decode(trained) == "".join(a + "<|im_end|>" for _, a in pairs)
    assert IndexedDataset(tmp_path / "out" / "ds_packed_labels_document").dtype == np.int32


@pytest.mark.parametrize(
    "handler", ["R1AlpacaStyleInstructionHandler", "Math17kAlpacaStyleInstructionHandler"]
)
def test_r1_prompts_end_at_the_assistants_turn_and_labels_are_the_answer(
    preprocess, tmp_path: Path, tokenizer, handler: str
) -> None:
    records = [
        {"problem": "What is 2 plus 3?", "answer": "5"},
        {"problem": "Write it.\nseven", "answer": "7"},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    keys = '{"prompt": "problem", "query": "", "response": "answer", "system": ""}'
    assert preprocess(src, "--handler-name", handler, "--prompt-type", "qwen", "--map-keys", keys) == 0
    ids, masks, labels = _instruction(tmp_path)
    for i, r in enumerate(records):
        # MindSpeed-RL's layout: the rendered prompt (no response), the answer without special tokens
        assert (
            tokenizer.decode(ids[i])
            == get_template("qwen").render([(r["problem"], "")])[: -len("<|im_end|>")]
        )
        assert tokenizer.decode(ids[i]).endswith("<|im_start|>assistant\n")
        assert masks[i] == [1] * len(ids[i])
        assert labels[i] == tokenizer.encode(r["answer"], add_special_tokens=False)


def test_sharegpt_with_system_message_and_openai_keys(preprocess, tmp_path: Path, tokenizer) -> None:
    records = [
        {
            "messages": [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"},
            ]
        }
    ]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    keys = (
        '{"messages": "messages", "tags": {"role_tag": "role", "content_tag": "content", '
        '"user_tag": "user", "assistant_tag": "assistant"}}'
    )
    assert (
        preprocess(
            src,
            "--handler-name",
            "SharegptStyleInstructionHandler",
            "--prompt-type",
            "chatml",
            "--map-keys",
            keys,
        )
        == 0
    )
    ids, _, labels = _instruction(tmp_path)
    assert tokenizer.decode(ids[0]) == get_template("chatml").render([("q", "a")], system="S")
    assert tokenizer.decode([t for t, lab in zip(ids[0], labels[0]) if lab != IGNORE_INDEX]) == "a<|im_end|>"


def test_sharegpt_default_keys(preprocess, tmp_path: Path, tokenizer) -> None:
    conv = [
        {"from": "human", "value": "q1"},
        {"from": "gpt", "value": "a1"},
        {"from": "human", "value": "q2"},
        {"from": "gpt", "value": "a2"},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", [{"conversations": conv}])
    assert preprocess(src, "--handler-name", "SharegptStyleInstructionHandler", "--prompt-type", "qwen") == 0
    ids, _, labels = _instruction(tmp_path)
    assert tokenizer.decode(ids[0]) == get_template("qwen").render([("q1", "a1"), ("q2", "a2")])
    trained = tokenizer.decode([t for t, lab in zip(ids[0], labels[0]) if lab != IGNORE_INDEX])
    assert trained == "a1<|im_end|>a2<|im_end|>"


def test_general_instruction_uses_alpaca_template_by_default(preprocess, tmp_path: Path, tokenizer) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", ALPACA[:1])
    assert preprocess(src, "--handler-name", "GeneralInstructionHandler") == 0
    ids, _, labels = _instruction(tmp_path)
    assert tokenizer.decode(ids[0]) == get_template("alpaca").render(
        [("What is 2 plus 3?", "2 plus 3 is 5.")], eos="<|im_end|>"
    )
    assert labels[0][-1] == tokenizer.eos_token_id


def test_seq_length_truncates_prompt_and_response_in_proportion(
    preprocess, tmp_path: Path, tokenizer
) -> None:
    prompt, response = "cat " * 40, "dog " * 20
    src = write_jsonl(tmp_path / "in.jsonl", [{"instruction": prompt, "output": response}])
    assert (
        preprocess(
            src,
            "--handler-name",
            "AlpacaStyleInstructionHandler",
            "--prompt-type",
            "empty",
            "--seq-length",
            "30",
        )
        == 0
    )
    ids, masks, labels = _instruction(tmp_path)
    assert len(ids[0]) == len(labels[0]) == len(masks[0]) == 30
    n_source, n_target = len(tokenizer.encode(prompt)), len(tokenizer.encode(response))
    assert n_source > 2 * 15 and n_target > 15  # both must be cut
    n_prompt = sum(lab == IGNORE_INDEX for lab in labels[0])
    assert 30 - n_prompt == int(30 * n_target / (n_source + n_target))
    assert ids[0][:n_prompt] == tokenizer.encode(prompt)[:n_prompt]
    assert ids[0][n_prompt:] == tokenizer.encode(response)[: 30 - n_prompt]


def test_split_budget_keeps_one_response_token() -> None:
    assert split_budget(100, 1, 10) == (9, 1)
    assert split_budget(3, 3, 100) == (97, 50)  # nothing to cut
    assert split_budget(0, 0, 5) == (5, 1)


@pytest.mark.parametrize("neat", [False, True])
def test_pack_rows_are_padded_and_keep_every_sample(
    preprocess, tmp_path: Path, tokenizer, neat: bool
) -> None:
    records = [{"instruction": f"What is {i} plus 1?", "output": f"{i + 1}."} for i in range(9)]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    extra = ["--neat-pack"] if neat else ["--pack"]
    assert (
        preprocess(
            src,
            "--handler-name",
            "AlpacaStyleInstructionHandler",
            "--prompt-type",
            "empty",
            "--seq-length",
            "32",
            *extra,
        )
        == 0
    )
    ids, masks, labels = _instruction(tmp_path)
    assert 1 < len(ids) < len(records) and all(len(r) == 32 for r in ids + masks + labels)
    samples = 0
    for row_ids, row_mask, row_labels in zip(ids, masks, labels):
        real = [m != 0 for m in row_mask]
        assert all(t == tokenizer.pad_token_id for t, r in zip(row_ids, real) if not r)
        assert all(lab == IGNORE_INDEX for lab, r in zip(row_labels, real) if not r)
        trained = [lab != IGNORE_INDEX for lab in row_labels]
        runs = sum(1 for i, t in enumerate(trained) if t and (i == 0 or not trained[i - 1]))
        assert runs == (max(row_mask) if neat else runs)  # one trained response per packed sample
        samples += runs
    assert samples == len(records)


def test_pack_with_pretrain_handler_is_a_config_error(preprocess, tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "x"}])
    assert preprocess(src, "--pack", "--seq-length", "8") == 2
    assert "does not need to be packed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unknown_prompt_type_and_missing_prompt_type(preprocess, tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", ALPACA)
    assert preprocess(src, "--handler-name", "AlpacaStyleInstructionHandler", "--prompt-type", "zzz") == 2
    assert "llama3" in capsys.readouterr().err
    assert preprocess(src, "--handler-name", "AlpacaStyleInstructionHandler") == 2
    assert "--prompt-type" in capsys.readouterr().err


def test_prompt_type_needing_tokens_the_tokenizer_lacks(preprocess, tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", ALPACA)
    assert preprocess(src, "--handler-name", "AlpacaStyleInstructionHandler", "--prompt-type", "llama3") == 2
    assert "<|eot_id|>" in capsys.readouterr().err


def test_max_samples_and_directory_input(preprocess, tmp_path: Path, tokenizer) -> None:
    d = tmp_path / "in"
    d.mkdir()
    write_jsonl(d / "b.jsonl", [{"text": "b1"}, {"text": "b2"}])
    write_jsonl(d / "a.jsonl", [{"text": "a1"}])
    (d / "notes.txt").write_text("ignored")
    assert preprocess(d, "--max-samples", "2") == 0
    assert read(tmp_path / "out" / "ds_text_document") == [tokenizer.encode("a1"), tokenizer.encode("b1")]


@pytest.mark.parametrize("extra", [[], ["--pack"]])
def test_seq_length_truncation_is_counted(preprocess, tmp_path: Path, capsys, extra) -> None:
    """With --seq-length, the samples whose answer is cut short are counted (both sft paths)."""
    long = " ".join(["word"] * 60)
    records = [{"instruction": long, "output": long}] * 3 + [{"instruction": "Hi?", "output": "Yes."}]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    argv = ["--handler-name", "AlpacaStyleInstructionHandler", "--prompt-type", "empty", "--seq-length", "32"]
    assert preprocess(src, *argv, *extra) == 0
    err = capsys.readouterr().err
    assert "WARNING: 3 of 4 samples (75%) have their answer cut short by --seq-length 32" in err
    assert "would keep 95% of the samples whole" in err
