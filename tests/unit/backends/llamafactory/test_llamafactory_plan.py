"""The llamafactory backend's plan, without LLaMA-Factory: the yaml it writes, the steps, the resume rule."""

from __future__ import annotations

import os

import pytest
import yaml

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

QUICK = REPO / "cfgs" / "quickstart_llamafactory.yaml"
NO_ENV = {"AF_LLAMAFACTORY_ENV": "/nonexistent/lf-env", "PATH": os.environ.get("PATH", "")}


def plan_for(tmp_path, *overrides: str, environ=None):
    loaded = load_experiment(QUICK, [f"--af_output_dir={tmp_path}", *overrides])
    return make_plan(loaded, dry_run=True, environ=environ or NO_ENV)


def lf_yaml(plan) -> dict:
    path = next(p for p in plan.files if p.endswith("llamafactory_train.yaml"))
    return yaml.safe_load(plan.files[path])


def test_quickstart_plan_writes_the_yaml_registers_the_data_and_runs_four_steps(tmp_path):
    plan = plan_for(tmp_path)
    assert [(s.name, s.role.value) for s in plan.steps] == [
        ("check", "check"),
        ("train", "train"),
        ("merge", "export"),
        ("plot", "plot"),
    ]
    cfg = lf_yaml(plan)
    assert cfg["output_dir"] == str(tmp_path) and cfg["stage"] == "sft" and cfg["do_train"] is True
    assert cfg["dataset"] == "demo_sft" and cfg["dataset_dir"] == str(tmp_path / "lf_data")
    assert cfg["plot_loss"] is False and cfg["include_num_input_tokens_seen"] is True
    assert cfg["overwrite_output_dir"] is True and "resume_from_checkpoint" not in cfg
    assert cfg["save_total_limit"] == 2
    train = plan.step("train")
    assert train.argv[1:] == ["train", str(tmp_path / "llamafactory_train.yaml")]
    assert train.argv[0] == "/nonexistent/lf-env/bin/llamafactory-cli"
    assert train.env["PATH"].startswith("/nonexistent/lf-env/bin" + os.pathsep)
    assert plan.logs.metrics_file == str(tmp_path / "trainer_log.jsonl") and plan.logs.loss_rank == "first"
    assert plan.checkpoints.scheme == "hf_trainer"
    assert any("LLaMA-Factory environment /nonexistent/lf-env" in w for w in plan.warnings)
    merge = yaml.safe_load(plan.files[str(tmp_path / "llamafactory_merge.yaml")])
    assert merge["adapter_name_or_path"] == str(tmp_path) and merge["export_dir"] == str(
        tmp_path / "lora_merged"
    )


def test_several_processes_run_llamafactorys_launcher_under_our_torchrun(tmp_path):
    plan = plan_for(tmp_path, "--env.NPUS_PER_NODE=2")
    argv = plan.step("train").argv
    assert argv[1:3] == ["-m", "torch.distributed.run"] and argv[argv.index("--nproc_per_node") + 1] == "2"
    assert argv[-2].endswith(os.path.join("llamafactory", "launcher.py")) and argv[-1].endswith(".yaml")
    assert plan.facts["global_batch"] == 4 * 1 * 2


