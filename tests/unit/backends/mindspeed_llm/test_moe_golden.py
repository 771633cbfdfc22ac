"""Golden plans of mixture-of-experts models against MindSpeed-LLM's own example scripts, flag for flag.

Opt-in: the scripts are read from the checkout named by AF_MINDSPEED_LLM_DIR (MindSpeed-LLM 2.1.0, as the
differential harness uses it) or, for the `-26.1.0` golden, AF_MINDSPEED_LLM_26_DIR (MindSpeed-LLM 26.1.0),
never copied here. Each golden file (`cfgs/golden/`) holds what the script
chooses; the architecture, MoE and MLA flags come from the catalog. The differences the plan makes on
purpose are listed with their reason; any other difference fails.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from tests.support.example_scripts import entry_argv
from tests.unit.backends.flag_pairs import pairs
from tests.unit.backends.mindspeed_llm.test_mindspeed_golden import GOLDEN, REPO, plan_json, split_train, step

CHECKOUT = os.environ.get("AF_MINDSPEED_LLM_DIR", "")  # read before any fixture replaces it
EXAMPLES = Path(CHECKOUT, "examples", "mcore")
READY = (EXAMPLES / "qwen3_moe").is_dir() and not (Path(CHECKOUT) / "convert_ckpt_v2.py").is_file()
NEEDS = pytest.mark.skipif(not READY, reason="needs AF_MINDSPEED_LLM_DIR: a MindSpeed-LLM 2.1.0 checkout")
CHECKOUT_26 = os.environ.get("AF_MINDSPEED_LLM_26_DIR", "")
EXAMPLES_26 = Path(CHECKOUT_26, "examples", "mcore")
READY_26 = (EXAMPLES_26 / "qwen3_moe").is_dir() and (Path(CHECKOUT_26) / "convert_ckpt_v2.py").is_file()
NEEDS_26 = pytest.mark.skipif(
    not READY_26, reason="needs AF_MINDSPEED_LLM_26_DIR: a MindSpeed-LLM 26.1.0 checkout"
)

# flag -> why our plan passes it and the script does not
DELIBERATE = {
    "--norm-epsilon": "the model's rms_norm_eps (1e-6); the Qwen3-MoE tune script passes none, so Megatron's "
    "default 1e-5 applies there",
}
CASES = [
    (
        "qwen3-30b-a3b-tune-4k-full",
        "qwen3_moe/tune_qwen3_30b_a3b_4K_full_ptd.sh",
        "model_weights/qwen3_moe_mcore",
        {"TOKENIZER_PATH": "model_from_hf/qwen3_moe_hf"},
    ),
    (
        "deepseek-v2-lite-16b-tune-full",
        "deepseek2_lite/tune_deepseek2_lite_16b_full_ptd.sh",
        "model_weights/deepseek2_lite_mcore",
        {"TOKENIZER_MODEL": "model_from_hf/deepseek_v2_lite"},
    ),
]


@pytest.fixture
def site(clean_env: Path, fake_checkout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    root = fake_checkout(tmp_path / "MindSpeed-LLM", v2=False)
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(root))
    monkeypatch.chdir(REPO)
    return root


@NEEDS
@pytest.mark.parametrize(("golden", "script", "load", "tokenizer"), CASES, ids=[c[0] for c in CASES])
def test_moe_training_matches_the_example_script(
    site: Path, golden: str, script: str, load: str, tokenizer: dict[str, str]
) -> None:
    assert_matches(golden, EXAMPLES / script, load, tokenizer, DELIBERATE)


CASES_26 = [
    (
        "qwen3-30b-a3b-tune-4k-full",
        "qwen3_moe/tune_qwen3_30b_a3b_4K_full_ptd.sh",
        "model_weights/qwen3_moe_mcore",
        {"TOKENIZER_PATH": "model_from_hf/qwen3_moe_hf"},
    ),
    (
        "deepseek-v2-lite-16b-tune-full",
        "deepseek2_lite/tune_deepseek2_lite_16b_full_ptd.sh",
        "model_weights/deepseek2_lite_mcore",
        {"TOKENIZER_MODEL": "model_from_hf/deepseek_v2_lite"},
    ),
]


@NEEDS_26
@pytest.mark.parametrize(("golden", "script", "load", "tokenizer"), CASES_26, ids=[c[0] for c in CASES_26])
def test_moe_training_matches_the_26_1_0_example_script(
    site: Path, golden: str, script: str, load: str, tokenizer: dict[str, str]
) -> None:
    """26.1.0's scripts spell the MoE/MLA flags as Megatron core 0.12 does (--moe-ffn-hidden-size,
    --multi-latent-attention, alltoall_seq) and pass --norm-epsilon themselves: no deliberate difference."""
    plan = assert_matches(f"{golden}-26.1.0", EXAMPLES_26 / script, load, tokenizer, {}, out=golden)
    assert plan["facts"]["mindspeed_llm_version"] == "26.1.0"


def assert_matches(
    golden: str,
    script: Path,
    load: str,
    tokenizer: dict[str, str],
    deliberate: dict[str, str],
    out: str | None = None,
) -> dict:
    plan = plan_json(GOLDEN / f"{golden}.yaml")
    train = step(plan, "train")
    _, ours = split_train(train["argv"], "posttrain_gpt.py")
    root = REPO / "output" / (out or golden)
    values = {
        "DATA_PATH": str(REPO / "finetune_dataset/alpaca"),
        "CKPT_LOAD_DIR": str(REPO / load),
        "CKPT_SAVE_DIR": str(root / "saved_checkpoints"),
        **{k: str(REPO / v) for k, v in tokenizer.items()},
    }
    theirs = entry_argv(script, "posttrain_gpt.py", values)
    got, want = Counter(pairs(ours)), Counter(pairs(theirs))
    for flag, args in want:  # a switch passed twice is set once (26.1.0's DeepSeek-V2-Lite script)
        if not args:
            want[(flag, args)] = 1
    extra = {f: v for f, v in got - want if f not in deliberate}
    missing = dict(want - got)
    assert not extra and not missing, (
        f"ours only: {sorted(extra.items())}\nscript only: {sorted(missing.items())}"
    )
    assert len({f for f, _ in pairs(ours)}) == len(pairs(ours)), "a flag is passed twice"
    return plan


@NEEDS
@pytest.mark.parametrize(
    ("model", "script"),
    [
        ("qwen3-30b-a3b", "qwen3_moe/ckpt_convert_qwen3_moe_hf2mcore.sh"),
        ("deepseek-v2-lite-16b", "deepseek2_lite/convert_ckpt_deepseek2_lite_hf2mcore.sh"),
    ],
)
def test_moe_conversion_passes_the_examples_moe_flags(model: str, script: str) -> None:
    """The v1 converter flags a MoE model needs, as the example's hf->mg command passes them (the layout
    flags are the training run's: here the script's own)."""
    from ascendfactory.backends.common.megatron.read import to_flags
    from ascendfactory.backends.mindspeed_llm.converters import hf2mg_options
    from ascendfactory.config.catalog import from_catalog

    theirs = dict(pairs(entry_argv(EXAMPLES / script, "convert_ckpt.py")))
    ep = int(float(theirs["--target-expert-parallel-size"][0]))
    options = hf2mg_options(
        "v1",
        arch=from_catalog(model),
        model_dir="/hf",
        save_dir="/mg",
        tp=int(float(theirs["--target-tensor-parallel-size"][0])),
        pp=int(float(theirs["--target-pipeline-parallel-size"][0])),
        num_layer_list=None,
        training={"expert-model-parallel-size": ep, "bf16": True},
    )
    ours = dict(pairs(to_flags(options)))
    for flag in ("--spec", "--moe-grouped-gemm", "--model-type-hf", "--target-expert-parallel-size"):
        assert ours.get(flag) == theirs[flag], flag
