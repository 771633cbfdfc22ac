"""The backend toolkit's plan shell (`PlanContext.new_plan`) and the sources `make_plan` gives a backend's
problems (`planner.with_sources`)."""

from __future__ import annotations

from pathlib import Path

from ascendfactory.backends.base import EXP_CONFIG
from ascendfactory.backends.planner import build_context, with_sources
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import Problem
from ascendfactory.plan import LogNaming, LogSpec, ThroughputSpec

QUICK = Path(__file__).resolve().parents[3] / "cfgs" / "quickstart.yaml"
MACHINE = {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2"}


def context(*overrides: str):
    return build_context(load_experiment(QUICK, ["--env.NNODES=2", *overrides]), MACHINE)


def logs() -> LogSpec:
    return LogSpec(
        format="megatron",
        naming=LogNaming(prefix="p"),
        loss_rank="last",
        throughput=ThroughputSpec("megatron"),
    )


def test_the_shell_fills_identity_policy_files_and_the_common_facts(tmp_path):
    ctx = context("--env.FOO=bar")
    warnings = ["kept"]
    plan = ctx.new_plan(str(tmp_path), logs(), warnings=warnings, facts={"tp": 2})
    cfg = ctx.config
    assert (plan.backend, plan.exp_name, plan.model_name) == (cfg.backend, cfg.exp_name, cfg.af_model_name)
    assert plan.source == str(QUICK) and plan.policy == ctx.run_policy() and plan.env == {"FOO": "bar"}
    assert list(plan.files) == [str(tmp_path / EXP_CONFIG)]
    assert "exp_name: quickstart-sft" in plan.files[str(tmp_path / EXP_CONFIG)]
    assert plan.facts == {
        "world_size": 6,
        "nnodes": 2,
        "devices_per_node": 3,
        "devices_source": ctx.devices.source,
        "tp": 2,
    }
    warnings.append("later")  # the backend's list, not a copy
    assert plan.warnings == ["kept", "later"]
    assert ctx.log_prefix == "tiny-demo-quickstart-sft"


def test_a_backends_own_facts_and_files_win(tmp_path):
    ctx = context()
    own = str(tmp_path / EXP_CONFIG)
    plan = ctx.new_plan(
        str(tmp_path),
        logs(),
        facts={"world_size": 1, "devices_per_node": 1},
        files={own: "framework's own\n", str(tmp_path / "x.yaml"): "x\n"},
    )
    assert plan.facts["world_size"] == 1 and plan.facts["devices_per_node"] == 1 and plan.facts["nnodes"] == 2
    assert plan.files == {own: "framework's own\n", str(tmp_path / "x.yaml"): "x\n"}


def test_a_problem_without_a_source_gets_its_keys_unless_it_is_about_the_machine():
    loaded = load_experiment(QUICK, ["--backend_config.training.seed=3"])
    got = with_sources(
        loaded,
        [
            Problem("backend_config.training.seed", "m"),
            Problem("backend_config.training.lr", "m"),
            Problem("(environment)", "Ascend toolkit: missing"),
            Problem("backend_config.training.lr", "m", source="elsewhere"),
        ],
    )
    assert [p.source for p in got] == ["command line", str(QUICK), "", "elsewhere"]