def test_auto_resume_picks_the_newest_complete_checkpoint(tmp_path):
    for step, complete in ((10, True), (20, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    cfg = lf_yaml(plan_for(tmp_path))
    assert cfg["resume_from_checkpoint"] == str(tmp_path / "checkpoint-10")
    assert cfg["overwrite_output_dir"] is False
    fresh = lf_yaml(plan_for(tmp_path, "--train_auto_resume=false"))
    assert "resume_from_checkpoint" not in fresh and fresh["overwrite_output_dir"] is True


def test_a_multi_process_cpu_resume_runs_on_one_process_with_the_same_global_batch(tmp_path, monkeypatch):
    monkeypatch.setattr("ascendfactory.backends.llamafactory.backend.detect_accelerator", lambda: "cpu")
    (tmp_path / "checkpoint-5").mkdir()
    (tmp_path / "checkpoint-5" / "trainer_state.json").write_text("{}")
    plan = plan_for(tmp_path, "--env.NPUS_PER_NODE=2")
    cfg = lf_yaml(plan)
    assert cfg["gradient_accumulation_steps"] == 2 and plan.step("train").launch.kind == "process"
    assert any("resuming a 2-process CPU run on one process" in w for w in plan.warnings)
    with pytest.raises(ConfigError, match="multi-node CPU run cannot resume"):
        plan_for(tmp_path, "--env.NPUS_PER_NODE=2", "--env.NNODES=2")


def test_load_types_map_to_llamafactory_keys(tmp_path):
    assert lf_yaml(plan_for(tmp_path, "--ckpt_load_type=0"))["train_from_scratch"] is True
    other = tmp_path / "weights"
    assert lf_yaml(plan_for(tmp_path, "--ckpt_load_type=1", f"--user_converted_ckpt_path={other}"))[
        "model_name_or_path"
    ] == str(other)
    resumed = lf_yaml(
        plan_for(
            tmp_path,
            "--ckpt_load_type=2",
            f"--user_converted_ckpt_path={other}/checkpoint-7",
            "--train_auto_resume=false",
        )
    )
    assert resumed["resume_from_checkpoint"] == f"{other}/checkpoint-7"


@pytest.mark.parametrize(
    "override,key,words",
    [
        ("--backend_config.training.output_dir=/x", "backend_config.training.output_dir", "af_output_dir"),
        (
            "--backend_config.training.overwrite_output_dir=true",
            "backend_config.training.overwrite_output_dir",
            "train_auto_resume",
        ),
        ("--stage=ppo", "backend_config.training.stage", "one of: pt, sft, dpo"),
        (
            "--backend_config.training.finetuning_type=qlora",
            "backend_config.training.finetuning_type",
            "lora, oft, freeze, full",
        ),
        (
            "--backend_config.training.learnin_rate=0.1",
            "backend_config.training.learnin_rate",
            "learning_rate",
        ),
        ("--backend_config.training.max_steps=ten", "backend_config.training.max_steps", "not an integer"),
        ("--backend_config.training.template=qwen25", "backend_config.training.template", "did you mean"),
        (
            "--backend_config.training.per_device_train_batch_size=0",
            "backend_config.training.per_device_train_batch_size",
            "positive",
        ),
        ("--backend_config.merj=1", "backend_config.merj", "merge_lora"),
    ],
)
def test_bad_keys_are_named_with_a_fix(tmp_path, override, key, words):
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, override)
    text = str(e.value)
    assert key in text and words in text, text


def _trainer_state(tmp_path, step: int, *, max_steps: int, epochs: float = 1.0) -> None:
    import json

    (tmp_path / f"checkpoint-{step}").mkdir()
    state = {"global_step": step, "max_steps": max_steps, "num_train_epochs": epochs}
    (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(state))


def test_a_finished_run_is_recognised_and_training_skipped(tmp_path):
    _trainer_state(tmp_path, 30, max_steps=30)  # the quickstart's max_steps: 30
    plan = plan_for(tmp_path)
    assert plan.step("train").skip_reason.startswith("complete: checkpoint-30 is at the run's end (step 30)")
    assert plan.step("check").skipped
    more = plan_for(tmp_path, "--backend_config.training.max_steps=40")
    assert not more.step("train").skipped
    assert more.step("train").notes == [f"resumes from {tmp_path / 'checkpoint-30'} (resume_from_checkpoint)"]


def test_an_unfinished_checkpoint_resumes(tmp_path):
    _trainer_state(tmp_path, 20, max_steps=30)
    assert not plan_for(tmp_path).step("train").skipped


def test_top_level_model_and_dataset_mean_what_they_mean_on_torch(tmp_path):
    model, data = str(REPO / "demo_assets" / "tiny-qwen2"), str(REPO / "cfgs" / "data" / "demo_sft.jsonl")
    plan = plan_for(
        tmp_path,
        "--backend_config.training.model_name_or_path=null",
        "--backend_config.training.dataset=null",
        f"--model_name_or_path={model}",
        f"--dataset={data}",
    )
    cfg = lf_yaml(plan)
    assert cfg["model_name_or_path"] == model and cfg["dataset"] == "demo_sft"
    both = plan_for(tmp_path, "--model_name_or_path=/elsewhere")
    assert any(w.startswith("model_name_or_path: /elsewhere (top level) is not used") for w in both.warnings)
    with pytest.raises(ConfigError, match="LLaMA-Factory tokenizes its own data"):
        plan_for(tmp_path, "--processed_data_dir=/p")


def test_save_total_limit_in_both_places_is_refused_naming_both_keys(tmp_path):
    # the quickstart sets save_total_limit: 2 at the top level; LLaMA-Factory has one save_total_limit
    with pytest.raises(ConfigError) as err:
        plan_for(tmp_path, "--backend_config.training.save_total_limit=5")
    problem = err.value.problems[0]
    assert problem.key == "backend_config.training.save_total_limit"
    assert "save_total_limit: 2 (top level)" in problem.message and "remove" in problem.fix


def test_save_total_limit_in_one_place_is_honoured(tmp_path):
    assert (
        lf_yaml(plan_for(tmp_path, "--backend_config.training.save_total_limit=2"))["save_total_limit"] == 2
    )
    loaded = load_experiment(
        QUICK, [f"--af_output_dir={tmp_path}", "--backend_config.training.save_total_limit=5"]
    )
    tree = dict(loaded.tree)
    tree.pop("save_total_limit")
    exp = tmp_path / "no_top.yaml"
    exp.write_text(yaml.safe_dump(tree))
    plan = make_plan(load_experiment(exp), dry_run=True, environ=NO_ENV)
    assert lf_yaml(plan)["save_total_limit"] == 5
