"""The shipped `lora-4k` experiment on the embedded backend, end to end through the CLI, on the demo model:
preprocess -> hf2mg -> LoRA training (2 processes: data parallel 2, bf16, validation) -> mg2hf with the
adapters merged; then the same file planned for MindSpeed-LLM. (LoRA under TP and PP:
test_train_lora_tied_bf16.py; merging TP/PP shards: tests/unit/engine/convert/test_tied_and_lora.py.)

Merged logits vs base + adapter: the reference runs the base weights with the trained adapters applied
(`lora.apply_lora`, PEFT's forward), in fp32; the merged model holds `W + alpha/r * B @ A` rounded to bf16
(the run's dtype, as MindSpeed-LLM's merge), so they agree to bf16 precision, far closer than to the base.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import REPO
from tests.integration.test_quickstart_e2e import free_port

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, demo_model):
    root = tmp_path_factory.mktemp("lora4k")
    exp = root / "lora-4k.yaml"
    made = cli("config", "--backend=torch", "--af_model_name=tiny-demo", "--exp_name=lora-4k",
               f"--output_file_path={exp}")  # fmt: skip
    assert made.returncode == 0, made.stderr
    out = root / "out"
    small = {
        "tokenizer-name-or-path": demo_model, "tensor-model-parallel-size": 1, "seq-length": 128,
        "micro-batch-size": 4, "global-batch-size": 8, "train-iters": 30, "lr": 2e-2, "min-lr": 2e-3,
        "save-interval": 15, "split": "90,10,0", "eval-interval": 10, "eval-iters": 2,
    }  # fmt: skip
    overrides = [f"--backend_config.training.{k}={v}" for k, v in small.items()]
    proc = cli("train", str(exp), f"--af_output_dir={out}", f"--env.MASTER_PORT={free_port()}",
               "--env.NPUS_PER_NODE=2", "--backend_config.preprocess_data.workers=1", *overrides)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return exp, out, demo_model, overrides


def test_lora_4k_trains_saves_adapters_and_merges(lora_run):
    from transformers import AutoModelForCausalLM

    from ascendfactory.engine.convert import lora
    from ascendfactory.engine.convert import megatron_io as mio
    from ascendfactory.metrics import parse_file

    exp, out, model, _ = lora_run
    log = next(p for p in (out / "logs").iterdir() if p.name.endswith("-run_log-N1-1.txt"))
    records = list(parse_file(log))
    losses = [r.metrics["lm loss"] for r in records if r.kind == "train"]
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.1, losses
    assert [r.step for r in records if r.kind == "eval"] == [10, 20, 30, 30]  # + after training
    assert (out / "training_loss.png").stat().st_size > 5000
    assert (
        "using world size: 2, data-parallel size: 2"
        in next(p for p in (out / "logs").iterdir() if p.name.endswith("-run_log-N1-0.txt")).read_text()
    )
    # MindSpeed-LLM's LoRA layout, in bf16
    shard = mio.load_shard(out / "saved_checkpoints", 30, 0, 0, 1)["model"]
    assert lora.adapter_targets(shard) == set(TARGETS)
    assert "decoder.layers.0.mlp.linear_fc1.base_layer.weight" in shard
    assert {v.dtype for v in shard.values()} == {torch.bfloat16}
    assert shard["decoder.layers.0.mlp.linear_fc2" + lora.A_SUFFIX].shape == (8, 176)
    # merged HF weights == base + adapter
    merged = AutoModelForCausalLM.from_pretrained(out / "ckpt_converted_mg2hf", dtype=torch.float32).eval()
    base, adapted = _base_and_adapted(out, model)
    x = torch.randint(0, merged.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, ref, plain = merged(x).logits, adapted(x), base(x)
    err, effect = float((got - ref).abs().max()), float((ref - plain).abs().max())
    assert err < 0.05 * float(ref.abs().max()) and effect > 10 * err, (err, effect)


def _base_and_adapted(out: Path, model_dir: Path):
    """The base model (converted weights) and the same with the trained adapters (TP shards glued)."""
    from transformers import AutoConfig

    from ascendfactory.engine.convert import lora
    from ascendfactory.engine.convert import megatron_io as mio
    from ascendfactory.engine.convert.dims import as_dims
    from ascendfactory.engine.convert.shard_map import hf_locals_to_full, megatron_to_hf_local
    from ascendfactory.engine.train.lora import apply_lora
    from ascendfactory.engine.train.model import build_stage, load_local_state

    cfg = AutoConfig.from_pretrained(model_dir)
    base_dir = next(out.glob("converted_weight_TP*PP1"))
    tp, _ = mio.discover_layout(base_dir, 1)
    conv = [mio.load_shard(base_dir, 1, t, 0, 1) for t in range(tp)]
    args = conv[0]["args"]
    weights = hf_locals_to_full(
        [
            megatron_to_hf_local(c["model"], cfg=args, tp=tp, tp_rank=t, layer_offset=0)
            for t, c in enumerate(conv)
        ],
        cfg=as_dims(args),
    )
    saved = [mio.load_shard(out / "saved_checkpoints", 30, t, 0, 1)["model"] for t in range(tp)]
    pieces = [
        lora.megatron_to_local(lora.from_peft_layout(s)[1], cfg=args, tp=tp, tp_rank=t, layer_offset=0)
        for t, s in enumerate(saved)
    ]
    adapters = {}
    for name in pieces[0]:
        parts = [p[name] for p in pieces]
        row_target = ".linear_proj." in name or ".linear_fc2." in name
        if ".lora_A." in name:  # A: replicated (qkv, fc1) or column-sharded (proj, fc2)
            adapters[name] = torch.cat(parts, 1) if row_target else parts[0]
        else:  # B: row-sharded (qkv, fc1) or replicated (proj, fc2)
            adapters[name] = parts[0] if row_target else torch.cat(parts, 0)
    cfg.vocab_size = args.padded_vocab_size
    models = []
    for with_lora in (False, True):
        m = build_stage(cfg, layers=[cfg.num_hidden_layers], pp_rank=0, device=torch.device("cpu"))
        if with_lora:
            apply_lora(m, cfg, targets=TARGETS, r=8, alpha=16, seed=0, tp_mesh=None, tp=1, tp_rank=0,
                       device=torch.device("cpu"))  # fmt: skip
        load_local_state(m, {k: v.float() for k, v in {**weights, **(adapters if with_lora else {})}.items()})
        models.append(m.eval())
    return models


def test_same_file_plans_mindspeed_llms_lora_commands(lora_run, tmp_path):
    exp, _, _, overrides = lora_run
    proc = cli("train", str(exp), "--backend=mindspeed-llm", f"--af_output_dir={tmp_path / 'ms'}",
               *overrides, "--dry-run", "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    steps = {s["name"]: s for s in json.loads(proc.stdout)["steps"]}
    train = steps["train"]["argv"]
    assert any(a.endswith("posttrain_gpt.py") for a in train)
    i = train.index("--lora-target-modules")
    assert train[i + 1 : i + 5] == TARGETS and "--lora-fusion" in train
    assert train[train.index("--lora-r") + 1] == "8" and train[train.index("--lora-alpha") + 1] == "16"
    merge = steps["mg2hf"]["argv"]
    assert merge[merge.index("--lora-load") + 1].endswith("saved_checkpoints")
    assert merge[merge.index("--load-dir") + 1].endswith("converted_weight_TP1PP1")
    assert yaml.safe_load(exp.read_text())["backend"] == "torch"  # the file itself is unchanged
