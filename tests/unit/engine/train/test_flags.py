"""Flag lists as data, parsing, and every problem reported at once."""

import pytest
from train_testlib import REQUIRED_ARGV

from ascendfactory.engine.train import flags
from ascendfactory.errors import ConfigError

BASE = REQUIRED_ARGV


def test_lists_are_disjoint():
    lists = [set(flags.HONOURED), set(flags.ARCHITECTURE), set(flags.IGNORED), set(flags.REFUSED)]
    for i, a in enumerate(lists):
        for b in lists[i + 1 :]:
            assert not a & b
    assert set(flags.known_flags()) == set().union(*lists)


def test_memory_flags_that_stay_ignored_say_why():
    assert set(flags.IGNORED_WHY) <= set(flags.IGNORED)
    for flag in ("--swap-attention", "--reuse-fp32-param"):
        assert "MindSpeed" in flags.IGNORED_WHY[flag] and "this trainer" in flags.IGNORED_WHY[flag]
    _, ignored = flags.parse_args(BASE + ["--swap-attention", "--reuse-fp32-param"])
    assert ignored == ["--swap-attention", "--reuse-fp32-param"]


def test_mindspeed_sft_script_flags_parse():
    argv = BASE + [
        "--finetune",
        "--stage",
        "sft",
        "--is-instruction-dataset",
        "--tokenizer-not-use-fast",
        "--prompt-type",
        "qwen",
        "--padded-samples",
        "--variable-seq-lengths",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--use-mcore-models",
        "--tensor-model-parallel-size",
        "1",
        "--num-layers",
        "28",
        "--group-query-attention",
        "--num-query-groups",
        "4",
        "--use-flash-attn",
        "--swiglu",
        "--use-fused-swiglu",
        "--normalization",
        "RMSNorm",
        "--rotary-base",
        "1000000",
        "--untie-embeddings-and-output-weights",
        "--add-qkv-bias",
        "--disable-bias-linear",
        "--initial-loss-scale",
        "4096",
        "--no-gradient-accumulation-fusion",
        "--bf16",
        "--distributed-backend",
        "nccl",
        "--split",
        "100,0,0",
        "--no-load-optim",
        "--no-load-rng",
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "block",
        "--recompute-num-layers",
        "2",
        "--log-throughput",
        "--eval-iters",
        "0",
    ]
    args, ignored = flags.parse_args(argv)
    assert args.stage == "sft" and args.bf16 and args.num_query_groups == 4
    assert ignored == [f for f in flags.IGNORED if f in argv]
    assert "--recompute-granularity" not in ignored and args.recompute_num_layers == 2  # honoured


def test_refused_and_unknown_and_bad_values_all_reported():
    with pytest.raises(ConfigError) as e:
        flags.parse_args(
            BASE
            + [
                "--lora-r",
                "8",  # without --lora-target-modules LoRA is off: named, not silently ignored
                "--qlora",
                "--no-such-flag",
                "--context-parallel-size",
                "2",
                "--lr-decay-style",
                "poly",
                "--stage",
                "dpo",
            ]
        )
    keys = [p.key for p in e.value.problems]
    for key in (
        "--lora-r",
        "--qlora",
        "--no-such-flag",
        "--context-parallel-size",
        "--lr-decay-style",
        "--stage",
    ):
        assert any(key in k for k in keys), key
    assert "context parallelism (2) is not supported" in str(e.value)


def test_required_flags():
    with pytest.raises(ConfigError) as e:
        flags.parse_args(["--lr", "1"])
    assert {p.key for p in e.value.problems} >= {
        "--seq-length",
        "--train-iters",
        "--data-path",
        "--tokenizer-name-or-path",
    }


def test_stage_defaults_from_instruction_flag():
    args, _ = flags.parse_args(BASE + ["--is-instruction-dataset"])
    assert args.stage == "sft"
    args, _ = flags.parse_args(BASE)
    assert args.stage == "pt"


def test_help_lists_honoured_and_architecture_flags(capsys):
    from ascendfactory.engine.train.__main__ import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--exit-interval" in out and "iteration % N" in out and "--num-query-groups" in out
    assert "--use-flash-attn" not in out  # ignored flags are accepted but not advertised


def test_collective_timeout_precedence(monkeypatch):
    from ascendfactory.engine.train.parallel import collective_timeout_s

    monkeypatch.delenv("AF_DISTRIBUTED_TIMEOUT_S", raising=False)
    assert collective_timeout_s(None) == 600.0
    monkeypatch.setenv("AF_DISTRIBUTED_TIMEOUT_S", "45")
    assert collective_timeout_s(None) == 45.0
    assert collective_timeout_s(2) == 120.0


