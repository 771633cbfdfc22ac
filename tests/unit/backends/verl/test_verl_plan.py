"""The verl backend's plan without verl (the shipped key lists): overrides, owned keys, steps, logs, data
checks, and the golden comparison with verl's own Qwen2.5-7B GRPO NPU example."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from ascendfactory.backends.planner import make_plan
from ascendfactory.backends.verl import backend as verl_backend
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import BackendNotRunnableError, ConfigError

NO_ENV = {"AF_VERL_ENV": "/nonexistent/verl-env", "PATH": os.environ.get("PATH", "")}
A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."


@pytest.fixture
def machine(monkeypatch):
    """The accelerator the plan sees (no device files here): set `machine.kind`."""

    class Machine:
        kind = "npu"

    m = Machine()
    monkeypatch.setattr(verl_backend, "detect_accelerator", lambda: m.kind)
    return m


def tokenizer_dir(root: Path) -> Path:
    """A word-level tokenizer (one token per space-separated word) with a tiny chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "<user>", "<assistant>", *"how many clips did she sell in may and april".split()]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(
        ["[UNK]"]
    )  # so that `tokenizers` alone reproduces AutoTokenizer (no transformers import)
    root.mkdir(parents=True, exist_ok=True)
    tok.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"})
    )
    (root / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m.role }}> {{ m.content }} {% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    (root / "config.json").write_text(
        json.dumps({"model_type": "llama", "num_attention_heads": 8, "num_key_value_heads": 2})
    )
    return root


def data_files(root: Path, lengths: list[int]) -> tuple[Path, Path]:
    """Parquet files of prompts of n words each: `<user> clips... <assistant>` is n + 2 tokens."""
    rows = [
        {
            "data_source": "gsm8k",
            "prompt": [{"role": "user", "content": " ".join(["clips"] * n)}],
            "ability": "math",
        }
        for n in lengths
    ]
    train, val = root / "train.parquet", root / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), train)
    pq.write_table(pa.Table.from_pylist(rows[:4]), val)
    return train, val


