"""The llamafactory backend's pieces that need no LLaMA-Factory: datasets, model facts, checkpoints."""

from __future__ import annotations

import json
import struct

from hypothesis import given
from hypothesis import strategies as st

from ascendfactory.backends.llamafactory import datasets
from ascendfactory.backends.llamafactory.model_facts import read_model
from ascendfactory.checkpoints import get_scheme
from ascendfactory.checkpoints.hf_trainer import newest_complete


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_data_files_are_registered_by_their_shape(tmp_path):
    alpaca = write_jsonl(tmp_path / "a.jsonl", [{"instruction": "q", "input": "", "output": "r"}])
    dpo = tmp_path / "prefs.json"
    dpo.write_text(json.dumps([{"instruction": "q", "chosen": "y", "rejected": "n"}]))
    chat = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    text = write_jsonl(tmp_path / "pt.jsonl", [{"text": "hello"}])
    out = tmp_path / "out"
    got = datasets.resolve(f"{alpaca},{dpo}, {chat},{text}", None, str(out))
    assert got.problems == [] and got.names == ["a", "prefs", "chat", "pt"]
    assert got.dataset_dir == str(out / "lf_data")
    assert got.info["a"] == {
        "file_name": str(alpaca),
        "columns": {"prompt": "instruction", "response": "output", "query": "input"},
    }
    assert got.info["prefs"]["ranking"] is True and got.info["prefs"]["columns"]["chosen"] == "chosen"
    assert got.info["chat"]["formatting"] == "sharegpt" and got.info["chat"]["tags"]["role_tag"] == "role"
    assert got.info["pt"]["columns"] == {"prompt": "text"}


def test_names_resolve_against_the_users_dataset_info_and_merge_with_paths(tmp_path):
    ddir = tmp_path / "data"
    ddir.mkdir()
    (ddir / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": "mine.json"}}))
    own = write_jsonl(tmp_path / "own.jsonl", [{"text": "x"}])
    got = datasets.resolve(["mine", str(own)], str(ddir), str(tmp_path / "out"))
    assert got.problems == [] and got.names == ["mine", "own"]
    assert got.info["mine"]["file_name"] == str(ddir / "mine.json")  # made absolute for the new dir
    bad = datasets.resolve("mien", str(ddir), str(tmp_path / "out"))
    assert bad.info is None and len(bad.problems) == 1
    assert "'mien' is not in" in bad.problems[0].message and "mine" in bad.problems[0].message
    only_names = datasets.resolve("mine", str(ddir), str(tmp_path / "out"))
    assert only_names.dataset_dir is None and only_names.problems == []


def test_unknown_shapes_and_missing_files_are_problems(tmp_path):
    odd = write_jsonl(tmp_path / "odd.jsonl", [{"question": "q", "answer": "a"}])
    got = datasets.resolve(f"{odd},{tmp_path / 'nope.jsonl'}", None, str(tmp_path))
    assert [p.message.split(":")[0] for p in got.problems] == [str(odd)]
    assert [p.message for p in got.missing] == [f"data file {tmp_path / 'nope.jsonl'} not found"]


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=5), max_size=6))
def test_describe_never_fails_and_keeps_columns_it_was_given(record):
    entry = datasets.describe(record)
    if entry is not None:
        cols = entry["columns"]
        assert all(v in record or k == "messages" for k, v in cols.items())


def test_model_facts_from_the_safetensors_header(tmp_path):
    header = {
        "model.layers.0.self_attn.q_proj.weight": {},
        "model.layers.0.mlp.down_proj.weight": {},
        "model.norm.weight": {},
        "__metadata__": {"format": "pt"},
    }
    blob = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob)
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    facts = read_model(str(tmp_path))
    assert facts.max_positions == 512
    assert facts.linear_modules == {"q_proj", "down_proj", "norm"}
    assert read_model(str(tmp_path / "missing")) is None


def test_hf_trainer_checkpoints_complete_only_with_trainer_state(tmp_path):
    for step, complete in ((10, True), (20, True), (30, False)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text("{}")
    assert newest_complete(str(tmp_path)) == str(tmp_path / "checkpoint-20")
    scheme = get_scheme("hf_trainer")
    assert scheme.repair_tracker(str(tmp_path)) == ("checkpoint-20", None)
    assert scheme.apply_retention(str(tmp_path), 1) == [str(tmp_path / "checkpoint-10")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-20", "checkpoint-30"]
