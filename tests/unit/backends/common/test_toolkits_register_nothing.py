"""The shared toolkits (`backends/common/`) register no backend and import no backend package: importing
every module of every toolkit leaves the backend registry empty (pyproject's import contract says the same
statically)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO


def test_importing_every_toolkit_module_registers_nothing():
    code = """
        import pkgutil, sys
        import ascendfactory.backends.common as common
        from ascendfactory.backends import registry
        names = [m.name for m in pkgutil.walk_packages(common.__path__, common.__name__ + ".")]
        for name in names:
            __import__(name)
        backends = sorted(m for m in sys.modules if m.split(".")[:2] == ["ascendfactory", "backends"]
                          and len(m.split(".")) > 2 and m.split(".")[2] not in ("common", "registry", "base",
                          "environment", "report_to", "inputs", "ports", "device_fit", "timing", "planner"))
        print(len(names), sorted(registry.BACKENDS.registered()), backends)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    count, registered, backend_modules = done.stdout.strip().split(" ", 2)
    assert int(count) >= 25  # megatron, mindspeed_rl_experiment and hydra with their modules: it looked
    assert registered == "[]" and backend_modules == "[]", done.stdout