def experiment(tmp_path: Path, bc: dict, **top) -> Path:
    cfg = {
        "backend": "verl",
        "af_model_name": "tiny-demo",
        "exp_name": "grpo",
        "af_output_dir": str(tmp_path / "out"),
        "env": {"NNODES": 1, "NPUS_PER_NODE": 8, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": 6390},
        "backend_config": bc,
        **top,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def grpo(tmp_path: Path, lengths=(3,) * 40, **changes) -> dict:
    tok = tokenizer_dir(tmp_path / "model")
    train, val = data_files(tmp_path, list(lengths))
    bc = {
        "data": {
            "train_files": str(train),
            "val_files": str(val),
            "train_batch_size": 8,
            "max_prompt_length": 16,
            "max_response_length": 16,
            "filter_overlong_prompts": True,
        },
        "algorithm": {"adv_estimator": "grpo"},
        "actor_rollout_ref": {
            "model": {"path": str(tok)},
            "actor": {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 1, "use_kl_loss": True},
            "rollout": {
                "name": "vllm",
                "n": 4,
                "tensor_model_parallel_size": 2,
                "log_prob_micro_batch_size_per_gpu": 1,
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": 1},
        },
        "trainer": {"save_freq": 5, "total_epochs": 2},
        "ray_kwargs": {"ray_init": {"num_cpus": 64}},
    }
    for dotted, value in changes.items():
        node = bc
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return bc


def plan_for(path: Path, *overrides: str, dry_run: bool = True, environ: dict | None = None):
    return make_plan(load_experiment(path, list(overrides)), dry_run=dry_run, environ=environ or NO_ENV)


def overrides_of(plan) -> list[str]:
    argv = plan.step("train").argv
    return argv[argv.index("verl.trainer.main_ppo") + 1 :]


# -- the plan ---------------------------------------------------------------------------------------------
def test_grpo_plan_runs_main_ppo_on_ray_with_the_plans_keys(tmp_path, machine):
    plan = plan_for(
        experiment(tmp_path, grpo(tmp_path), stage="grpo", train_auto_resume=True, save_total_limit=2)
    )
    out = tmp_path / "out"
    assert [(s.name, s.role.value) for s in plan.steps] == [
        ("check", "check"),
        ("train", "train"),
        ("merge", "export"),
        ("plot", "plot"),
    ]
    check = plan.step("check").argv
    assert check[1].endswith("verl_check.py") and check[2:] == overrides_of(plan)  # the driver's overrides
    launch = plan.step("train").launch
    assert launch.kind == "ray" and launch.python == "/nonexistent/verl-env/bin/python"
    assert launch.driver[:3] == ("/nonexistent/verl-env/bin/python", "-m", "verl.trainer.main_ppo")
    assert (launch.head_address, launch.port, launch.nnodes) == ("10.0.0.1", 6390, 1)
    # 3 CPUs per worker x 8, TransferQueue's controller and its 8 storage units; the NPUs
    assert dict(launch.resources) == {"CPU": 33.0, "NPU": 8.0} and dict(launch.node_resources) == {
        "CPU": 64.0
    }
    ours = overrides_of(plan)
    assert ours[:3] == [
        f"data.train_files={tmp_path}/train.parquet",
        f"data.val_files={tmp_path}/test.parquet",
        "data.train_batch_size=8",
    ]
    for expected in (
        f"trainer.default_local_dir={out}/saved_checkpoints",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=8",
        "trainer.resume_mode=auto",
        "trainer.device=npu",
        "trainer.max_actor_ckpt_to_keep=2",
        "trainer.project_name=tiny-demo",
        "trainer.experiment_name=grpo",
        "trainer.logger=console",
        "algorithm.adv_estimator=grpo",
        "hydra/job_logging=stdout",
    ):
        assert expected in ours
    assert not any(o.startswith("ray_kwargs.ray_init.num_cpus") for o in ours)  # -> ray start --num-cpus
    assert plan.checkpoints.scheme == "verl" and plan.checkpoints.root == str(out / "saved_checkpoints")
    assert plan.checkpoints.retain == 2
    logs = plan.logs
    assert (
        logs.naming.prefix == "verl_grpo-tiny-demo-32-npu" and logs.naming.run_log == "run_log-N{nnodes}-WS8"
    )
    assert (
        logs.plot_metrics == ("critic/score/mean", "response_length/mean")
        and logs.throughput.formula == "verl"
    )
    assert plan.step("train").env["ASCEND_PROCESS_LOG_PATH"] == str(out / "plog" / "rank0")
    merge = plan.step("merge")
    assert merge.argv[1].endswith("verl_merge.py") and merge.argv[2:] == [
        str(out / "saved_checkpoints"),
        "--backend",
        "fsdp",
    ]
    assert merge.skip_reason is None and merge.inputs == [
        str(out / "saved_checkpoints" / "latest_checkpointed_iteration.txt")
    ]
    # 40 prompts of 5 tokens fit; 40 // 8 = 5 steps per epoch, 2 epochs: the last checkpoint is global_step_10
    assert plan.facts["train_prompts"] == 40 and plan.facts["total_training_steps"] == 10
    assert any("global_step_10/actor" in n for n in merge.notes)
    text = plan.files[str(out / "exp-config.yaml")]
    assert text.startswith("# verl's configuration for this run")
    composed = yaml.safe_load(text)
    assert composed["trainer"]["default_local_dir"] == str(out / "saved_checkpoints")
    assert composed["actor_rollout_ref"]["actor"]["rollout_n"] == 4  # interpolations resolved
    assert yaml.safe_load(plan.files[str(out / ".af" / "experiment.yaml")])["backend"] == "verl"


def test_owned_keys_name_the_generic_key_that_decides_them(tmp_path, machine):
    bc = grpo(
        tmp_path,
        **{"trainer.default_local_dir": "/elsewhere", "trainer.nnodes": 2, "trainer.resume_mode": "auto"},
    )
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, bc))
    by_key = {p.key: p for p in e.value.problems}
    assert "the plan sets it from af_output_dir" in by_key["backend_config.trainer.default_local_dir"].message
    assert by_key["backend_config.trainer.nnodes"].fix == "set env.NNODES instead"
    assert "train_auto_resume" in by_key["backend_config.trainer.resume_mode"].fix
    same = grpo(
        tmp_path, **{"trainer.n_gpus_per_node": 8, "trainer.project_name": "mine"}
    )  # agrees with env: fine
    assert "trainer.project_name=mine" in overrides_of(plan_for(experiment(tmp_path, same)))


def test_a_misspelt_key_and_other_problems_are_reported_at_once(tmp_path, machine):
    bc = grpo(
        tmp_path, **{"trainer.n_gpu_per_node": 8, "actor_rollout_ref.actor.loss_agg_mode": "foo", "datas": {}}
    )
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, bc))
    by_key = {p.key: p for p in e.value.problems}
    assert "not in verl 0.9.1's config" in by_key["backend_config.trainer.n_gpu_per_node"].message
    assert "did you mean trainer.n_gpus_per_node?" in by_key["backend_config.trainer.n_gpu_per_node"].fix
    assert "'foo' is not a loss aggregation mode" in by_key[f"backend_config.{A}loss_agg_mode"].message
    assert "did you mean data?" in by_key["backend_config.datas"].fix


