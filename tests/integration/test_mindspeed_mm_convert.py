"""The real MindSpeed-MM `mm-convert`, driven by the mindspeed-mm plan through the real CLI and runner.

`ascendfactory-cli train` runs the whole plan on a tiny random Qwen2.5-VL (4 LLM layers, 4 ViT layers) with
TP 2 x PP 2: MindSpeed-MM's own `checkpoint.convert_cli` converts HF -> MM (nested lists), the training step
runs under torchrun, MindSpeed-MM's mm_to_hf converts the saved checkpoint back, the loss is plotted and the
throughput summarised. The HF weights must come back bit for bit.

Two stand-ins, because MindSpeed-MM's training needs Ascend NPUs:
- `pretrain_vlm.py` is replaced (in a copy of the checkout) by a program that checks what the plan passes
  (the json files, the load directory's layout for its rank, the flags), keeps the loaded weights as the
  "trained" ones, prints MindSpeed-MM's training_log lines and saves like Megatron (iter_*, tracker);
- `mindspeed.megatron_adaptor`, which mm_to_hf imports before unpickling a training checkpoint (it patches
  Megatron for NPUs), is an empty module: the checkpoints here hold plain tensors.

Runs where a MindSpeed-MM checkout and a Python with what mm-convert imports are given:
    AF_TEST_MM_PYTHON=<python with torch, transformers (qwen2_5_vl), jsonargparse, pydantic>
    AF_TEST_MINDSPEED_MM_2_1_0=<MindSpeed-MM 2.1.0 checkout>  AF_TEST_MINDSPEED_MM_MASTER=<master checkout>
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

PYTHON = os.environ.get("AF_TEST_MM_PYTHON", "")
CHECKOUTS = {
    "2.1.0": os.environ.get("AF_TEST_MINDSPEED_MM_2_1_0", ""),
    "master": os.environ.get("AF_TEST_MINDSPEED_MM_MASTER", ""),
}
REPO = Path(__file__).resolve().parents[2]
SKIP = "set AF_TEST_MM_PYTHON and AF_TEST_MINDSPEED_MM_<2_1_0|MASTER> (see the module docstring)"

BUILD_TINY = """
import sys, torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
torch.manual_seed(0)
cfg = Qwen2_5_VLConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=512, max_position_embeddings=512, tie_word_embeddings=False,
    rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
    vision_config=dict(depth=4, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64,
                       fullatt_block_indexes=[1, 3], window_size=112, patch_size=14, spatial_merge_size=2,
                       temporal_patch_size=2),
)
model = Qwen2_5_VLForConditionalGeneration(cfg).to(torch.bfloat16)
model.save_pretrained(sys.argv[1], safe_serialization=True, max_shard_size="100KB")
"""

# Stand-in for pretrain_vlm.py: one process per rank under torchrun (TP fastest, as Megatron orders ranks).
STAND_IN = r"""
import argparse, json, os, shutil, sys, time
p = argparse.ArgumentParser(allow_abbrev=False)
for name in ("mm-data", "mm-model", "mm-tool", "load", "save"):
    p.add_argument("--" + name, required=True)
for name in ("tensor-model-parallel-size", "pipeline-model-parallel-size", "global-batch-size",
             "train-iters"):
    p.add_argument("--" + name, type=int, required=True)
args, _ = p.parse_known_args()
data, model = json.load(open(args.mm_data)), json.load(open(args.mm_model))
json.load(open(args.mm_tool))
assert data["dataset_param"]["dataset_type"] == "huggingface", data
tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
for part in (model["text_decoder"], model["image_encoder"]["vision_encoder"]):
    assert len(part["pipeline_num_layers"]) == pp, part
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert world == tp * pp, (world, tp, pp)
shard = f"mp_rank_{rank % tp:02d}_{rank // tp:03d}"
tracker = open(os.path.join(args.load, "latest_checkpointed_iteration.txt")).read().strip()
source = os.path.join(args.load, tracker if tracker == "release" else f"iter_{int(tracker):07d}", shard)
assert os.path.isfile(os.path.join(source, "model_optim_rng.pt")), source
n = args.train_iters
target = os.path.join(args.save, f"iter_{n:07d}")
for i in range(1, n + 1):
    if rank == world - 1:
        gbs = args.global_batch_size
        print(f" [2025-09-23 10:00:{i:02d}] iteration {i:8d}/{n:8d} | consumed samples: {i * gbs:12d}"
              f" | elapsed time per iteration (ms): {100.0 + i:.1f} | learning rate: 1.000000E-05 |"
              f" global batch size: {gbs:5d} | loss: {3.0 / i:.6E} | tokens per sample: 5.120000E+02 |"
              " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
              flush=True)
shutil.copytree(source, os.path.join(target, shard))
if rank == 0:
    while len(os.listdir(target)) < world:
        time.sleep(0.1)
    open(os.path.join(args.save, "latest_checkpointed_iteration.txt"), "w").write(str(n))
    print(f"  successfully saved checkpoint from iteration {n:7d} to {args.save}", flush=True)
