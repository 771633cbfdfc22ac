"""Our hf->mg conversion against MindSpeed-LLM's own `convert_ckpt_v2.py`, tensor by tensor (opt-in).

Runs where checkouts are given (never committed here):

    AF_TEST_MINDSPEED_LLM_V2         a MindSpeed-LLM checkout of 2.3.0 or later (has convert_ckpt_v2.py)
    AF_TEST_MINDSPEED_LLM_V2_PATH    PYTHONPATH for it: its MindSpeed and Megatron-LM checkouts (2.3.0's
                                     install guide: MindSpeed 2.3.0_core_r0.12.1, Megatron-LM core_v0.12.1)
    AF_TEST_MINDSPEED_LLM_V2_PYTHON  an interpreter with its pure-Python needs (einops, datasets);
                                     default: this one

The Ascend-only packages it imports are stood in for by `tests/support/peer_standins.py`. The v2 converter's
dense families are Qwen3 and later, so the model is a tiny Qwen3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.megatron_trees import compare_megatron_trees
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.integration

CHECKOUT = os.environ.get("AF_TEST_MINDSPEED_LLM_V2", "")
PEER_PATH = os.environ.get("AF_TEST_MINDSPEED_LLM_V2_PATH", "")
PEER_PYTHON = os.environ.get("AF_TEST_MINDSPEED_LLM_V2_PYTHON", sys.executable)
STANDINS = Path(__file__).resolve().parents[1] / "support" / "peer_standins.py"
READY = bool(CHECKOUT) and os.path.isfile(os.path.join(CHECKOUT, "convert_ckpt_v2.py"))


def _model(root: Path) -> Path:
    src = root / "hf"
    build_tiny_model(
        src,
        "qwen3",
        seed=3,
        dtype="bfloat16",
        num_layers=4,
        hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=256,
        vocab_size=512,
    )
    cfg = json.loads((src / "config.json").read_text())
    # the hub's keys, which the v2 converter reads (transformers 5 writes `dtype`, `rope_parameters`)
    cfg.setdefault("torch_dtype", cfg.get("dtype", "bfloat16"))
    cfg.setdefault("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    return src


@pytest.mark.skipif(not READY, reason="needs AF_TEST_MINDSPEED_LLM_V2: a MindSpeed-LLM >= 2.3.0 checkout")
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 2), (1, 4)])
def test_hf_to_megatron_equals_mindspeed_llms_v2_converter(tmp_path: Path, tp: int, pp: int) -> None:
    src = _model(tmp_path)
    flags = [
        "--load-model-type",
        "hf",
        "--save-model-type",
        "mg",
        "--load-dir",
        str(src),
        "--model-type-hf",
        "qwen3",
        "--target-tensor-parallel-size",
        str(tp),
        "--target-pipeline-parallel-size",
        str(pp),
    ]
    ours, peer = tmp_path / "ours", tmp_path / "peer"
    subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.convert", *flags, "--save-dir", str(ours)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    done = subprocess.run(
        [
            PEER_PYTHON,
            str(STANDINS),
            os.path.join(CHECKOUT, "convert_ckpt_v2.py"),
            *flags,
            "--save-dir",
            str(peer),
        ],
        env={**os.environ, "PYTHONPATH": PEER_PATH},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (peer / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (ours / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    verdict = compare_megatron_trees(ours, peer)
    assert verdict.startswith("identical"), verdict
