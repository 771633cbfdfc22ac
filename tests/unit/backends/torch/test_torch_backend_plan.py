"""The embedded backend's plan: skip decisions, the load rule, auto-resume, retention-safe inspection."""

from __future__ import annotations

import os

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

QUICK = REPO / "cfgs" / "quickstart.yaml"


def plan_for(*overrides: str, dry_run: bool = True):
    return make_plan(load_experiment(QUICK, list(overrides)), dry_run=dry_run)


def train_argv(plan) -> list[str]:
    argv = plan.step("train").argv
    return argv[argv.index("ascendfactory.engine.train") + 1 :]


def test_default_plan_runs_every_step_with_finetune_flags(tmp_path):
    plan = plan_for(f"--af_output_dir={tmp_path}")
    assert [s.name for s in plan.steps] == ["preprocess", "data-fit", "hf2mg", "train", "mg2hf", "plot"]
    assert not any(s.skipped for s in plan.steps)
    argv = train_argv(plan)
    assert argv[argv.index("--load") + 1] == f"{tmp_path}/converted_weight_TP1PP1"
    assert {"--finetune", "--no-load-optim", "--no-load-rng", "--is-instruction-dataset"} <= set(argv)
    assert argv[argv.index("--data-path") + 1] == f"{tmp_path}/preprocess_data/demo_sft"
    torchrun = plan.step("train").argv
    assert torchrun[torchrun.index("--nproc_per_node") + 1] == "2"
    assert plan.facts["dp"] == 2


@pytest.mark.parametrize(
    "overrides,kind,reason",
    [
        (["--backend_config.training.data-path=/d/x"], "preprocess", "preprocessed data given: /d/x"),
        (["--ckpt_load_type=0"], "hf2mg", "ckpt_load_type 0"),
        (["--user_converted_ckpt_path=/w/conv"], "hf2mg", "user_converted_ckpt_path given: /w/conv"),
        (["--backend_config.convert_ckpt_mg2hf=null"], "mg2hf", "final conversion disabled"),
        (["--convert_mg2hf_at_last=false"], "mg2hf", "final conversion disabled"),
    ],
)
def test_skip_reasons(tmp_path, overrides, kind, reason):
    plan = plan_for(f"--af_output_dir={tmp_path}", *overrides)
    assert reason in (plan.step(kind).skip_reason or "")


def test_pretraining_data_path_gets_the_text_document_suffix(tmp_path):
    plan = plan_for(
        f"--af_output_dir={tmp_path}",
        "--stage=pt",
        "--backend_config.preprocess_data.handler-name=GeneralPretrainHandler",
    )
    argv = train_argv(plan)
    assert argv[argv.index("--data-path") + 1].endswith("preprocess_data/demo_sft_text_document")
    assert "--is-instruction-dataset" not in argv and "--stage" not in argv


def test_handler_and_stage_must_agree(tmp_path):
    with pytest.raises(ConfigError, match="makes pre-training data but stage is sft"):
        plan_for(
            f"--af_output_dir={tmp_path}",
            "--backend_config.preprocess_data.handler-name=GeneralPretrainHandler",
        )


def test_ckpt_load_type_2_is_a_true_resume_and_needs_a_path(tmp_path):
    with pytest.raises(ConfigError, match="ckpt_load_type 2"):
        plan_for(f"--af_output_dir={tmp_path}", "--ckpt_load_type=2")
    plan = plan_for(f"--af_output_dir={tmp_path}", "--ckpt_load_type=2", "--user_converted_ckpt_path=/w/run1")
    argv = train_argv(plan)
    assert argv[argv.index("--load") + 1] == "/w/run1" and "--finetune" not in argv


def _fake_checkpoint(root, it: int, tracker: int | None = None) -> None:
    d = os.path.join(root, f"iter_{it:07d}", "mp_rank_00")
    os.makedirs(d)
    open(os.path.join(d, "model_optim_rng.pt"), "wb").close()
    if tracker is not None:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(tracker))


