"""The mixture-of-experts quickstarts through the CLI (`train cfgs/quickstart_qwen3_moe.yaml`,
`cfgs/quickstart_deepseek2_lite.yaml`): preprocess -> hf2mg with EP 2 -> torchrun train on two processes
(DP 2 = EP 2, all-to-all dispatch over gloo) -> mg2hf -> plot, on the tiny demos built offline; the LM loss
falls, the load-balancing loss is logged beside it and plotted, each rank's checkpoint holds its own experts
(`mp_rank_00_00E`), and the HF weights that come back load in transformers and differ from the ones that
went in. Shortened to 20 iterations here (2-core CPU: about 40 s for Qwen3-MoE, 30 s for DeepSeek-V2-Lite with
MLA, shared experts and a dense first layer)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
ITERS = 20
CASES = [
    pytest.param("quickstart_qwen3_moe.yaml", "qwen3_moe", id="qwen3-moe"),
    pytest.param("quickstart_deepseek2_lite.yaml", "deepseek_v2_lite", id="deepseek-v2-lite"),
]


def lm_and_aux(log: Path) -> tuple[list[float], list[float]]:
    from ascendfactory.metrics import parse_file

    records = [r.metrics for r in parse_file(log) if "lm loss" in r.metrics]
    return [m["lm loss"] for m in records], [
        m["load_balancing_loss"] for m in records if "load_balancing_loss" in m
    ]


@pytest.mark.parametrize(("cfg", "family"), CASES)
def test_moe_quickstart_trains_with_expert_parallel_2_and_gives_back_hf_weights(tmp_path, cfg, family):
    from safetensors.torch import load_file

    from ascendfactory.engine.demo import make_demo_model

    model = make_demo_model(tmp_path / "model", family=family)
    out = tmp_path / "run"
    args = [
        "train",
        str(REPO / "cfgs" / cfg),
        f"--af_output_dir={out}",
        f"--backend_config.training.tokenizer-name-or-path={model}",
        f"--env.MASTER_PORT={free_port()}",
        f"--backend_config.training.train-iters={ITERS}",
        f"--backend_config.training.save-interval={ITERS}",
        f"--backend_config.training.eval-interval={ITERS}",
        "--backend_config.training.eval-iters=1",
        "--backend_config.training.log-interval=1",
    ]
    proc = subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    converted = out / "converted_weight_TP1PP1EP2"
    assert converted.is_dir()
    final = out / "saved_checkpoints" / f"iter_{ITERS:07d}"
    assert sorted(p.name for p in final.iterdir()) == [
        "mp_rank_00_000",
        "mp_rank_00_001",
    ]  # one per expert rank
    png = (out / "training_loss.png").read_bytes()
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert height == 2 * 360, (width, height)  # two panels of 3.6 in at 100 dpi: lm loss, load_balancing_loss

    last_rank = next(p for p in (out / "logs").iterdir() if p.name.endswith("-run_log-N1-1.txt"))
    lm, aux = lm_and_aux(last_rank)
    assert len(lm) == ITERS and len(aux) == ITERS, (lm, aux)
    assert all(x == x and x > 0 for x in lm + aux)  # finite, no NaN
    assert sum(lm[-3:]) / 3 < 0.85 * sum(lm[:3]) / 3, lm  # the LM loss fell
    summary = json.loads((out / ".af" / "summary.json").read_text())
    balance = summary["metrics"]["load_balancing_loss"]  # the run summary's line for it
    assert balance["last"] == pytest.approx(aux[-1], rel=1e-4), balance

    from transformers import AutoModelForCausalLM

    hf = out / "ckpt_converted_mg2hf"
    trained = AutoModelForCausalLM.from_pretrained(hf)
    assert trained.config.model_type == json.loads((model / "config.json").read_text())["model_type"]
    before, after = load_file(str(model / "model.safetensors")), load_file(str(hf / "model.safetensors"))
    assert before.keys() == after.keys()
    experts = [k for k in after if ".experts." in k]
    assert experts and all(after[k].shape == before[k].shape for k in after)
    assert sum(not after[k].equal(before[k]) for k in experts) > len(experts) // 2  # the experts trained
    import torch

    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    assert torch.isfinite(trained(ids).logits).all()
