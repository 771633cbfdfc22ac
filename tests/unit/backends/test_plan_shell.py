"""The backend toolkit's plan shell (`PlanContext.new_plan`) and the sources `make_plan` gives a backend's
problems (`planner.with_sources`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendfactory.backends.base import EXP_CONFIG
from ascendfactory.backends.planner import build_context, with_sources
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import Problem
from ascendfactory.plan import LogNaming, LogSpec, Plan, ThroughputSpec
from tests.unit.backends.llamafactory import test_llamafactory_plan as lf
from tests.unit.backends.mindspeed_llm import test_mindspeed_llm as llm
from tests.unit.backends.mindspeed_mm import mm_helpers
from tests.unit.backends.torch import test_torch_backend_plan as torch_sft
from tests.unit.backends.torch import test_torch_grpo_plan as grpo
from tests.unit.backends.torch.test_torch_grpo_plan import model_dir  # noqa: F401 - a fixture
from tests.unit.backends.verl import test_verl_plan as verl
from tests.unit.backends.verl.test_verl_plan import machine  # noqa: F401 - a fixture

QUICK = Path(__file__).resolve().parents[3] / "cfgs" / "quickstart.yaml"
MACHINE = {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2"}


def context(*overrides: str):
    args = ["--env.NNODES=2", "--accelerator=auto", *overrides]  # devices: MACHINE's visibility variable
    return build_context(load_experiment(QUICK, args), MACHINE)


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


def test_option_problems_names_each_key_outside_a_flat_option_list():
    from ascendfactory.backends.registry import get_backend

    ctx = context()
    backend = get_backend(ctx.config.backend)
    problems = backend.option_problems(ctx, {"training": int, "preprocess_data": dict, "other": str})
    assert [(p.key, p.message, p.fix) for p in problems] == [
        (f"backend_config.{key}", f"not an option of {backend.name}", "use: training, preprocess_data, other")
        for key in ("convert_ckpt_hf2mg", "convert_ckpt_mg2hf")
    ]
    assert all(p.source == str(QUICK) for p in problems)  # the file the key came from
    assert backend.option_problems(ctx, ctx.config.backend_config) == []


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


# Each backend's plan of a small valid experiment, with top-level keys `top` (its tests' own helpers).
def _torch(tmp_path: Path, request: pytest.FixtureRequest, top: dict) -> Plan:
    args = [f"--{k}={v}" for k, v in top.items()]
    return torch_sft.plan_for(f"--af_output_dir={tmp_path}", "--env.NPUS_PER_NODE=2", *args)


def _grpo(backend: str):
    def plan(tmp_path: Path, request: pytest.FixtureRequest, top: dict) -> Plan:
        model = request.getfixturevalue("model_dir")
        return grpo.plan_for(tmp_path, model, *(f"--{k}={v}" for k, v in top.items()), backend=backend)

    return plan


def _llamafactory(tmp_path: Path, request: pytest.FixtureRequest, top: dict) -> Plan:
    return lf.plan_for(tmp_path, *(f"--{k}={v}" for k, v in top.items()))


def _mindspeed_llm(tmp_path: Path, request: pytest.FixtureRequest, top: dict) -> Plan:
    request.getfixturevalue("clean_env")
    return llm.plan_for(tmp_path, top)


def _mindspeed_mm(tmp_path: Path, request: pytest.FixtureRequest, top: dict) -> Plan:
    request.getfixturevalue("clean_env")
    mm_helpers.make_hf_dir(tmp_path / "HF")
    return mm_helpers.plan_for(tmp_path, top)


def _verl(tmp_path: Path, request: pytest.FixtureRequest, top: dict) -> Plan:
    request.getfixturevalue("machine")
    return verl.plan_for(verl.experiment(tmp_path, verl.grpo(tmp_path), stage="grpo", **top))


PLANNERS = {
    "torch": _torch,
    "torch-grpo": _grpo("torch"),
    "mindspeed-rl": _grpo("mindspeed-rl"),
    "llamafactory": _llamafactory,
    "mindspeed-llm": _mindspeed_llm,
    "mindspeed-mm": _mindspeed_mm,
    "verl": _verl,
}


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_every_backends_plan_waits_for_nodes_as_the_experiment_says_and_names_its_device_source(
    name, tmp_path, request
):
    """The runner's node waits (rendezvous, node 0's outputs, Ray's nodes) read `plan.policy`, which every
    backend takes from the shell: `node_wait_timeout_s` when given, else RunPolicy's 1800 s. The shell's
    `devices_source` fact is the one the planner records for env.NPUS_PER_NODE."""
    (tmp_path / "given").mkdir(), (tmp_path / "default").mkdir()
    given = PLANNERS[name](tmp_path / "given", request, {"node_wait_timeout_s": 90})
    assert given.policy.node_wait_timeout_s == 90 and given.policy.collective_timeout_s == 90
    default = PLANNERS[name](tmp_path / "default", request, {})
    assert default.policy.node_wait_timeout_s == 1800
    for plan in (given, default):
        assert plan.facts["devices_source"] == plan.facts["topology"]["NPUS_PER_NODE"]["source"] != ""