def fake_env(root: Path) -> dict:
    """An environment with what `environment.missing` looks for (its python is this one, without verl: the
    plan then composes against the key lists)."""
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "verl" / "trainer" / "config").mkdir(parents=True)
    (site / "verl" / "trainer" / "config" / "ppo_trainer.yaml").write_text("defaults: []\n")
    for dist in ("TransferQueue-0.1.11", "ray-2.60.0", "hydra_core-1.3.8", "vllm-0.24.0"):
        (site / f"{dist}.dist-info").mkdir()
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(os.path.realpath(__import__("sys").executable))
    return {**NO_ENV, "AF_VERL_ENV": str(root)}


def test_a_real_run_without_an_accelerator_stops_before_ray(tmp_path, machine):
    machine.kind = "cpu"
    path = experiment(tmp_path, grpo(tmp_path))
    with pytest.raises(
        BackendNotRunnableError, match="verl cannot train on this machine: it has no GPU or NPU"
    ):
        plan_for(path, dry_run=False, environ=fake_env(tmp_path / "env"))
    assert not (tmp_path / "out").exists()
    dry = plan_for(path)  # --dry-run works here
    assert any("a real `train` of this experiment stops before Ray starts" in w for w in dry.warnings)
    assert "trainer.device=cpu" in overrides_of(dry) and dry.logs.naming.prefix.endswith("-cpu")


def test_without_an_accelerator_every_problem_is_named_at_once(tmp_path, machine):
    """Missing data and no GPU/NPU: one refusal names both (audit D7: the machine came on the next try)."""
    machine.kind = "cpu"
    path = experiment(tmp_path, grpo(tmp_path))
    missing = tmp_path / "gone.parquet"
    with pytest.raises(ConfigError) as e:
        plan_for(
            path, f"--backend_config.data.train_files={missing}", dry_run=False, environ=fake_env(tmp_path)
        )
    keys = [p.key for p in e.value.problems]
    assert "backend_config.data.train_files" in keys and keys[-1] == "(environment)"
    assert "this machine has no GPU or NPU: verl 0.9.1 cannot train here" in e.value.problems[-1].message


def test_a_real_run_needs_the_verl_environment(tmp_path, machine):
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, grpo(tmp_path)), dry_run=False)
    (problem,) = e.value.problems
    assert problem.key == "backend_config.env_dir" and "sh install.sh verl" in problem.fix


# -- prompts against data.max_prompt_length -----------------------------------------------------------------
def test_prompts_longer_than_max_prompt_length_are_counted_and_what_remains_is_said(tmp_path, machine):
    # "<user> clips x n <assistant>" is n + 2 tokens: n = 20 is 22 tokens > 16
    plan = plan_for(experiment(tmp_path, grpo(tmp_path, lengths=[3] * 30 + [20] * 10)))
    assert (
        plan.facts["train_prompts_over_max_prompt_length"] == 10
        and plan.facts["train_longest_prompt_tokens"] == 22
    )
    assert plan.facts["steps_per_epoch"] == 3  # 30 remain // 8
    (warning,) = [w for w in plan.warnings if "data.train_files" in w]
    assert "10 of 40 prompts are longer than data.max_prompt_length 16 tokens (longest 22" in warning
    assert "verl drops them: 30 remain" in warning


def test_all_prompts_too_long_or_too_few_left_for_one_batch_are_errors(tmp_path, machine):
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, grpo(tmp_path, lengths=[20] * 12)))
    messages = {p.key: p for p in e.value.problems}
    assert (
        "verl would drop every one and then fail with 'num_samples=0'"
        in messages["backend_config.data.train_files"].message
    )
    assert "raise data.max_prompt_length to at least 22" in messages["backend_config.data.train_files"].fix
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, grpo(tmp_path, lengths=[3] * 5 + [20] * 20)))
    assert "the 5 left are fewer than data.train_batch_size 8" in e.value.problems[0].message


