"""Our hf->mg conversion against MindSpeed-LLM's own `convert_ckpt_v2.py`, tensor by tensor (opt-in).

Runs where checkouts are given (never committed here):

    AF_TEST_MINDSPEED_LLM_V2         a MindSpeed-LLM checkout of 2.3.0 or later (has convert_ckpt_v2.py)
    AF_TEST_MINDSPEED_LLM_V2_PATH    PYTHONPATH for it: its MindSpeed and Megatron-LM checkouts (2.3.0's
                                     install guide: MindSpeed 2.3.0_core_r0.12.1, Megatron-LM core_v0.12.1;
                                     26.1.0: MindSpeed 26.1.0_core_r0.12.1, the same Megatron-LM)
    AF_TEST_MINDSPEED_LLM_V2_PYTHON  an interpreter with its pure-Python needs (einops, datasets, peft;
                                     26.1.0's requirements also tiktoken, sentencepiece); default: this one

The Ascend-only packages it imports are stood in for by `tests/support/peer_standins.py`. The v2 converter's
dense families are Qwen3 and later at 2.3.0; 26.1.0's also takes qwen25 and llama2 (`--model-type-hf`), so the
dense models are tiny Qwen3, Qwen2.5 and Llama, hf->mg at several layouts and mg->hf (each converter's HF
output of the same Megatron tree, tensor by tensor); the mixture-of-experts families
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
from tests.support.peer_converter import SIZES, hf_tensors, run_ours, run_peer
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.integration

CHECKOUT = os.environ.get("AF_TEST_MINDSPEED_LLM_V2", "")
PEER_PATH = os.environ.get("AF_TEST_MINDSPEED_LLM_V2_PATH", "")
PEER_PYTHON = os.environ.get("AF_TEST_MINDSPEED_LLM_V2_PYTHON", sys.executable)
READY = bool(CHECKOUT) and os.path.isfile(os.path.join(CHECKOUT, "convert_ckpt_v2.py"))
NEEDS_CHECKOUT = pytest.mark.skipif(
    not READY, reason="needs AF_TEST_MINDSPEED_LLM_V2: a MindSpeed-LLM >= 2.3.0 checkout"
)


def _peer(flags: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """MindSpeed-LLM's convert_ckpt_v2.py with `flags`, under the stand-ins."""
    return run_peer(
        PEER_PYTHON, os.path.join(CHECKOUT, "convert_ckpt_v2.py"), flags, pythonpath=PEER_PATH, cwd=cwd
    )


def _both(tmp_path: Path, src: Path, flags: list[str]) -> str:
    """Run both converters with the same flags; the verdict of comparing their trees."""
    flags = ["--load-model-type", "hf", "--save-model-type", "mg", "--load-dir", str(src), *flags]
    ours, peer = tmp_path / "ours", tmp_path / "peer"
    run_ours([*flags, "--save-dir", str(ours)])
    done = _peer([*flags, "--save-dir", str(peer)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (peer / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (ours / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    return compare_megatron_trees(ours, peer)


@NEEDS_CHECKOUT
@pytest.mark.parametrize(
    ("family", "tp", "pp"),
    [("qwen3", 1, 1), ("qwen3", 2, 2), ("qwen3", 1, 4), ("qwen25", 2, 2), ("llama2", 2, 1), ("llama2", 1, 2)],
)
def test_hf_to_megatron_equals_mindspeed_llms_v2_converter(
    tmp_path: Path, family: str, tp: int, pp: int
) -> None:
    src = build_tiny_model(tmp_path / "hf", family, seed=3, dtype="bfloat16", **SIZES)
    flags = ["--model-type-hf", family, "--target-tensor-parallel-size", str(tp)]
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


@NEEDS_CHECKOUT
@pytest.mark.parametrize("family", ["qwen3", "qwen25", "llama2"])
def test_megatron_to_hf_equals_mindspeed_llms_v2_converter(tmp_path: Path, family: str) -> None:
    """TP 2 x PP 2 back to HF, as the mindspeed-llm backend's final conversion runs it (no target sizes):
    the peer reads the Megatron tree our converter wrote (its `args` included). Ours returns the original
    weights. The peer's output is the same for qwen25; for the families of `V2_MG2HF_UNGROUPED_QKV`
    (qwen3, llama2: model_cfg.json gives them no `qkv_split: per_group`) 26.1.0's mg->hf splits the fused
    QKV as [Q; K; V] although its hf->mg wrote it per query group, so its q/k/v projections differ from the
    originals while every other tensor is the same (its own hf->mg->hf round trip does the same; the plan
    warns about it)."""
    import torch

    from ascendfactory.backends.mindspeed_llm.converters import V2_MG2HF_UNGROUPED_QKV

    src = build_tiny_model(tmp_path / "hf", family, seed=3, dtype="bfloat16", **SIZES)
    mg = tmp_path / "mg"
    to_mg = ["--load-model-type", "hf", "--save-model-type", "mg", "--load-dir", str(src)]
    to_mg += ["--save-dir", str(mg), "--model-type-hf", family]
    to_mg += ["--target-tensor-parallel-size", "2", "--target-pipeline-parallel-size", "2"]
    run_ours(to_mg)
    back = ["--load-model-type", "mg", "--save-model-type", "hf", "--load-dir", str(mg)]
    back += ["--hf-cfg-dir", str(src), "--model-type-hf", family]
    ours, peer = tmp_path / "ours_hf", tmp_path / "peer_hf"
    run_ours([*back, "--save-dir", str(ours)])
    done = _peer([*back, "--save-dir", str(peer)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    a, b = hf_tensors(ours), hf_tensors(peer)
    assert sorted(a) == sorted(b), (sorted(set(a) - set(b)), sorted(set(b) - set(a)))
    original = hf_tensors(src)
    assert sorted(a) == sorted(original) and all(torch.equal(a[n], original[n]) for n in original)
    differ = sorted(n for n in a if not torch.equal(a[n], b[n]))
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
    if family in V2_MG2HF_UNGROUPED_QKV:
        assert differ and all(n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")) for n in differ)
    else:
        assert differ == []
