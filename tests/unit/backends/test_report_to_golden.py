"""`report_to` mapped to each framework's own tracker keys (golden plans), the user's own spelling winning,
and a tracker the framework cannot reach refused with the backend named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ascendfactory.backends.common.mindspeed_rl_experiment.tree import TRAIN_CONFIG
from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO
from tests.unit.backends.mindspeed_mm.mm_helpers import plan_for as mm_plan_for
from tests.unit.backends.verl import test_verl_plan as verl_helpers

QUICK = REPO / "cfgs" / "quickstart.yaml"
LF_QUICK = REPO / "cfgs" / "quickstart_llamafactory.yaml"
NO_LF = {"AF_LLAMAFACTORY_ENV": "/nonexistent/lf-env", "PATH": os.environ.get("PATH", "")}


@pytest.fixture(autouse=True)
def every_client_installed(monkeypatch):
    """The key mapping alone: whether this machine has each client is test_tracker_clients.py's matter."""
    from ascendfactory.backends import report_to

    monkeypatch.setattr(report_to, "absent_modules", lambda python, modules: [])


def plan(path: Path, tmp_path: Path, *overrides: str, environ: dict | None = None):
    loaded = load_experiment(path, [f"--af_output_dir={tmp_path / 'out'}", *overrides])
    return make_plan(loaded, dry_run=True, environ=environ or {"PATH": os.environ.get("PATH", "")})


def flag_values(argv: list[str], flag: str) -> list[str]:
    i = argv.index(flag)
    out = []
    for a in argv[i + 1 :]:
        if a.startswith("--"):
            break
        out.append(a)
    return out


def refused(call, *args, **kw) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as e:
        call(*args, **kw)
    return [(p.key, f"{p.message} | {p.fix}") for p in e.value.problems]


# -- Megatron: torch (embedded) and mindspeed-llm --------------------------------------------------------
def test_torch_maps_every_tracker_to_megatron_flags_and_its_own_report_to(tmp_path):
    p = plan(QUICK, tmp_path, "--report_to={project: team, tensorboard: , mlflow: , wandb: , swanlab: }")
    out = os.path.abspath(tmp_path / "out")
    argv = p.step("train").argv
    assert flag_values(argv, "--tensorboard-dir") == [f"{out}/tensorboard"]
    assert flag_values(argv, "--wandb-project") == ["team"]
    assert flag_values(argv, "--wandb-exp-name") == ["quickstart-sft"]
    assert flag_values(argv, "--wandb-save-dir") == [f"{out}/trackers"]
    assert flag_values(argv, "--af-report-to") == ["mlflow", "swanlab"]
    assert p.env["MLFLOW_TRACKING_URI"] == f"sqlite:///{out}/trackers/mlflow/mlflow.db"
    assert p.env["MLFLOW_EXPERIMENT_NAME"] == "team"
    assert p.env["WANDB_MODE"] == "offline" and p.env["SWANLAB_MODE"] == "local"
    assert [s.name for s in p.tracking.specs] == ["tensorboard", "mlflow", "wandb", "swanlab"]
    assert p.tracking.runs_file == f"{out}/trackers/runs.json"
    assert dict(p.tracking.params)["experiment.backend_config.training.lr"] == "0.003"


def test_the_users_own_megatron_flags_and_env_win(tmp_path):
    p = plan(
        QUICK,
        tmp_path,
        "--report_to=[wandb]",
        "--backend_config.training.wandb-project=mine",
        "--env.WANDB_MODE=online",
    )
    argv = p.step("train").argv
    assert argv.count("--wandb-project") == 1 and flag_values(argv, "--wandb-project") == ["mine"]
    assert p.env["WANDB_MODE"] == "online"


