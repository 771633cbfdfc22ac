"""`environment.package_version` lists a site-packages folder once while it is unchanged, and again after
an install adds or removes a distribution."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendfactory.backends import environment as venv


def _site(env: Path) -> Path:
    site = env / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return site


def test_versions_by_normalised_name_and_after_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _site(tmp_path / "env")
    for dist in ("Ray-2.40.0", "omegaconf-2.3.0", "hydra_core-1.3.2"):
        (site / f"{dist}.dist-info").mkdir()
    (site / "vllm-0.1.egg-info").mkdir()  # not a dist-info: not read
    env = str(tmp_path / "env")
    listings = []
    real = venv.glob.glob
    monkeypatch.setattr(venv.glob, "glob", lambda p, **k: listings.append(p) or real(p, **k))
    assert venv.package_version(env, "ray") == "2.40.0"
    assert (
        venv.package_version(env, "hydra-core") == "1.3.2"
        and venv.package_version(env, "OmegaConf") == "2.3.0"
    )
    assert venv.package_version(env, "vllm") is None
    assert sum(p.endswith("*.dist-info") for p in listings) == 1  # listed once while unchanged
    (site / "vllm-0.24.0.dist-info").mkdir()
    assert venv.package_version(env, "vllm") == "0.24.0"
    (site / "Ray-2.40.0.dist-info").rmdir()
    assert venv.package_version(env, "ray") is None
    assert venv.package_version(str(tmp_path / "nowhere"), "ray") is None
