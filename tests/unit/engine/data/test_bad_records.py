"""Bad records are reported with file and line; a failed run leaves nothing behind; workers agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data_helpers import read, write_jsonl

GOOD = {"text": "The capital of Peru is Lima."}


def _mixed(tmp_path: Path) -> Path:
    lines = [
        json.dumps(GOOD),
        json.dumps(GOOD),
        json.dumps({"txt": "typo"}),
        "",
        "{not json",
        json.dumps({"text": 5}),
        json.dumps(["a", "list"]),
        json.dumps(GOOD),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _leftovers(tmp_path: Path) -> list[str]:
    out = tmp_path / "out"
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


def test_first_bad_record_fails_with_file_and_line(preprocess, tmp_path: Path, capsys) -> None:
    src = _mixed(tmp_path)
    assert preprocess(src) == 1
    err = capsys.readouterr().err
    assert f"{src}:3: bad record (line 3): missing field 'text'" in err
    assert "--on-bad-record skip" in err
    assert _leftovers(tmp_path) == []  # no final files, no temporary files


def test_skip_reports_every_bad_record(preprocess, tmp_path: Path, capsys, tokenizer) -> None:
    src = _mixed(tmp_path)
    assert preprocess(src, "--on-bad-record", "skip") == 0
    err = capsys.readouterr().err
    assert "skipped 4 bad records" in err
    for line, reason in [
        (3, "missing field 'text'"),
        (5, "unreadable JSON"),
        (6, "field 'text' must be a string, got int"),
        (7, "expected a JSON object, got list"),
    ]:
        assert f"{src}:{line}: bad record (line {line}): {reason}" in err
    assert read(tmp_path / "out" / "ds_text_document") == [tokenizer.encode(GOOD["text"])] * 3


def test_json_array_records_report_their_line(preprocess, tmp_path: Path, capsys) -> None:
    src = tmp_path / "in.json"
    src.write_text('[\n  {"text": "a"},\n  {"text": "b"},\n\n  {"text": null}\n]\n')
    assert preprocess(src) == 1
    assert f"{src}:5: bad record (line 5): missing field 'text'" in capsys.readouterr().err


def test_parquet_rows_and_values(preprocess, tmp_path: Path, capsys, tokenizer) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["one", "two", None]}), src)
    assert preprocess(src) == 1
    assert f"{src}:3: bad record (row 3)" in capsys.readouterr().err
    assert preprocess(src, "--on-bad-record", "skip") == 0
    assert read(tmp_path / "out" / "ds_text_document") == [tokenizer.encode("one"), tokenizer.encode("two")]


def test_all_records_bad_is_an_error(preprocess, tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"x": 1}])
    assert preprocess(src, "--on-bad-record", "skip") == 1
    assert "no documents were written" in capsys.readouterr().err
    assert _leftovers(tmp_path) == []


def test_failure_keeps_an_earlier_complete_output(preprocess, tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", [GOOD])
    assert preprocess(good) == 0
    before = (tmp_path / "out" / "ds_text_document.bin").read_bytes()
    assert preprocess(_mixed(tmp_path)) == 1
    assert (tmp_path / "out" / "ds_text_document.bin").read_bytes() == before
    assert _leftovers(tmp_path) == ["ds_text_document.bin", "ds_text_document.idx"]


def test_missing_input_and_bad_flags(preprocess, tmp_path: Path, capsys) -> None:
    assert preprocess(tmp_path / "nope.jsonl") == 2
    assert "does not exist" in capsys.readouterr().err
    assert preprocess(write_jsonl(tmp_path / "in.jsonl", [GOOD]), "--map-keys", "[1]") == 2
    assert preprocess(write_jsonl(tmp_path / "in.jsonl", [GOOD]), "--workers", "0") == 2


def test_workers_give_byte_identical_output(tokenizer_dir: Path, tmp_path: Path) -> None:
    from ascendfactory.engine.data import runner
    from ascendfactory.engine.data.demo_data import sft_records
    from ascendfactory.engine.data.preprocess import main

    src = write_jsonl(tmp_path / "in.jsonl", sft_records(300))
    outputs = []
    for workers in (1, 2):
        prefix = tmp_path / f"w{workers}" / "sft"
        old = runner.CHUNK_SIZE
        runner.CHUNK_SIZE = 64  # several chunks, so ordering across workers matters
        try:
            assert (
                main(
                    [
                        "--input",
                        str(src),
                        "--tokenizer-name-or-path",
                        str(tokenizer_dir),
                        "--output-prefix",
                        str(prefix),
                        "--handler-name",
                        "AlpacaStyleInstructionHandler",
                        "--prompt-type",
                        "qwen",
                        "--workers",
                        str(workers),
                    ]
                )
                == 0
            )
        finally:
            runner.CHUNK_SIZE = old
        outputs.append({p.name: p.read_bytes() for p in sorted(prefix.parent.iterdir())})
    assert len(outputs[0]) == 6 and outputs[0] == outputs[1]
