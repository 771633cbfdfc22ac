"""The verl backend against verl 0.9.1 itself (`sh install.sh verl`), on CPU: the shipped templates compose
with Hydra against verl's own config, a misspelt key fails with our message, the prompt counts agree with
verl's own dataset filter, and the merge step turns a checkpoint written by verl's own FSDP checkpoint
manager into Hugging Face weights that load in transformers. GRPO itself cannot run here (verl has no CPU
platform; verl 0.9.1 on this CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascendfactory.backends.common.hydra.overrides import format_value
from ascendfactory.backends.planner import make_plan
from ascendfactory.backends.verl import environment
from ascendfactory.config.load import load_experiment
from ascendfactory.features.templates import render_experiment
from ascendfactory.plan import Plan
from tests.integration.test_ray_launch import free_port, no_ray_process_left

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
ENV, _ = environment.find_env(None, os.environ)
PY = environment.python_of(ENV)
needs_verl = pytest.mark.skipif(
    bool(environment.missing(ENV)), reason=f"no verl environment at {ENV}: sh install.sh verl"
)
COMPOSE = REPO / "ascendfactory" / "backends" / "common" / "hydra" / "programs" / "hydra_compose.py"
VERL_CONFIG = ["--package=verl", "--config-dir=trainer/config"]


def template(tmp_path: Path, exp: str) -> Path:
    path = tmp_path / f"verl-{exp}.yaml"
    path.write_text(
        render_experiment(backend="verl", model_name="qwen2.5-7b", exp_name=exp, output_file=str(path))
    )
    return path


def composed(plan) -> dict:
    return yaml.safe_load(plan.files[os.path.join(plan.output_dir, "exp-config.yaml")])


def tiny_grpo_plan(path: Path, bc: dict, out: Path, *, npus: int, **top) -> Plan:
    """The dry-run plan of a verl GRPO experiment of the demo model, written to `path`."""
    tree = {
        "backend": "verl",
        "af_model_name": "tiny-demo",
        "exp_name": "grpo",
        "af_output_dir": str(out),
        **top,
        "backend_config": bc,
    }
    tree["env"] = {"NPUS_PER_NODE": npus, **tree.get("env", {})}
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return make_plan(load_experiment(path, []), dry_run=True)


@needs_verl
@pytest.mark.parametrize("exp", ["ppo", "grpo", "dapo"])
def test_every_template_composes_against_verls_own_config(tmp_path, exp):
    loaded = load_experiment(template(tmp_path, exp), [f"--af_output_dir={tmp_path / 'out'}"])
    plan = make_plan(loaded, dry_run=True)
    assert plan.facts["composed_by"].startswith("Hydra against verl's own config"), plan.facts
    hydra = composed(plan)
    assert hydra["trainer"]["default_local_dir"] == str(tmp_path / "out" / "saved_checkpoints")
    # the shipped key lists compose the same config without verl
    offline = make_plan(loaded, dry_run=True, environ={**os.environ, "AF_VERL_ENV": str(tmp_path / "none")})
    assert offline.facts["composed_by"].startswith("the shipped key lists")
    assert composed(offline) == hydra


@needs_verl
def test_a_misspelt_key_fails_with_our_message_naming_it(tmp_path):
    done = subprocess.run(
        [
            *CLI,
            "train",
            str(template(tmp_path, "grpo")),
            "--dry-run",
            "--backend_config.trainer.n_gpu_per_node=8",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "backend_config.trainer.n_gpu_per_node: not in verl 0.9.1's config" in done.stderr
    assert "(Hydra: Could not override 'trainer.n_gpu_per_node'.)" in done.stderr
    assert "fix: did you mean trainer.n_gpus_per_node?" in done.stderr and "Traceback" not in done.stderr


@needs_verl
def test_the_compose_program_names_every_problem_hydra_finds():
    request = {
        "overrides": [
            "trainer.n_gpu_per_node=1",
            "+trainer.nnodes=2",
            "data.train_files=[a,b",
            "actor_rollout_ref.model.override_config.attn_implementation=eager",
            "+actor_rollout_ref.model.override_config.attn_implementation=eager",
            "trainer.default_local_dir=${trainer.nope}/x",
            "data.train_batch_size=4",
        ],
        "config_name": "ppo_trainer",
    }
    done = subprocess.run(
        [PY, str(COMPOSE), *VERL_CONFIG],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 1 and result["framework_imported"] is False
    kinds = {(p["key"], p["kind"]) for p in result["problems"]}
    assert kinds == {
        ("trainer.n_gpu_per_node", "unknown_key"),
        ("trainer.nnodes", "append_exists"),
        ("data.train_files", "syntax"),
        ("actor_rollout_ref.model.override_config.attn_implementation", "unknown_key"),
        ("trainer.default_local_dir", "interpolation"),
    }
    config = result["config"]
    assert config["data"]["train_batch_size"] == 4  # the rest composed
    assert config["actor_rollout_ref"]["model"]["override_config"] == {"attn_implementation": "eager"}


class HydraParser:
    """verl's Hydra parsing override values, kept running across examples."""

    SCRIPT = (
        "import sys, json\n"
        "from hydra.core.override_parser.overrides_parser import OverridesParser\n"
        "p = OverridesParser.create()\n"
        "for line in sys.stdin:\n"
        "    o = p.parse_overrides([json.loads(line)])[0]\n"
        "    v = o.value()\n"
        "    conv = lambda x: {k: conv(y) for k, y in x.items()} if isinstance(x, dict) else "
        "[conv(y) for y in x] if isinstance(x, list) else x\n"
        "    print(json.dumps({'v': conv(v)}), flush=True)\n"
    )

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [PY, "-c", self.SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def parse(self, text: str):
        self.proc.stdin.write(json.dumps(text) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["v"]


@pytest.fixture(scope="module")
def hydra_parser():
    parser = HydraParser()
    yield parser
    parser.proc.stdin.close()
    parser.proc.wait(10)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64).filter(lambda f: abs(f) < 1e300),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), inner, max_size=3)
    ),
    max_leaves=6,
)


