"""Golden tests: the shipped `cfgs/golden/*.yaml` plan exactly the flags of MindSpeed-LLM's example scripts,
per MindSpeed-LLM version.

2.1.0 (`qwen25-7b-*.yaml`): transcribed from MindSpeed-LLM 2.1.0's examples/mcore/qwen25/*.sh (Qwen2.5-7B).
26.1.0 (`qwen25-72b-*-26.1.0.yaml`, `qwen25-7b-convert-v2.yaml`): transcribed from MindSpeed-LLM v26.1.0's
examples/mcore/qwen25/*.sh (the release keeps only the 72B training scripts; its converter scripts are
7B's). The scripts' placeholder paths (`${CKPT_LOAD_DIR}`, `./model_weights/...`) are replaced by the plan's
own, absolute paths; values compare as numbers where they are numbers (1e-6 == 1e-06).
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

# v26.1.0 tune_qwen25_72b_4k_full_ptd.sh: TP 8, PP 2, 4 nodes, MEMORY_ARGS, --no-pad-to-seq-lengths,
# --ckpt-format torch, --transformer-impl local.
TUNE_FULL_26 = """
--sequence-parallel --use-mcore-models --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
--num-layers 80 --reuse-fp32-param --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
--hidden-size 8192 --ffn-hidden-size 29568 --num-attention-heads 64 --max-position-embeddings 4096
--seq-length 4096 --disable-bias-linear --add-qkv-bias --group-query-attention --num-query-groups 8
--use-flash-attn --swiglu --use-fused-swiglu --normalization RMSNorm --norm-epsilon 1e-6 --use-fused-rmsnorm
--position-embedding-type rope --rotary-base 1000000 --use-fused-rotary-pos-emb
--untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 32
--make-vocab-size-divisible-by 1 --padded-vocab-size 152064 --tokenizer-type PretrainedFromHF
--tokenizer-name-or-path ${TOKENIZER_PATH} --attention-dropout 0.0 --hidden-dropout 0.0 --train-iters 2000
--lr 1.25e-6 --lr-decay-style cosine --min-lr 1.25e-7 --lr-warmup-fraction 0.01 --init-method-std 0.01
--weight-decay 0.0 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 --initial-loss-scale 4096
--no-gradient-accumulation-fusion --no-masked-softmax-fusion --attention-softmax-in-fp32 --bf16 --ckpt-format
torch --data-path ${DATA_PATH} --split 100,0,0 --no-load-optim --no-load-rng --no-save-optim --no-save-rng
--seed 1234 --log-interval 1 --save-interval 2000 --eval-interval 2000 --eval-iters 0 --log-throughput
--finetune --stage sft --is-instruction-dataset --tokenizer-not-use-fast --prompt-type qwen --padded-samples
--no-pad-to-seq-lengths --swap-attention --recompute-granularity full --recompute-method block
--recompute-num-layers 4 --recompute-activation-function --distributed-backend nccl --load ${CKPT_LOAD_DIR}
--save ${CKPT_SAVE_DIR} --transformer-impl local
"""

# v26.1.0 tune_qwen25_72b_4k_lora_ptd.sh: TP 4, PP 1, --use-ascend-mc2, --no-shuffle.
TUNE_LORA_26 = """
--reuse-fp32-param --use-mcore-models --tensor-model-parallel-size 4 --pipeline-model-parallel-size 1
--sequence-parallel --num-layers 80 --hidden-size 8192 --ffn-hidden-size 29568 --num-attention-heads 64
--max-position-embeddings 4096 --seq-length 4096 --disable-bias-linear --add-qkv-bias --group-query-attention
--num-query-groups 8 --use-flash-attn --swiglu --use-fused-swiglu --normalization RMSNorm --norm-epsilon 1e-6
--use-fused-rmsnorm --position-embedding-type rope --rotary-base 1000000 --use-fused-rotary-pos-emb
--untie-embeddings-and-output-weights --micro-batch-size 1 --global-batch-size 16
--make-vocab-size-divisible-by 1 --padded-vocab-size 152064 --tokenizer-type PretrainedFromHF
--tokenizer-name-or-path ${TOKENIZER_PATH} --attention-dropout 0.0 --hidden-dropout 0.0 --train-iters 2000
--lr 1.25e-6 --lr-decay-style cosine --min-lr 1.25e-7 --lr-warmup-fraction 0.01 --init-method-std 0.01
--weight-decay 0.0 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 --initial-loss-scale 4096
--no-gradient-accumulation-fusion --no-masked-softmax-fusion --attention-softmax-in-fp32 --bf16
--use-distributed-optimizer --overlap-grad-reduce --use-ascend-mc2 --no-shuffle --ckpt-format torch
--data-path ${DATA_PATH} --split 100,0,0 --no-load-optim --no-load-rng --no-save-optim --no-save-rng
--seed 1234 --log-interval 1 --save-interval 2000 --eval-interval 2000 --eval-iters 0 --log-throughput
--finetune --stage sft --is-instruction-dataset --tokenizer-not-use-fast --prompt-type qwen --padded-samples
--no-pad-to-seq-lengths --lora-r 8 --lora-alpha 16 --lora-fusion --lora-target-modules linear_qkv
linear_proj linear_fc1 linear_fc2 --distributed-backend nccl --load ${CKPT_LOAD_DIR} --save ${CKPT_SAVE_DIR}
--transformer-impl local
"""

# v26.1.0 pretrain_qwen25_72b_32k_ptd.sh: TP 8, PP 4 (num-layer-list), CP 4, 16 nodes, CoC.
PRETRAIN_32K_26 = """
--use-mcore-models --context-parallel-size 4 --context-parallel-algo megatron_cp_algo
--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel --num-layers 80
--num-layer-list 17,20,22,21 --hidden-size 8192 --ffn-hidden-size 29568 --num-attention-heads 64
--tokenizer-type PretrainedFromHF --tokenizer-name-or-path ${TOKENIZER_PATH} --seq-length 32768
--max-position-embeddings 32768 --micro-batch-size 1 --global-batch-size 32 --make-vocab-size-divisible-by 1
--padded-vocab-size 152064 --rotary-base 1000000 --lr 1.25e-6 --train-iters 2000 --lr-decay-style cosine
--untie-embeddings-and-output-weights --disable-bias-linear --attention-dropout 0.0 --init-method-std 0.01
--hidden-dropout 0.0 --position-embedding-type rope --normalization RMSNorm --swiglu --use-flash-attn
--use-fused-rotary-pos-emb --use-rotary-position-embeddings --use-fused-swiglu --use-fused-rmsnorm
--no-masked-softmax-fusion --attention-softmax-in-fp32 --min-lr 1.25e-7 --weight-decay 1e-1 --norm-epsilon
1e-5 --lr-warmup-fraction 0.01 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 --add-qkv-bias
--initial-loss-scale 4096 --no-gradient-accumulation-fusion --no-load-optim --no-load-rng --seed 42 --bf16
--group-query-attention --num-query-groups 8 --use-distributed-optimizer --overlap-grad-reduce
--exit-on-missing-checkpoint --use-ascend-coc --coc-fused-kernel --no-shared-storage --ckpt-format torch
--data-path ${DATA_PATH} --split 100,0,0 --log-interval 1 --save-interval 2000 --eval-interval 2000
--eval-iters 0 --load ${CKPT_LOAD_DIR} --save ${CKPT_SAVE_DIR} --log-throughput --distributed-backend nccl
--transformer-impl local
"""

# ckpt_convert_qwen25_hf2mcore.sh (2.1.0, v1) and 26.1.0's v2 example.
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
# ckpt_convert_qwen25_mcore2hf_lora.sh (v26.1.0, v2).
MG2HF_LORA_V2 = """
--load-model-type mg --save-model-type hf --lora-r 8 --lora-alpha 16 --lora-target-modules linear_qkv
linear_proj linear_fc1 linear_fc2 --load-dir ${CKPT_LOAD_DIR} --lora-load ${SAVED} --save-dir ${OUT}
--hf-cfg-dir ${HF} --model-type-hf qwen25
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


