"""CLI tests through typer's runner: config -> dry-run round trips, formats, errors, frozen surface."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ascendfactory.backends.registry import all_backends
from ascendfactory.cli.app import app, main
from tests.conftest import REPO

runner = CliRunner()

TEMPLATES = [(b.name, e) for b in all_backends() for e in b.experiments()]


def test_every_backend_ships_the_required_templates():
    shipped = set(TEMPLATES)
    for need in [
        ("mindspeed-llm", "full-4k"),
        ("mindspeed-llm", "lora-4k"),
        ("llamafactory", "full-4k"),
        ("llamafactory", "lora-4k"),
        ("verl", "ppo"),
        ("verl", "grpo"),
        ("verl", "dapo"),
        ("mindspeed-rl", "grpo"),
        ("mindspeed-mm", "full"),
        ("torch", "tiny-sft"),
        ("torch", "full-4k"),
        ("torch", "lora-4k"),  # both Megatron backends ship lora-4k: the same file runs on either
    ]:
        assert need in shipped


@pytest.mark.parametrize("backend,exp", TEMPLATES)
def test_config_then_dry_run_round_trip(tmp_path, backend, exp):
    out = tmp_path / f"{backend}-{exp}.yaml"
    model = {"tiny-sft": "tiny-demo", "full": "qwen2.5-vl-7b"}.get(exp, "qwen2.5-7b")
    r = runner.invoke(
        app,
        [
            "config",
            f"--backend={backend}",
            f"--af_model_name={model}",
            f"--exp_name={exp}",
            f"--output_file_path={out}",
        ],
    )
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "# " in text and f"backend: {backend}" in text  # commented
    r = runner.invoke(app, ["train", str(out), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["backend"] == backend and plan["model_name"] == model and plan["exp_name"] == exp
    names = [s["name"] for s in plan["steps"] if s["name"] != "data-fit"]  # torch's own sft check
    if (backend, exp) == ("mindspeed-llm", "fsdp2-4k"):
        assert names == ["train", "plot"]  # the FSDP2 trainer trains from HF weights and writes them back
    elif backend in ("torch", "mindspeed-llm"):
        assert names[:4] == ["preprocess", "hf2mg", "train", "mg2hf"]


def test_config_refuses_to_overwrite(tmp_path):
    out = tmp_path / "x.yaml"
    out.write_text("keep me")
    args = [
        "config",
        "--backend=torch",
        "--af_model_name=tiny-demo",
        "--exp_name=tiny-sft",
        f"--output_file_path={out}",
    ]
    assert main(args) == 2
    assert out.read_text() == "keep me"
    assert main([*args, "--force"]) == 0 and "backend: torch" in out.read_text()


@pytest.mark.parametrize(
    "flag,value,fragment",
    [
        ("--backend", "torchy", "use one of: torch, mindspeed-llm"),
        ("--exp_name", "full-9k", "use one of: full-4k, lora-4k, tiny-sft"),
        ("--af_model_name", "qwen2.5-7bb", "did you mean: qwen2.5-7b"),
    ],
)
def test_config_bad_choices_list_the_valid_ones(tmp_path, capsys, flag, value, fragment):
    args = {"--backend": "torch", "--af_model_name": "tiny-demo", "--exp_name": "tiny-sft"} | {flag: value}
    code = main(
        ["config", *(f"{k}={v}" for k, v in args.items()), f"--output_file_path={tmp_path / 'x.yaml'}"]
    )
    assert code == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_dry_run_text_shows_steps_commands_and_skip_reasons(tmp_path):
    cfg = REPO / "cfgs" / "quickstart.yaml"
    r = runner.invoke(
        app,
        ["train", str(cfg), "--dry-run", "--ckpt_load_type=0", "--backend_config.training.data-path=/data/x"],
    )
    assert r.exit_code == 0, r.output
    assert "skip: preprocessed data given: /data/x" in r.stdout
    assert "skip: ckpt_load_type 0: training starts from random weights" in r.stdout
    assert "-m ascendfactory.engine.train" in r.stdout and "--data-path /data/x" in r.stdout


def test_dry_run_shell_is_a_runnable_script(tmp_path):
    r = runner.invoke(
        app, ["train", str(REPO / "cfgs" / "quickstart.yaml"), "--dry-run", "--format", "shell"]
    )
    assert r.exit_code == 0
    script = tmp_path / "plan.sh"
    script.write_text(r.stdout)
    assert r.stdout.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in r.stdout
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # syntax check


def test_configuration_errors_exit_2_without_traceback(capsys):
    code = main(
        [
            "train",
            str(REPO / "cfgs" / "quickstart.yaml"),
            "--dry-run",
            "--backend_config.training.tensor-model-parallel-size=3",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "tensor-model-parallel-size" in err and "does not divide" in err and "command line" in err
    assert "Traceback" not in err


def test_af_debug_shows_the_traceback(monkeypatch):
    from ascendfactory.errors import ConfigError

    monkeypatch.setenv("AF_DEBUG", "1")
    with pytest.raises(ConfigError):
        main(["train", str(REPO / "cfgs" / "quickstart.yaml"), "--dry-run", "--nope=1"])


def test_old_style_through_the_cli():
    r = runner.invoke(
        app,
        [
            "train",
            str(REPO / "cfgs" / "multi_model_cfgs.yaml"),
            "qwen2.5-7b",
            "full-4k",
            "--dry-run",
            "--format",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["facts"]["pp"] == 2


def test_two_positionals_is_an_error(capsys):
    assert main(["train", str(REPO / "cfgs" / "quickstart.yaml"), "qwen", "--dry-run"]) == 2
    assert "CONFIG_YAML MODEL_NAME EXP_NAME" in capsys.readouterr().err


def test_show_prints_the_resolved_config():
    r = runner.invoke(app, ["show", str(REPO / "cfgs" / "quickstart.yaml"), "--exp_name=zz"])
    assert r.exit_code == 0
    assert "af_output_dir: ./outputs/tiny-demo-zz" in r.stdout


def test_models_and_experiments_list():
    r = runner.invoke(app, ["models", "--json"])
    names = {row["model"] for row in json.loads(r.stdout)}
    assert {"qwen2.5-7b", "llama3.1-8b", "qwen3-8b", "glm4-9b", "tiny-demo"} <= names
    r = runner.invoke(app, ["experiments", "--json"])
    assert {row["backend"] for row in json.loads(r.stdout)} >= {"torch", "mindspeed-llm", "verl"}


# The CLI surface is frozen: new knobs go in the yaml, not in new flags (as torchtitan's
# test_no_new_cli_options).
FROZEN = {
    "config": {"--backend", "--af_model_name", "--exp_name", "--output_file_path", "--force"},
    "train": {"--dry-run", "--format", "--verbose"},
    "estimate": {"--json", "--suggest"},
    "convert": set(),
    "preprocess": set(),
    "models": {"--json"},
    "experiments": {"--backend", "--json"},
    "show": set(),
    "doctor": {"--backend", "--install-plan", "--run", "--json"},
    # the product's benchmark commands, with its own option names (underscores, --o)
    "performance": {"--result_dir", "--backend", "--baseline", "--output_dir", "--o", "--json"},
    "eval": {
        "--dataset",
        "--model_name",
        "--run_type",
        "--model_name_or_path",
        "--num_fewshot",
        "--batch_size",
        "--json",
    },
}
GROUPS = {  # command groups: their commands and options
    "submit": {
        "slurm": {
            "--nodes",
            "--partition",
            "--time",
            "--account",
            "--gpus-per-node",
            "--cpus-per-task",
            "--dry-run",
        },
        "k8s": {"--kind", "--image", "--nodes", "--gpus-per-node", "--device-resource", "--dry-run"},
        "status": {"--json", "--scheduler"},  # which scheduler holds a job given by its id
        "cancel": {"--scheduler"},
    },
}


def test_cli_surface_is_frozen():
    import typer.main

    group = typer.main.get_command(app)
    commands = {name for name in group.commands if name not in ("logs", *GROUPS)}
    assert commands == set(FROZEN)
    for name, expected in FROZEN.items():
        opts = {o for p in group.commands[name].params for o in p.opts if o.startswith("--")}
        opts.discard("--help")
        assert opts == expected, name
    for group_name, frozen in GROUPS.items():
        sub = group.commands[group_name]
        assert set(sub.commands) == set(frozen), group_name
        for name, expected in frozen.items():
            opts = {o for p in sub.commands[name].params for o in p.opts if o.startswith("--")}
            opts.discard("--help")
            assert opts == expected, f"{group_name} {name}"


def test_help_has_examples():
    for cmd in ("config", "train", "models", "doctor"):
        r = runner.invoke(app, [cmd, "--help"])
        assert r.exit_code == 0 and "Examples" in r.stdout, cmd


def test_installed_console_script_runs():
    exe = os.path.join(os.path.dirname(sys.executable), "ascendfactory-cli")
    if not os.path.exists(exe):
        pytest.skip("console script not installed (run sh install.sh)")
    proc = subprocess.run(
        [exe, "train", str(REPO / "cfgs" / "quickstart.yaml"), "--dry-run", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["facts"]["world_size"] == 2


def test_config_interactive_prompts(tmp_path):
    out = tmp_path / "asked.yaml"
    r = runner.invoke(app, ["config"], input=f"torch\ntiny-demo\ntiny-sft\n{out}\n")
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "backend: torch" in text and "af_model_name: tiny-demo" in text and "exp_name: tiny-sft" in text
    r = runner.invoke(app, ["train", str(out), "--dry-run", "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["exp_name"] == "tiny-sft"


def test_config_offers_the_demo_template_first_for_the_demo_model(tmp_path):
    """Enter at every prompt: the demo model gets tiny-sft (its own sizes), a real model the first one."""
    out = tmp_path / "defaults.yaml"
    r = runner.invoke(app, ["config", "--backend=torch"], input=f"\n\n{out}\n")
    assert r.exit_code == 0, r.output
    assert "af_model_name: tiny-demo" in out.read_text() and "exp_name: tiny-sft" in out.read_text()
    real = tmp_path / "real.yaml"
    r = runner.invoke(app, ["config", "--backend=torch", "--af_model_name=qwen2.5-7b"], input=f"\n{real}\n")
    assert r.exit_code == 0 and "exp_name: full-4k" in real.read_text(), r.output