def test_without_the_filter_long_prompts_are_a_warning(tmp_path, machine):
    bc = grpo(tmp_path, lengths=[20] * 16, **{"data.filter_overlong_prompts": False})
    plan = plan_for(experiment(tmp_path, bc))
    assert any("verl left-truncates them at rollout" in w for w in plan.warnings)


def test_a_hub_tokenizer_is_not_counted_and_the_plan_says_so(tmp_path, machine):
    bc = grpo(tmp_path, **{"actor_rollout_ref.model.path": "Qwen/Qwen2.5-7B-Instruct"})
    plan = plan_for(experiment(tmp_path, bc))
    assert any(
        "40 prompts; lengths not counted: the tokenizer Qwen/Qwen2.5-7B-Instruct is not a directory" in w
        for w in plan.warnings
    )


# -- resume, retention, merge, ray ----------------------------------------------------------------------
def test_resume_modes_follow_the_generic_keys(tmp_path, machine):
    path = experiment(tmp_path, grpo(tmp_path))
    assert "trainer.resume_mode=disable" in overrides_of(plan_for(path))
    step = tmp_path / "run" / "global_step_40"
    got = overrides_of(plan_for(path, "--ckpt_load_type=2", f"--user_converted_ckpt_path={step}"))
    assert "trainer.resume_mode=resume_path" in got and f"trainer.resume_from_path={step}" in got
    with pytest.raises(ConfigError, match="not a global_step_N directory"):
        plan_for(path, "--ckpt_load_type=2", f"--user_converted_ckpt_path={tmp_path}")
    with pytest.raises(ConfigError, match="verl always starts from the weights"):
        plan_for(path, "--ckpt_load_type=0")


def test_merge_is_skipped_without_checkpoints_and_uses_megatrons_merger_for_megatron(tmp_path, machine):
    plan = plan_for(experiment(tmp_path, grpo(tmp_path, **{"trainer.save_freq": -1})))
    assert plan.step("merge").skip_reason == "trainer.save_freq is -1: verl saves no checkpoint to merge"
    plan = plan_for(experiment(tmp_path, grpo(tmp_path, **{"merge": False})))
    assert plan.step("merge").skip_reason == "backend_config.merge: false"
    plan = plan_for(experiment(tmp_path, grpo(tmp_path, model_engine="megatron")))
    assert plan.step("merge").argv[-2:] == ["--backend", "megatron"]
    assert "model_engine=megatron" in overrides_of(plan)


def test_too_few_ray_cpus_is_an_error_naming_both_keys(tmp_path, machine):
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, grpo(tmp_path, **{"ray_kwargs.ray_init.num_cpus": 8})))
    (problem,) = e.value.problems
    assert problem.key == "backend_config.ray_kwargs.ray_init.num_cpus"
    assert "8 logical CPUs per node" in problem.message and "33 in all" in problem.message
    assert "at least 33" in problem.fix and "num_data_storage_units" in problem.fix
    bc = grpo(
        tmp_path,
        **{
            "ray_kwargs.ray_init.num_cpus": 26,
            "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        },
    )
    assert dict(plan_for(experiment(tmp_path, bc)).step("train").launch.resources)["CPU"] == 26.0
    with pytest.raises(ConfigError, match="refused by ray.init when it attaches to a running cluster"):
        plan_for(experiment(tmp_path, grpo(tmp_path, **{"ray_kwargs.ray_init.+num_gpus": 8})))


def test_node_logs_do_not_collide_on_a_shared_filesystem(tmp_path, machine):
    path = experiment(tmp_path, grpo(tmp_path))
    worker = plan_for(path, "--env.NNODES=2", "--env.NODE_RANK=1")
    assert worker.logs.naming.run_log == "run_log-N{nnodes}-WS16-node{node_rank}"
    assert worker.step("plot").skip_reason and worker.step("merge").only_node0
    assert worker.step("train").launch.command()[2] == "worker"
    assert "trainer.nnodes=2" in overrides_of(plan_for(path, "--env.NNODES=2"))


# -- golden: verl's own example ---------------------------------------------------------------------------
# volcengine/verl @ b178a3cd56f58b2d502255daba591e92833930a7, examples/grpo_trainer/run_qwen2_5_7b_grpo_npu.sh
# (last changed in 392791bdd8268e36e03638fe2b8776e7b981885f): its `python3 -m verl.trainer.main_ppo`
# overrides as the program receives them after the shell ($HOME -> /root, quotes removed).
NPU_EXAMPLE = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=/root/data/gsm8k/train.parquet",
    "data.val_files=/root/data/gsm8k/test.parquet",
    "data.train_batch_size=1024",
    "data.max_prompt_length=1024",
    "data.max_response_length=1024",
    "data.filter_overlong_prompts=True",
    "data.truncation=error",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
    "actor_rollout_ref.actor.optim.lr=5e-8",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.ppo_mini_batch_size=32",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.rollout.enable_chunked_prefill=False",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.use_kl_in_reward=False",
    "trainer.critic_warmup=0",
    "trainer.logger=console",
    "trainer.project_name=verl_grpo_example_gsm8k",
    "trainer.experiment_name=qwen2_5_7b_function_rm",
    "trainer.n_gpus_per_node=16",
    "trainer.nnodes=1",
    "trainer.save_freq=-1",
    "trainer.test_freq=5",
    "trainer.total_epochs=5",
]


