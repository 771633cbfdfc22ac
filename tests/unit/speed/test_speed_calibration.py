"""The time model against recorded runs: refitting each device's recorded runs gives the constants
`speed.devices` holds, and every recorded run is predicted within 25% (the issue's goal), CPU and H200."""

from __future__ import annotations

import pytest

from ascendfactory.speed import calibrate
from ascendfactory.speed.devices import DEVICES

GOAL = 0.25


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


@pytest.mark.parametrize("device", ["cpu", "h200"])
def test_every_recorded_run_within_the_goal(device):
    rec = calibrate.load(device)
    errors = calibrate.errors(rec.runs, DEVICES[device])
    worst = max(zip(errors, (r.label for r in rec.runs)), key=lambda e: abs(e[0]))
    assert abs(worst[0]) <= GOAL, worst


def test_cpu_leave_one_out_within_the_goal():
    """Each CPU run predicted by constants fitted on the others: the error a new layout would see."""
    rec = calibrate.load("cpu")
    assert len(rec.runs) > len(rec.free) + 1
    errors = calibrate.leave_one_out(rec.runs, DEVICES["cpu"], rec.free)
    assert max(abs(e) for e in errors) <= GOAL, errors


def test_a_run_the_model_misses_is_caught():
    """The check can fail: a recorded run twice as slow as measured is outside the goal."""
    rec = calibrate.load("h200")
    slow = [calibrate.RecordedRun(r.label, r.workload, r.measured_step_s * 2) for r in rec.runs[:1]]
    assert abs(calibrate.errors(slow, DEVICES["h200"])[0]) > GOAL


def test_recorded_files_say_when_and_where():
    for device in ("cpu", "h200"):
        rec = calibrate.load(device)
        assert rec.date and rec.commit and rec.machine and rec.runs
