"""`performance`: baseline matching, the flags and verdicts, the runs' figures by each framework's formula,
and the workbook's contents read back with openpyxl."""

from __future__ import annotations

import re

import openpyxl
import pytest

from ascendfactory.errors import ConfigError
from ascendfactory.perf.baseline import BaselineFile, compare_figure, load_baseline, match, verdict
from ascendfactory.perf.report import compare_runs, payload, table_rows
from ascendfactory.perf.runs import find_runs, read_run
from ascendfactory.perf.workbook import workbook_name, write_workbook
from ascendfactory.speed.flops import megatron_flops
from tests.support import perf_runs as P

BASE = """
tolerance: 0.05
baselines:
  Qwen2.5-0.5B:
    pt-2k:
      - {device: h200, seq_length: 2048, tokens_per_s_per_device: 1000, step_time_s: 16.384,
         peak_memory_mb: 50000, date: '2026-11-25', commit: abc1234, source: test}
      - {device: h200, seq_length: 4096, tokens_per_s_per_device: 600, date: '2026-11-25', commit: abc1234}
      - {device: ascend-910b3, seq_length: 2048, backend: mindspeed-llm, tokens_per_s_per_device: 700,
         date: '2026-11-25', commit: abc1234}
    lora-2k:
      - {device: h200, seq_length: 2048, tokens_per_s_per_device: 400, date: '2026-11-25', commit: abc1234}
"""


@pytest.fixture()
def baseline(tmp_path):
    path = tmp_path / "base.yaml"
    path.write_text(BASE, encoding="utf-8")
    return load_baseline(path)


def test_match_by_model_experiment_seq_device_and_backend(baseline):
    def m(**kw):
        args = dict(model="qwen2.5-0.5b", experiment="pt-2k", seq_length=2048, device="h200", backend="torch")
        return match(baseline, **{**args, **kw})

    assert m().tokens_per_s_per_device == 1000  # model name folded (case)
    assert m(seq_length=4096).tokens_per_s_per_device == 600
    assert m(seq_length=1024) is None
    assert m(device="a100-80gb") is None
    assert m(device="ascend-910b3") is None  # that entry is mindspeed-llm's only
    assert m(device="ascend-910b3", backend="mindspeed-llm").tokens_per_s_per_device == 700
    assert m(experiment="lora-2k").tokens_per_s_per_device == 400
    assert m(model="llama3.1-8b") is None and m(experiment=None) is None


@pytest.mark.parametrize(
    ("figure", "measured", "flag", "sense"),
    [
        ("tokens_per_s_per_device", 1040, "within", "same"),
        ("tokens_per_s_per_device", 960, "within", "same"),
        ("tokens_per_s_per_device", 800, "below", "worse"),
        ("tokens_per_s_per_device", 1200, "above", "better"),
        ("step_time_s", 1200, "above", "worse"),
        ("peak_memory_mb", 800, "below", "better"),
    ],
)
def test_flags(figure, measured, flag, sense):
    c = compare_figure(figure, measured, 1000, 0.05)
    assert (c["flag"], c["sense"]) == (flag, sense)
    assert c["ratio"] == pytest.approx(measured / 1000)


def test_verdict_reads_tokens_then_step_time():
    worse = compare_figure("tokens_per_s_per_device", 800, 1000, 0.05)
    better_step = compare_figure("step_time_s", 0.5, 1, 0.05)
    assert verdict([worse, better_step]) == "regression"
    assert verdict([better_step]) == "improvement"
    assert verdict([compare_figure("mfu", 0.1, 0.2, 0.05)]) == "no figure"


def test_bad_baseline_names_the_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("tolerance: 2\nbaselines: {m: {e: [{device: h200, seq_length: 0, tokens: 5}]}}\n")
    with pytest.raises(ConfigError) as e:
        load_baseline(path)
    text = str(e.value)
    assert "tolerance" in text and "baselines.m.e.0.seq_length" in text and "tokens" in text
    with pytest.raises(ConfigError, match="cannot read"):
        load_baseline(tmp_path / "missing.yaml")


def _folder(tmp_path):
    P.megatron_run(tmp_path / "runs" / "ok", tokens_per_s=1010.0, predicted_step_s=17.0)
    P.megatron_run(tmp_path / "runs" / "slow", tokens_per_s=800.0, exp="pt-2k", seq=2048)
    P.megatron_run(
        tmp_path / "runs" / "ms",
        tokens_per_s=700.0,
        backend="mindspeed-llm",
        device="ascend-910b3",
        devices=8,
        gbs=64,
    )
    P.llamafactory_run(tmp_path / "runs" / "lf", tokens_per_s=500.0)
    P.verl_run(tmp_path / "runs" / "verl", tokens_per_s=300.0)
    return tmp_path / "runs"


def test_a_prediction_the_model_cannot_support_is_not_reported(tmp_path):
    """A run whose plan had no supported figure (`in_range` false: a model below the calibrated shapes) gets
    no predicted step time and no error, but a note saying why, as its run summary does."""
    run = P.megatron_run(
        tmp_path / "tiny", tokens_per_s=1010.0, predicted_step_s=17.0, predicted_in_range=False
    )
    fig = read_run(run)
    assert fig.predicted_step_s is None and fig.prediction_error is None
    assert any(n.startswith("no predicted step time: the h200 time model") for n in fig.notes), fig.notes


