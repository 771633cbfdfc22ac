"""`backend: torch, stage: grpo`: the plan of a MindSpeed-RL experiment run by the embedded programs, what it
refuses by name, auto-resume with the reference on the original weights, and the same file on mindspeed-rl."""

from __future__ import annotations

import json

import pytest
import yaml

from ascendfactory.backends.planner import make_plan
from ascendfactory.checkpoints.megatron import write_tracker
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

QUICK = REPO / "cfgs" / "quickstart_grpo.yaml"


@pytest.fixture
def model_dir(tmp_path):
    """A directory with the demo model's config.json (all the plan reads of the model)."""
    from ascendfactory.engine.demo import _config

    d = tmp_path / "warm"
    d.mkdir()
    _config("qwen2", 960, bos_id=0, eos_id=2, pad_id=0).to_json_file(str(d / "config.json"))
    return d


def plan_for(tmp_path, model_dir, *overrides: str, backend: str = "torch"):
    args = [
        f"--af_output_dir={tmp_path / 'out'}",
        f"--backend_config.megatron_training.tokenizer_name_or_path={model_dir}",
        f"--backend={backend}",
        *([] if backend == "torch" else ["--accelerator=auto"]),  # as the file's comment says
        *overrides,
    ]
    return make_plan(load_experiment(QUICK, args), dry_run=True)


def rendered(plan) -> dict:
    path = next(p for p in plan.files if p.endswith("mindspeed_rl_grpo.yaml"))
    return yaml.safe_load(plan.files[path])


def test_quickstart_plan_runs_our_programs_on_the_mindspeed_rl_tree(tmp_path, model_dir):
    out = tmp_path / "out"
    plan = plan_for(tmp_path, model_dir)
    assert [s.name for s in plan.steps] == ["preprocess", "hf2mg", "train", "mg2hf", "plot"]
    pre = plan.step("preprocess").argv
    assert pre[1:3] == ["-m", "ascendfactory.engine.data.preprocess"]
    assert pre[pre.index("--handler-name") + 1] == "R1AlpacaStyleInstructionHandler"
    assert json.loads(pre[pre.index("--map-keys") + 1])["prompt"] == "problem"
    assert pre[pre.index("--output-prefix") + 1] == f"{out}/preprocessed_data/demo_grpo"
    hf2mg = plan.step("hf2mg").argv
    assert hf2mg[hf2mg.index("--save-dir") + 1] == f"{out}/converted_hf2mg_weight_TP1PP1"
    train = plan.step("train").argv
    entry = train[train.index("ascendfactory.engine.rl") + 1 :]
    assert entry == [
        "--config-path",
        str(out),
        "--config-name",
        "mindspeed_rl_grpo",
        "--af-metrics-dir",
        f"{out}/logs",
    ]
    assert train[train.index("--nproc_per_node") + 1] == "2"
    mg2hf = plan.step("mg2hf").argv
    assert mg2hf[mg2hf.index("--save-dir") + 1] == f"{out}/converted_mg2hf_weight"
    y = rendered(plan)
    actor = y["actor_config"]
    assert actor["load"] == f"{out}/converted_hf2mg_weight_TP1PP1" and actor["finetune"] is True
    assert actor["save"] == f"{out}/saved_checkpoints"
    assert y["megatron_training"]["data_path"] == f"{out}/preprocessed_data/demo_grpo"
    assert plan.logs.format == "mindspeed_rl" and plan.logs.loss_rank == "first"
    assert plan.logs.plot_metrics == (
        "grpo/score/mean",
        "base_acc_rewards/mean",
        "format_rewards/mean",
        "response_length/mean",
    )
    assert {"e2e_tps", "update_tps", "vllm_tps"} <= set(plan.logs.summary_metrics)
    assert plan.checkpoints.root == f"{out}/saved_checkpoints" and plan.checkpoints.retain == 2


