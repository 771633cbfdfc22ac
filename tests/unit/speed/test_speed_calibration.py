"""The time model against recorded runs: refitting each device's recorded runs gives the constants
`speed.devices` holds, and every recorded run is predicted within 25% (the issue's goal), CPU and H200."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ascendfactory.speed import calibrate
from ascendfactory.speed.devices import DEVICES
from ascendfactory.speed.model import predict

GOAL = 0.25
CPU_LEAVE_ONE_OUT = 0.35  # the distributed optimizer's row, +34.1%: the one run that shows its all-gather
CPU_UNDER_LOAD = (-0.427, 0.475)  # the smallest and largest error of the runs under load


@pytest.mark.parametrize("device", ["cpu", "h200"])
def test_stored_constants_are_the_fit_of_the_recorded_runs(device):
    rec = calibrate.load(device)
    stored = DEVICES[device]
    fitted = calibrate.fit(rec.runs, stored, rec.free)
    for name in rec.free:
        assert getattr(stored, name) == pytest.approx(getattr(fitted, name), rel=0.01), name
    errors = calibrate.errors(rec.runs, stored)
    assert stored.calibrated_on == len(rec.runs)
    assert stored.calibration_error == pytest.approx(max(abs(e) for e in errors), abs=0.005)


def test_h200_runs_within_the_goal():
    rec = calibrate.load("h200")
    errors = calibrate.errors(rec.runs, DEVICES["h200"])
    assert max(abs(e) for e in errors) <= GOAL, errors


def test_cpu_runs_within_the_goal():
    """Every recorded CPU run within 25%: bench_memory.py's 16 layouts (the interleaved pipeline and the
    distributed optimizer among them) and the other model shapes, the quickstart's demo model included."""
    rec = calibrate.load("cpu")
    errors = dict(zip((r.label for r in rec.runs), calibrate.errors(rec.runs, DEVICES["cpu"])))
    assert {
        "tp1 pp2v dp1 mbs1 s256 none tracker-off",
        "tp1 pp1 dp2 mbs1 s256 none distopt tracker-off",
        "demo tp1 pp1 dp2 mbs4 s128 none tracker-off",
    } <= set(errors)
    assert {r.workload.hidden for r in rec.runs} == {64, 128, 256, 384, 768}
    assert max(abs(e) for e in errors.values()) <= GOAL, errors


def test_what_the_distributed_optimizer_moves_over_gloo():
    """Over gloo the embedded trainer's distributed optimizer all-reduces the gradients and all-gathers the
    weights (engine/train/distopt.py): (d-1)/d of the weights more on the wire than plain data parallel, and
    three passes over them; over NCCL-like collectives it moves what the all-reduce moves."""
    rec = {r.label: r for r in calibrate.load("cpu").runs}
    run = rec["tp1 pp1 dp2 mbs1 s256 none distopt tracker-off"]
    cpu = calibrate.device_for(run, DEVICES["cpu"])
    w = run.workload
    plain = predict(replace(w, distributed_optimizer=False), cpu).parts["dp_comm"]
    weights = w.param_count() * 4
    gathered = predict(w, cpu).parts["dp_comm"]
    expected = weights / 2 / cpu.intra_bandwidth + cpu.latency_s + 3 * weights / cpu.memory_bandwidth
    assert gathered - plain == pytest.approx(expected, rel=1e-9)
    assert predict(w, cpu.with_(gloo=False)).parts["dp_comm"] == pytest.approx(plain)


def test_the_interleaved_schedule_pays_its_ops():
    """VPP chunks per rank: 2 x micro-batches x VPP schedule ops, each at the measured op cost."""
    w = calibrate.load("cpu").runs[0].workload
    cpu = DEVICES["cpu"]
    one, three = (predict(replace(w, pp=2, gbs=2, vpp=v), cpu).parts["pp_comm"] for v in (1, 3))
    activation = 256 * 768 * 4
    assert one == pytest.approx(2 * 2 * (activation / cpu.intra_bandwidth + cpu.op_s))
    assert three == pytest.approx(3 * one)
    assert cpu.op_s == cpu.pipeline_op_s and DEVICES["h200"].op_s == DEVICES["h200"].latency_s


def test_cpu_leave_one_out():
    """Each CPU run predicted by constants fitted on the others: the error a new layout would see
    (docs/time-to-train.md states it)."""
    rec = calibrate.load("cpu")
    assert len(rec.runs) > len(rec.free) + 1
    errors = calibrate.leave_one_out(rec.runs, DEVICES["cpu"], rec.free)
    assert max(abs(e) for e in errors) < CPU_LEAVE_ONE_OUT, errors


# The H200 figures held out of its fit (recorded/h200.yaml `validate:`), their errors as
# docs/time-to-train.md states them: the 0.5B shape's other programs within 8%, the 1.5B shape's plain step
# -5.9% (it was +30% while one efficiency carried the launches and the memory-bound work too).
H200_HELD_OUT = {"0.5B shape, plain": 0.076, "0.5B shape, transformers": -0.064, "1.5B shape, plain": -0.059}


def test_h200_held_out_figures():
    rec = calibrate.load("h200")
    assert len(rec.validate) == len(H200_HELD_OUT)
    errors = calibrate.errors(rec.validate, DEVICES["h200"])
    assert max(abs(e) for e in errors) <= GOAL, errors
    for (key, stated), run, error in zip(H200_HELD_OUT.items(), rec.validate, errors):
        assert key in run.label
        assert error == pytest.approx(stated, abs=0.005), run.label


def test_a_run_the_model_misses_is_caught():
    """The check can fail: a recorded run twice as slow as measured is outside the goal."""
    rec = calibrate.load("h200")
    slow = [calibrate.RecordedRun(r.label, r.workload, r.measured_step_s * 2) for r in rec.runs[:1]]
    assert abs(calibrate.errors(slow, DEVICES["h200"])[0]) > GOAL


def test_recorded_files_say_when_and_where():
    for device in ("cpu", "h200"):
        rec = calibrate.load(device)
        assert rec.date and rec.commit and rec.machine and rec.runs


def test_cpu_held_out_runs_within_the_goal():
    """The 28 layouts measured again right after the recorded ones, held out of the fit: every one within
    25%, and each gets a figure (`in_range`)."""
    rec = calibrate.load("cpu")
    again = [r for r in rec.validate if r.label.startswith("again ")]
    assert len(again) == 28 and {r.label.removeprefix("again ") for r in again} == {r.label for r in rec.runs}
    errors = dict(zip((r.label for r in again), calibrate.errors(again, DEVICES["cpu"])))
    assert max(abs(e) for e in errors.values()) <= GOAL, errors
    assert all(predict(r.workload, DEVICES["cpu"]).in_range for r in again)


def test_cpu_runs_under_load_are_not_the_calibration():
    """The runs measured while other jobs shared the cores are kept apart (`loaded:`): neither fitted nor
    held out, and off by more than the goal (what docs/time-to-train.md says a busy machine does)."""
    rec = calibrate.load("cpu")
    assert len(rec.loaded) == 44
    assert not {r.label for r in rec.loaded} & {r.label for r in rec.runs + rec.validate}
    errors = calibrate.errors(rec.loaded, DEVICES["cpu"])
    assert max(abs(e) for e in errors) > GOAL
    assert min(errors) == pytest.approx(CPU_UNDER_LOAD[0], abs=0.005)
    assert max(errors) == pytest.approx(CPU_UNDER_LOAD[1], abs=0.005)