def test_auto_resume_wins_over_user_path_when_a_complete_checkpoint_exists(tmp_path):
    saved = tmp_path / "saved_checkpoints"
    _fake_checkpoint(str(saved), 40, tracker=40)
    plan = plan_for(f"--af_output_dir={tmp_path}", "--user_converted_ckpt_path=/w/conv")
    argv = train_argv(plan)
    assert argv[argv.index("--load") + 1] == str(saved)
    assert "--finetune" not in argv and "--no-load-optim" not in argv
    assert "iter_0000040" in plan.step("train").notes[0]
    assert "train_auto_resume" in plan.step("hf2mg").skip_reason


def test_tracker_pointing_at_a_missing_dir_is_not_resumed(tmp_path):
    saved = tmp_path / "saved_checkpoints"
    _fake_checkpoint(str(saved), 40, tracker=80)
    argv = train_argv(plan_for(f"--af_output_dir={tmp_path}"))
    assert "--finetune" in argv  # falls back to ckpt_load_type 1


def test_lora_refuses_resume(tmp_path):
    saved = tmp_path / "saved_checkpoints"
    _fake_checkpoint(str(saved), 40, tracker=40)
    with pytest.raises(ConfigError, match="LoRA fine-tuning cannot resume"):
        plan_for(f"--af_output_dir={tmp_path}", "--backend_config.training.lora-r=8")


def test_unknown_and_refused_training_flags_fail_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError) as e:
        plan_for(f"--af_output_dir={tmp_path}", "--backend_config.training.lr-decay=cosine")
    assert "did you mean: lr-decay-style" in str(e.value)
    with pytest.raises(ConfigError) as e:
        plan_for(
            f"--af_output_dir={tmp_path}",
            "--backend_config.training.context-parallel-size=2",
            "--env.NPUS_PER_NODE=4",
        )
    assert "context parallelism" in str(e.value)


def test_missing_inputs_are_errors_on_a_real_run_only(tmp_path):
    over = [f"--af_output_dir={tmp_path}", "--backend_config.preprocess_data.input=/nope/data.jsonl"]
    plan_for(*over)  # dry run: fine
    with pytest.raises(ConfigError, match="/nope/data.jsonl does not exist"):
        plan_for(*over, dry_run=False)


def test_multi_node_plan_runs_conversion_on_node0_only(tmp_path):
    plan = plan_for(
        f"--af_output_dir={tmp_path}",
        "--env.NNODES=2",
        "--env.NODE_RANK=1",
        "--backend_config.training.global-batch-size=16",
    )
    assert plan.step("hf2mg").only_node0 and plan.step("preprocess").only_node0
    torchrun = plan.step("train").argv
    assert torchrun[torchrun.index("--node_rank") + 1] == "1" and plan.facts["world_size"] == 4


def test_the_plan_carries_the_errors_auto_resume_does_not_retry(tmp_path):
    from ascendfactory.backends import device_fit, ports

    unretryable = plan_for(f"--af_output_dir={tmp_path}").policy.unretryable
    # the trainer's configuration problems, its NaN check, a busy port and a rank without a device
    expected = ("configuration problem", "found NaN in", *ports.UNRETRYABLE, *device_fit.UNRETRYABLE)
    assert unretryable == expected


@pytest.mark.parametrize(
    "key",
    [
        "seq-length",
        "train-iters",
        "global-batch-size",
        "micro-batch-size",
        "tensor-model-parallel-size",
        "pipeline-model-parallel-size",
    ],
)
@pytest.mark.parametrize("value", [0, -1, -4096])
def test_sizes_and_counts_below_one_are_named(tmp_path, key, value):
    with pytest.raises(ConfigError) as e:
        plan_for(f"--af_output_dir={tmp_path}", f"--backend_config.training.{key}={value}")
    assert f"backend_config.training.{key}" in str(e.value) and str(value) in str(e.value)


def test_a_device_count_past_any_machine_is_refused_at_once(tmp_path):
    import time

    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="env.NPUS_PER_NODE"):
        plan_for(f"--af_output_dir={tmp_path}", "--env.NPUS_PER_NODE=999999937")
    assert time.monotonic() - t0 < 1


def test_a_finished_run_skips_training_instead_of_starting_torchrun(tmp_path):
    _fake_checkpoint(str(tmp_path / "saved_checkpoints"), 120, tracker=120)  # the quickstart's train-iters
    plan = plan_for(f"--af_output_dir={tmp_path}")
    assert plan.step("train").skip_reason.startswith("complete: saved_checkpoints is at iteration 120 of")
    longer = plan_for(f"--af_output_dir={tmp_path}", "--backend_config.training.train-iters=160")
    assert not longer.step("train").skipped


