"""Our conversion of the mixture-of-experts families against MindSpeed-LLM 2.1.0's own v1 `convert_ckpt.py`,
tensor by tensor (opt-in, slow: about 15-40 s per peer run on a 2-core CPU).

Runs where the checkouts are named (never committed here):

    AF_MINDSPEED_LLM_DIR              MindSpeed-LLM 2.1.0 with Megatron-LM core_r0.8.0's megatron/ copied in
                                      (its install guide); the checkout must have no convert_ckpt_v2.py
    AF_MINDSPEED_DIR                  MindSpeed at 2.1.0's pin (2c085cc9, the install guide's checkout)
    AF_TEST_MINDSPEED_LLM_V1_PYTHON   an interpreter with torch, transformers 4.51 .. 4.x (v1 loads the HF
                                      model with AutoModelForCausalLM and reads `mlp.experts[i].gate_proj`,
                                      which transformers 5 fuses; Qwen3-MoE needs 4.51, DeepSeek-V2 4.53 or
                                      later for its own classes), einops, peft and setuptools < 81
                                      (pkg_resources); default: this one

v1 builds the Megatron model of each rank through MindSpeed-LLM's adaptor and copies the HF weights into it,
so it runs the whole adaptor here, under `tests/support/peer_standins.py`: torch_npu, torchair, acl and apex
are inert stand-in imports, and the device random generator Megatron's RNG tracker seeds is a host one
(`--no-initialization`: no weight keeps what it drew). MindSpeed's own adaptor replaces transformer_engine
(its dummy modules), so that one is not stood in.

The peer gets the flags our mindspeed-llm plan for 2.1.0 runs (`backends/mindspeed_llm/converters.py`
`hf2mg_options` / `mg2hf_options` with converter v1, in the plan's step environment); ours gets the same argv
(it ignores v1's `--use-mcore-models`, `--model-type`, `--tokenizer-model`, `--spec`) plus
`--target-mindspeed-llm 2.1.0`, which gives DeepSeek's MLA tensors 2.1.0's names. Compared: every rank
file, names, shapes, dtypes and bytes of each tensor (the peer also writes `_extra_state: None` beside each
Column/RowParallelLinear, which Megatron's load pre-hook fills in when absent, so they are not tensors
compared), and the round trip: 2.1.0's mg->hf of its own tree and ours of the same tree return the HF weights.

2.1.0's v1 cannot write DeepSeek-V2-Lite at TP > 1 (its saver cuts the replicated MLA `linear_qkv` by TP and
leaves `linear_kvb` whole); that is checked too, so the DeepSeek layouts compared have TP 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.megatron_trees import compare_megatron_trees
from tests.support.peer_converter import SIZES, hf_tensors, run_ours, run_peer
from tests.support.tiny_model import build_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHECKOUT = os.environ.get("AF_MINDSPEED_LLM_DIR", "")
MINDSPEED = os.environ.get("AF_MINDSPEED_DIR", "")
PEER_PYTHON = os.environ.get("AF_TEST_MINDSPEED_LLM_V1_PYTHON", sys.executable)
READY = (
    os.path.isfile(os.path.join(CHECKOUT, "convert_ckpt.py"))
    and not os.path.isfile(os.path.join(CHECKOUT, "convert_ckpt_v2.py"))
    and os.path.isdir(os.path.join(CHECKOUT, "megatron"))
    and os.path.isdir(os.path.join(MINDSPEED, "mindspeed"))
)
pytestmark.append(
    pytest.mark.skipif(
        not READY,
        reason="needs AF_MINDSPEED_LLM_DIR (MindSpeed-LLM 2.1.0 with megatron/) and AF_MINDSPEED_DIR",
    )
)
PEER_NEEDS = (
    "import transformers, einops, peft, pkg_resources; "
    "assert int(transformers.__version__.split('.')[0]) < 5, transformers.__version__"
)


@pytest.fixture(scope="module", autouse=True)
def peer_python() -> None:
    done = subprocess.run([PEER_PYTHON, "-c", PEER_NEEDS], capture_output=True, text=True, timeout=120)
    if done.returncode:
        pytest.skip(
            f"AF_TEST_MINDSPEED_LLM_V1_PYTHON ({PEER_PYTHON}) lacks what 2.1.0's v1 converter imports: "
            + done.stderr.strip().splitlines()[-1]
        )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_moe_v1")
    return {
        f: build_tiny_model(root / f, f, seed=5, dtype="bfloat16", **SIZES)
        for f in ("qwen3-moe", "deepseek2-lite", "deepseek2")
    }


def _peer(flags: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """2.1.0's convert_ckpt.py as the plan's step runs it (from the checkout, in the step's environment)."""
    from ascendfactory.backends.mindspeed_llm.backend import STEP_ENV

    script = os.path.join(CHECKOUT, "convert_ckpt.py")
    path = os.pathsep.join([CHECKOUT, MINDSPEED])
    done = run_peer(
        PEER_PYTHON,
        script,
        flags,
        pythonpath=path,
        cwd=CHECKOUT,
        without=("transformer_engine",),
        env=STEP_ENV,
    )
    assert cwd.is_dir()
    return done


def _plan_flags(src: Path, save: Path, tp: int, pp: int, ep: int, grouped: bool) -> list[str]:
    """What our mindspeed-llm plan for 2.1.0 hands convert_ckpt.py for hf->mg (bf16 training)."""
    from ascendfactory.backends.common.megatron.read import to_flags
    from ascendfactory.backends.mindspeed_llm.converters import hf2mg_options
    from ascendfactory.config.catalog import from_hf_dir

    training = {"bf16": True, "expert-model-parallel-size": ep, "moe-grouped-gemm": grouped}
    options = hf2mg_options(
        "v1",
        arch=from_hf_dir(src),
        model_dir=str(src),
        save_dir=str(save),
        tp=tp,
        pp=pp,
        num_layer_list=None,
        training=training,
    )
    return to_flags(options)


CASES = [
    ("qwen3-moe", 2, 2, 2, True),
    ("qwen3-moe", 2, 2, 2, False),
    ("qwen3-moe", 1, 1, 4, True),
    ("qwen3-moe", 2, 1, 2, False),
    ("deepseek2-lite", 1, 2, 2, True),
    ("deepseek2-lite", 1, 2, 2, False),
    ("deepseek2-lite", 1, 1, 4, True),
    ("deepseek2", 1, 2, 2, True),  # DeepSeek-V2's q latent: linear_qb and q_layernorm too
]


@pytest.mark.parametrize(
    ("family", "tp", "pp", "ep", "grouped"),
    CASES,
    ids=[f"{f}-tp{t}pp{p}ep{e}{'-grouped' if g else ''}" for f, t, p, e, g in CASES],
)
def test_moe_hf_to_megatron_equals_mindspeed_llm_2_1_0s_converter(
    models: dict[str, Path], tmp_path: Path, family: str, tp: int, pp: int, ep: int, grouped: bool
) -> None:
    src, ours, peer = models[family], tmp_path / "ours", tmp_path / "peer"
    done = _peer(_plan_flags(src, peer, tp, pp, ep, grouped), tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_ours([*_plan_flags(src, ours, tp, pp, ep, grouped), "--target-mindspeed-llm", "2.1.0"])
    assert (peer / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (ours / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    verdict = compare_megatron_trees(ours, peer)
    assert verdict.startswith(f"identical: {tp * pp * ep} files"), verdict


def test_deepseek2_lite_at_tp2_stops_in_2_1_0s_saver(models: dict[str, Path], tmp_path: Path) -> None:
    """2.1.0's saver.py `set_model_layer_attn` chunks the fused MLA `linear_qkv` by TP, but deepseek_spec.py
    builds it as LinearNoTP (whole on every rank): the copy fails. (Ours writes it whole and `linear_kvb`
    cut, the shapes 2.1.0's model has.)"""
    done = _peer(_plan_flags(models["deepseek2-lite"], tmp_path / "peer", 2, 1, 2, False), tmp_path)
    assert done.returncode != 0
    assert "set_layers_self_attention_linear_qkv_weight" in done.stdout + done.stderr


@pytest.mark.parametrize(("family", "tp", "pp", "ep"), [("qwen3-moe", 2, 2, 2), ("deepseek2-lite", 1, 2, 2)])
def test_moe_megatron_to_hf_round_trip_with_2_1_0s_converter(
    models: dict[str, Path], tmp_path: Path, family: str, tp: int, pp: int, ep: int
) -> None:
    """2.1.0's grouped-GEMM tree back to HF by 2.1.0's v1 mg->hf with the flags of our plan's mg2hf step (the
    HF config staged into --save-dir, its output moved up from mg2hf/, as `v1_mg2hf_output.py` does), and by
    ours: both give the original weights, bit for bit."""
    from ascendfactory.backends.common.megatron.read import to_flags
    from ascendfactory.backends.mindspeed_llm.converters import mg2hf_options
    from ascendfactory.backends.mindspeed_llm.programs.v1_mg2hf_output import collect_mg2hf, stage_hf_config
    from ascendfactory.config.catalog import from_hf_dir

    src, tree = models[family], tmp_path / "peer_mg"
    done = _peer(_plan_flags(src, tree, tp, pp, ep, True), tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    peer_hf, ours_hf = tmp_path / "peer_hf", tmp_path / "ours_hf"
    stage_hf_config(str(src), str(peer_hf))
    training = {"bf16": True, "moe-grouped-gemm": True}
    options = mg2hf_options(
        "v1",
        arch=from_hf_dir(src),
        load_dir=str(tree),
        save_dir=str(peer_hf),
        model_dir=str(src),
        lora=None,
        training=training,
    )
    done = _peer(to_flags(options), tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collect_mg2hf(str(peer_hf))
    back = ["--load-model-type", "mg", "--save-model-type", "hf", "--load-dir", str(tree)]
    run_ours([*back, "--save-dir", str(ours_hf), "--hf-cfg-dir", str(src), "--model-type-hf", family])
    original = hf_tensors(src)
    for out in (hf_tensors(peer_hf), hf_tensors(ours_hf)):
        assert sorted(out) == sorted(original)
        for name, tensor in original.items():
            assert out[name].dtype == tensor.dtype and torch.equal(out[name], tensor), name
