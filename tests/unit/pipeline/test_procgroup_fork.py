"""A background import never overlaps a fork that runs the at-fork hooks (the `_releaseLock` traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from ascendfactory.pipeline import procgroup, results

# A module that registers an at-fork pair as logging does, timed to land inside a fork's hook window when a
# fork is under way: it waits (up to 1 s) for the main thread's "before" hook to signal the fork, registers
# the pair, then lets the fork go on. The "after in parent" half counts the calls its "before" half missed.
_PAIR_MODULE = """
import os, forkwindow
forkwindow.in_fork.wait(1.0)
os.register_at_fork(before=forkwindow.before, after_in_parent=forkwindow.after)
forkwindow.registered.set()
"""

_DRIVER = """
import os, sys, threading, types
forkwindow = types.ModuleType("forkwindow")
forkwindow.in_fork, forkwindow.registered = threading.Event(), threading.Event()
forkwindow.armed, forkwindow.depth, forkwindow.unmatched = False, 0, 0
def before():
    forkwindow.depth += 1
def after():
    if forkwindow.depth == 0:
        forkwindow.unmatched += 1
    forkwindow.depth = max(0, forkwindow.depth - 1)
def window():  # the first "before" hook to run (registered last): holds the window open for the import
    if forkwindow.armed:
        forkwindow.in_fork.set()
        forkwindow.registered.wait(2.0)
forkwindow.before, forkwindow.after = before, after
sys.modules["forkwindow"] = forkwindow
os.register_at_fork(before=window)
from ascendfactory.pipeline import procgroup, results
forkwindow.armed = True
results.prewarm_plot(("pairmod",))
import time; time.sleep(0.1)
procgroup.start(["true"], env=dict(os.environ), cwd=None).wait()
print("unmatched", forkwindow.unmatched)
"""


def test_a_fork_waits_for_the_background_import_so_no_at_fork_pair_is_split(tmp_path):
    (tmp_path / "pairmod.py").write_text(textwrap.dedent(_PAIR_MODULE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_DRIVER)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "unmatched 0" in done.stdout, done.stdout + done.stderr


def test_start_waits_for_a_slow_background_import(tmp_path, monkeypatch):
    (tmp_path / "slowmod27.py").write_text("import time\ntime.sleep(0.6)\nLOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    thread = procgroup.import_in_background(("slowmod27",), name="test-import")
    time.sleep(0.1)
    t0 = time.monotonic()
    proc = procgroup.start(["true"], env=dict(os.environ), cwd=None)
    waited = time.monotonic() - t0
    proc.wait()
    thread.join(5)
    assert waited >= 0.3, f"the fork did not wait for the import ({waited:.2f} s)"
    assert sys.modules["slowmod27"].LOADED
    sys.modules.pop("slowmod27", None)


def test_prewarm_leaves_a_missing_module_to_its_user():
    results.prewarm_plot(("no_such_module_27",))  # no exception, no traceback on the console
