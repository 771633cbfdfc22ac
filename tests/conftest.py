"""Shared test helpers: repo paths and a writer for experiment files."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
LOGS = REPO / "tests" / "data" / "logs"  # real log samples, vendored (tests/data/logs/README.md)


@pytest.fixture
def write_yaml(tmp_path):
    """write_yaml(text, name='exp.yaml') -> path of a file holding `text`."""

    def _write(text: str, name: str = "exp.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    """Device-count precedence must not depend on the machine running the tests."""
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture(autouse=True)
def _no_cluster_platform(monkeypatch):
    """Topology must not come from a cluster platform the tests happen to run on (config.platforms)."""
    for var in (
        "SLURM_JOB_ID",
        "SLURM_NODEID",
        "MA_NUM_HOSTS",
        "VC_TASK_INDEX",
        "PET_NNODES",
        "KUBERNETES_SERVICE_HOST",
        "SKYPILOT_NODE_RANK",
    ):
        monkeypatch.delenv(var, raising=False)