def test_runs_by_their_frameworks_formula(tmp_path):
    runs = {f.name: read_run(f) for f in find_runs(_folder(tmp_path))}
    assert set(runs) == {"ok", "slow", "ms", "lf", "verl"}
    ok = runs["ok"]
    assert ok.format == "megatron" and ok.tokens_per_s_per_device == pytest.approx(1010, rel=1e-3)
    assert ok.step_time_s == pytest.approx(8 * 2048 / 1010, rel=1e-3)
    assert ok.peak_memory_mb == 50000 and ok.device == "h200"
    assert ok.predicted_step_s == 17.0 and ok.prediction_error == pytest.approx(17.0 / ok.step_time_s - 1)
    # TFLOP/s = tokens/s x Megatron's FLOPs per token of the shape the plan recorded; MFU over the H200 peak
    per_token = (
        megatron_flops(
            batch=1,
            seq=2048,
            layers=24,
            hidden=896,
            ffn=4864,
            heads=14,
            kv_heads=2,
            kv_channels=64,
            padded_vocab=151936,
        )
        / 2048
    )
    assert per_token == pytest.approx(268.5e12 * 0.2131 / (8 * 2048), rel=1e-3)  # the README's H200 figure
    assert ok.tflops_per_device == pytest.approx(ok.tokens_per_s_per_device * per_token / 1e12)
    assert ok.mfu == pytest.approx(ok.tflops_per_device / 989)
    assert runs["ms"].tokens_per_s_per_device == pytest.approx(700, rel=1e-3) and runs["ms"].devices == 8
    assert runs["lf"].format == "llamafactory" and runs["lf"].tokens_per_s_per_device == pytest.approx(
        500, rel=0.01
    )
    assert runs["lf"].step_time_s == pytest.approx(2.0)
    assert runs["lf"].seq_length == 2048  # LLaMA-Factory's cutoff_len
    assert runs["verl"].seq_length == 1024  # verl's max_prompt_length + max_response_length
    assert runs["verl"].tokens_per_s_per_device == pytest.approx(300) and runs["verl"].step_time_s == 4.0


def test_planted_regression_is_flagged(tmp_path, baseline):
    rows = {
        r.run.path.rsplit("/", 1)[-1]: r
        for r in compare_runs([read_run(f) for f in find_runs(_folder(tmp_path))], baseline)
    }
    assert rows["ok"].verdict == "ok"
    assert rows["slow"].verdict == "regression"  # 800 against 1000: -20%
    assert rows["ms"].verdict == "ok"
    assert rows["verl"].verdict == "no baseline"
    data = payload(list(rows.values()), baseline, baseline_path="base.yaml")
    assert [p.rsplit("/", 1)[-1] for p in data["regressions"]] == ["slow"]
    table = {r["run"]: r for r in table_rows(list(rows.values()))}
    assert table["qwen2.5-0.5b/pt-2k"]["verdict"] in ("ok", "regression")


def test_workbook_contents_read_back(tmp_path, baseline):
    runs = [read_run(f) for f in find_runs(_folder(tmp_path))]
    rows = compare_runs(runs, baseline)
    name = workbook_name([r.backend for r in runs], "0.1.0", when=0)
    assert re.fullmatch(r"Mixed_train_performance_benchmark_0\.1\.0_\d{8}_\d{6}\.xlsx", name)
    assert workbook_name(["mindspeed-llm"], "0.1.0").startswith(
        "ModelLink_train_performance_benchmark_0.1.0_"
    )
    path = write_workbook(
        tmp_path / "out" / name, rows, baseline, baseline_path="base.yaml", result_dir="runs"
    )
    wb = openpyxl.load_workbook(path)
    assert wb.sheetnames == ["performance", "baseline", "method"]
    ws = wb["performance"]
    head = [c.value for c in ws[1]]
    by_folder = {row[0]: dict(zip(head, row)) for row in ws.iter_rows(min_row=2, values_only=True)}
    assert len(by_folder) == 5
    slow = next(v for k, v in by_folder.items() if k.endswith("/slow"))
    assert slow["tokens/s/device"] == pytest.approx(800, rel=1e-3)
    assert slow["baseline tokens_per_s_per_device"] == 1000
    assert slow["ratio tokens_per_s_per_device"] == pytest.approx(0.8, rel=1e-3)
    assert slow["flag tokens_per_s_per_device"] == "below" and slow["verdict"] == "regression"
    assert slow["baseline date"] == "2026-11-25" and slow["baseline commit"] == "abc1234"
    ok = next(v for k, v in by_folder.items() if k.endswith("/ok"))
    assert ok["predicted step s"] == 17.0 and ok["verdict"] == "ok" and ok["window"] == "3-20"
    entries = list(wb["baseline"].iter_rows(min_row=2, values_only=True))
    assert len(entries) == 4 and entries[0][:4] == ("Qwen2.5-0.5B", "pt-2k", "h200", 2048)
    method = dict(wb["method"].iter_rows(values_only=True))
    assert method["tolerance"] == 0.05 and "GBS x seq_length" in method["MindSpeed-LLM / torch"]
    assert not list((tmp_path / "out").glob(".*tmp"))  # written atomically


def test_shipped_baseline_loads_and_says_where_its_figures_come_from():
    from ascendfactory.cli.performance_cmd import DEFAULT_BASELINE

    shipped = load_baseline(DEFAULT_BASELINE)
    entries = [e for exps in shipped.baselines.values() for es in exps.values() for e in es]
    assert {e.device for e in entries} >= {"h200", "cpu"}
    assert all(e.date and e.commit and e.source for e in entries)
    assert isinstance(shipped, BaselineFile)
