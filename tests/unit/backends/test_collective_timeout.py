"""`node_wait_timeout_s` is the collective timeout of every torchrun the product launches, each framework in
its own terms: AF_DISTRIBUTED_TIMEOUT_S (the embedded trainers, set by the runner on every torchrun),
Megatron's `--distributed-timeout-minutes` (mindspeed-llm, mindspeed-mm), LLaMA-Factory's `ddp_timeout`.
Unset, each framework keeps its own default; a value the user gives the framework's own key wins."""

from __future__ import annotations

import pytest
import yaml

from ascendfactory.backends.common.megatron.skeleton import TIMEOUT_FLAG
from ascendfactory.pipeline.launchers import launcher_for
from ascendfactory.plan import Plan, RunPolicy, Torchrun
from tests.unit.backends.llamafactory import test_llamafactory_plan as lf
from tests.unit.backends.mindspeed_llm import test_mindspeed_llm as llm
from tests.unit.backends.mindspeed_mm import mm_helpers
from tests.unit.backends.torch.test_torch_backend_plan import plan_for as torch_plan_for
from tests.unit.backends.torch.test_torch_grpo_plan import model_dir  # noqa: F401 - a fixture
from tests.unit.backends.torch.test_torch_grpo_plan import plan_for as grpo_plan_for

FLAG = f"--{TIMEOUT_FLAG}"


def runner_env(plan: Plan) -> dict[str, str]:
    """What the runner adds to the environment of the plan's train step (a torchrun)."""
    launch = plan.step("train").launch
    assert isinstance(launch, Torchrun)
    return launcher_for(launch, plan.policy).env()


def flag_value(argv: list[str]) -> str | None:
    return argv[argv.index(FLAG) + 1] if FLAG in argv else None


def lf_yaml(plan: Plan) -> dict:
    return yaml.safe_load(next(text for path, text in plan.files.items() if path.endswith("train.yaml")))


def test_the_policy_gives_whole_seconds():
    assert RunPolicy(node_wait_timeout_s=90.7).collective_timeout_s == 90
    assert RunPolicy().collective_timeout_s == 1800


def test_the_embedded_trainer_gets_it_from_the_runner(tmp_path):
    plan = torch_plan_for(f"--af_output_dir={tmp_path}", "--env.NPUS_PER_NODE=2", "--node_wait_timeout_s=90")
    assert runner_env(plan) == {"AF_DISTRIBUTED_TIMEOUT_S": "90"}
    assert flag_value(plan.step("train").argv) is None  # to the second, not rounded to minutes
    default = torch_plan_for(f"--af_output_dir={tmp_path}", "--env.NPUS_PER_NODE=2")
    assert runner_env(default) == {"AF_DISTRIBUTED_TIMEOUT_S": "1800"}


def test_the_embedded_grpo_trainer_gets_it_from_the_runner(tmp_path, model_dir):  # noqa: F811
    plan = grpo_plan_for(tmp_path, model_dir, "--node_wait_timeout_s=75")
    assert runner_env(plan) == {"AF_DISTRIBUTED_TIMEOUT_S": "75"}


def test_mindspeed_llm_gets_megatrons_flag_in_whole_minutes(tmp_path, clean_env):
    plan = llm.plan_for(tmp_path, {"node_wait_timeout_s": 90})
    assert flag_value(plan.step("train").argv) == "2"  # 90 s rounded up: never shorter than asked
    assert runner_env(plan) == {"AF_DISTRIBUTED_TIMEOUT_S": "90"}
    assert flag_value(llm.plan_for(tmp_path).step("train").argv) is None  # MindSpeed-LLM's default
    own = {"node_wait_timeout_s": 90, "backend_config": {"training": {TIMEOUT_FLAG: 45}}}
    assert flag_value(llm.plan_for(tmp_path, own).step("train").argv) == "45"


def test_mindspeed_mm_gets_megatrons_flag_in_whole_minutes(tmp_path, clean_env):
    mm_helpers.make_hf_dir(tmp_path / "HF")
    plan = mm_helpers.plan_for(tmp_path, {"node_wait_timeout_s": 600})
    argv = plan.step("train").argv
    assert flag_value(argv) == "10" and argv.count(FLAG) == 1
    own = {"node_wait_timeout_s": 600, "backend_config": {"training": {TIMEOUT_FLAG: 45}}}
    assert flag_value(mm_helpers.plan_for(tmp_path, own).step("train").argv) == "45"


@pytest.mark.parametrize("nproc", [1, 2])
def test_llamafactory_gets_ddp_timeout(tmp_path, nproc):
    plan = lf.plan_for(tmp_path, "--node_wait_timeout_s=90", f"--env.NPUS_PER_NODE={nproc}")
    assert lf_yaml(plan)["ddp_timeout"] == 90
    assert "ddp_timeout" not in lf_yaml(lf.plan_for(tmp_path))  # LLaMA-Factory's default (1800 s)
    own = lf.plan_for(tmp_path, "--node_wait_timeout_s=90", "--backend_config.training.ddp_timeout=300")
    assert lf_yaml(own)["ddp_timeout"] == 300
