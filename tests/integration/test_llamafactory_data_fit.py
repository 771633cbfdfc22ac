"""The own-data case (audit row 18) on the llamafactory backend: 50 alpaca records whose prompts mostly
run past `cutoff_len: 64`. LLaMA-Factory's infer_seqlen cuts the prompt and keeps the short answers, so
the check step warns with the counts (the questions are cut) and training goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascendfactory.backends.llamafactory import environment
from tests.integration.test_own_data_fit import own_records

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
ENV, _ = environment.find_env(None, os.environ)


@pytest.mark.skipif(bool(environment.missing(ENV)), reason=f"no LLaMA-Factory environment at {ENV}")
def test_the_check_step_counts_the_samples_cutoff_len_cuts(tmp_path, demo_model):
    data = own_records(tmp_path / "own.jsonl")
    cfg = {
        "backend": "llamafactory",
        "af_model_name": "tiny-demo",
        "exp_name": "own-data",
        "af_output_dir": str(tmp_path / "out"),
        "stage": "sft",
        "env": {"NPUS_PER_NODE": 1, "MASTER_PORT": 29000 + os.getpid() % 500},
        "backend_config": {
            "training": {
                "model_name_or_path": str(demo_model),
                "finetuning_type": "lora",
                "lora_target": "all",
                "dataset": str(data),
                "template": "empty",  # no default system prompt: the 20 short records fit
                "cutoff_len": 64,
                "preprocessing_num_workers": 1,
                "dataloader_num_workers": 0,
                "per_device_train_batch_size": 2,
                "max_steps": 1,
            },
            "merge_lora": False,
        },
    }
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [*CLI, "train", str(path)], cwd=REPO, capture_output=True, text=True, timeout=600, env=env
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "check: [lf-check] WARNING: 30 of 50 samples (60%) are longer than cutoff_len 64" in text
    assert "30 lose only prompt tokens" in text and "0 keep no answer token" in text
    assert json.loads((tmp_path / "out" / ".af" / "summary.json").read_text())["nan_iterations"] == 0


@pytest.mark.skipif(bool(environment.missing(ENV)), reason=f"no LLaMA-Factory environment at {ENV}")
def test_a_cutoff_len_past_the_models_positions_is_never_suggested(tmp_path, demo_model):
    """Prompts longer than the demo model's 512 positions: the check says the data cannot fit the model
    instead of suggesting a cutoff_len the model cannot take (audit C2, row 27)."""
    words = " ".join(f"word{i % 37}" for i in range(700))
    data = tmp_path / "long.jsonl"
    data.write_text(
        "".join(json.dumps({"instruction": words, "input": "", "output": f"{i}."}) + "\n" for i in range(20))
    )
    script = REPO / "ascendfactory" / "backends" / "llamafactory" / "programs" / "lf_check.py"
    train = {
        "stage": "sft",
        "do_train": True,
        "model_name_or_path": str(demo_model),
        "finetuning_type": "lora",
        "lora_target": "all",
        "dataset": "long",
        "dataset_dir": str(tmp_path),
        "template": "empty",
        "cutoff_len": 64,
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 1,
        "max_steps": 1,
        "report_to": "none",
    }
    (tmp_path / "dataset_info.json").write_text(json.dumps({"long": {"file_name": str(data)}}))
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(train))
    proc = subprocess.run(
        [str(Path(ENV) / "bin" / "python"), str(script), str(tmp_path / "train.yaml"), "--data-fit=warn"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "past the model's 512 positions (max_position_embeddings): at cutoff_len 512 0% stay whole" in text
    assert "the data cannot fit this model whole" in text and "would keep 95%" not in text
