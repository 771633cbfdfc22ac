"""GRPO on the embedded backend, for real, through the installed CLI: the quickstart's warm-up SFT and GRPO on
two CPU processes (the mean reward rises), the log lines and `logs summary`, kill -9 of a rank with
train_auto_resume (final weights bit-identical to the uninterrupted run), and one process (DP 1) and TP 2
against the quickstart's DP 2 run (same metrics), and `report_to: [wandb]` read back from the offline run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.integration.tracker_readback import run_ids, wandb_segments, wandb_series
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
WARMUP = REPO / "cfgs" / "quickstart_grpo_sft.yaml"
GRPO = REPO / "cfgs" / "quickstart_grpo.yaml"
ITERS = 14
PARSED = ("grpo/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm")


def run_cli(args: list[str], timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def grpo_args(out: Path, model: Path) -> list[str]:
    return [
        "train",
        str(GRPO),
        f"--af_output_dir={out}",
        f"--backend_config.megatron_training.tokenizer_name_or_path={model}",
        f"--env.MASTER_PORT={free_port()}",
        f"--backend_config.megatron_training.train_iters={ITERS}",
        "--backend_config.megatron_training.save_interval=7",
        "--save_total_limit=0",
        "--auto_resume.backoff_s=0.5",
    ]


def metric_lines(path: Path) -> list[dict[str, float]]:
    """The MindSpeed-RL lines of a log, parsed by our parser (`step` added)."""
    from ascendfactory.metrics.mindspeed_rl import MindSpeedRLParser

    parser = MindSpeedRLParser()
    records = [r for line in path.read_text().splitlines() for r in parser.feed(line)]
    return [{"step": r.step, **r.metrics} for r in records]


def final_weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "converted_mg2hf_weight" / "model.safetensors"))


@pytest.fixture(scope="module")
def warm(tmp_path_factory, demo_model) -> Path:
    """Step 1 of the quickstart: the demo model after its warm-up SFT (HF weights)."""
    out = tmp_path_factory.mktemp("warmup")
    proc = run_cli(
        [
            "train",
            str(WARMUP),
            f"--af_output_dir={out}",
            f"--backend_config.training.tokenizer-name-or-path={demo_model}",
            f"--env.MASTER_PORT={free_port()}",
        ]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "ckpt_converted_mg2hf"


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, warm) -> Path:
    """Step 2: GRPO, DP 2 on two CPU processes."""
    out = tmp_path_factory.mktemp("grpo")
    proc = run_cli(grpo_args(out, warm))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_quickstart_reward_rises_and_leaves_mindspeed_rls_tree(quickstart):
    out = quickstart
    for name in (
        "preprocessed_data/demo_grpo_packed_input_ids_document.idx",
        "preprocessed_data/demo_grpo_packed_labels_document.bin",
        "converted_hf2mg_weight_TP1PP1/latest_checkpointed_iteration.txt",
        "saved_checkpoints/iter_0000014",
        "converted_mg2hf_weight/model.safetensors",
        "mindspeed_rl_grpo.yaml",
        "exp-config.yaml",
        "training_loss.png",
    ):
        assert (out / name).exists(), name
    [log] = (out / "logs").glob("grpo_metrics-*.log")
    lines = metric_lines(log)
    assert len(lines) == ITERS
    score = [m["grpo/score/mean"] for m in lines]
    assert score[0] < 0.3, score
    assert sum(score[-6:]) / 6 > 0.8, score
    length = [m["response_length/mean"] for m in lines]
    assert length[-1] > length[0] + 10  # the rewarded format is the longer one
    rank0 = next(p for p in (out / "logs").iterdir() if p.name.endswith("-run_log-N1-0.txt"))
    assert metric_lines(rank0) == lines  # the line is printed by rank 0, as the driver prints it
    rank1 = next(p for p in (out / "logs").iterdir() if p.name.endswith("-run_log-N1-1.txt"))
    assert metric_lines(rank1) == []
    assert "time/actor_infer/generate/total" in rank0.read_text() and "system/tps" in rank0.read_text()
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(out / "converted_mg2hf_weight").config.num_hidden_layers == 2


def test_logs_summary_reports_the_three_tps_means(quickstart):
    [log] = (quickstart / "logs").glob("grpo_metrics-*.log")
    proc = run_cli(["logs", "summary", str(log)], timeout=60)
    assert proc.returncode == 0, proc.stderr
    for key in ("e2e_tps", "update_tps", "vllm_tps"):
        assert re.search(rf"throughput {key}: [\d,.]+ tokens/s/device", proc.stdout), proc.stdout[-2000:]


@pytest.mark.slow  # a killed and a resumed GRPO run; the torch trainer's kill -9 resume stays in CI
def test_kill9_of_a_rank_resumes_to_bit_identical_weights(tmp_path, warm, quickstart):
    import psutil

    out = tmp_path / "killed"
    runner = subprocess.Popen(
        [*CLI, *grpo_args(out, warm)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    tracker = out / "saved_checkpoints" / "latest_checkpointed_iteration.txt"
    deadline = time.time() + 300
    while time.time() < deadline and not (tracker.exists() and tracker.read_text().strip() == "7"):
        time.sleep(0.05)
    assert tracker.exists(), "no checkpoint was saved"
    time.sleep(0.5)  # a little into iteration 8
    victims = [
        p
        for p in psutil.Process(runner.pid).children(recursive=True)
        if "ascendfactory.engine.rl" in " ".join(p.cmdline())
        and "torch.distributed.run" not in " ".join(p.cmdline())
    ]
    assert victims, "no training rank found"
    os.kill(victims[-1].pid, signal.SIGKILL)
    output, _ = runner.communicate(timeout=400)
    assert runner.returncode == 0, output[-4000:]
    assert "auto-resume 1/3" in output
    a, b = final_weights(quickstart), final_weights(out)
    assert a.keys() == b.keys()
    for name in a:
        assert bool((a[name] == b[name]).all()), name
    # the resumed segment goes on from the checkpoint with the same samples and losses
    reference = {m["step"]: m for m in metric_lines(next((quickstart / "logs").glob("grpo_metrics-*.log")))}
    resumed = metric_lines(max((out / "logs").glob("grpo_metrics-*.log")))
    assert [m["step"] for m in resumed] == list(range(8, ITERS + 1))
    for m in resumed:
        assert all(m[k] == reference[m["step"]][k] for k in PARSED), m["step"]


def run_engine(
    out: Path, config_dir: Path, nproc: int, *overrides: str, iters: int = 2, tensorboard: Path | None = None
) -> list[dict[str, float]]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_port",
        str(free_port()),
        "-m",
        "ascendfactory.engine.rl",
        "--config-path",
        str(config_dir),
        "--config-name",
        "mindspeed_rl_grpo",
        "--af-metrics-dir",
        str(out),
        *(
            ["--af-tensorboard-dir", str(tensorboard), "+rl_config.use_tensorboard=true"]
            if tensorboard
            else []
        ),
        f"megatron_training.train_iters={iters}",
        f"actor_config.save={out / 'ckpt'}",
        f"rl_config.actor_resource.num_npus={nproc}",
        *overrides,
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return metric_lines(next(out.glob("grpo_metrics-*.log")))


@pytest.mark.slow  # two more GRPO runs (about 2 min); `pytest -m slow`
def test_one_process_and_tensor_parallel_match_the_data_parallel_run(tmp_path, quickstart):
    """DP 1 sees the quickstart's (DP 2) samples in the same micro-batches; TP 2 shards the model."""
    dp2 = metric_lines(next((quickstart / "logs").glob("grpo_metrics-*.log")))[:2]
    dp1 = run_engine(tmp_path / "dp1", quickstart, 1, tensorboard=tmp_path / "tb")
    assert len(dp1) == 2
    for a, b in zip(dp1, dp2):
        for key in PARSED:
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-3), key
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "rank_0"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/grpo/score/mean", "train/e2e_tps", "time/actor_infer/generate/total", "system/tps"} <= tags
    assert [e.value for e in events.Scalars("train/grpo/score/mean")] == pytest.approx(
        [m["grpo/score/mean"] for m in dp1], abs=1e-4
    )
    conv = tmp_path / "tp2_weights"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ascendfactory.engine.convert",
            "--load-model-type",
            "mg",
            "--save-model-type",
            "mg",
            "--load-dir",
            str(quickstart / "converted_hf2mg_weight_TP1PP1"),
            "--save-dir",
            str(conv),
            "--target-tensor-parallel-size",
            "2",
            "--target-pipeline-parallel-size",
            "1",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    tp2 = run_engine(
        tmp_path / "tp2",
        quickstart,
        2,
        "actor_config.tensor_model_parallel_size=2",
        f"actor_config.load={conv}",
        iters=1,
    )
    # iteration 1 samples the same responses (bf16 sums in another order can change later samples)
    assert tp2[0]["grpo/score/mean"] == dp2[0]["grpo/score/mean"]
    assert tp2[0]["response_length/mean"] == dp2[0]["response_length/mean"]
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert tp2[0][key] == pytest.approx(dp2[0][key], rel=2e-2), key