def test_the_rendered_yaml_is_what_the_trainer_reads(tmp_path, model_dir):
    from ascendfactory.engine.rl.config import load_yaml, read_trainer_yaml

    plan = plan_for(tmp_path, model_dir)
    path = next(p for p in plan.files if p.endswith("mindspeed_rl_grpo.yaml"))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "mindspeed_rl_grpo.yaml").write_text(plan.files[path])
    cfg = read_trainer_yaml(*load_yaml(str(tmp_path / "cfg"), "mindspeed_rl_grpo", []))
    assert cfg.n == 8 and cfg.args.bf16 and cfg.args.finetune
    assert cfg.rl["verifier_function"] == ["base_acc", "format"] and cfg.sampling.max_tokens == 64
    assert cfg.args.num_layers == 2 and cfg.rl["actor_resource"] == {"num_npus": 2}


@pytest.mark.parametrize(
    "override,key,text",
    [
        ("--backend_config.rl_config.use_kl_in_reward=true", "rl_config.use_kl_in_reward", "not supported"),
        (
            "--backend_config.rl_config.verifier_function=[acc_for_dapo] "
            "--backend_config.rl_config.verifier_weight=[1]",
            "verifier_function",
            "does not implement",
        ),
        (
            "--backend_config.actor_config.pipeline_model_parallel_size=2",
            "pipeline_model_parallel_size",
            "stage",
        ),
        ("--backend_config.preprocess_data.pack=true", "preprocess_data.pack", "embedded preprocessing"),
        ("--backend_config.preprocess_data.prompt_type=qwen_r1", "preprocess_data.prompt_type", "qwen"),
        ("--backend_config.rl_config.mini_batch_size=3", "rl_config.mini_batch_size", "data-parallel"),
        ("--backend_config.megatron_training.hidden_dropout=0.1", "hidden_dropout", "not supported"),
        ("--backend_config.rl_config.no_such_key=1", "rl_config.no_such_key", ""),  # MindSpeed-RL's key list
    ],
)
def test_refused_by_name_before_anything_runs(tmp_path, model_dir, override, key, text):
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, model_dir, *override.split())
    hits = [p for p in e.value.problems if key in p.key]
    assert hits, [p.key for p in e.value.problems]
    assert text in " ".join(p.message for p in hits)
    assert all(p.source for p in hits)


def test_auto_resume_loads_saved_checkpoints_with_the_reference_on_the_converted_weights(tmp_path, model_dir):
    saved = tmp_path / "out" / "saved_checkpoints"
    (saved / "iter_0000010" / "mp_rank_00").mkdir(parents=True)
    (saved / "iter_0000010" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"x")
    write_tracker(saved, 10)
    plan = plan_for(tmp_path, model_dir)
    actor = rendered(plan)["actor_config"]
    assert actor["load"] == str(saved)
    assert (actor["finetune"], actor["no_load_optim"], actor["no_load_rng"]) == (False, False, False)
    ref = rendered(plan)["rl_config"]["integrated_mode_config"]["ref_model_load_path"]
    assert ref == str(tmp_path / "out" / "converted_hf2mg_weight_TP1PP1")
    assert (
        plan.step("train").notes[0].startswith("train_auto_resume: newest complete checkpoint iter_0000010")
    )


def test_the_same_file_plans_mindspeed_rls_commands(tmp_path, model_dir):
    plan = plan_for(tmp_path, model_dir, backend="mindspeed-rl")
    assert plan.backend == "mindspeed-rl"
    train = plan.step("train").argv
    assert "cli/train_grpo.py" in train and train[train.index("--config-name") + 1] == "mindspeed_rl_grpo"
    assert "cli/preprocess_data.py" in plan.step("preprocess").argv
    assert "convert_ckpt.py" in plan.step("hf2mg").argv
    torch_yaml = rendered(plan_for(tmp_path, model_dir))
    assert rendered(plan) == torch_yaml  # one MindSpeed-RL yaml, whichever backend runs it


def test_planning_imports_neither_torch_nor_transformers():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ascendfactory.backends.planner import make_plan\n"
        "from ascendfactory.config.load import load_experiment\n"
        f"make_plan(load_experiment({str(QUICK)!r}, []), dry_run=True)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
