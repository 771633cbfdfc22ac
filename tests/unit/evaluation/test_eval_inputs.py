"""`eval`'s inputs, checked before anything runs: the local dataset files of each benchmark, the weights of a
run, the task files handed to lm-evaluation-harness (its own task definitions pointed at the local files)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from ascendfactory.errors import ConfigError
from ascendfactory.evaluation import datasets, options, weights
from ascendfactory.evaluation.run import read_log
from tests.conftest import REPO

SAMPLES = REPO / "tests" / "data" / "eval"
sys.path.insert(0, str(REPO / "ascendfactory" / "programs"))
import lm_eval_run  # noqa: E402  (a program: imports nothing of ascendfactory)


def test_shipped_samples_are_found_by_benchmark():
    mmlu = datasets.files_of(datasets.BENCHMARKS["mmlu"], SAMPLES)
    assert sorted(mmlu) == ["elementary_mathematics", "high_school_geography"]
    assert set(mmlu["elementary_mathematics"]) == {"test", "dev"}
    ceval = datasets.files_of(datasets.BENCHMARKS["ceval"], SAMPLES)
    assert set(ceval["computer_network"]) == {"val", "dev"}
    gsm = datasets.files_of(datasets.BENCHMARKS["gsm8k"], SAMPLES)
    assert set(gsm["test"]) == {"test", "train"}
    assert [b.out_dir for b in datasets.selected("all")] == ["mmlu_test", "ceval_validation", "gsm8k_test"]


def test_missing_files_are_named(tmp_path):
    for name in datasets.BENCHMARKS:
        with pytest.raises(ConfigError) as e:
            datasets.files_of(datasets.BENCHMARKS[name], tmp_path)
        assert str(tmp_path) in str(e.value) and "AF_EVAL_DATA_DIR" in str(e.value)
    (tmp_path / "mmlu" / "data" / "test").mkdir(parents=True)
    (tmp_path / "mmlu" / "data" / "test" / "anatomy_test.csv").write_text("q,a,b,c,d,A\n")
    found = datasets.files_of(datasets.BENCHMARKS["mmlu"], tmp_path)
    assert datasets.zero_shot(found) == ["anatomy"]  # no dev file: said, run zero-shot
    with pytest.raises(ConfigError, match="unknown dataset"):
        datasets.selected("cmmlu")


def _model(folder: Path, tokenizer: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    return folder


def test_weights_of_a_run(tmp_path):
    out = tmp_path / "run"
    export = _model(out / "ckpt_converted_mg2hf")
    assert weights.of_run(str(out), str(export), "full").model == str(export)
    # LLaMA-Factory LoRA without a merge: the adapter on the base model it names
    lf = tmp_path / "lf"
    base = _model(tmp_path / "base")
    lf.mkdir()
    (lf / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    found = weights.of_run(str(lf), None, "lora")
    assert (found.model, found.adapter) == (str(base), str(lf))
    with pytest.raises(ConfigError, match="no HF weights of this run"):
        weights.of_run(str(lf), None, "full")
    assert weights.given(str(lf)).adapter == str(lf)
    with pytest.raises(ConfigError, match="no tokenizer"):
        weights.given(str(_model(tmp_path / "bare", tokenizer=False)))


def test_task_files_take_the_librarys_definitions(tmp_path):
    lib = tmp_path / "lib"  # a stand-in of lm_eval/tasks: the subject files the program includes
    (lib / "mmlu" / "default").mkdir(parents=True)
    (lib / "mmlu" / "default" / "mmlu_elementary_mathematics.yaml").write_text(
        "task: mmlu_elementary_mathematics\n"
    )
    (lib / "ceval").mkdir()
    task = {
        "dataset": "mmlu",
        "out": str(tmp_path / "mmlu_test"),
        "shots": 5,
        "subjects": datasets.files_of(datasets.BENCHMARKS["mmlu"], SAMPLES),
    }
    group, names = lm_eval_run.write_tasks(task, lib)
    assert group == "af_mmlu" and names == ["af_mmlu_elementary_mathematics", "af_mmlu_high_school_geography"]
    folder = tmp_path / "mmlu_test" / "tasks"
    known = yaml.safe_load((folder / "af_mmlu_elementary_mathematics.yaml").read_text())
    assert known["include"] == str(lib / "mmlu" / "default" / "mmlu_elementary_mathematics.yaml")
    assert known["dataset_path"] == "json" and known["num_fewshot"] == 2  # the dev file has 2 examples
    rows = [
        json.loads(line)
        for line in Path(known["dataset_kwargs"]["data_files"]["test"]).read_text().splitlines()
    ]
    assert rows[0] == {"question": "What is 7 + 5?", "choices": ["10", "11", "12", "13"], "answer": 2}
    unknown = yaml.safe_load((folder / "af_mmlu_high_school_geography.yaml").read_text())
    assert unknown["include"].endswith("_default_template_yaml")
    assert unknown["description"].startswith(
        "The following are multiple choice questions (with answers) about high"
    )
    group_cfg = yaml.safe_load((folder / "af_mmlu.yaml").read_text())
    assert group_cfg["aggregate_metric_list"][0]["weight_by_size"] is True
    ceval = {
        "dataset": "ceval",
        "out": str(tmp_path / "c"),
        "shots": 5,
        "subjects": datasets.files_of(datasets.BENCHMARKS["ceval"], SAMPLES),
    }
    lm_eval_run.write_tasks(ceval, lib)
    cfg = yaml.safe_load((tmp_path / "c" / "tasks" / "af_ceval_computer_network.yaml").read_text())
    val = [json.loads(x) for x in Path(cfg["dataset_kwargs"]["data_files"]["val"]).read_text().splitlines()]
    assert (
        val[0]["answer"] == "C" and val[0]["explanation"] == "" and "计算机网络" not in cfg.get("include", "")
    )


def test_bad_mmlu_rows_are_refused(tmp_path):
    bad = tmp_path / "x_test.csv"
    bad.write_text("only,three,columns\n")
    with pytest.raises(SystemExit, match="expected 6 columns"):
        lm_eval_run.read_rows(str(bad), "mmlu")
    bad.write_text("q,a,b,c,d,E\n")
    with pytest.raises(SystemExit, match="not one of A, B, C, D"):
        lm_eval_run.read_rows(str(bad), "mmlu")


def test_results_log_is_read_back(tmp_path):
    log = tmp_path / "results.log"
    log.write_text("        Average: 37.50\nelementary_mathematics: 40.00\n")
    assert read_log(log) == (37.5, {"elementary_mathematics": 40.0})


def test_batch_size_is_an_integer_or_lm_evals_auto():
    assert options.batch_size("8") == 8 and options.batch_size(1) == 1
    assert options.batch_size("auto") == "auto" and options.batch_size("auto:4") == "auto:4"
    for bad in ("0", "-2", "eight", "auto:0", "2.5"):
        with pytest.raises(ConfigError) as e:
            options.batch_size(bad)
        assert "--batch_size" in str(e.value) and repr(bad) in str(e.value)


def test_num_fewshot_is_checked_against_each_fewshot_file(tmp_path):
    mmlu, gsm = datasets.BENCHMARKS["mmlu"], datasets.BENCHMARKS["gsm8k"]
    files = datasets.files_of(mmlu, SAMPLES)  # the samples' dev files hold 2 questions each
    assert options.shots(mmlu, files, None) == 5  # the default: the program caps it at what a file has
    assert options.shots(mmlu, files, 0) == 0 and options.shots(mmlu, files, 2) == 2
    with pytest.raises(ConfigError) as e:
        options.shots(mmlu, files, 3)
    assert "elementary_mathematics_dev.csv holds 2" in str(e.value) and "--num_fewshot 2" in str(e.value)
    with pytest.raises(ConfigError, match="negative"):
        options.shots(mmlu, files, -1)
    gsm_files = datasets.files_of(gsm, SAMPLES)
    assert options.examples_in(gsm_files["test"]["train"], gsm) == 2
    ceval = datasets.BENCHMARKS["ceval"]
    assert options.examples_in(datasets.files_of(ceval, SAMPLES)["computer_network"]["dev"], ceval) == 2
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    with pytest.raises(ConfigError) as e:  # no train file: no shots to show
        options.shots(gsm, datasets.files_of(gsm, tmp_path), 1)
    assert "gsm8k/train.jsonl" in str(e.value) and "--num_fewshot 0" in str(e.value)
    assert options.shots(gsm, datasets.files_of(gsm, tmp_path), 0) == 0


def test_the_shots_asked_reach_the_task_files(tmp_path):
    lib = tmp_path / "lib"
    (lib / "mmlu" / "default").mkdir(parents=True)
    (lib / "mmlu" / "default" / "_default_template_yaml").write_text("dataset_path: x\n")
    files = datasets.files_of(datasets.BENCHMARKS["mmlu"], SAMPLES)
    for asked, written in ((0, 0), (1, 1), (5, 2)):  # 5 (the default) capped at the dev file's 2
        task = {"dataset": "mmlu", "out": str(tmp_path / f"o{asked}"), "shots": asked, "subjects": files}
        lm_eval_run.write_tasks(task, lib)
        made_file = tmp_path / f"o{asked}" / "tasks" / "af_mmlu_elementary_mathematics.yaml"
        made = yaml.safe_load(made_file.read_text())
        assert made["num_fewshot"] == written
