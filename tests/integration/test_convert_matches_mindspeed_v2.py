"""Our hf->mg conversion against MindSpeed-LLM's own `convert_ckpt_v2.py`, tensor by tensor (opt-in).

Runs where checkouts are given (never committed here):

    AF_TEST_MINDSPEED_LLM_V2         a MindSpeed-LLM checkout of 2.3.0 or later (has convert_ckpt_v2.py)
    AF_TEST_MINDSPEED_LLM_V2_PATH    PYTHONPATH for it: its MindSpeed and Megatron-LM checkouts (2.3.0's
                                     install guide: MindSpeed 2.3.0_core_r0.12.1, Megatron-LM core_v0.12.1;
                                     26.1.0: MindSpeed 26.1.0_core_r0.12.1, the same Megatron-LM)
    AF_TEST_MINDSPEED_LLM_V2_PYTHON  an interpreter with its pure-Python needs (einops, datasets, peft);
                                     default: this one

The Ascend-only packages it imports are stood in for by `tests/support/peer_standins.py`. The v2 converter's
dense families are Qwen3 and later, so the dense model is a tiny Qwen3; the mixture-of-experts families
(Qwen3-MoE, DeepSeek-V2-Lite, DeepSeek-V3) are compared at TP 2 x PP 2 x EP 2, with and without
`--moe-grouped-gemm`, and at two other layouts.
"""

from __future__ import annotations

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
NEEDS_CHECKOUT = pytest.mark.skipif(
    not READY, reason="needs AF_TEST_MINDSPEED_LLM_V2: a MindSpeed-LLM >= 2.3.0 checkout"
)
SIZES = dict(
    num_layers=4, hidden_size=128, num_heads=4, num_kv_heads=2, intermediate_size=256, vocab_size=512
)


def _both(tmp_path: Path, src: Path, flags: list[str]) -> str:
    """Run both converters with the same flags; the verdict of comparing their trees."""
    flags = ["--load-model-type", "hf", "--save-model-type", "mg", "--load-dir", str(src), *flags]
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
    return compare_megatron_trees(ours, peer)


@NEEDS_CHECKOUT
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 2), (1, 4)])
def test_hf_to_megatron_equals_mindspeed_llms_v2_converter(tmp_path: Path, tp: int, pp: int) -> None:
    src = build_tiny_model(tmp_path / "hf", "qwen3", seed=3, dtype="bfloat16", **SIZES)
    flags = ["--model-type-hf", "qwen3", "--target-tensor-parallel-size", str(tp)]
    verdict = _both(tmp_path, src, [*flags, "--target-pipeline-parallel-size", str(pp)])
    assert verdict.startswith("identical"), verdict


@NEEDS_CHECKOUT
@pytest.mark.parametrize("family", ["qwen3-moe", "deepseek2-lite", "deepseek3"])
@pytest.mark.parametrize(
    ("tp", "pp", "ep", "grouped"),
    [(2, 2, 2, True), (2, 2, 2, False), (1, 1, 4, True), (2, 1, 2, False)],
    ids=["tp2pp2ep2-grouped", "tp2pp2ep2", "tp1pp1ep4-grouped", "tp2pp1ep2"],
)
def test_moe_hf_to_megatron_equals_mindspeed_llms_v2_converter(
    tmp_path: Path, family: str, tp: int, pp: int, ep: int, grouped: bool
) -> None:
    """Tiny models of each MoE family (4 experts, top 2; DeepSeek: a dense first layer, two shared experts,
    MLA; V3's router bias fp32) built offline from the transformers config classes."""
    src = build_tiny_model(tmp_path / "hf", family, seed=5, dtype="bfloat16", **SIZES)
    flags = ["--model-type-hf", family, "--target-tensor-parallel-size", str(tp)]
    flags += ["--target-pipeline-parallel-size", str(pp), "--target-expert-parallel-size", str(ep)]
    verdict = _both(tmp_path, src, flags + (["--moe-grouped-gemm"] if grouped else []))
    assert verdict.startswith("identical"), verdict
