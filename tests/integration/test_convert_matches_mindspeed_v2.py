"""Our conversions against MindSpeed-LLM's own `convert_ckpt_v2.py`, tensor by tensor (opt-in).

Runs where checkouts are given (never committed here):

    AF_TEST_MINDSPEED_LLM_V2         a MindSpeed-LLM checkout of 2.3.0 or later (has convert_ckpt_v2.py);
                                     26.1.0 (the version the mindspeed-llm backend plans for by default)
    AF_TEST_MINDSPEED_LLM_V2_PATH    PYTHONPATH for it: its MindSpeed and Megatron-LM checkouts (26.1.0's
                                     install guide: MindSpeed 26.1.0_core_r0.12.1, Megatron-LM core_v0.12.1)
    AF_TEST_MINDSPEED_LLM_V2_PYTHON  an interpreter with its pure-Python needs (einops, datasets, peft,
                                     tiktoken, sentencepiece: its requirements.txt); default: this one

The Ascend-only packages it imports are stood in for by `tests/support/peer_standins.py`. hf->mg: the
Megatron trees compared file by file; mg->hf: each converter's HF output of its own Megatron tree (the
same, by the first test) compared tensor by tensor. Families: the dense ones both converters take, as
26.1.0's v2 does (`--model-type-hf qwen3 | qwen25 | llama2`; 2.3.0's v2 takes only qwen3 of these).
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


FAMILIES = ("qwen3", "qwen25", "llama2")


def _model(root: Path, family: str = "qwen3") -> Path:
    src = root / "hf"
    build_tiny_model(
        src,
        family,
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


def _peer(flags: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PEER_PYTHON, str(STANDINS), os.path.join(CHECKOUT, "convert_ckpt_v2.py"), *flags],
        env={**os.environ, "PYTHONPATH": PEER_PATH},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


@pytest.mark.skipif(not READY, reason="needs AF_TEST_MINDSPEED_LLM_V2: a MindSpeed-LLM >= 2.3.0 checkout")
@pytest.mark.parametrize(
    ("family", "tp", "pp"),
    [("qwen3", 1, 1), ("qwen3", 2, 2), ("qwen3", 1, 4), ("qwen25", 2, 2), ("llama2", 2, 1), ("llama2", 1, 2)],
)
def test_hf_to_megatron_equals_mindspeed_llms_v2_converter(
    tmp_path: Path, family: str, tp: int, pp: int
) -> None:
    src = _model(tmp_path, family)
    flags = [
        "--load-model-type",
        "hf",
        "--save-model-type",
        "mg",
        "--load-dir",
        str(src),
        "--model-type-hf",
        family,
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
    done = _peer([*flags, "--save-dir", str(peer)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (peer / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (ours / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    verdict = compare_megatron_trees(ours, peer)
    assert verdict.startswith("identical"), verdict


def _hf_tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    out: dict = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@pytest.mark.skipif(not READY, reason="needs AF_TEST_MINDSPEED_LLM_V2: a MindSpeed-LLM >= 2.3.0 checkout")
@pytest.mark.parametrize("family", FAMILIES)
def test_megatron_to_hf_equals_mindspeed_llms_v2_converter(tmp_path: Path, family: str) -> None:
    """TP 2 x PP 2 back to HF, as the backend's final conversion runs it (no target sizes)."""
    import torch

    src = _model(tmp_path, family)
    mg = tmp_path / "mg"
    to_mg = [
        "--load-model-type",
        "hf",
        "--save-model-type",
        "mg",
        "--load-dir",
        str(src),
        "--save-dir",
        str(mg),
    ]
    sizes = ["--target-tensor-parallel-size", "2", "--target-pipeline-parallel-size", "2"]
    subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.convert", *to_mg, "--model-type-hf", family, *sizes],
        check=True,
        capture_output=True,
        timeout=300,
    )
    ours, peer = tmp_path / "ours_hf", tmp_path / "peer_hf"
    back = ["--load-model-type", "mg", "--save-model-type", "hf", "--load-dir", str(mg)]
    back += ["--hf-cfg-dir", str(src), "--model-type-hf", family]
    subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.convert", *back, "--save-dir", str(ours)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    done = _peer([*back, "--save-dir", str(peer)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    a, b = _hf_tensors(ours), _hf_tensors(peer)
    assert sorted(a) == sorted(b), (sorted(set(a) - set(b)), sorted(set(b) - set(a)))
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert torch.equal(a[name], b[name]), name
    original = _hf_tensors(src)  # and both give the original weights back
    assert all(torch.equal(a[n], original[n]) for n in original if n in a)