def test_lora_flags_are_mindspeed_llms():
    """2.1.0 `_add_lora_args`: targets nargs+ (LoRA on when given), r 16, alpha 32; CCLoRA is performance."""
    args, ignored = flags.parse_args(
        BASE + ["--lora-target-modules", "linear_qkv", "linear_fc2", "--lora-fusion", "--lora-ckpt-filter"]
    )
    assert args.lora_target_modules == ["linear_qkv", "linear_fc2"]
    assert (args.lora_r, args.lora_alpha, args.lora_load, args.lora_ckpt_filter) == (16, 32, None, True)
    assert ignored == ["--lora-fusion"]
    args, _ = flags.parse_args(
        BASE + ["--lora-target-modules", "linear_proj", "--lora-r", "8", "--lora-alpha", "16"]
    )
    assert (args.lora_r, args.lora_alpha) == (8, 16)
    args, _ = flags.parse_args(BASE)
    assert args.lora_target_modules == [] and args.lora_r == 16  # off


@pytest.mark.parametrize(
    "extra,key,fragment",
    [
        (["--lora-target-modules", "q_proj"], "--lora-target-modules", "use some of: linear_qkv"),
        (["--lora-target-modules", "linear_qkv", "linear_qkv"], "--lora-target-modules", "named twice"),
        (["--lora-target-modules", "linear_qkv", "--lora-r", "0"], "--lora-r", "must be >= 1"),
        (["--lora-load", "x"], "--lora-load", "LoRA is off without --lora-target-modules"),
        (["--lora-alpha", "16"], "--lora-alpha", "LoRA is off without --lora-target-modules"),
        (["--eval-iters", "-1"], "--eval-iters", "must be >= 0"),
    ],
)
def test_bad_lora_and_eval_flags(extra, key, fragment):
    with pytest.raises(ConfigError) as e:
        flags.parse_args(BASE + extra)
    assert any(p.key == key and fragment in f"{p.message} {p.fix}" for p in e.value.problems), e.value


def test_eval_defaults_are_megatrons():
    args, _ = flags.parse_args(BASE)
    assert (args.eval_interval, args.eval_iters, args.split) == (1000, 100, "969,30,1")
    assert "--qlora" in flags.REFUSED and "--lora-r" in flags.HONOURED and "--eval-iters" in flags.HONOURED


def test_memory_features_are_honoured():
    args, ignored = flags.parse_args(
        BASE + ["--use-distributed-optimizer", "--sequence-parallel", "--tensor-model-parallel-size", "2"]
    )
    assert args.use_distributed_optimizer and args.sequence_parallel and ignored == []
    assert "--use-distributed-optimizer" in flags.HONOURED and "--sequence-parallel" in flags.HONOURED


def test_sequence_parallel_needs_a_sequence_divisible_by_tp():
    argv = list(BASE)
    i = argv.index("--seq-length")
    argv[i + 1] = "33"
    with pytest.raises(ConfigError) as e:
        flags.parse_args(argv + ["--sequence-parallel", "--tensor-model-parallel-size", "2"])
    assert "33 is not divisible" in str(e.value) and "--sequence-parallel" in str(e.value)
    args, _ = flags.parse_args(argv + ["--sequence-parallel"])  # TP 1: accepted, the trainer turns it off
    assert args.sequence_parallel