def test_megatron_recompute_rules_hold_at_plan_time(tmp_path):
    with pytest.raises(ConfigError) as e:
        plan_for(f"--af_output_dir={tmp_path}", "--backend_config.training.recompute-granularity=full")
    text = str(e.value)
    assert (
        "backend_config.training.recompute-method" in text
        and "backend_config.training.recompute-num-layers" in text
    )
    with pytest.raises(ConfigError) as e:
        plan_for(
            f"--af_output_dir={tmp_path}",
            "--backend_config.training.recompute-granularity=selective",
            "--backend_config.training.recompute-method=block",
        )
    assert "not supported with --recompute-granularity selective" in str(e.value)
    plan = plan_for(
        f"--af_output_dir={tmp_path}",
        "--backend_config.training.recompute-granularity=full",
        "--backend_config.training.recompute-method=block",
        "--backend_config.training.recompute-num-layers=1",
    )
    argv = train_argv(plan)
    assert argv[argv.index("--recompute-method") + 1] == "block"


def test_fewer_micro_batches_than_pipeline_stages_is_refused_before_launch(tmp_path):
    """torch's 1F1B schedule stops with 'Number of microbatches (1) must be greater than or equal to the
    number of stages (2)' after the queue; the plan says it first, in the key the user edits."""
    from ascendfactory.errors import ConfigError

    T = "--backend_config.training."
    args = [f"--af_output_dir={tmp_path}", "--env.NPUS_PER_NODE=2", f"{T}pipeline-model-parallel-size=2"]
    with pytest.raises(ConfigError) as e:
        plan_for(*args, f"{T}global-batch-size=1", f"{T}micro-batch-size=1")
    (problem,) = [p for p in e.value.problems if "micro-batch(es)" in p.message]
    assert problem.key == "backend_config.training.global-batch-size" and "2 or more" in problem.fix
    assert plan_for(*args, f"{T}global-batch-size=2", f"{T}micro-batch-size=1").facts["pp"] == 2


def test_virtual_pipeline_at_plan_time(tmp_path):
    """hf2mg converts for the trainer's virtual pipeline; Megatron's micro-batch rule for the interleaved
    schedule is checked once DP is known (PP 3, DP 1 here)."""
    from tests.support import training as T

    T.make_tiny_model(tmp_path / "hf6", family="qwen2", num_hidden_layers=6)
    common = (
        f"--af_output_dir={tmp_path}",
        "--env.NPUS_PER_NODE=3",
        f"--backend_config.training.tokenizer-name-or-path={tmp_path / 'hf6'}",
        "--backend_config.training.pipeline-model-parallel-size=3",
        "--backend_config.training.virtual-pipeline-model-parallel-size=2",
        "--backend_config.training.micro-batch-size=1",
    )
    with pytest.raises(ConfigError) as e:
        plan_for(*common, "--backend_config.training.global-batch-size=4")
    assert "backend_config.training.global-batch-size" in str(e.value)
    assert "number of microbatches (4) is not divisible by pipeline-model-parallel-size (3)" in str(e.value)
    plan = plan_for(*common, "--backend_config.training.global-batch-size=6")
    argv = plan.step("hf2mg").argv
    assert argv[argv.index("--num-layers-per-virtual-pipeline-stage") + 1] == "1"
    argv = train_argv(plan)
    assert argv[argv.index("--virtual-pipeline-model-parallel-size") + 1] == "2"
    no_vpp = (*common[:4], "--backend_config.training.micro-batch-size=1")
    plan = plan_for(*no_vpp, "--backend_config.training.global-batch-size=4")  # no VPP: no rule
    assert "--num-layers-per-virtual-pipeline-stage" not in plan.step("hf2mg").argv


def test_a_mapping_given_as_the_preprocess_input_is_named_on_a_dry_run(tmp_path):
    """Found by the fuzz property: the dry run's missing-input check ran os.path.exists on a mapping."""
    with pytest.raises(ConfigError) as e:
        plan_for(f"--af_output_dir={tmp_path}", "--backend_config.preprocess_data.input={a: 1}")
    assert [p.key for p in e.value.problems] == ["backend_config.preprocess_data.input"]
