"""Fingerprints, manifests, skip decisions and the wait for node 0."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from ascendfactory.errors import StageFailedError
from ascendfactory.pipeline import manifest as mf
from ascendfactory.plan import LogNaming, LogSpec, Plan, Process, Role, Step, ThroughputSpec


def _step(tmp_path, **kw) -> Step:
    src = tmp_path / "model"
    src.mkdir(exist_ok=True)
    (src / "config.json").write_text('{"a": 1}')
    out = tmp_path / "converted"
    defaults = dict(
        name="hf2mg",
        role=Role.CONVERT,
        launch=Process((sys.executable, "convert.py", "--x", "1")),
        inputs=[str(src)],
        outputs=[str(out)],
    )
    return Step(**{**defaults, **kw})


def _make_outputs(step: Step) -> None:
    os.makedirs(step.outputs[0], exist_ok=True)
    with open(os.path.join(step.outputs[0], "w.bin"), "w") as f:
        f.write("weights")


def test_path_fingerprint_sees_content_listing_and_prefixes(tmp_path):
    f = tmp_path / "small.json"
    f.write_text("aaaa")
    before = mf.path_fingerprint(str(f))
    st = f.stat()
    f.write_text("bbbb")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: only the hash can tell
    assert mf.path_fingerprint(str(f)) != before
    d = tmp_path / "dir"
    d.mkdir()
    empty = mf.path_fingerprint(str(d))
    (d / "sub").mkdir()
    (d / "sub" / "x").write_text("1")
    assert mf.path_fingerprint(str(d)) != empty
    (tmp_path / "data_text_document.bin").write_text("b")
    (tmp_path / "data_text_document.idx").write_text("i")
    assert mf.path_fingerprint(str(tmp_path / "data_text_document")).startswith("p:2:")
    assert mf.path_fingerprint(str(tmp_path / "nothing")) == "missing"


def test_decide_skips_only_when_everything_matches(tmp_path):
    mdir = str(tmp_path / ".af")
    step = _step(tmp_path)
    assert mf.decide(step, {}, mdir).reason == "no manifest"
    _make_outputs(step)
    mf.write(mdir, step, {"A": "1"}, wall_s=1.0, node_rank=0)
    d = mf.decide(step, {"A": "1"}, mdir)
    assert d.up_to_date and d.reason == f"outputs up to date (manifest {mdir}/hf2mg.json)"
    assert not mf.decide(step, {"A": "2"}, mdir).up_to_date  # env changed
    assert not mf.decide(_step(tmp_path, launch=Process((*step.argv, "--y"))), {"A": "1"}, mdir).up_to_date
    (tmp_path / "model" / "config.json").write_text('{"a": 2}')
    assert "inputs changed" in mf.decide(step, {"A": "1"}, mdir).reason


def test_decide_reruns_when_an_output_was_touched_or_removed(tmp_path):
    mdir = str(tmp_path / ".af")
    step = _step(tmp_path)
    _make_outputs(step)
    mf.write(mdir, step, {}, wall_s=1.0, node_rank=0)
    (tmp_path / "converted" / "extra").write_text("x")
    assert "output" in mf.decide(step, {}, mdir).reason
    mf.write(mdir, step, {}, wall_s=1.0, node_rank=0)
    import shutil

    shutil.rmtree(tmp_path / "converted")
    assert not mf.decide(step, {}, mdir).up_to_date


def test_train_is_never_skipped(tmp_path):
    step = _step(tmp_path, name="train", role=Role.TRAIN)
    _make_outputs(step)
    mf.write(str(tmp_path / ".af"), step, {}, wall_s=1.0, node_rank=0)
    assert not mf.decide(step, {}, str(tmp_path / ".af")).up_to_date


def test_annotate_plan_skips_up_to_date_steps_and_notes_dependent_ones(tmp_path):
    mdir = str(tmp_path / ".af")
    pre = _step(
        tmp_path, name="preprocess", role=Role.PREPROCESS, outputs=[str(tmp_path / "preprocess_data")]
    )
    conv = _step(tmp_path)
    train = Step(
        name="train",
        role=Role.TRAIN,
        launch=Process(("t",)),
        inputs=[str(tmp_path / "preprocess_data" / "d")],
        outputs=[str(tmp_path / "saved_checkpoints")],
    )
    back = Step(
        name="mg2hf",
        role=Role.EXPORT,
        launch=Process(("c",)),
        inputs=[str(tmp_path / "saved_checkpoints")],
        outputs=[str(tmp_path / "hf")],
    )
    for s in (pre, conv, back):
        _make_outputs(s)
        mf.write(mdir, s, {}, wall_s=0.1, node_rank=0)
    logs = LogSpec(
        format="megatron",
        naming=LogNaming(prefix="m-e"),
        loss_rank="last",
        throughput=ThroughputSpec("megatron"),
    )
    plan = Plan(
        backend="torch",
        exp_name="e",
        model_name="m",
        output_dir=str(tmp_path),
        logs=logs,
        steps=[pre, conv, train, back],
    )
    mf.annotate_plan(plan)
    assert pre.skip_reason.startswith("outputs up to date") and conv.skipped
    assert not train.skipped and not back.skipped  # back reads what train (which runs) writes
    assert any("skipped at run time" in n for n in back.notes)
    assert back.fingerprint and train.fingerprint


def test_wait_for_node0_returns_when_the_manifest_appears(tmp_path):
    mdir = str(tmp_path / ".af")
    step = _step(tmp_path)
    _make_outputs(step)
    t = threading.Timer(0.3, lambda: mf.write(mdir, step, {}, wall_s=0.1, node_rank=0))
    t.start()
    t0 = time.monotonic()
    path = mf.wait_for_node0(step, {}, mdir, timeout_s=10, started_at=time.time(), poll_s=0.05)
    assert path.endswith("hf2mg.json") and time.monotonic() - t0 < 5


def test_wait_for_node0_fails_fast_on_failure_and_on_timeout(tmp_path):
    mdir = str(tmp_path / ".af")
    step = _step(tmp_path)
    mf.write_failure(mdir, step, returncode=3, log_path="/x/log.txt", node_rank=0)
    with pytest.raises(StageFailedError) as e:
        mf.wait_for_node0(step, {}, mdir, timeout_s=10, started_at=time.time(), poll_s=0.05)
    assert e.value.returncode == 3 and "NODE_RANK 0" in str(e.value)
    mf.invalidate(mdir, step)
    with pytest.raises(StageFailedError) as e:
        mf.wait_for_node0(step, {}, mdir, timeout_s=0.3, started_at=time.time(), poll_s=0.05)
    assert e.value.returncode == 124 and "node_wait_timeout_s" in str(e.value)