# -- report_to: [wandb] ----------------------------------------------------------------------------------
# The runner maps it to MindSpeed-RL's `rl_config.use_wandb` / `wandb_*`; rank 0 of the GRPO trainer logs
# every iteration's scalars into the offline W&B run the runner named (`WANDB_RUN_ID`), read back with
# wandb's own record reader (tracker_readback.py).
TRACKED_ITERS = 3


def tiny_grpo_args(out: Path, model: Path) -> list[str]:
    """The quickstart's GRPO arguments with three iterations, saved once at the end."""
    args = [a for a in grpo_args(out, model) if "train_iters=" not in a and "save_interval=" not in a]
    return [
        *args,
        f"--backend_config.megatron_training.train_iters={TRACKED_ITERS}",
        f"--backend_config.megatron_training.save_interval={TRACKED_ITERS}",
        "--report_to=[wandb]",
    ]


@pytest.mark.slow  # one more GRPO run; the SFT tracker runs (test_trackers_e2e) and the unit tests stay in CI
def test_grpo_reports_every_iterations_scalars_to_an_offline_wandb_run(tmp_path, warm):
    out = tmp_path / "grpo"
    proc = run_cli(tiny_grpo_args(out, warm))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rl = yaml.safe_load((out / "mindspeed_rl_grpo.yaml").read_text())["rl_config"]
    assert rl["use_wandb"] is True and rl["wandb_project"] == "tiny-demo"
    assert rl["wandb_exp_name"] == "quickstart-grpo" and rl["wandb_save_dir"] == str(out / "trackers")

    [log] = (out / "logs").glob("grpo_metrics-*.log")
    lines = metric_lines(log)
    assert [m["step"] for m in lines] == list(range(1, TRACKED_ITERS + 1))
    segments = wandb_segments(out / "trackers")
    wandb_id = run_ids(out)["wandb"]["run_id"]
    assert segments and {s.run_id for s in segments} == {wandb_id}  # the trainer continued the runner's id
    trainer = next(s for s in segments if s.history)
    assert trainer.project == "tiny-demo" and trainer.name == "quickstart-grpo"
    for key in ("grpo/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "e2e_tps"):
        logged = {m["step"]: m[key] for m in lines}
        assert wandb_series(segments, key) == pytest.approx(logged, abs=1e-4), key  # the line has 4 decimals
    assert sorted(wandb_series(segments, "system/tps")) == list(range(1, TRACKED_ITERS + 1))
    assert trainer.config["rl_config.n_samples_per_prompt"] == "8"  # the resolved yaml as parameters
    assert trainer.config["rl_config.use_wandb"] == "True"
    assert trainer.config["megatron_training.train_iters"] == str(TRACKED_ITERS)
