"""The mindspeed-rl plan: load decisions, real-run checks, files, install plan and doctor, metric lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from msrl_helpers import DELETE, experiment

from ascendfactory.backends.common.mindspeed_rl_experiment.read import load_yaml
from ascendfactory.backends.mindspeed_rl import environment
from ascendfactory.backends.mindspeed_rl.programs import PROGRAMS_DIR
from ascendfactory.backends.planner import make_plan
from ascendfactory.checkpoints.megatron import write_tracker
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from ascendfactory.plan import Plan

V = {"backend_config": {"mindspeed_rl_version": "master"}}


def plan_for(tmp_path: Path, changes: dict | None = None, *, dry_run: bool = True, environ=None) -> Plan:
    from msrl_helpers import merge

    tree = merge({"backend_config": {"mindspeed_rl_version": "master"}}, changes or {})
    env = {"AF_THIRD_PARTY_DIR": str(tmp_path / "3p"), **(environ or {})}
    return make_plan(load_experiment(experiment(tmp_path, tree)), dry_run=dry_run, environ=env)


def rl_yaml(plan: Plan) -> dict:
    return load_yaml(plan.files[str(Path(plan.output_dir) / "mindspeed_rl_grpo.yaml")])


def test_fresh_start_loads_the_converted_weights(tmp_path, clean_env):
    plan = plan_for(tmp_path)
    actor = rl_yaml(plan)["actor_config"]
    out = Path(plan.output_dir)
    assert actor["load"] == str(out / "converted_hf2mg_weight_TP2PP2")
    assert (actor["finetune"], actor["no_load_optim"], actor["no_load_rng"]) == (True, True, True)
    assert actor["save"] == str(out / "saved_checkpoints")
    assert plan.step("hf2mg").skip_reason is None and plan.step("preprocess").skip_reason is None
    assert (
        plan.step("train").notes[0] == "ckpt_load_type 1: weights only (finetune, no_load_optim, no_load_rng)"
    )


def test_auto_resume_loads_saved_checkpoints_and_keeps_the_reference_on_the_original(tmp_path, clean_env):
    saved = tmp_path / "OUT" / "saved_checkpoints"
    (saved / "iter_0000100" / "mp_rank_00_000").mkdir(parents=True)
    (saved / "iter_0000100" / "mp_rank_00_000" / "model_optim_rng.pt").write_bytes(b"x")
    write_tracker(saved, 100)
    plan = plan_for(tmp_path, {"train_auto_resume": True})
    y = rl_yaml(plan)
    assert y["actor_config"]["load"] == str(saved)
    assert (
        y["actor_config"]["finetune"],
        y["actor_config"]["no_load_optim"],
        y["actor_config"]["no_load_rng"],
    ) == (
        False,
        False,
        False,
    )
    ref = y["rl_config"]["integrated_mode_config"]["ref_model_load_path"]
    assert ref == str(tmp_path / "OUT" / "converted_hf2mg_weight_TP2PP2")
    assert (
        plan.step("train").notes[0].startswith("train_auto_resume: newest complete checkpoint iter_0000100")
    )


def test_given_weights_skip_the_conversion_and_user_flags_win(tmp_path, clean_env):
    plan = plan_for(tmp_path, {"backend_config": {"actor_config": {"load": "weights", "no_load_rng": False}}})
    assert plan.step("hf2mg").skip_reason == f"actor_config.load given: {Path.cwd() / 'weights'}"
    actor = rl_yaml(plan)["actor_config"]
    assert actor["load"] == str(Path.cwd() / "weights") and actor["no_load_rng"] is False


def test_ckpt_load_type_0_and_2(tmp_path, clean_env):
    plan = plan_for(tmp_path, {"ckpt_load_type": 0})
    assert "load" not in rl_yaml(plan)["actor_config"]
    assert "ckpt_load_type 0: GRPO starts from random weights (nothing is loaded)" in plan.warnings
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, {"ckpt_load_type": 2})
    assert e.value.problems[0].key == "user_converted_ckpt_path"
    plan = plan_for(tmp_path, {"ckpt_load_type": 2, "user_converted_ckpt_path": str(tmp_path / "prev")})
    assert rl_yaml(plan)["actor_config"]["finetune"] is False
    assert any("reference model loads the resumed actor weights" in w for w in plan.warnings)


def test_save_elsewhere_is_refused(tmp_path, clean_env):
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, {"backend_config": {"actor_config": {"save": "./ckpt"}}})
    assert [p.key for p in e.value.problems] == ["backend_config.actor_config.save"]


def test_a_real_run_checks_the_machine_and_the_inputs(tmp_path, clean_env):
    with pytest.raises(ConfigError) as e:
        plan_for(
            tmp_path,
            {"backend_config": {"megatron_training": {"data_path": str(tmp_path / "d/data")}}},
            dry_run=False,
        )
    got = [(p.key, p.message.split(":")[0]) for p in e.value.problems]
    assert got[0][0] == "scripts_dir" and "MindSpeed-RL directory" in got[0][1]
    assert got[1] == ("(environment)", "Ascend toolkit")
    keys = [k for k, _ in got]
    assert "backend_config.megatron_training.tokenizer_name_or_path" in keys
    assert "backend_config.megatron_training.data_path" in keys
    data = next(p for p in e.value.problems if p.key.endswith("data_path"))
    assert data.message.startswith(
        f"preprocessed data missing: {tmp_path}/d/data_packed_input_ids_document.bin"
    )


def test_the_placement_cpus_of_this_machine(tmp_path, clean_env, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    plan = plan_for(tmp_path)
    (w,) = [w for w in plan.warnings if "num_cpus_for_placement_group" in w]
    assert w.startswith(
        "rl_config.num_cpus_for_placement_group: each node needs 129 CPUs (8 per NPU x 16 NPUs "
        "+ 1 for the rule reward) but this machine has 64"
    )
    plan = plan_for(tmp_path, {"backend_config": {"rl_config": {"num_cpus_for_placement_group": 2}}})
    assert not [w for w in plan.warnings if "num_cpus_for_placement_group" in w]


def test_worker_nodes_join_and_leave_the_conversion_to_node_0(tmp_path, clean_env):
    plan = plan_for(
        tmp_path,
        {
            "env": {"NNODES": 2, "NODE_RANK": 1},
            "shared_filesystem": False,
            "backend_config": {"megatron_training": {"global_batch_size": 64}},
        },
    )
    train = plan.step("train")
    assert train.argv[2:5] == ["worker", "--address", "10.0.0.1:6766"]
    assert plan.step("mg2hf").skip_reason == "NODE_RANK 0 converts the trained weights"
    assert plan.step("plot").skip_reason == "the metrics are printed on node 0"
    assert plan.step("hf2mg").skip_reason is None  # each node converts for its own disk


def test_dry_run_json_names_the_version_and_the_metrics(tmp_path, clean_env):
    plan = plan_for(tmp_path).to_dict()
    assert plan["facts"]["mindspeed_rl_version"] == "master" and plan["facts"]["actor_dp"] == 4
    assert plan["logs"]["plot_metrics"] == ["math_17k_acc_rewards/mean", "response_length/mean"]
    assert plan["logs"]["summary_metrics"][-3:] == ["e2e_tps", "update_tps", "vllm_tps"]
    assert plan["checkpoints"]["scheme"] == "megatron"


def test_install_plan_and_doctor(tmp_path, clean_env):
    steps = environment.install_plan(str(tmp_path))
    shown = [s.display() for s in steps]
    assert shown[0].startswith("git clone -b 2.3.0 https://gitcode.com/Ascend/MindSpeed-RL.git")
    assert any("checkout 09b8c1253af02abf62f9056e3a4e5cba78b03d7a" in s for s in shown)
    assert any("checkout a2c0733b9c8674e240a0a7607ed3f973115cc6b7" in s for s in shown)
    assert any("-b core_v0.12.1" in s for s in shown)
    assert any(s.startswith("cp -r") and s.endswith("MindSpeed-RL/") and "mindspeed_llm" in s for s in shown)
    assert shown[-1].endswith("antlr4-python3-runtime==4.9.3 --no-deps")
    checks = {c.name: c for c in environment.checks({"AF_THIRD_PARTY_DIR": str(tmp_path)})}
    assert checks["MindSpeed-RL checkout"].status == "missing"
    assert checks["MindSpeed-LLM converters"].status == "warn"
    assert checks["python: ray"].status in ("ok", "missing")


def test_metric_lines_copies_only_the_iteration_lines(tmp_path):
    program = (
        "import sys\n"
        "print('(train pid=1) \\x1b[36m2026 - INFO - [x] iteration: 1 / 2 | e2e_tps : 1.0000 \\x1b[0m')\n"
        "print('other line')\n"
        "print('iteration: 2 / 2 | e2e_tps : 2.0000 ', file=sys.stderr)\n"
        "sys.exit(7)\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            f"{PROGRAMS_DIR}/metric_lines.py",
            "--match",
            r"iteration:\s*\d+\s*/\s*\d+",
            "--to",
            str(tmp_path / "logs" / "grpo_metrics-{time}.log"),
            "--",
            sys.executable,
            "-c",
            program,
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 7
    assert "other line" in out.stdout and "\x1b[36m" in out.stdout  # passed through unchanged
    (log,) = (tmp_path / "logs").glob("grpo_metrics-2*.log")
    assert log.read_text().splitlines() == [
        "(train pid=1) 2026 - INFO - [x] iteration: 1 / 2 | e2e_tps : 1.0000 ",
        "iteration: 2 / 2 | e2e_tps : 2.0000 ",
    ]


def test_an_unknown_backend_config_section_and_version(tmp_path, clean_env):
    with pytest.raises(ConfigError) as e:
        plan_for(
            tmp_path,
            {"backend_config": {"mindspeed_rl_version": "9.9", "trainer": {}, "preprocess_data": DELETE}},
        )
    assert [p.key for p in e.value.problems][:2] == [
        "backend_config.mindspeed_rl_version",
        "backend_config.trainer",
    ]


@pytest.mark.parametrize("value", ["", "configs/envs/no_such_runtime_env.yaml"])
def test_a_runtime_env_path_naming_no_file_is_refused(tmp_path, clean_env, value):
    # cli/train_grpo.py's main opens it in the MindSpeed-RL directory before Ray starts (found by diffval)
    rl_dir = tmp_path / "MindSpeed-RL"
    for script in environment.missing_entry_scripts(str(rl_dir)):
        (rl_dir / script).parent.mkdir(parents=True, exist_ok=True)
        (rl_dir / script).write_text("")
    (rl_dir / "configs" / "envs").mkdir(parents=True)
    (rl_dir / "configs" / "envs" / "runtime_env.yaml").write_text("env_vars: {}\n")
    changes = {"scripts_dir": str(rl_dir), "backend_config": {"rl_config": {"runtime_env_path": value}}}
    with pytest.raises(ConfigError) as err:
        plan_for(tmp_path, changes)
    assert any(p.key == "backend_config.rl_config.runtime_env_path" for p in err.value.problems)
    changes["backend_config"]["rl_config"]["runtime_env_path"] = "configs/envs/runtime_env.yaml"
    assert plan_for(tmp_path, changes).step("train") is not None


def test_a_cpu_count_of_the_wrong_kind_is_named_not_a_crash(tmp_path, clean_env):
    changes = {"backend_config": {"rl_config": {"num_cpus_for_local_task": "abc", "rule_reward": True}}}
    with pytest.raises(ConfigError) as err:
        plan_for(tmp_path, changes)
    assert [p.key for p in err.value.problems] == ["backend_config.rl_config.num_cpus_for_local_task"]