def test_mindspeed_llm_gets_megatrons_flags_and_refuses_mlflow(tmp_path, checkout):
    p = plan(
        QUICK, tmp_path, "--backend=mindspeed-llm", "--accelerator=auto", "--report_to=[wandb,tensorboard]"
    )
    argv = p.step("train").argv
    assert flag_values(argv, "--wandb-project") == ["tiny-demo"]
    assert flag_values(argv, "--wandb-exp-name") == ["quickstart-sft"]
    assert flag_values(argv, "--tensorboard-dir") == [os.path.abspath(tmp_path / "out" / "tensorboard")]
    # 26.1.0 refuses wandb-exp-name without its use-wandb switch; 2.1.0 has no such flag
    assert ("--use-wandb" in argv) == (p.facts["mindspeed_llm_version"] == "26.1.0")
    old = plan(
        QUICK,
        tmp_path / "old",
        "--backend=mindspeed-llm",
        "--accelerator=auto",
        "--report_to=[wandb]",
        "--backend_config.mindspeed_llm_version=2.1.0",
    )
    assert "--use-wandb" not in old.step("train").argv and old.facts["mindspeed_llm_version"] == "2.1.0"
    problems = refused(
        plan, QUICK, tmp_path, "--backend=mindspeed-llm", "--accelerator=auto", "--report_to=[mlflow,swanlab]"
    )
    assert [k for k, _ in problems] == ["report_to.mlflow", "report_to.swanlab"]
    assert "backend mindspeed-llm cannot report to mlflow" in problems[0][1]
    assert "mindspeed-llm reaches: tensorboard, wandb" in problems[0][1]


GRPO_QUICK = REPO / "cfgs" / "quickstart_grpo.yaml"


def rl_config(p) -> dict:
    """The rl_config of the MindSpeed-RL yaml the embedded GRPO trainer reads."""
    path = next(f for f in p.files if f.endswith(f"/{TRAIN_CONFIG}.yaml"))
    return yaml.safe_load(p.files[path])["rl_config"]


def test_the_embedded_grpo_trainer_gets_mindspeed_rls_wandb_and_swanlab_switches(tmp_path):
    p = plan(GRPO_QUICK, tmp_path, "--report_to={project: team, run_name: r1, wandb: , swanlab: }")
    out = os.path.abspath(tmp_path / "out")
    rl = rl_config(p)
    assert rl["use_wandb"] is True and rl["wandb_project"] == "team" and rl["wandb_exp_name"] == "r1"
    assert rl["wandb_save_dir"] == f"{out}/trackers"
    assert rl["use_swanlab"] is True and rl["swanlab_project"] == "team" and rl["swanlab_exp_name"] == "r1"
    assert rl["swanlab_mode"] == "local" and rl["swanlab_save_dir"] == f"{out}/trackers/swanlog"
    assert p.env["WANDB_MODE"] == "offline" and p.env["SWANLAB_MODE"] == "local"
    assert [s.name for s in p.tracking.specs] == ["wandb", "swanlab"]


def test_the_embedded_grpo_trainers_own_spelling_wins(tmp_path):
    p = plan(
        GRPO_QUICK,
        tmp_path,
        "--report_to=[wandb]",
        "--backend_config.rl_config.wandb_project=mine",
        "--backend_config.rl_config.use_wandb=true",
    )
    rl = rl_config(p)
    assert rl["wandb_project"] == "mine" and rl["use_wandb"] is True and "use_swanlab" not in rl


def test_the_embedded_grpo_trainer_refuses_mlflow_as_mindspeed_rl_does(tmp_path):
    problems = refused(plan, GRPO_QUICK, tmp_path, "--report_to=[mlflow]")
    assert problems and "backend torch cannot report to mlflow" in problems[0][1]
    assert "torch reaches: tensorboard, wandb, swanlab" in problems[0][1]


# -- LLaMA-Factory ----------------------------------------------------------------------------------------
def lf_yaml(p) -> dict:
    path = next(f for f in p.files if f.endswith("llamafactory_train.yaml"))
    return yaml.safe_load(p.files[path])