"""


def runnable(generation: str) -> bool:
    checkout = CHECKOUTS[generation]
    return bool(
        PYTHON and checkout and os.path.isfile(os.path.join(checkout, "checkpoint", "convert_cli.py"))
    )


def staged_checkout(source: str, root: Path, generation: str) -> Path:
    """A copy of the checkout's converter with the stand-in trainer, megatron/'s version file and the
    generation's marker: what the plan looks for."""
    root.mkdir(parents=True)
    shutil.copytree(Path(source) / "checkpoint", root / "checkpoint")
    (root / "pretrain_vlm.py").write_text(STAND_IN, encoding="utf-8")
    info = root / "megatron" / "core" / "package_info.py"
    info.parent.mkdir(parents=True)
    info.write_text(f"MAJOR = 0\nMINOR = {8 if generation == '2.1.0' else 12}\n", encoding="utf-8")
    if generation == "master":
        marker = root / "mindspeed_mm" / "configs" / "validate_params.json"
        marker.parent.mkdir(parents=True)
        marker.write_text("{}", encoding="utf-8")
    stub = root / "_stubs" / "mindspeed"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("", encoding="utf-8")
    (stub / "megatron_adaptor.py").write_text("", encoding="utf-8")
    return root


@pytest.mark.parametrize("generation", ["2.1.0", "master"])
def test_real_mm_convert_round_trip_through_the_runner(tmp_path: Path, generation: str) -> None:
    if not runnable(generation):
        pytest.skip(
            "set AF_TEST_MM_PYTHON and AF_TEST_MINDSPEED_MM_<2_1_0|MASTER> (see the module docstring)"
        )
    from safetensors.torch import load_file

    hf = tmp_path / "hf"
    subprocess.run([PYTHON, "-c", BUILD_TINY, str(hf)], check=True, capture_output=True, timeout=600)
    checkout = staged_checkout(CHECKOUTS[generation], tmp_path / "MindSpeed-MM", generation)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.json").write_text("[]", encoding="utf-8")
    out = tmp_path / "out"
    experiment = {
        "backend": "mindspeed-mm",
        "af_model_name": "qwen2.5-vl-7b",  # the 7B example's json files, sized down below to the tiny model
        "exp_name": "tiny",
        "af_output_dir": str(out),
        "env": {"NPUS_PER_NODE": 4, "MASTER_PORT": 29600 + (generation == "master")},
        "backend_config": {
            "data": {
                "dataset_param": {
                    "preprocess_parameters": {"model_name_or_path": str(hf)},
                    "basic_parameters": {
                        "dataset_dir": str(tmp_path / "data"),
                        "dataset": str(tmp_path / "data/train.json"),
                    },
                }
            },
            "model": {
                "image_encoder": {
                    "vision_encoder": {
                        "num_layers": 4,
                        "num_attention_heads": 4,
                        "pipeline_num_layers": [4, 0],
                    }
                },
                "text_decoder": {
                    "num_layers": 4,
                    "hidden_size": 64,
                    "num_attention_heads": 4,
                    "num_query_groups": 2,
                    "pipeline_num_layers": [1, 3],
                },
            },
            "training": {
                "tensor-model-parallel-size": 2,
                "pipeline-model-parallel-size": 2,
                "global-batch-size": 4,
                "train-iters": 3,
            },
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(checkout / "_stubs")]),
        "AF_MINDSPEED_MM_DIR": str(checkout),
        "ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest",  # the run checks it is sourced
    }
    done = subprocess.run(
        [PYTHON, "-m", "ascendfactory.cli.app", "train", str(path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]

    converted = out / "converted_weight_TP2PP2"
    assert (converted / "latest_checkpointed_iteration.txt").read_text() == "release"
    assert sorted(p.name for p in (converted / "release").iterdir()) == [
        "mp_rank_00_000",
        "mp_rank_00_001",
        "mp_rank_01_000",
        "mp_rank_01_001",
    ]
    assert (out / "saved_checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "3"
    for name in ("data.json", "model.json", "tools.json"):
        json.loads((out / "mm_config" / name).read_text())
    assert (out / "exp-config.yaml").is_file() and (out / "training_loss.png").is_file()
    assert glob.glob(str(out / "logs" / "*-run_log-N1-3.txt"))

    def tensors(d: Path) -> dict:
        found: dict = {}
        for f in sorted(d.glob("*.safetensors")):
            found.update(load_file(f))
        return found

    before, after = tensors(hf), tensors(out / "ckpt_converted_mg2hf")
    assert sorted(before) == sorted(after)
    assert all((before[k] == after[k]).all() for k in before)
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert "samples/s" in json.dumps(summary)


@pytest.mark.parametrize("generation", ["2.1.0", "master"])
@pytest.mark.parametrize("subcommand", ["hf_to_mm", "mm_to_hf"])
def test_generated_options_are_mm_converts_own(generation: str, subcommand: str) -> None:
    """keys/mm_convert_<gen>.txt lists exactly the options the real mm-convert's parser shows (`-h`); an
    optional nested model (`--cfg.llm_hf_config`) is shown as one option and listed by its fields."""
    if not runnable(generation):
        pytest.skip(SKIP)
    import re

    from ascendfactory.backends.mindspeed_mm.keys import mm_convert

    shown = subprocess.run(
        [PYTHON, "-m", "checkpoint.convert_cli", "Qwen2_5_VLConverter", subcommand, "-h"],
        cwd=CHECKOUTS[generation],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    usage = shown.split("\n\n", 1)[0]
    options = set(re.findall(r"--(cfg\.[\w.]+)", usage))
    groups = set(re.findall(r"--(cfg\.[\w.]+) CONFIG", usage))  # `--cfg.parallel_config CONFIG`: a group
    leaves = options - groups
    ours = set(mm_convert(generation)[("Qwen2_5_VLConverter", subcommand)])
    collapsed = {leaf for leaf in leaves if any(k.startswith(f"{leaf}.") for k in ours)}  # llm_hf_config
    assert leaves - collapsed == {k for k in ours if not any(k.startswith(f"{c}.") for c in collapsed)}