@pytest.mark.parametrize(
    "extra,needle",
    [
        (  # core_r0.8.0: PP > 2 only without p2p overlap (on by default), else PP > 1
            ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"]
            + ["--no-overlap-p2p-communication"],
            "greater than 2",
        ),
        (["--num-layers-per-virtual-pipeline-stage", "1"], "greater than 1"),
        (
            [
                "--pipeline-model-parallel-size",
                "4",
                "--num-layers",
                "12",
                "--num-layers-per-virtual-pipeline-stage",
                "2",
            ],
            "divisible",
        ),
        (["--num-layers-per-virtual-pipeline-stage", "x"], "--num-layers-per-virtual-pipeline-stage"),
        (["--pipeline-model-parallel-size", "4", "--virtual-pipeline-model-parallel-size", "0"], ">= 1"),
        (
            ["--pipeline-model-parallel-size", "4", "--num-layers", "16"]
            + ["--virtual-pipeline-model-parallel-size", "3"],
            "divisible",
        ),
        (
            ["--pipeline-model-parallel-size", "4", "--num-layers", "16", "--num-layer-list", "4,4,4,4"]
            + ["--virtual-pipeline-model-parallel-size", "2"],
            "not support work with virtual pipeline",
        ),
        (
            ["--pipeline-model-parallel-size", "4", "--num-layers", "16"]
            + ["--virtual-pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "2"],
            "2 layers per chunk x 4 chunks != 16 layers / PP 4",
        ),
    ],
)
def test_virtual_pipeline_rules_of_megatron(extra, needle):
    with pytest.raises(ConfigError) as e:
        flags.parse_args(BASE + extra)
    assert needle in str(e.value)
    ok = [
        "--pipeline-model-parallel-size",
        "4",
        "--num-layers",
        "16",
        "--num-layers-per-virtual-pipeline-stage",
        "2",
    ]
    args, ignored = flags.parse_args(BASE + ok)
    assert ignored == [] and flags.virtual_chunk_layers(args, 16) == 2
    args, _ = flags.parse_args(BASE + ok[:4] + ["--virtual-pipeline-model-parallel-size", "2"])
    assert flags.virtual_chunk_layers(args, 16) == 2  # 16 layers / PP 4 / 2 chunks
    args, _ = flags.parse_args(BASE + ok[:4])
    assert flags.virtual_chunk_layers(args, 16) is None
    pp2 = [
        "--pipeline-model-parallel-size",
        "2",
        "--num-layers",
        "16",
        "--num-layers-per-virtual-pipeline-stage",
        "2",
    ]
    args, _ = flags.parse_args(BASE + pp2)  # PP 2 with p2p overlap (Megatron's default): accepted
    assert flags.virtual_chunk_layers(args, 16) == 2


def _checkpoint(root, *, optimizer, distributed_file=False):
    import torch

    folder = root / "iter_0000002" / "mp_rank_00"
    folder.mkdir(parents=True)
    state = {"model": {"w": torch.zeros(2)}, "iteration": 2}
    if optimizer is not None:
        state.update(optimizer=optimizer, opt_param_scheduler={"num_steps": 8})
    torch.save(state, folder / "model_optim_rng.pt")
    if distributed_file:
        torch.save({"buckets_coalesced": True}, folder / "distrib_optim.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("2")
    return str(root)


def test_distributed_optimizer_switch_refused_before_launch(tmp_path):
    replicated = _checkpoint(tmp_path / "r", optimizer={"state": {}, "param_groups": []})
    distributed = _checkpoint(
        tmp_path / "d", optimizer={"optimizer": {"param_groups": []}}, distributed_file=True
    )
    converted = _checkpoint(tmp_path / "c", optimizer=None)
    do = "--use-distributed-optimizer"
    for load, extra, refused in (
        (replicated, [do], "holds the replicated optimizer's state (no distrib_optim.pt) and this run uses"),
        (distributed, [], "holds the distributed optimizer's state (distrib_optim.pt) and this run does not"),
    ):
        with pytest.raises(ConfigError) as e:
            flags.parse_args(BASE + ["--load", load, *extra])
        assert refused in str(e.value) and "--no-load-optim" in str(e.value)
        flags.parse_args(BASE + ["--load", load, *extra, "--no-load-optim"])  # the weights only: allowed
        flags.parse_args(BASE + ["--load", load, *extra, "--finetune"])
    flags.parse_args(BASE + ["--load", replicated])
    flags.parse_args(BASE + ["--load", distributed, do])
    flags.parse_args(BASE + ["--load", converted, do])
    flags.parse_args(BASE + ["--load", converted])


@pytest.mark.parametrize(("value", "ok"), [("torch", True), ("torch_dist", False), ("zarr", False)])
def test_only_the_torch_checkpoint_format_is_taken(value, ok):
    """MindSpeed-LLM 26.1.0's examples pass --ckpt-format torch (Megatron 0.12's default is torch_dist): the
    embedded trainer writes the torch layout only, and names any other format instead of ignoring it."""
    if ok:
        args, _ = flags.parse_args([*BASE, "--ckpt-format", value])
        assert args.ckpt_format == "torch"
        return
    with pytest.raises(ConfigError) as e:
        flags.parse_args([*BASE, "--ckpt-format", value])
    problem = next(p for p in e.value.problems if p.key == "--ckpt-format")
    assert value in problem.message and "--ckpt-format torch" in problem.fix
