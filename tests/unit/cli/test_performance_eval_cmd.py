"""`ascendfactory-cli performance` (both forms) and `eval`'s checks before anything runs, through main()."""

from __future__ import annotations

import json
import os

import openpyxl
import pytest

from ascendfactory.cli._output import out
from ascendfactory.cli.app import main
from tests.support import perf_runs as P

BASE = """
tolerance: 0.1
baselines:
  qwen2.5-0.5b:
    pt-2k:
      - {device: h200, seq_length: 2048, tokens_per_s_per_device: 1000, date: '2026-11-25', commit: abc1234}
"""


@pytest.fixture(autouse=True)
def _human_mode():
    yield
    out.mode = "human"


def test_newer_form_writes_the_workbook_and_json_and_exits_3_on_a_regression(tmp_path, capsys):
    P.megatron_run(tmp_path / "runs" / "a", tokens_per_s=950.0)
    P.megatron_run(tmp_path / "runs" / "nested" / "b", tokens_per_s=1050.0, backend="mindspeed-llm")
    (tmp_path / "base.yaml").write_text(BASE)
    args = ["performance", f"--result_dir={tmp_path / 'runs'}", f"--baseline={tmp_path / 'base.yaml'}"]
    assert main([*args, f"--output_dir={tmp_path / 'o1'}", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["verdict"] for r in data["runs"]] == ["ok", "ok"] and data["regressions"] == []
    assert os.path.basename(data["workbook"]).startswith("Mixed_train_performance_benchmark_")
    assert json.loads((tmp_path / "o1" / "performance.json").read_text())["runs"][0]["run"]["model"]
    # --backend keeps one framework's runs and names the workbook after it
    assert main([*args, f"--output_dir={tmp_path / 'o2'}", "--backend=mindspeed-llm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"]) == 1 and os.path.basename(data["workbook"]).startswith("ModelLink_")
    # a planted 20% regression
    P.megatron_run(tmp_path / "runs" / "c", tokens_per_s=800.0)
    assert main([*args, f"--output_dir={tmp_path / 'o3'}"]) == 3
    text = capsys.readouterr().out
    assert "REGRESSION in 1 run(s)" in text and "/runs/c" in text
    book = next((tmp_path / "o3").glob("*.xlsx"))
    verdicts = [
        row[-1] for row in openpyxl.load_workbook(book)["performance"].iter_rows(min_row=2, values_only=True)
    ]
    assert sorted(verdicts) == ["ok", "ok", "regression"]


def test_older_form_reads_the_cfgs_files_experiments(tmp_path, capsys):
    cfgs = tmp_path / "cfgs.yaml"
    cfgs.write_text(
        "base:\n  backend: torch\n  af_output_dir: " + str(tmp_path) + "/out/${af_model_name}-${exp_name}\n"
        "qwen2.5-0.5b:\n  pt-2k:\n    SEQ_LEN: 2048\n  pt-4k:\n    SEQ_LEN: 4096\n"
    )
    P.megatron_run(tmp_path / "out" / "qwen2.5-0.5b-pt-2k", tokens_per_s=700.0)
    (tmp_path / "base.yaml").write_text(BASE)
    code = main(
        ["performance", str(cfgs), f"--baseline={tmp_path / 'base.yaml'}", f"--o={tmp_path / 'o'}", "--json"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 3 and [r["verdict"] for r in data["runs"]] == ["regression", "no baseline"]
    assert "no training log" in " ".join(data["runs"][1]["run"]["notes"])  # pt-4k has not run


def test_bad_invocations_say_what_to_give(tmp_path, capsys):
    assert main(["performance"]) == 2
    assert "--result_dir" in capsys.readouterr().err
    assert main(["performance", f"--result_dir={tmp_path}"]) == 2
    assert "no run under" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("baselines: [1, 2]\n")
    P.megatron_run(tmp_path / "r", tokens_per_s=1.0)
    assert main(["performance", f"--result_dir={tmp_path}", f"--baseline={tmp_path / 'bad.yaml'}"]) == 2
    assert "baselines" in capsys.readouterr().err


def test_eval_refuses_before_running(tmp_path, capsys, monkeypatch):
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "backend: torch\naf_model_name: m\nexp_name: e\naf_output_dir: " + str(tmp_path / "out") + "\n"
        "accelerator: cpu\nbackend_config:\n  training: {seq-length: 128}\n"
    )
    monkeypatch.setenv("AF_EVAL_ENV", str(tmp_path / "no-env"))
    assert main(["eval", str(exp), "--dataset", "mmul"]) == 2
    assert "unknown dataset 'mmul'" in capsys.readouterr().err
    assert main(["eval", str(exp), "--run_type", "qlora"]) == 2
    assert main(["eval", str(exp)]) == 2  # no HF weights: the run never trained
    err = capsys.readouterr().err
    assert "no HF weights of this run" in err and "--model_name_or_path" in err
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert main(["eval", str(exp), "--model_name_or_path", str(model)]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    (model / "tokenizer.json").write_text("{}")
    assert main(["eval", str(exp), "--model_name_or_path", str(model)]) == 2
    err = capsys.readouterr().err
    assert "lm-evaluation-harness" in err or "eval environment" in err
    assert "sh install.sh eval" in err
    assert not (tmp_path / "out" / "mmlu_test").exists()


def test_eval_checks_its_knobs_before_running(tmp_path, capsys, monkeypatch):
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "backend: torch\naf_model_name: m\nexp_name: e\naf_output_dir: " + str(tmp_path / "out") + "\n"
        "accelerator: cpu\nbackend_config:\n  training: {seq-length: 128}\n"
    )
    monkeypatch.setenv("AF_EVAL_ENV", str(tmp_path / "no-env"))
    assert main(["eval", str(exp), "--batch_size", "0"]) == 2
    assert "--batch_size" in capsys.readouterr().err
    assert main(["eval", str(exp), "--num_fewshot", "-1"]) == 2
    assert "--num_fewshot" in capsys.readouterr().err