def hydra_value(text: str):
    """A plain override value as Hydra types it (enough for these scripts: bool, int, float, string)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def as_typed(overrides: list[str]) -> dict:
    return {k: hydra_value(v) for k, v in (o.split("=", 1) for o in overrides)}


def test_golden_the_npu_example_is_what_the_same_experiment_runs(tmp_path, machine):
    script = as_typed(NPU_EXAMPLE)
    # the same experiment in our file: every key verl's script sets, except those the generic keys
    # decide (nodes and devices come from env, the logger is ours; project/experiment names are the script's)
    bc: dict = {}
    for key, value in script.items():
        if key in ("trainer.nnodes", "trainer.n_gpus_per_node", "trainer.logger"):
            continue
        node = bc
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    bc["ray_kwargs"] = {"ray_init": {"num_cpus": 192}}  # an Ascend server's cores
    path = experiment(tmp_path, bc, stage="grpo", af_model_name="qwen2.5-7b")
    plan = plan_for(path, "--env.NPUS_PER_NODE=16", "--env.NNODES=1")
    ours = as_typed(overrides_of(plan))
    assert {k: ours.get(k) for k in script} == script  # every override of the script, with its value
    extra = {k: v for k, v in ours.items() if k not in script}
    assert extra == {  # and only what AscendFactory decides on top
        "trainer.default_local_dir": str(tmp_path / "out" / "saved_checkpoints"),
        "trainer.resume_mode": "disable",
        "trainer.device": "npu",
        "hydra.run.dir": ".",
        "hydra.output_subdir": "null",
        "hydra/job_logging": "stdout",
    }
    train = plan.step("train")
    assert train.launch.driver[1:3] == ("-m", "verl.trainer.main_ppo")
    assert dict(train.launch.resources)["NPU"] == 16.0  # 1 node x 16 NPUs, as the script's n_gpus_per_node
    assert plan.logs.naming.prefix == "verl_grpo-qwen2.5-7b-2048-npu"
    assert plan.logs.naming.run_log.endswith("-WS16")
    assert plan.step("merge").skip_reason == "trainer.save_freq is -1: verl saves no checkpoint to merge"


def test_a_real_run_on_a_gpu_machine_plans_and_checks_the_rollout_engine(tmp_path, machine):
    machine.kind = "cuda"
    environ = fake_env(tmp_path / "env")
    plan = plan_for(experiment(tmp_path, grpo(tmp_path)), dry_run=False, environ=environ)
    assert dict(plan.step("train").launch.resources)["GPU"] == 8.0 and "trainer.device=cuda" in overrides_of(
        plan
    )
    assert "ASCEND_PROCESS_LOG_PATH" not in plan.step("train").env
    with pytest.raises(ConfigError, match="is sglang, which is not installed in the verl environment"):
        plan_for(
            experiment(tmp_path, grpo(tmp_path, **{f"{R}name": "sglang"})), dry_run=False, environ=environ
        )


# -- install plan and doctor ----------------------------------------------------------------------------
def test_install_plan_keeps_the_cpu_torch_and_installs_the_verl_core_extra(tmp_path):
    from ascendfactory.backends.verl import environment

    steps = environment.install_steps({"AF_ENVS_DIR": str(tmp_path), "AF_TORCH_SPEC": "torch==2.13.0"})
    env = tmp_path / "verl"
    assert steps[0].argv[1:] == ("-m", "venv", str(env))
    assert steps[1].argv[-1] == "torch==2.13.0"
    assert steps[2].argv[-2:] == ("torch==2.13.0", "verl[verl-core]==0.9.1")  # torch pinned on the same line
    assert all(s.skip_if_exists == str(env / ".af-verl-installed") for s in steps)


def test_doctor_reports_the_missing_rollout_engine_and_accelerator(tmp_path):
    from ascendfactory.backends.verl import environment

    environ = fake_env(tmp_path / "env")
    (tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "vllm-0.24.0.dist-info").rmdir()
    checks = {c.name: c for c in environment.checks(environ, "cpu")}
    assert checks["verl environment"].status == "ok"
    assert checks["rollout engine"].status == "missing" and "vllm" in checks["rollout engine"].detail
    assert checks["accelerator for verl"].status == "missing"
    on_npu = {c.name: c for c in environment.checks(fake_env(tmp_path / "env2"), "npu")}
    assert on_npu["rollout engine"].detail == "vllm" and on_npu["vllm-ascend"].status == "missing"
    absent = environment.checks({"AF_VERL_ENV": str(tmp_path / "none")}, "npu")
    assert absent[0].status == "missing" and "sh install.sh verl" in absent[0].detail


# -- the log spec on verl's console lines ------------------------------------------------------------------
def test_the_plans_log_spec_plots_reward_and_length_and_summarises_verls_console_log(tmp_path, machine):
    from ascendfactory.pipeline import results

    plan = plan_for(experiment(tmp_path, grpo(tmp_path)))
    log = tmp_path / "run.txt"
    lines = []
    for step in range(
        1, 9
    ):  # verl 0.9.1 under Ray: colour-coded prefix, np.float64 values from reduce_metrics
        lines.append(
            f"\x1b[36m(TaskRunnerV1 pid=4242)\x1b[0m step:{step} - actor/pg_loss:np.float64({0.1 / step}) - "
            f"actor/kl_loss:np.float64(0.00{step}) - critic/score/mean:np.float64({step / 10}) - "
            f"response_length/mean:np.float64({200 - step}) - perf/throughput:{1000.0 + 10 * step} - "
            f"timing_s/step:{12.5 + step}"
        )
    log.write_text(
        "(TaskRunnerV1 pid=4242) step:0 - val-core/openai/gsm8k/acc/mean@1:0.1\n" + "\n".join(lines) + "\n"
    )
    png = results.plot([str(log)], str(tmp_path / "training_loss.png"), plan.logs)
    assert png and Path(png).read_bytes()[:4] == b"\x89PNG"
    summary = results.summarize(results.RunSummary(str(tmp_path), [], 1.0), [str(log)], plan.logs)
    score = summary.metrics["critic/score/mean"]
    assert (score["first_step"], score["first"], score["last_step"], score["last"]) == (1, 0.1, 8, 0.8)
    assert summary.metrics["response_length/mean"]["last"] == 192 and "actor/kl_loss" in summary.metrics
    assert summary.throughput["formula"] and summary.throughput["value"] > 1000
    assert summary.loss_start == pytest.approx(0.1)  # actor/pg_loss


def test_top_level_model_and_dataset_are_refused_with_where_verl_takes_them(tmp_path, machine):
    path = experiment(tmp_path, grpo(tmp_path), model_name_or_path="/m", dataset="/d.parquet")
    with pytest.raises(ConfigError) as err:
        plan_for(path)
    fixes = {p.key: p.fix for p in err.value.problems}
    assert fixes["model_name_or_path"] == "give it as backend_config.actor_rollout_ref.model.path"
    assert fixes["dataset"] == "give it as backend_config.data.train_files"


@pytest.mark.parametrize(
    "options, key, message, fix",
    [
        (
            {"merge": "false"},
            "backend_config.merge",
            "Input should be a valid boolean (got 'false')",
            "write true or false",
        ),
        (
            {"env_dir": 5},
            "backend_config.env_dir",
            "Input should be a valid string (got 5)",
            "write a text (quote it if it looks like a number)",
        ),
    ],
)
def test_a_bad_option_value_is_named_with_a_fix(tmp_path, machine, options, key, message, fix):
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, grpo(tmp_path, **options)))
    (p,) = [p for p in e.value.problems if p.key == key]
    assert (p.message, p.fix) == (message, fix)


def test_a_tensorboard_section_names_the_train_steps_event_directory(tmp_path, machine):
    """`tensorboard:` (a TensorboardConfig) reaches the train step's TENSORBOARD_DIR (it was read as a
    mapping and raised AttributeError; found by the type checker)."""
    events = tmp_path / "events"
    path = experiment(tmp_path, grpo(tmp_path), stage="grpo")
    plan = plan_for(path, f"--tensorboard.tensorboard_dir={events}")
    assert plan.step("train").env["TENSORBOARD_DIR"] == str(events)
    assert "trainer.logger=[console,tensorboard]" in overrides_of(plan)


# -- Ascend NPUs (issue 37) ---------------------------------------------------------------------------------
def test_a_machine_without_a_device_plans_for_the_trainer_device_the_experiment_gives(tmp_path, machine):
    """A dry run on a laptop prepares an NPU job: trainer.device npu, Ray's NPU resource, npu log names."""
    machine.kind = "cpu"
    plan = plan_for(experiment(tmp_path, grpo(tmp_path, **{"trainer.device": "npu"})))
    assert "trainer.device=npu" in overrides_of(plan)
    assert '"NPU": 8.0' in " ".join(plan.step("train").argv)
    assert plan.logs.naming.prefix.endswith("-npu") and plan.logs.naming.device_info.startswith("npu_info")
    assert any("planned for trainer.device npu" in w for w in plan.warnings)
    machine.kind = "cuda"  # a machine with another device: the value is refused, as before
    with pytest.raises(ConfigError) as err:
        plan_for(experiment(tmp_path, grpo(tmp_path, **{"trainer.device": "npu"})))
    assert any(p.key.endswith("trainer.device") for p in err.value.problems)


