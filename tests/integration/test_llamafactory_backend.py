"""The llamafactory backend for real: LLaMA-Factory in its own environment (`sh install.sh llamafactory`),
on the demo model, offline, on CPU. Each run imports LLaMA-Factory (10-20 s) before it trains."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from ascendfactory.backends.llamafactory import environment
from ascendfactory.checkpoints.hf_trainer import newest_complete

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
ENV, _ = environment.find_env(None, os.environ)
needs_env = pytest.mark.skipif(
    bool(environment.missing(ENV)),
    reason=f"no LLaMA-Factory environment at {ENV}: sh install.sh llamafactory",
)
SFT = [
    {"instruction": f"What is {i} plus {i}?", "input": "", "output": f"{i} plus {i} is {2 * i}."}
    for i in range(40)
]


def experiment(
    tmp_path: Path, demo_model: Path, name: str, *, nproc: int = 1, bc: dict | None = None, **top
) -> Path:
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in SFT))
    training = {
        "model_name_or_path": str(demo_model),
        "finetuning_type": "lora",
        "lora_target": "all",
        "dataset": str(data),
        "template": "qwen",
        "cutoff_len": 128,
        "max_samples": 40,
        "preprocessing_num_workers": 1,
        "dataloader_num_workers": 0,
        "per_device_train_batch_size": 2,
        "learning_rate": 1.0e-3,
        "max_steps": 6,
        "save_steps": 3,
        "seed": 42,
        **(bc or {}).pop("training", {}),
    }
    cfg = {
        "backend": "llamafactory",
        "af_model_name": "tiny-demo",
        "exp_name": name,
        "af_output_dir": str(tmp_path / name),
        "stage": "sft",
        "env": {"NPUS_PER_NODE": nproc, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29000 + os.getpid() % 500},
        "backend_config": {"training": training, **(bc or {})},
        **top,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def train(path: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AF_MONITOR_INTERVAL_S": "1"}
    return subprocess.run(
        [*CLI, "train", str(path), *extra], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env
    )


def trainer_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines() if line.strip()]


def losses(out: Path) -> dict[int, float]:
    found: dict[int, float] = {}
    for rec in trainer_log(out):
        if "loss" in rec:
            found[rec["current_steps"]] = rec["loss"]  # a resumed run logs a step again: the later wins
    return found


def kill_after_checkpoint(exp: Path, checkpoint: Path) -> None:
    """Start `train exp`, then kill -9 every process of it as soon as `checkpoint` is complete."""
    proc = subprocess.Popen(
        [*CLI, "train", str(exp)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not (checkpoint / "trainer_state.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, f"the run ended before {checkpoint.name}"
        time.sleep(0.05)
    for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    proc.wait(30)
    time.sleep(1)


def test_dry_run_reports_every_problem_at_once_without_importing_llamafactory(tmp_path, demo_model):
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"question": "q", "answer": "a"}\n')
    exp = experiment(
        tmp_path,
        demo_model,
        "bad",
        bc={
            "training": {
                "learning_rate": "abc",
                "template": "qwen_nope",
                "bf16": True,
                "lora_target": "q_proj,nonexistent_proj",
                "cutoff_len": 100000,
                "foo_bar": 1,
                "dataset": f"{odd}",
                "output_dir": "/elsewhere",
            }
        },
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [*CLI, "train", str(exp), "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - t0
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    err = proc.stderr
    for key in (
        "training.learning_rate",
        "training.template",
        "training.lora_target",
        "training.cutoff_len",
        "training.foo_bar",
        "training.dataset",
        "training.output_dir",
    ):
        assert f"backend_config.{key}" in err, (key, err)
    assert "qwen" in err and "nonexistent_proj" in err and "did you mean" in err
    assert took < 30  # no LLaMA-Factory import


@needs_env
def test_sft_lora_trains_merges_and_leaves_the_documented_tree(tmp_path, demo_model):
    # report_to mlflow: through LLaMA-Factory's own integration (tracker_readback.check_llamafactory_mlflow)
    exp = experiment(tmp_path, demo_model, "lora", report_to=["mlflow"])
    proc = train(exp)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = tmp_path / "lora"
    for name in (
        "adapter_model.safetensors",
        "trainer_log.jsonl",
        "training_loss.png",
        "exp-config.yaml",
        "llamafactory_train.yaml",
        "llamafactory_merge.yaml",
        "lf_data/dataset_info.json",
        "checkpoint-3/trainer_state.json",
        "checkpoint-6/trainer_state.json",
        "lora_merged/model.safetensors",
        "lora_merged/config.json",
    ):
        assert (out / name).exists(), name
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert any(n.endswith("-run_log-R0_WS1.txt") for n in logs), logs
    assert any(n.endswith("-npu_info-R0_WS1.txt") for n in logs), logs
    assert sorted(losses(out)) == [1, 2, 3, 4, 5, 6]
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert summary["first_step"] == 1 and summary["last_step"] == 6
    assert summary["loss_start"] == pytest.approx(losses(out)[1])
    tp = summary["throughput"]
    assert tp["unit"] == "tokens/s/device" and tp["value"] > 0
    assert "throughput:" in proc.stdout and "tokens/s/device" in proc.stdout
    from tests.integration.tracker_readback import check_llamafactory_mlflow

    check_llamafactory_mlflow(out, losses(out), summary)
    assert (
        "[lf-check] ok: stage sft, lora"
        in (out / "logs").joinpath(next(n for n in logs if n.endswith("-check.txt"))).read_text()
    )
    # the merged model loads in transformers and differs from the base model
    import torch
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(str(out / "lora_merged"))
    base = AutoModelForCausalLM.from_pretrained(str(demo_model))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert not torch.allclose(merged(ids).logits, base(ids).logits)


@needs_env
@pytest.mark.parametrize(
    "stage,bc",
    [
        pytest.param(  # slow: full fine-tuning runs in the data-fit and resume tests
            "sft",
            {
                "merge_lora": False,
                "training": {"finetuning_type": "full", "learning_rate": 1.0e-4, "lora_target": None},
            },
            marks=pytest.mark.slow,
        ),
        pytest.param("pt", {"merge_lora": False, "training": {"dataset": "__PT__"}}, marks=pytest.mark.slow),
        (
            "dpo",
            {
                "merge_lora": False,
                "training": {"dataset": "__DPO__", "pref_beta": 0.1, "learning_rate": 5.0e-5},
            },
        ),
    ],
    ids=["sft-full", "pt-lora", "dpo-lora"],
)
def test_other_stages_train(tmp_path, demo_model, stage, bc):
    pt = tmp_path / "pt.jsonl"
    pt.write_text("".join(json.dumps({"text": f"After {i} comes {i + 1}. " * 8}) + "\n" for i in range(40)))
    dpo = tmp_path / "dpo.jsonl"
    dpo.write_text(
        "".join(
            json.dumps(
                {
                    "instruction": r["instruction"],
                    "input": "",
                    "chosen": r["output"],
                    "rejected": SFT[(i + 1) % 40]["output"],
                }
            )
            + "\n"
            for i, r in enumerate(SFT)
        )
    )
    training = {k: v for k, v in bc["training"].items() if v is not None}
    training["dataset"] = {"__PT__": str(pt), "__DPO__": str(dpo)}.get(
        training.get("dataset"), training.get("dataset")
    )
    training = {k: v for k, v in training.items() if v is not None}
    exp = experiment(tmp_path, demo_model, stage, bc={**bc, "training": training}, stage=stage)
    if "lora_target" in bc["training"]:
        cfg = yaml.safe_load(exp.read_text())
        cfg["backend_config"]["training"].pop("lora_target")
        exp.write_text(yaml.safe_dump(cfg))
    proc = train(exp)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = tmp_path / stage
    assert sorted(losses(out)) == [1, 2, 3, 4, 5, 6]
    assert (out / "training_loss.png").exists() and not (out / "lora_merged").exists()
    weights = (
        "model.safetensors" if training.get("finetuning_type") == "full" else "adapter_model.safetensors"
    )
    assert (out / weights).exists()
    if stage == "dpo":
        assert "accuracy" in trainer_log(out)[0]


@needs_env
@pytest.mark.slow  # the two-node test below runs two processes with one log per rank in CI
def test_two_processes_run_through_torchrun_with_one_log_per_rank(tmp_path, demo_model):
    exp = experiment(tmp_path, demo_model, "ddp", nproc=2, bc={"merge_lora": False})
    proc = train(exp)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = tmp_path / "ddp"
    logs = sorted(p.name for p in (out / "logs").iterdir())
    for rank in (0, 1):
        assert any(n.endswith(f"-run_log-R{rank}_WS2.txt") for n in logs), logs
    records = trainer_log(out)
    assert sorted(losses(out)) == [1, 2, 3, 4, 5, 6]
    assert records[-1]["total_tokens"] > 0
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert summary["throughput"]["details"]["devices"] == 2


@needs_env
def test_kill_9_mid_run_then_the_same_command_resumes_with_identical_losses(tmp_path, demo_model):
    steps = {"training": {"max_steps": 60, "save_steps": 10}, "merge_lora": False}
    reference = experiment(tmp_path, demo_model, "ref", bc=json.loads(json.dumps(steps)))
    assert train(reference).returncode == 0
    expected = losses(tmp_path / "ref")
    assert sorted(expected) == list(range(1, 61))

    exp = experiment(tmp_path, demo_model, "killed", bc=json.loads(json.dumps(steps)), train_auto_resume=True)
    out = tmp_path / "killed"
    kill_after_checkpoint(exp, out / "checkpoint-10")
    assert max(losses(out)) < 60, "the kill came after the run ended"
    newest = newest_complete(str(out))
    done = int(newest.rsplit("-", 1)[1])
    resumed = train(exp)
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    cfg = yaml.safe_load((out / "llamafactory_train.yaml").read_text())
    assert cfg["resume_from_checkpoint"] == newest and cfg["overwrite_output_dir"] is False
    got = losses(out)
    assert sorted(got) == list(range(1, 61))
    assert [got[s] for s in range(done + 1, 61)] == [
        expected[s] for s in range(done + 1, 61)
    ]  # bit-identical


@needs_env
def test_llamafactorys_own_check_stops_the_run_before_training(tmp_path, demo_model):
    # what only LLaMA-Factory itself finds: a tokenizer.json it cannot load (our checks read config.json)
    import shutil

    broken = tmp_path / "broken-model"
    shutil.copytree(demo_model, broken)
    (broken / "tokenizer.json").write_text("{not json")
    exp = experiment(tmp_path, broken, "tokcheck")
    proc = train(exp)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "step 'check' failed" in proc.stderr
    assert not (tmp_path / "tokcheck" / "trainer_log.jsonl").exists()


@needs_env
def test_deepspeed_missing_from_the_environment_is_refused_before_any_step(tmp_path, demo_model):
    # LLaMA-Factory's parser requires the deepspeed package for a `deepspeed` config; the plan looks it up
    # in LLaMA-Factory's environment (the differential harness's rule) before anything runs
    ds = tmp_path / "ds.json"
    ds.write_text("{}")
    exp = experiment(tmp_path, demo_model, "dscheck", bc={"training": {"deepspeed": str(ds)}})
    proc = train(exp)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "deepspeed" in proc.stderr.lower() and "nothing was run" in proc.stderr
    assert not (tmp_path / "dscheck" / "logs").exists()


@needs_env
@pytest.mark.slow  # three 40-step runs (about 1 min); the one-process kill -9 resume stays in CI
def test_a_two_process_cpu_run_killed_resumes_on_one_process_with_identical_losses(tmp_path, demo_model):
    steps = {"training": {"max_steps": 40, "save_steps": 10}, "merge_lora": False}
    reference = experiment(tmp_path, demo_model, "ref2", nproc=2, bc=json.loads(json.dumps(steps)))
    assert train(reference).returncode == 0
    expected = losses(tmp_path / "ref2")

    exp = experiment(
        tmp_path, demo_model, "killed2", nproc=2, bc=json.loads(json.dumps(steps)), train_auto_resume=True
    )
    out = tmp_path / "killed2"
    kill_after_checkpoint(exp, out / "checkpoint-10")
    assert max(losses(out)) < 40, "the kill came after the run ended"
    done = int(newest_complete(str(out)).rsplit("-", 1)[1])
    resumed = train(exp)
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    assert "resuming a 2-process CPU run on one process" in resumed.stderr
    cfg = yaml.safe_load((out / "llamafactory_train.yaml").read_text())
    assert cfg["gradient_accumulation_steps"] == 2
    got = losses(out)
    assert sorted(got) == list(range(1, 41))
    for step in range(done + 1, 41):  # same global batch; float sums in another order: not bit-exact
        assert got[step] == pytest.approx(expected[step], rel=1e-4, abs=1e-5), step


@needs_env
def test_two_nodes_over_localhost_run_one_job_with_the_same_command(tmp_path, demo_model):
    port = 29500 + os.getpid() % 400
    procs, outs = [], []
    for rank in (0, 1):
        exp = experiment(
            tmp_path, demo_model, f"node{rank}", bc={"merge_lora": False}, shared_filesystem=False
        )
        cfg = yaml.safe_load(exp.read_text())
        cfg["env"].update(NNODES=2, NODE_RANK=rank, MASTER_PORT=port)
        exp.write_text(yaml.safe_dump(cfg))
        outs.append(tmp_path / f"node{rank}")
        procs.append(
            subprocess.Popen(
                [*CLI, "train", str(exp)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
        )
    texts = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], texts[0][-3000:] + texts[1][-3000:]
    for rank, out in enumerate(outs):
        logs = [p.name for p in (out / "logs").iterdir()]
        assert any(n.endswith(f"-run_log-R{rank}_WS2.txt") for n in logs), logs
    assert sorted(losses(outs[0])) == [1, 2, 3, 4, 5, 6]  # global rank 0 writes LLaMA-Factory's records
    assert not (outs[1] / "trainer_log.jsonl").exists()