@needs_verl
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(VALUES)
def test_hydra_reads_every_value_back_as_written(hydra_parser, value):
    assert hydra_parser.parse(f"a.b={format_value(value)}") == value


@needs_verl
def test_prompt_counts_agree_with_verls_own_dataset_filter(tmp_path, demo_model):
    import pyarrow as pa
    import pyarrow.parquet as pq

    words = "how many clips did natalia sell in april and in may altogether".split()
    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": " ".join(words * (1 + i % 9))}],
        }
        for i in range(40)
    ]
    train = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), train)
    bc = {
        "data": {
            "train_files": str(train),
            "val_files": str(train),
            "train_batch_size": 4,
            "max_prompt_length": 200,
            "max_response_length": 16,
            "filter_overlong_prompts": True,
        },
        "algorithm": {"adv_estimator": "grpo"},
        "actor_rollout_ref": {
            "model": {"path": str(demo_model)},
            "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 1},
            "rollout": {
                "name": "vllm",
                "n": 2,
                "tensor_model_parallel_size": 1,
                "log_prob_micro_batch_size_per_gpu": 1,
            },
        },
    }
    plan = tiny_grpo_plan(tmp_path / "exp.yaml", bc, tmp_path / "o", npus=2)
    ours = plan.facts["train_prompts"] - plan.facts["train_prompts_over_max_prompt_length"]
    assert 0 < ours < 40
    script = (
        "import sys\n"
        "from omegaconf import OmegaConf\n"
        "from verl.utils import hf_tokenizer\n"
        "from verl.utils.dataset.rl_dataset import RLHFDataset\n"
        "config = OmegaConf.create({'max_prompt_length': 200, 'filter_overlong_prompts': True,"
        " 'filter_overlong_prompts_workers': 1, 'prompt_key': 'prompt', 'return_raw_chat': True})\n"
        "ds = RLHFDataset(data_files=[sys.argv[1]], tokenizer=hf_tokenizer(sys.argv[2]), config=config)\n"
        "print('KEPT', len(ds))\n"
    )
    done = subprocess.run(
        [PY, "-c", script, str(train), str(demo_model)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf")},
    )
    kept = [line for line in done.stdout.splitlines() if line.startswith("KEPT")]
    assert kept, done.stderr[-2000:]
    assert int(kept[-1].split()[1]) == ours


@needs_verl
def test_the_merge_step_turns_verls_fsdp_checkpoint_into_hf_weights(tmp_path, demo_model):
    import torch
    from transformers import AutoModelForCausalLM

    from ascendfactory.cli._output import out as cli_out
    from ascendfactory.pipeline.runner import run_experiment

    exp = tmp_path / "exp.yaml"
    bc = {
        "data": {
            "train_files": "/absent/train.parquet",
            "val_files": "/absent/test.parquet",
            "train_batch_size": 4,
            "max_prompt_length": 64,
            "max_response_length": 16,
        },
        "algorithm": {"adv_estimator": "grpo"},
        "actor_rollout_ref": {
            "model": {"path": str(demo_model)},
            "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 1},
            "rollout": {
                "name": "vllm",
                "n": 2,
                "tensor_model_parallel_size": 1,
                "log_prob_micro_batch_size_per_gpu": 1,
            },
        },
        "trainer": {"save_freq": 1},
    }
    plan = tiny_grpo_plan(exp, bc, tmp_path / "out", npus=1)
    root = Path(plan.checkpoints.root)
    made = subprocess.run(
        [
            PY,
            str(HERE / "verl_fsdp_checkpoint.py"),
            str(demo_model),
            str(root),
            "3",
            str(29600 + os.getpid() % 300),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    plan.steps = [plan.step("merge")]  # the plan's own merge step, through the runner
    assert run_experiment(plan, out=cli_out, live=False) == 0
    merged = root / "global_step_3" / "actor" / "huggingface"
    assert (merged / "model.safetensors").is_file()
    logs = "".join(p.read_text() for p in (tmp_path / "out" / "logs").glob("*merge*.txt"))
    assert "-m verl.model_merger merge --backend fsdp --local_dir" in logs
    model = AutoModelForCausalLM.from_pretrained(merged)
    trained = torch.load(root / "trained.pt")
    for name, tensor in model.state_dict().items():
        if name in trained:  # bf16 on disk: equal to the trained fp32 weights up to bf16 rounding
            assert torch.allclose(tensor.float(), trained[name].float(), atol=1e-2, rtol=1e-2), name
    assert len(set(model.state_dict()) & set(trained)) >= 20
    ids = torch.tensor([[1, 2, 3]])
    assert model(input_ids=ids).logits.shape[-1] == model.config.vocab_size


@needs_verl
@pytest.mark.slow
def test_the_train_step_runs_verl_on_our_ray_cluster_up_to_its_device_check(tmp_path, demo_model):
    """The plan's train step for real, on CPU: the Ray head and the driver `python -m verl.trainer.main_ppo
    <our overrides>`; verl accepts them, validate_config passes, its TaskRunner, TransferQueue (with the CPUs
    the plan counted) and datasets come up, then verl stops at its GPU check. That error is not retried by
    auto-resume; the cluster is gone afterwards; the log has the documented name. About 90 s."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ascendfactory.cli._output import out as cli_out
    from ascendfactory.errors import StageFailedError
    from ascendfactory.pipeline.runner import run_experiment

    rows = [
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}]}
        for i in range(16)
    ]
    for name in ("train", "test"):
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{name}.parquet")
    bc = {
        "data": {
            "train_files": str(tmp_path / "train.parquet"),
            "val_files": str(tmp_path / "test.parquet"),
            "train_batch_size": 4,
            "max_prompt_length": 128,
            "max_response_length": 16,
            "filter_overlong_prompts": True,
        },
        "actor_rollout_ref": {
            "model": {"path": str(demo_model)},
            "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2, "use_kl_loss": True},
            "rollout": {
                "name": "vllm",
                "n": 2,
                "tensor_model_parallel_size": 1,
                "log_prob_micro_batch_size_per_gpu": 2,
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": 2},
        },
        "trainer": {"save_freq": 2, "total_epochs": 1},
        "ray_kwargs": {"ray_init": {"num_cpus": 8}},
        "transfer_queue": {"backend": {"SimpleStorage": {"num_data_storage_units": 1}}},
    }
    exp = tmp_path / "exp.yaml"
    port = free_port()
    plan = tiny_grpo_plan(
        exp,
        bc,
        tmp_path / "out",
        npus=1,
        stage="grpo",
        train_auto_resume=True,
        node_wait_timeout_s=120,
        env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
    )
    assert plan.facts["total_training_steps"] == 4
    train = plan.step("train")
    # no GPU here: the head must not wait for one (verl's own check is what we want to reach)
    train.launch = dataclasses.replace(train.launch, resources=(("CPU", 5.0),))
    plan.steps = [train]
    with pytest.raises(StageFailedError) as failed:
        run_experiment(plan, out=cli_out, live=False)
    log = Path(failed.value.log_path)
    assert log.name.startswith("verl_grpo-tiny-demo-144-cpu-") and log.name.endswith("-run_log-N1-WS1.txt")
    text = log.read_text()
    assert "[validate_config] All configuration checks passed successfully!" in text
    assert "filter dataset len: 16" in text and "Total training steps: 4" in text
    assert "Total available GPUs 0 is less than total desired GPUs 1" in text
    runner_log = next((tmp_path / "out" / "logs").glob("*-runner.txt")).read_text()
    assert "a restart cannot fix; auto-resume stops" in runner_log
    assert no_ray_process_left(port)  # the cluster this run started is gone


@needs_verl
def test_the_shipped_key_lists_are_what_the_generator_writes_from_the_installed_verl(tmp_path):
    done = subprocess.run(
        [PY, str(REPO / "scripts" / "gen_verl_keys.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    shipped = REPO / "ascendfactory" / "backends" / "verl" / "keys" / "0.9.1"
    for path in sorted(shipped.glob("*.txt")):
        assert (tmp_path / "0.9.1" / path.name).read_text() == path.read_text(), path.name