def test_a_device_verl_does_not_train_on_is_named(tmp_path, machine):
    machine.kind = "cpu"
    with pytest.raises(ConfigError) as err:
        plan_for(experiment(tmp_path, grpo(tmp_path, **{"trainer.device": "tpu"})))
    problem = next(p for p in err.value.problems if p.key == "backend_config.trainer.device")
    assert "npu" in problem.fix


def test_the_ascend_template_is_verls_npu_recipe(tmp_path, machine):
    from ascendfactory.features.templates import render_experiment

    machine.kind = "cpu"
    tree = yaml.safe_load(
        render_experiment(backend="verl", model_name="qwen2.5-7b", exp_name="grpo-npu", output_file="x")
    )
    bc = tree["backend_config"]
    assert bc["trainer"]["device"] == "npu" and bc["actor_rollout_ref"]["rollout"]["name"] == "vllm"
    assert bc["actor_rollout_ref"]["model"]["use_remove_padding"] is False
    assert bc["actor_rollout_ref"]["rollout"]["enable_chunked_prefill"] is False
    bc.update(grpo(tmp_path))  # the demo's data and model, the template's NPU choices kept
    bc["trainer"]["device"] = "npu"
    plan = plan_for(experiment(tmp_path, bc))
    assert "trainer.device=npu" in overrides_of(plan)


