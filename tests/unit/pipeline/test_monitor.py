"""The device-memory monitor: device tool parsing, per-rank files, process RSS, overhead."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from ascendfactory.pipeline.launch import LogNames
from ascendfactory.pipeline.launchers import MonitorTargets
from ascendfactory.pipeline.monitor import DeviceMonitor, parse_npu_smi, parse_nvidia_smi, visible_devices
from tests.support import runner_fakes as fakes

NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc2                 Version: 23.0.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.6        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3339 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 90.1        37                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          7000 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 1234          | python                   | 3000                    |
+===========================+===============+====================================================+
"""


def test_parse_npu_smi_groups_rows_per_device():
    blocks = parse_npu_smi(NPU_SMI)
    assert sorted(blocks) == [0, 1]
    assert "7000 / 65536" in blocks[1][1] and "910B3" in blocks[0][0]


def test_parse_nvidia_smi_and_visible_devices():
    rows = parse_nvidia_smi("0, NVIDIA H100, 1024, 81559, 3\n1, NVIDIA H100, 2048, 81559, 50\n")
    assert rows[1].startswith("1, NVIDIA H100, 2048")
    assert visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "4,5"}, "npu") == [4, 5]
    assert visible_devices({}, "cuda") is None


def _workers(tmp_path: Path, n: int) -> subprocess.Popen:
    sleeper = fakes.write_script(
        tmp_path, "sleeper.py", "import time\nx = b'1' * (30 * 2**20)\ntime.sleep(60)\n"
    )
    launcher = fakes.write_script(tmp_path, "launcher.py", fakes.FAKE_LAUNCHER)
    return subprocess.Popen(
        [sys.executable, launcher, "--nproc_per_node", str(n), sleeper],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def _last_rss(path: str) -> float:
    try:
        text = Path(path).read_text()
    except OSError:
        return 0.0
    return float(text.split("rss_mb ")[-1].split()[0]) if "rss_mb " in text else 0.0


def test_cpu_monitor_writes_rss_per_rank(tmp_path):
    names = LogNames.for_run(str(tmp_path), "m", "e", "20260101_000000")
    proc = _workers(tmp_path, 2)
    mon = DeviceMonitor(
        MonitorTargets((2, 3), local_rank_env=True),
        {r: names.npu_info(r) for r in (2, 3)},
        env={},
        interval_s=0.2,
        kind="cpu",
    )
    try:
        mon.attach(proc.pid)
        mon.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _last_rss(names.npu_info(3)) < 30:
            time.sleep(0.1)
    finally:
        mon.stop()
        os.killpg(proc.pid, 15)
        proc.wait()
    for rank in (2, 3):  # node 1 of 2, two ranks each
        text = Path(names.npu_info(rank)).read_text()
        assert f"rank {rank} pid" in text and "rss_mb" in text
    assert _last_rss(names.npu_info(3)) > 30  # the worker's 30 MiB buffer
    assert mon.samples >= 1 and mon.cpu_seconds < mon.samples * 0.2


def test_npu_monitor_writes_each_rank_its_device(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "npu-smi"
    (tmp_path / "npu.txt").write_text(NPU_SMI)
    tool.write_text(f"#!/bin/sh\ncat {tmp_path / 'npu.txt'}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    names = LogNames.for_run(str(tmp_path), "m", "e", "20260101_000000")
    mon = DeviceMonitor(
        MonitorTargets((0, 1), local_rank_env=True),
        {r: names.npu_info(r) for r in (0, 1)},
        env={"ASCEND_RT_VISIBLE_DEVICES": "1,0"},
        interval_s=60,
    )
    assert mon.kind == "npu"
    files = {local: open(path, "w") for local, path in mon.paths.items()}
    mon.sample(files)
    for f in files.values():
        f.close()
    assert "7000 / 65536" in Path(names.npu_info(0)).read_text()  # local rank 0 uses NPU 1
    assert "3339 / 65536" in Path(names.npu_info(1)).read_text()