def test_llamafactory_gets_report_to_run_name_and_its_swanlab_keys(tmp_path):
    p = plan(LF_QUICK, tmp_path, "--report_to=[tensorboard,mlflow,wandb,swanlab]", environ=NO_LF)
    lf = lf_yaml(p)
    out = os.path.abspath(tmp_path / "out")
    assert lf["report_to"] == ["tensorboard", "mlflow", "wandb"]
    assert lf["run_name"] == p.exp_name and lf["logging_dir"] == f"{out}/tensorboard"
    assert lf["use_swanlab"] is True and lf["swanlab_mode"] == "local"
    assert lf["swanlab_logdir"] == f"{out}/trackers/swanlog" and lf["swanlab_project"] == "tiny-demo"
    assert p.env["MLFLOW_EXPERIMENT_NAME"] == "tiny-demo" and p.env["WANDB_DIR"] == f"{out}/trackers"
    assert dict(p.tracking.spec("mlflow").resume_env) == {"MLFLOW_MAX_LOG_PARAMS": "0"}


def test_llamafactorys_own_spelling_is_not_duplicated(tmp_path):
    p = plan(
        LF_QUICK,
        tmp_path,
        "--report_to=[wandb,mlflow]",
        "--backend_config.training.report_to=[wandb]",
        "--backend_config.training.run_name=mine",
        environ=NO_LF,
    )
    lf = lf_yaml(p)
    assert lf["report_to"] == ["wandb", "mlflow"] and lf["run_name"] == "mine"
    off = plan(
        LF_QUICK, tmp_path, "--report_to=[mlflow]", "--backend_config.training.report_to=none", environ=NO_LF
    )
    assert lf_yaml(off)["report_to"] == "none"


def test_llamafactory_checks_the_swanlab_mode_in_its_own_terms(tmp_path):
    problems = refused(plan, LF_QUICK, tmp_path, "--report_to.swanlab.mode=offline", environ=NO_LF)
    assert any(k == "backend_config.training.swanlab_mode" for k, _ in problems), problems


# -- verl -------------------------------------------------------------------------------------------------
def test_verl_gets_its_loggers_names_and_wandb_run_id(tmp_path, machine):
    exp = verl_helpers.experiment(
        tmp_path,
        verl_helpers.grpo(tmp_path),
        report_to={"project": "rl", "mlflow": {}, "wandb": {}, "swanlab": {}},
    )
    p = verl_helpers.plan_for(exp)
    overrides = verl_helpers.overrides_of(p)
    assert "trainer.logger=[console,mlflow,wandb,swanlab]" in overrides
    assert "trainer.project_name=rl" in overrides and "trainer.experiment_name=grpo" in overrides
    assert p.tracking.spec("wandb").run_id == "rl--grpo"  # verl names its W&B run itself
    assert p.env["SWANLAB_LOG_DIR"].endswith("/trackers/swanlog") and p.env["MLFLOW_EXPERIMENT_NAME"] == "rl"


# -- MindSpeed-MM -----------------------------------------------------------------------------------------
def test_mindspeed_mm_gets_megatrons_wandb_flags_and_refuses_swanlab(tmp_path):
    p = mm_plan_for(tmp_path, {"report_to": ["wandb"]})
    argv = p.step("train").argv
    assert flag_values(argv, "--wandb-project") and flag_values(argv, "--wandb-save-dir")
    problems = refused(mm_plan_for, tmp_path, {"report_to": ["swanlab"]})
    assert problems[0][0] == "report_to.swanlab" and "mindspeed-mm" in problems[0][1]


@pytest.fixture
def machine(monkeypatch):
    from ascendfactory.backends.verl import backend as verl_backend

    monkeypatch.setattr(verl_backend, "detect_accelerator", lambda: "npu")


@pytest.fixture
def checkout(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    from tests.unit.backends.conftest import make_checkout

    root = make_checkout(tmp_path / "MindSpeed-LLM", v2=False)
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(root))
    return root
