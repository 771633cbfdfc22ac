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


def test_h200_runs_within_the_goal():
    rec = calibrate.load("h200")
    errors = calibrate.errors(rec.runs, DEVICES["h200"])
    assert max(abs(e) for e in errors) <= GOAL, errors


# The CPU layouts the goal is missed on (README, "Time to train before the queue"): measured slower than the
# model says; every other layout must stay within it.
CPU_MISSES = {"tp1 pp2v dp1 mbs1 s256 none tracker-off", "tp1 pp1 dp2 mbs1 s256 none distopt tracker-off"}


def test_cpu_runs_within_the_goal_but_the_two_stated():
    rec = calibrate.load("cpu")
    errors = dict(zip((r.label for r in rec.runs), calibrate.errors(rec.runs, DEVICES["cpu"])))
    outside = {label for label, e in errors.items() if abs(e) > GOAL}
    assert outside == CPU_MISSES, errors
    assert all(-0.3 < errors[label] < 0 for label in CPU_MISSES)  # both slower than predicted, by < 30%


def test_cpu_leave_one_out():
    """Each CPU run predicted by constants fitted on the others: the error a new layout would see (within 30%;
    the README states it)."""
    rec = calibrate.load("cpu")
    assert len(rec.runs) > len(rec.free) + 1
    errors = calibrate.leave_one_out(rec.runs, DEVICES["cpu"], rec.free)
    assert max(abs(e) for e in errors) < 0.3, errors


def test_a_run_the_model_misses_is_caught():
    """The check can fail: a recorded run twice as slow as measured is outside the goal."""
    rec = calibrate.load("h200")
    slow = [calibrate.RecordedRun(r.label, r.workload, r.measured_step_s * 2) for r in rec.runs[:1]]
    assert abs(calibrate.errors(slow, DEVICES["h200"])[0]) > GOAL


def test_recorded_files_say_when_and_where():
    for device in ("cpu", "h200"):
        rec = calibrate.load(device)
        assert rec.date and rec.commit and rec.machine and rec.runs