def out_paths(name: str, model: str = "qwen2.5-7b", hf: str = HF) -> dict[str, str]:
    root = str(REPO / "output" / f"{model}-{name}")
    return {
        "HF": hf,
        "TOKENIZER_PATH": hf,
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


HF_72B = str(REPO / "model_from_hf/qwen2.5_72b_hf")


@pytest.mark.parametrize(
    "name, text, entry, paths, launcher",
    [
        (
            "tune-4k-full",
            TUNE_FULL_26,
            "posttrain_gpt.py",
            inputs("finetune_dataset/alpaca", "model_weights/qwen2.5_mcore"),
            "--nproc_per_node 8 --nnodes 4 --node_rank 0 --master_addr localhost --master_port 6000",
        ),
        (
            "tune-4k-lora",
            TUNE_LORA_26,
            "posttrain_gpt.py",
            inputs("finetune_dataset/alpaca", "model_weights/qwen25_mcore"),
            DISTRIBUTED_ARGS,
        ),
        (
            "pretrain-32k",
            PRETRAIN_32K_26,
            "pretrain_gpt.py",
            inputs("dataset/alpaca_text_document", "model_weights/qwen2.5_mcore"),
            "--nproc_per_node 8 --nnodes 16 --node_rank 0 --master_addr localhost --master_port 6001",
        ),
    ],
)
def test_26_1_0_training_matches_the_example_script(
    site: Path, name: str, text: str, entry: str, paths: dict[str, str], launcher: str
) -> None:
    plan = plan_json(GOLDEN / f"qwen25-72b-{name}-26.1.0.yaml")
    assert plan["facts"]["mindspeed_llm_version"] == "26.1.0"
    train = step(plan, "train")
    got_launcher, flags = split_train(train["argv"], entry)
    assert got_launcher == [*launcher.split(), "--tee", "3"]
    want = expected(text, {**out_paths(name, "qwen2.5-72b", HF_72B), **paths})
    assert_same_flags(pairs(flags), want)
    assert train["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_26_1_0_lora_merge_matches_the_example_script(site: Path) -> None:
    plan = plan_json(GOLDEN / "qwen25-72b-tune-4k-lora-26.1.0.yaml")
    assert plan["facts"]["converter"] == "v2"  # what 26.1.0's examples run
    back = step(plan, "mg2hf")["argv"]
    paths = {
        **out_paths("tune-4k-lora", "qwen2.5-72b", HF_72B),
        "CKPT_LOAD_DIR": str(REPO / "model_weights/qwen25_mcore"),
    }
    assert back[1] == "convert_ckpt_v2.py"
    assert pairs(back[2:]) == expected(MG2HF_LORA_V2, paths)  # same flags, same order as the script


def test_golden_runs_warn_that_no_save_state_prevents_resume(site: Path) -> None:
    plan = plan_json(GOLDEN / "qwen25-7b-tune-4k-full.yaml")
    assert any("no-save-optim" in w and "resum" in w for w in plan["warnings"])
    assert step(plan, "hf2mg")["skip_reason"].startswith("user_converted_ckpt_path given")
    assert step(plan, "preprocess")["skip_reason"].startswith("preprocessed data given")