def test_install_on_ascend_keeps_the_images_torch_npu_and_vllm_ascend(tmp_path):
    from ascendfactory.backends.verl import environment

    steps = environment.install_steps({"AF_VERL_DEVICE": "npu", "AF_ENVS_DIR": str(tmp_path)})
    shown = [s.display() for s in steps]
    assert "--system-site-packages" in shown[0]
    assert not any("torch==" in s for s in shown)  # the image's torch and torch_npu stay
    assert "verl[verl-core]==0.9.1" in shown[1]
    assert "torch_npu" in shown[2] and "vllm_ascend" in shown[2]
    cpu = [s.display() for s in environment.install_steps({"AF_ENVS_DIR": str(tmp_path)})]
    assert any("torch==2.13.0" in s for s in cpu)


@pytest.mark.parametrize("value", [1, [1, 2]])
def test_a_model_path_that_is_not_text_is_refused(tmp_path, machine, value):
    """verl's HFModelConfig reads the model and tokenizer paths as text: a number or list stops it with a
    TypeError (found by the random harness, seed 3603: critic.model.tokenizer_path=1 and [1, 2])."""
    bc = grpo(tmp_path, **{"critic.model.tokenizer_path": value})
    with pytest.raises(ConfigError) as e:
        plan_for(experiment(tmp_path, bc))
    by_key = {p.key: p for p in e.value.problems}
    assert "must be one path as text" in by_key["backend_config.critic.model.tokenizer_path"].message
