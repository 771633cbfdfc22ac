"""The mindspeed-rl backend's whole pipeline through the real CLI, runner and Ray launcher, on two nodes.

What is real: `ascendfactory-cli train` (two invocations, NODE_RANK 0 and 1, over 127.0.0.1), the planner
and its checks, the runner, `programs/ray_node.py` forming one Ray cluster whose nodes offer `{"NPU": 1}`,
the head waiting for the NPUs and CPUs the plan asks for, `programs/metric_lines.py` copying the driver's
metric lines into `logs/grpo_metrics-<time>.log`, checkpoint retention, the v1 mg2hf output wrapper, the
plot (reward and response length) and the summary (the three TPS means). What stands in for the framework
(no NPU here): MindSpeed-RL's `cli/train_grpo.py` / `cli/preprocess_data.py` and MindSpeed-LLM's
`convert_ckpt.py` (`mindspeed_rl_standin/`, which read the files and argv the plan writes and ask Ray for
MindSpeed-RL's placement groups). The Ascend toolkit check is satisfied by setting ASCEND_TOOLKIT_HOME.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.ports import free_port

pytest.importorskip("ray")
pytestmark = pytest.mark.integration

STANDIN = Path(__file__).parent / "mindspeed_rl_standin"
CLI = [sys.executable, "-m", "ascendfactory.cli.app"]


def experiment(tmp_path: Path, node_rank: int, port: int) -> Path:
    hf = tmp_path / "hf"
    hf.mkdir(exist_ok=True)
    (hf / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "intermediate_size": 176,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 960,
                "max_position_embeddings": 512,
                "tie_word_embeddings": False,
            }
        )
    )
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(8))
    )
    cfg = {
        "backend": "mindspeed-rl",
        "af_model_name": "tiny-demo",
        "exp_name": "grpo",
        "af_output_dir": str(tmp_path / f"out{node_rank}"),
        "scripts_dir": str(STANDIN / "MindSpeed-RL"),
        "shared_filesystem": False,
        "node_wait_timeout_s": 90,
        "save_total_limit": 1,
        "env": {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "NNODES": 2,
            "NODE_RANK": node_rank,
            "NPUS_PER_NODE": 1,
        },
        "backend_config": {
            "mindspeed_rl_version": "master",
            "preprocess_data": {
                "input": str(data),
                "handler_name": "R1AlpacaStyleInstructionHandler",
                "prompt_type": "qwen_r1",
                "map_keys": {"prompt": "problem", "query": "", "response": "answer", "system": ""},
                "dataset_additional_keys": ["labels"],
            },
            "megatron_training": {
                "tokenizer_name_or_path": str(hf),
                "global_batch_size": 2,
                "seq_length": 256,
                "train_iters": 6,
                "save_interval": 2,
                "dataset_additional_keys": ["labels"],
            },
            "actor_config": {"micro_batch_size": 1},
            "rl_config": {
                "n_samples_per_prompt": 2,
                "mini_batch_size": 2,
                "verifier_function": ["base_acc"],
                "verifier_weight": [1.0],
                "num_cpus_for_placement_group": 0.5,
                "num_cpus_for_local_task": 0.5,
            },
            "generate_config": {
                "infer_tensor_parallel_size": 1,
                "max_model_len": 512,
                "sampling_config": {"max_tokens": 128, "temperature": 1.0},
            },
        },
    }
    path = tmp_path / f"node{node_rank}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def start(path: Path, tmp_path: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "AF_MONITOR_INTERVAL_S": "1",
        "AF_MINDSPEED_LLM_DIR": str(STANDIN / "MindSpeed-LLM"),
        "ASCEND_TOOLKIT_HOME": str(tmp_path),  # what `source set_env.sh` exports; no toolkit is used
    }
    return subprocess.Popen(
        [*CLI, "train", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )


def test_grpo_pipeline_on_two_ray_nodes(tmp_path):
    port = free_port()
    head = start(experiment(tmp_path, 0, port), tmp_path)
    worker = start(experiment(tmp_path, 1, port), tmp_path)
    head_out, _ = head.communicate(timeout=300)
    worker_out, _ = worker.communicate(timeout=120)
    assert head.returncode == 0, head_out[-5000:]
    assert worker.returncode == 0, worker_out[-5000:]

    out0, out1 = tmp_path / "out0", tmp_path / "out1"
    # the MindSpeed-RL yaml and the dataset yaml the stand-ins read
    rl_yaml = yaml.safe_load((out0 / "mindspeed_rl_grpo.yaml").read_text())
    assert rl_yaml["actor_config"]["load"] == str(out0 / "converted_hf2mg_weight_TP1PP1")
    assert rl_yaml["megatron_training"]["data_path"] == str(out0 / "preprocessed_data" / "prompts")
    assert (out0 / "preprocessed_data" / "prompts_packed_labels_document.idx").is_file()
    assert (out0 / "converted_hf2mg_weight_TP1PP1" / "latest_checkpointed_iteration.txt").read_text() == "1"
    # Ray: both nodes' NPUs in one cluster; the placement groups MindSpeed-RL asks for were granted
    (log0,) = (out0 / "logs").glob("tiny-demo-grpo-*-run_log-N2-0.txt")
    text0 = log0.read_text()
    assert "cluster ready: 2 of 2 nodes" in text0
    assert "actor workers placed on 2 node(s) for 2 NPUs" in text0
    assert "training process successfully!" in text0
    (log1,) = (out1 / "logs").glob("tiny-demo-grpo-*-run_log-N2-1.txt")
    assert "the driver on the head succeeded" in log1.read_text()
    # AscendFactory's grpo_metrics-<time>.log: the driver's iteration lines and nothing else (each may be
    # there twice: both Ray nodes run on this one machine, so both nodes' log monitors read the same files)
    (metrics,) = (out0 / "logs").glob("grpo_metrics-*.log")
    lines = metrics.read_text().splitlines()
    assert all(
        re.search(r"iteration: \d / 6 \|", line)
        and line.endswith("vllm_tps : 30%02d.0000 " % int(re.search(r"iteration: (\d)", line).group(1)))
        for line in lines
    )
    assert {int(re.search(r"iteration: (\d)", line).group(1)) for line in lines} == {1, 2, 3, 4, 5, 6}
    assert not list((out1 / "logs").glob("grpo_metrics-*.log"))
    # checkpoints: saved every 2 iterations, save_total_limit 1 keeps the newest; mg2hf on node 0 only
    saved = out0 / "saved_checkpoints"
    assert sorted(p.name for p in saved.glob("iter_*")) == ["iter_0000006"]
    hf_out = out0 / "converted_mg2hf_weight"
    assert json.loads((hf_out / "model.safetensors").read_text()) == {"converted_from_iteration": 6}
    assert (hf_out / "config.json").is_file() and not (hf_out / "mg2hf").exists()
    assert not (out1 / "converted_mg2hf_weight").exists()
    # the plot and the summary: reward and response length, the TPS means
    assert (out0 / "training_loss.png").stat().st_size > 0 and not (out1 / "training_loss.png").exists()
    summary = json.loads((out0 / ".af" / "summary.json").read_text())
    assert summary["metrics"]["base_acc_rewards/mean"]["last"] == pytest.approx(0.6)
    assert summary["metrics"]["response_length/mean"]["first"] == pytest.approx(101.0)
    assert summary["metrics"]["update_tps"]["mean"] == pytest.approx(2003.5)
    assert summary["metrics"]["vllm_tps"]["mean"] == pytest.approx(3003.5)
    assert summary["throughput"]["metric"] == "e2e_tps"
    assert (summary["loss_start"], summary["first_step"], summary["last_step"]) == (0.5, 1, 6)
    assert "vllm_tps: 3001 at step 1 -> 3006 at step 6 (mean 3004" in head_out
