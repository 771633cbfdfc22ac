"""The v1 mg2hf output program, `doctor --backend mindspeed-llm`, and its install plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ascendfactory.backends.environment import ascend_toolkit_status
from ascendfactory.backends.mindspeed_llm.environment import checks as mindspeed_llm_checks
from ascendfactory.backends.mindspeed_llm.environment import install_plan as mindspeed_llm_plan
from ascendfactory.backends.mindspeed_llm.programs import v1_mg2hf_output as files
from ascendfactory.backends.mindspeed_llm.versions import RELEASES
from ascendfactory.cli.app import app
from ascendfactory.errors import ConfigError
from ascendfactory.features.install import run_install


def hf_dir(root: Path) -> Path:
    root.mkdir(parents=True)
    for name, text in (
        ("config.json", "{}"),
        ("tokenizer.json", "{}"),
        ("generation_config.json", "{}"),
        ("model-00001-of-00002.safetensors", "w"),
        ("model.safetensors.index.json", "{}"),
    ):
        (root / name).write_text(text)
    return root


def test_v1_mg2hf_wrapper_stages_config_runs_and_collects(tmp_path: Path) -> None:
    hf, out = hf_dir(tmp_path / "hf"), tmp_path / "out"
    # Stands in for convert_ckpt.py mg -> hf: it needs config.json in --save-dir and writes <save-dir>/mg2hf/.
    fake_v1 = (
        "import os, sys; d = sys.argv[1]; assert os.path.exists(os.path.join(d, 'config.json')); "
        "os.makedirs(os.path.join(d, 'mg2hf')); "
        "open(os.path.join(d, 'mg2hf', 'model.safetensors'), 'w').write('new'); "
        "open(os.path.join(d, 'mg2hf', 'config.json'), 'w').write('{\"saved\": 1}')"
    )
    code = files.main(
        [
            "--stage-hf-config",
            str(hf),
            "--collect-mg2hf",
            str(out),
            "--",
            sys.executable,
            "-c",
            fake_v1,
            str(out),
        ]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert json.loads((out / "config.json").read_text()) == {"saved": 1}  # the converter's copy wins


def test_wrapper_returns_the_program_exit_code_and_does_not_collect(tmp_path: Path) -> None:
    hf, out = hf_dir(tmp_path / "hf"), tmp_path / "out"
    code = files.main(
        [
            "--stage-hf-config",
            str(hf),
            "--collect-mg2hf",
            str(out),
            "--",
            sys.executable,
            "-c",
            "raise SystemExit(3)",
        ]
    )
    assert code == 3 and not (out / "model.safetensors").exists()


def test_wrapper_reports_a_missing_hf_config(tmp_path: Path) -> None:
    assert (
        files.main(
            [
                "--stage-hf-config",
                str(tmp_path),
                "--collect-mg2hf",
                str(tmp_path / "o"),
                "--",
                sys.executable,
                "-c",
                "pass",
            ]
        )
        == 1
    )


def test_toolkit_status_names_the_fix(tmp_path: Path) -> None:
    assert ascend_toolkit_status({"ASCEND_TOOLKIT_HOME": "/opt/x"}) == (True, "ASCEND_TOOLKIT_HOME=/opt/x")
    set_env = tmp_path / "set_env.sh"
    assert "not found" in ascend_toolkit_status({}, str(set_env))[1]
    set_env.write_text("")
    ok, detail = ascend_toolkit_status({}, str(set_env))
    assert not ok and detail == f"installed but not sourced: run `source {set_env}`"


def test_doctor_lists_what_the_checkout_lacks(tmp_path: Path, fake_checkout) -> None:
    rows = {c.name: c for c in mindspeed_llm_checks({"AF_THIRD_PARTY_DIR": str(tmp_path)})}
    row = rows["MindSpeed-LLM checkout"]
    assert row.status == "missing" and "install.sh" in row.detail
    root = fake_checkout(tmp_path / "msllm", v2=False, megatron=False)
    rows = {c.name: c for c in mindspeed_llm_checks({"AF_MINDSPEED_LLM_DIR": str(root)})}
    assert rows["MindSpeed-LLM checkout"].status == "ok"
    assert rows["megatron/ in MindSpeed-LLM"].status == "missing"
    assert rows["checkpoint converters"].detail == "convert_ckpt.py"


def test_doctor_command_exits_1_when_mindspeed_pieces_are_missing(clean_env, monkeypatch) -> None:
    from ascendfactory.cli._output import out

    monkeypatch.setattr(out, "mode", out.mode)  # `doctor --json` switches the shared output object to json
    r = CliRunner().invoke(app, ["doctor", "--backend", "mindspeed-llm", "--json"])
    assert r.exit_code == 1
    rows = {row["check"]: row["status"] for row in json.loads(r.output)}
    assert rows["MindSpeed-LLM checkout"] == "missing" and rows["Ascend toolkit"] == "missing"


def test_install_plan_follows_the_2_1_0_install_guide(tmp_path: Path) -> None:
    steps = mindspeed_llm_plan(str(tmp_path), RELEASES["2.1.0"], python="py")
    shown = [s.display() for s in steps]
    assert any("checkout 2c085cc9" in s for s in shown)
    assert any("-b 2.1.0 https://gitcode.com/ascend/MindSpeed-LLM.git" in s for s in shown)
    assert any("-b core_r0.8.0 https://github.com/NVIDIA/Megatron-LM.git" in s for s in shown)
    order = [s.what for s in steps]
    assert order.index("clone Megatron-LM core_r0.8.0") < order.index("copy megatron/ into MindSpeed-LLM")
    assert all(s.skip_if_exists for s in steps if s.argv[0] in ("git", "cp") and s.argv[1] in ("clone", "-r"))


def test_install_plan_follows_the_26_1_0_install_guide(tmp_path: Path) -> None:
    """docs/zh/pytorch/training/install_guide.md at v26.1.0, 方式二 steps 4-6."""
    steps = mindspeed_llm_plan(str(tmp_path), RELEASES["26.1.0"], python="py")
    shown = [s.display() for s in steps]
    assert shown[0].startswith("py -m pip install triton-ascend==3.2.1")
    assert any("checkout 26.1.0_core_r0.12.1" in s for s in shown)
    assert any("-b 26.1.0 https://gitcode.com/ascend/MindSpeed-LLM.git" in s for s in shown)
    assert any("-b core_v0.12.1 https://github.com/NVIDIA/Megatron-LM.git" in s for s in shown)
    assert any(s.endswith("MindSpeed-LLM/logs") and "mkdir" in s for s in shown)


@pytest.mark.parametrize(
    "environ, version",
    [({}, "26.1.0"), ({"AF_MINDSPEED_LLM_VERSION": "2.1.0"}, "2.1.0")],
)
def test_install_sh_installs_the_default_or_the_chosen_version(tmp_path: Path, environ, version) -> None:
    from ascendfactory.features.install import install_steps

    steps = install_steps("mindspeed-llm", {**environ, "AF_THIRD_PARTY_DIR": str(tmp_path)})
    assert any(s.what == f"clone MindSpeed-LLM {version}" for s in steps)
    with pytest.raises(ConfigError) as err:
        install_steps("mindspeed-llm", {"AF_MINDSPEED_LLM_VERSION": "2.3.0"})
    assert "AF_MINDSPEED_LLM_VERSION" in err.value.problems[0].key


@pytest.mark.parametrize("version", ["2.1.0", "26.1.0"])
def test_install_skips_what_is_there(tmp_path: Path, capsys, version: str) -> None:
    for name in ("MindSpeed", "MindSpeed-LLM", "Megatron-LM", "MindSpeed-LLM/megatron"):
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
    steps = [s for s in mindspeed_llm_plan(str(tmp_path), RELEASES[version]) if s.skip_if_exists]
    assert run_install(steps) == 0
    assert capsys.readouterr().out.count("already present") == len(steps)


def test_install_sh_runs_the_mindspeed_plan() -> None:
    text = (Path(__file__).resolve().parents[4] / "install.sh").read_text()
    assert 'doctor --install-plan "$BACKEND" --run' in text
