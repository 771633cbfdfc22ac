"""`doctor`: what this machine has and lacks for a backend: generic checks (python, accelerator, port, disk)
around the backend's own (`Backend.checks`, returning `backends.environment.Check` records)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

from ascendfactory.backends.environment import Check, ascend_checks
from ascendfactory.config.devices import (
    DeviceCount,
    detect_accelerator,
    node_accelerators,
    resolve_devices_per_node,
)


def accelerator_check(environ: Mapping[str, str], devices: DeviceCount | None, *, cpu: bool) -> Check:
    """What this node has, and the processes per node (an experiment's, else the machine's default); a warning
    where the experiment asks more devices than the node has visible (a real run is refused then)."""
    node = node_accelerators(environ)
    devices = devices or resolve_devices_per_node(None, environ)
    has = f"{node.kind} ({node.source})" if node.installed else node.kind
    detail = f"{has}; devices per node: {devices.count} ({devices.source})"
    if cpu:
        return Check("accelerator", "info", f"{detail}, as CPU processes (accelerator: cpu)", required=False)
    if not node.installed or devices.count <= node.visible:
        return Check("accelerator", "info", detail, required=False)
    return Check(
        "accelerator",
        "warn",
        f"{detail}: more than the {node.visible} visible, a real run is refused "
        f"(set env.NPUS_PER_NODE: {node.visible})",
        required=False,
    )


def free_port_check(port: int, source: str = "default MASTER_PORT") -> Check:
    """Whether `port` is free to bind here (`source`: where the number comes from)."""
    from ascendfactory.backends import ports

    if not ports.in_use(port):
        return Check(f"port {port}", "ok", f"free ({source})", required=False)
    return Check(
        f"port {port}",
        "warn",
        f"in use ({source}): set env.MASTER_PORT to a free port, e.g. {ports.free_port_near(port)}",
        required=False,
    )


def run_checks(
    backend: str = "torch",
    environ: Mapping[str, str] | None = None,
    *,
    port: tuple[int, str] = (6000, "default MASTER_PORT"),
    devices: DeviceCount | None = None,
    cpu: bool = False,
) -> list[Check]:
    """Generic checks (python, accelerator, port, disk) around the backend's own; `port`: the port to
    check and where it comes from (an experiment's env.MASTER_PORT); `devices`: the processes per node an
    experiment asks (`cpu`: as CPU processes), held against the devices this node has."""
    from ascendfactory.backends.registry import get_backend

    environ = os.environ if environ is None else environ
    chosen = get_backend(backend, key="--backend")
    checks = [Check("python", "ok", sys.version.split()[0])]
    checks.append(accelerator_check(environ, devices, cpu=cpu))
    kind = detect_accelerator()
    own = chosen.checks(environ)
    if kind == "npu" and not any(c.name == "Ascend toolkit" for c in own):
        own = [*ascend_checks(environ, torch_npu_required=True), *own]
    checks += own
    checks.append(free_port_check(*port))
    usage = shutil.disk_usage(os.getcwd())
    free_gb = usage.free / 2**30
    checks.append(
        Check("disk (cwd)", "ok" if free_gb > 10 else "warn", f"{free_gb:.0f} GiB free", required=False)
    )
    return checks
