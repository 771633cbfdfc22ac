"""Golden tests: the shipped `cfgs/golden/*.yaml` plan exactly the flags of MindSpeed-LLM's example scripts.

Expected flags are transcribed from MindSpeed-LLM 2.1.0's examples/mcore/qwen25/*.sh (the full, LoRA and
conversion scripts' arguments). The scripts' placeholder paths (`${CKPT_LOAD_DIR}`, `./model_weights/...`) are
replaced by the plan's own, absolute paths; values compare as numbers where they are numbers (1e-6 == 1e-06).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ascendfactory.cli.app import app
from tests.unit.backends.flag_pairs import pairs

REPO = Path(__file__).resolve().parents[4]
GOLDEN = REPO / "cfgs" / "golden"
HF = str(REPO / "model_from_hf/qwen2.5_7b_hf")

DISTRIBUTED_ARGS = "--nproc_per_node 8 --nnodes 1 --node_rank 0 --master_addr localhost --master_port 6000"

# tune_qwen25_7b_4k_full_ptd.sh: GPT_ARGS, DATA_ARGS, CKPT_ARGS, OUTPUT_ARGS, TUNE_ARGS, final line.
TUNE_FULL = """
--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --use-mcore-models
--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --num-layers 28 --hidden-size 3584
--ffn-hidden-size 18944 --num-attention-heads 28 --max-position-embeddings 4096 --seq-length 4096
--disable-bias-linear --add-qkv-bias --group-query-attention --num-query-groups 4 --use-flash-attn
--swiglu --use-fused-swiglu --normalization RMSNorm --norm-epsilon 1e-6 --use-fused-rmsnorm
--position-embedding-type rope --rotary-base 1000000 --use-fused-rotary-pos-emb
--untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 8
--make-vocab-size-divisible-by 1 --padded-vocab-size 152064 --tokenizer-type PretrainedFromHF
--tokenizer-name-or-path ${TOKENIZER_PATH} --attention-dropout 0.0 --hidden-dropout 0.0
--train-iters 5000 --lr 1.25e-6 --lr-decay-style cosine --min-lr 1.25e-7 --lr-warmup-fraction 0.01
--init-method-std 0.01 --weight-decay 0.0 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95
--initial-loss-scale 4096 --no-gradient-accumulation-fusion --no-masked-softmax-fusion
--attention-softmax-in-fp32 --bf16 --data-path ${DATA_PATH} --split 100,0,0 --no-load-optim
--no-load-rng --no-save-optim --no-save-rng --seed 1234 --log-interval 1 --save-interval 5000
--eval-interval 5000 --eval-iters 0 --log-throughput --finetune --stage sft --is-instruction-dataset
--tokenizer-not-use-fast --prompt-type qwen --padded-samples --variable-seq-lengths --load
${CKPT_LOAD_DIR} --save ${CKPT_SAVE_DIR} --distributed-backend nccl
"""

# tune_qwen25_7b_4k_lora_ptd.sh (2.1.0): PP 1, GBS 16, no --overlap-param-gather, LoRA TUNE_ARGS.
TUNE_LORA = """
--finetune --stage sft --is-instruction-dataset --tokenizer-not-use-fast --prompt-type qwen
--variable-seq-lengths --padded-samples --lora-r 8 --lora-alpha 16 --lora-fusion
--lora-target-modules linear_qkv linear_proj linear_fc1 linear_fc2 --use-mcore-models
--use-distributed-optimizer --overlap-grad-reduce --tensor-model-parallel-size 1
--pipeline-model-parallel-size 1 --num-layers 28 --hidden-size 3584 --ffn-hidden-size 18944
--num-attention-heads 28 --tokenizer-type PretrainedFromHF --tokenizer-name-or-path
${TOKENIZER_PATH} --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1
--global-batch-size 16 --make-vocab-size-divisible-by 1 --padded-vocab-size 152064 --rotary-base
1000000 --lr 1.25e-6 --lr-warmup-fraction 0.01 --min-lr 1.25e-7 --train-iters 5000 --lr-decay-style
cosine --untie-embeddings-and-output-weights --disable-bias-linear --attention-dropout 0.0
--init-method-std 0.02 --hidden-dropout 0.0 --position-embedding-type rope --normalization RMSNorm
--swiglu --use-flash-attn --weight-decay 0.0 --use-rotary-position-embeddings
--no-masked-softmax-fusion --attention-softmax-in-fp32 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2
0.95 --add-qkv-bias --initial-loss-scale 4096 --no-gradient-accumulation-fusion --bf16
--group-query-attention --num-query-groups 4 --norm-epsilon 1e-06 --use-fused-rmsnorm
--use-fused-swiglu --use-fused-rotary-pos-emb --data-path ${DATA_PATH} --split 100,0,0
--no-load-optim --no-load-rng --no-save-optim --no-save-rng --seed 1234 --log-interval 1
--save-interval 5000 --eval-interval 5000 --eval-iters 0 --log-throughput --distributed-backend nccl
--load ${CKPT_LOAD_DIR} --save ${CKPT_SAVE_DIR}
"""

# pretrain_qwen25_7b_32k_ptd.sh (2.1.0): TP 4, PP 2, --sequence-parallel, no TUNE_ARGS, pretrain_gpt.py.
PRETRAIN_32K = """
--use-mcore-models --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2
--sequence-parallel --num-layers 28 --hidden-size 3584 --ffn-hidden-size 18944 --num-attention-heads
28 --max-position-embeddings 32768 --seq-length 32768 --disable-bias-linear --add-qkv-bias
--group-query-attention --num-query-groups 4 --use-flash-attn --swiglu --use-fused-swiglu
--normalization RMSNorm --norm-epsilon 1e-6 --use-fused-rmsnorm --position-embedding-type rope
--rotary-base 1000000 --use-fused-rotary-pos-emb --untie-embeddings-and-output-weights
--micro-batch-size 1 --global-batch-size 64 --make-vocab-size-divisible-by 1 --padded-vocab-size
152064 --tokenizer-type PretrainedFromHF --tokenizer-name-or-path ${TOKENIZER_PATH}
--attention-dropout 0.0 --hidden-dropout 0.0 --train-iters 2000 --lr 1.25e-6 --lr-decay-style cosine
--min-lr 1.25e-7 --lr-warmup-fraction 0.01 --init-method-std 0.01 --weight-decay 1e-1 --clip-grad
1.0 --adam-beta1 0.9 --adam-beta2 0.95 --initial-loss-scale 4096 --no-gradient-accumulation-fusion
--no-masked-softmax-fusion --attention-softmax-in-fp32 --bf16 --data-path ${DATA_PATH} --split
100,0,0 --load ${CKPT_LOAD_DIR} --no-load-optim --no-load-rng --no-save-optim --no-save-rng --seed
1234 --save ${CKPT_SAVE_DIR} --log-interval 1 --save-interval 2000 --eval-interval 2000 --eval-iters
0 --log-throughput --distributed-backend nccl
"""

# ckpt_convert_qwen25_hf2mcore.sh (2.1.0, v1) and master's v2 example.
HF2MG_V1 = """
--use-mcore-models --model-type GPT --load-model-type hf --save-model-type mg
--target-tensor-parallel-size 4 --target-pipeline-parallel-size 2 --add-qkv-bias --load-dir ${HF}
--save-dir ${CONVERTED} --tokenizer-model ${HF}/tokenizer.json --model-type-hf llama2 --params-dtype
bf16
"""
HF2MG_V2 = """
--load-model-type hf --save-model-type mg --target-tensor-parallel-size 4
--target-pipeline-parallel-size 2 --load-dir ${HF} --save-dir ${CONVERTED} --model-type-hf qwen25
"""
# ckpt_convert_qwen25_mcore2hf.sh (2.1.0, v1); --save-dir: our output dir, which the plan stages with the HF
# config, hence --load-hf-from-config (the script's --save-dir is the original HF dir, weights included).
MG2HF_V1 = """
--use-mcore-models --model-type GPT --model-type-hf llama2 --load-model-type mg --save-model-type hf
--target-tensor-parallel-size 1 --target-pipeline-parallel-size 1 --add-qkv-bias --load-dir ${SAVED}
--save-dir ${OUT} --load-hf-from-config
"""
MG2HF_V2 = """
--load-model-type mg --save-model-type hf --load-dir ${SAVED} --save-dir ${OUT} --hf-cfg-dir ${HF}
--model-type-hf qwen25
"""
# ckpt_convert_qwen25_mcore2hf_lora.sh (2.1.0): the base weights plus the LoRA training output.
MG2HF_LORA_V1 = """
--use-mcore-models --model-type GPT --model-type-hf llama2 --load-model-type mg --save-model-type hf
--target-tensor-parallel-size 1 --target-pipeline-parallel-size 1 --add-qkv-bias --lora-r 8
--lora-alpha 16 --lora-target-modules linear_qkv linear_proj linear_fc1 linear_fc2 --load-dir
${CKPT_LOAD_DIR} --lora-load ${SAVED} --save-dir ${OUT} --load-hf-from-config
"""


def expected(text: str, paths: dict[str, str]) -> list[tuple[str, tuple[str, ...]]]:
    filled = re.sub(r"\$\{(\w+)\}", lambda m: paths[m.group(1)], text)
    return pairs(shlex.split(filled))


def plan_json(path: Path) -> dict:
    r = CliRunner().invoke(app, ["train", str(path), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def step(plan: dict, name: str) -> dict:
    return next(s for s in plan["steps"] if s["name"] == name)


def out_paths(name: str) -> dict[str, str]:
    root = str(REPO / "output" / f"qwen2.5-7b-{name}")
    return {
        "HF": HF,
        "TOKENIZER_PATH": HF,
        "CKPT_SAVE_DIR": f"{root}/saved_checkpoints",
        "SAVED": f"{root}/saved_checkpoints",
        "OUT": f"{root}/ckpt_converted_mg2hf",
        "CONVERTED": f"{root}/converted_weight_TP4PP2",
    }


Flags = list[tuple[str, tuple[str, ...]]]


def assert_same_flags(got: Flags, want: Flags) -> None:
    missing, extra = Counter(want) - Counter(got), Counter(got) - Counter(want)
    assert not missing and not extra, f"missing: {sorted(missing)}\nextra: {sorted(extra)}"
    assert len({f for f, _ in got}) == len(got), "a flag is passed twice"


@pytest.fixture
def site(clean_env: Path, fake_checkout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    root = fake_checkout(tmp_path / "MindSpeed-LLM")
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(root))
    monkeypatch.chdir(REPO)
    return root


def split_train(argv: list[str], entry: str) -> tuple[list[str], list[str]]:
    i = argv.index(entry)
    return argv[3:i], argv[i + 1 :]


def inputs(data: str, load: str) -> dict[str, str]:
    return {"DATA_PATH": str(REPO / data), "CKPT_LOAD_DIR": str(REPO / load)}


@pytest.mark.parametrize(
    "name, text, entry, paths",
    [
        (
            "tune-4k-full",
            TUNE_FULL,
            "posttrain_gpt.py",
            inputs("finetune_dataset/alpaca", "model_weights/qwen2.5_mcore"),
        ),
        (
            "tune-4k-lora",
            TUNE_LORA,
            "posttrain_gpt.py",
            inputs("finetune_dataset/alpaca", "model_weights/qwen25_mcore"),
        ),
        (
            "pretrain-32k",
            PRETRAIN_32K,
            "pretrain_gpt.py",
            inputs("dataset/alpaca_text_document", "model_weights/qwen2.5_mcore"),
        ),
    ],
)
def test_training_matches_the_example_script(
    site: Path, name: str, text: str, entry: str, paths: dict[str, str]
) -> None:
    plan = plan_json(GOLDEN / f"qwen25-7b-{name}.yaml")
    train = step(plan, "train")
    launcher, flags = split_train(train["argv"], entry)
    assert launcher == [*DISTRIBUTED_ARGS.split(), "--tee", "3"]  # --tee 3: per-rank log prefixes
    assert_same_flags(pairs(flags), expected(text, {**out_paths(name), **paths}))
    assert train["cwd"] == str(site)
    assert train["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


@pytest.mark.parametrize("version, hf2mg, mg2hf", [("v1", HF2MG_V1, MG2HF_V1), ("v2", HF2MG_V2, MG2HF_V2)])
def test_conversions_match_the_example_scripts(site: Path, version: str, hf2mg: str, mg2hf: str) -> None:
    name = f"convert-{version}"
    plan = plan_json(GOLDEN / f"qwen25-7b-{name}.yaml")
    script = {"v1": "convert_ckpt.py", "v2": "convert_ckpt_v2.py"}[version]
    paths = out_paths(name)
    forward = step(plan, "hf2mg")["argv"]
    assert forward[1] == script
    assert pairs(forward[2:]) == expected(hf2mg, paths)  # same flags, same order as the script
    back = step(plan, "mg2hf")["argv"]
    if version == "v1":  # stage the HF config into save-dir, run, move <save-dir>/mg2hf/* up
        cut = back.index("--")
        assert back[1].endswith("backends/mindspeed_llm/programs/v1_mg2hf_output.py")  # run by path
        assert back[2:cut] == [
            "--stage-hf-config",
            HF,
            "--collect-mg2hf",
            paths["OUT"],
        ]
        back = back[cut + 1 :]
    assert back[1] == script
    assert pairs(back[2:]) == expected(mg2hf, paths)
    assert plan["facts"]["converter"] == version


def test_lora_merge_matches_the_example_script(site: Path) -> None:
    plan = plan_json(GOLDEN / "qwen25-7b-tune-4k-lora.yaml")
    back = step(plan, "mg2hf")["argv"]
    back = back[back.index("--") + 1 :]
    paths = {**out_paths("tune-4k-lora"), "CKPT_LOAD_DIR": str(REPO / "model_weights/qwen25_mcore")}
    assert back[1] == "convert_ckpt.py"
    assert pairs(back[2:]) == expected(MG2HF_LORA_V1, paths)


def test_golden_runs_warn_that_no_save_state_prevents_resume(site: Path) -> None:
    plan = plan_json(GOLDEN / "qwen25-7b-tune-4k-full.yaml")
    assert any("no-save-optim" in w and "resum" in w for w in plan["warnings"])
    assert step(plan, "hf2mg")["skip_reason"].startswith("user_converted_ckpt_path given")
    assert step(plan, "preprocess")["skip_reason"].startswith("preprocessed data given")
