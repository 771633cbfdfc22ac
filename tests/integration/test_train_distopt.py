"""`--use-distributed-optimizer`: the same training as the replicated optimizer (DP2, TP2 x DP2, PP2 x DP2),
Megatron's checkpoint files (`distrib_optim.pt` beside `model_optim_rng.pt`), a bit-identical resume, a
resume on another DP size, Megatron's refusal to switch with the optimizer state, and mg->hf on its output.

Tolerance: per-step `lm loss` relative 1e-5 and final weights max |diff| <= 2e-5 against the single-process
run (as test_train_layouts); against the same layout without it the printed losses are equal (the same sums
in the same order; only the gradient norm is summed in pieces)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ascendfactory.engine.train import megatron_buffer
from tests.support import training as T

pytestmark = pytest.mark.integration

DO = "--use-distributed-optimizer"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("distopt")
    T.make_tiny_model(root / "hf", family="qwen2", num_hidden_layers=2, tie_word_embeddings=True)
    for tp, pp in ((1, 1), (2, 1), (1, 2)):
        T.hf_to_megatron(root / "hf", root / f"mg_{tp}_{pp}", tp=tp, pp=pp)
    data = T.make_pretrain_data(root / "data" / "pt")

    def flags(*extra, iters=4, tp=1, pp=1, load=None):
        start = (
            ["--load", str(root / f"mg_{tp}_{pp}"), "--finetune"] if load is None else ["--load", str(load)]
        )
        return [
            "--tokenizer-name-or-path", str(root / "hf"), "--data-path", data, "--seq-length", "32",
            "--micro-batch-size", "1", "--global-batch-size", "4", "--train-iters", str(iters),
            "--lr", "5e-3", "--lr-decay-style", "cosine", "--min-lr", "5e-4", "--lr-warmup-iters", "1",
            "--log-interval", "1", "--split", "100,0,0", "--seed", "7",
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            *start,
            *extra,
        ]  # fmt: skip

    base = T.torchrun(1, flags("--save", str(root / "base")), timeout=240)
    assert base.returncode == 0, base.stderr[-3000:]
    return root, flags, base.stdout


def _run(nproc, flags):
    proc = T.torchrun(nproc, flags, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


SLOW = pytest.mark.slow  # 4 processes, or several runs: minutes on a loaded 2-core runner


@pytest.mark.parametrize(
    "name,tp,pp",
    [("dp2", 1, 1), pytest.param("tp2_dp2", 2, 1, marks=SLOW), pytest.param("pp2_dp2", 1, 2, marks=SLOW)],
)
def test_same_training_as_single_process(setup, name, tp, pp):
    root, flags, base_out = setup
    nproc = 2 * tp * pp
    out = _run(nproc, flags(DO, "--save", str(root / name), tp=tp, pp=pp))
    (root / name / "stdout.txt").write_text(out)
    ref, got = T.losses_from_log(base_out), T.losses_from_log(out)
    assert sorted(got) == [1, 2, 3, 4] and ref[4] != ref[1]
    assert got == pytest.approx(ref, rel=1e-5)
    base_w, weights = T.megatron_to_hf_full(root / "base"), T.megatron_to_hf_full(root / name)
    assert set(weights) == set(base_w)
    worst = max(float((weights[k] - base_w[k]).abs().max()) for k in base_w)
    assert worst <= 2e-5, worst
    rank_dir = "mp_rank_00" if pp == 1 else "mp_rank_00_000"
    assert (root / name / "iter_0000004" / rank_dir / "distrib_optim.pt").is_file()
    if name == "dp2":
        _memory_goes_down(root, flags, out)


def _memory_line(stdout: str, rank: int) -> dict[str, float]:
    line = next(x for x in stdout.splitlines() if x.startswith(f"[Rank {rank}] (after 1 iterations) memory"))
    fields = dict(f.split(": ") for f in line.split(" | ")[1:])
    return {k.strip(): float(v) for k, v in fields.items()}


def _memory_goes_down(root, flags, distributed_out):
    """The memory line after iteration 1 (the tracker's count of live tensors): the replicated optimizer
    holds 16 bytes per parameter (fp32 weight, gradient, two moments), the distributed one 4 + 4 + 8 / DP;
    the peak goes down as well (the replicated path also has its all-reduce buffer)."""
    plain = _memory_line(_run(2, flags("--save", str(root / "dp2_plain"))), 0)
    sharded = _memory_line(distributed_out, 0)
    main = torch.load(root / "dp2" / "iter_0000004" / "mp_rank_00" / "model_optim_rng.pt", weights_only=False)
    numel = sum(t.numel() for t in main["model"].values())  # all trained (fp32, tied: no output_layer)
    saved_mb = (plain["allocated"] - sharded["allocated"]) * 2**20
    assert saved_mb == pytest.approx(8 * (1 - 1 / 2) * numel, rel=0.02)
    assert sharded["max allocated"] < plain["max allocated"]


def test_checkpoint_files_and_bit_identical_resume(setup):
    root, flags, _ = setup
    full = root / "dp2"  # the uninterrupted run of test_same_training_as_single_process[dp2], else made here
    if not (full / "stdout.txt").is_file():
        (full / "stdout.txt").parent.mkdir(parents=True, exist_ok=True)
        (full / "stdout.txt").write_text(_run(2, flags(DO, "--save", str(full))))
    part = root / "part"
    first = _run(2, flags(DO, "--save", str(part), "--exit-interval", "2"))
    second = _run(2, flags(DO, "--save", str(part), load=part))
    assert f" loading checkpoint from {part} at iteration 2" in second
    ref = T.losses_from_log((full / "stdout.txt").read_text())
    assert {**T.losses_from_log(first), **T.losses_from_log(second)} == ref

    folder = full / "iter_0000004" / "mp_rank_00"
    main = torch.load(folder / "model_optim_rng.pt", weights_only=False)
    assert "state" not in main["optimizer"] and "fp32_from_fp16_params" not in main["optimizer"]
    assert [g["step"] for g in main["optimizer"]["optimizer"]["param_groups"]] == [4, 4]
    # Megatron's groups, in its order (the embedding's stage: decay first) and with the keys its scheduler
    # reads (wd_mult scales the weight decay; a loader pairs groups by position)
    groups = main["optimizer"]["optimizer"]["param_groups"]
    assert [(g["wd_mult"], g["lr_mult"], g["is_expert_parallel"]) for g in groups] == [
        (1.0, 1.0, False),
        (0.0, 1.0, False),
    ]
    shards = torch.load(folder / "distrib_optim.pt", weights_only=False)
    assert shards["buckets_coalesced"] is True
    assert set(shards) == {"buckets_coalesced", 0}  # Megatron's keys only: one buffer, no extra entries
    ((key, tensors),) = shards[0].items()
    # Megatron's layout: the model's parameters in reverse registration order, 64-element aligned
    layout = megatron_buffer.build_layout(
        [(n, main["model"][n].numel()) for n in sorted(main["model"], key=megatron_buffer.registration_key)],
        dp=2,
    )
    numel = layout.numel_unpadded
    assert key == (torch.float32, torch.float32) and tensors["numel_unpadded"] == numel
    assert set(tensors) == {"param", "exp_avg", "exp_avg_sq", "numel_unpadded"}
    assert all(
        tensors[k].shape == (numel,) and tensors[k].dtype == torch.float32 for k in ("param", "exp_avg")
    )
    assert torch.equal(tensors["param"], megatron_buffer.to_world(main["model"], layout))  # fp32 run
    first = layout.world_start["decoder.final_layernorm.weight"]  # reversed: the last registered first
    assert first == 0 and layout.world_start["embedding.word_embeddings.weight"] == max(
        layout.world_start.values()
    )
    assert float(tensors["exp_avg_sq"].min()) >= 0 and float(tensors["exp_avg_sq"].max()) > 0

    resumed = part / "iter_0000004" / "mp_rank_00"
    other = torch.load(resumed / "model_optim_rng.pt", weights_only=False)
    assert all(torch.equal(v, other["model"][k]) for k, v in main["model"].items())
    again = torch.load(resumed / "distrib_optim.pt", weights_only=False)[0][key]
    assert all(torch.equal(tensors[k], again[k]) for k in ("param", "exp_avg", "exp_avg_sq"))


@SLOW
def test_resume_on_another_dp_size_and_switch_rules(setup):
    root, flags, base_out = setup
    part = root / "part_dp"
    _run(2, flags(DO, "--save", str(part), "--exit-interval", "2"))
    # DP 2 -> 1: the world tensors are unpadded, each rank takes its new part (Megatron's dp-zero scatter)
    out = _run(1, flags(DO, load=part))
    assert T.losses_from_log(out) == pytest.approx(
        {k: v for k, v in T.losses_from_log(base_out).items() if k > 2}, rel=1e-5
    )
    refused = T.torchrun(1, flags(load=part), timeout=240)
    assert refused.returncode != 0
    text = refused.stdout + refused.stderr
    assert "--use-distributed-optimizer" in text and "distrib_optim.pt" in text and "--no-load-optim" in text
    assert "engine/train/checkpoint.py" not in text  # one message, not the trainer's traceback
    weights_only = _run(1, flags("--no-load-optim", load=part))
    assert sorted(T.losses_from_log(weights_only)) == [3, 4]
    plain = root / "plain"
    _run(1, flags("--save", str(plain), "--exit-interval", "2"))
    refused = T.torchrun(2, flags(DO, load=plain), timeout=240)
    assert (
        refused.returncode != 0
        and "holds the replicated optimizer's state" in refused.stdout + refused.stderr
    )


@SLOW
def test_mg2hf_reads_a_distributed_optimizer_checkpoint(setup):
    root, flags, _ = setup
    save = root / "bf16"
    _run(2, flags(DO, "--bf16", "--save", str(save), "--exit-interval", "2"))
    folder = save / "iter_0000002" / "mp_rank_00"
    shards = torch.load(folder / "distrib_optim.pt", weights_only=False)
    (key,) = shards[0]
    assert key == (torch.bfloat16, torch.float32)  # Megatron's (param dtype, grad dtype) buffer key
    model = torch.load(folder / "model_optim_rng.pt", weights_only=False)["model"]
    assert all(v.dtype == torch.bfloat16 for v in model.values())
    out = root / "bf16_hf"
    proc = subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.convert", "--load-model-type", "mg", "--save-model-type",
         "hf", "--load-dir", str(save), "--save-dir", str(out), "--hf-cfg-dir", str(root / "hf")],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    from safetensors.torch import load_file

    hf = load_file(str(out / "model.safetensors"))
    full = T.megatron_to_hf_full(save)
    assert torch.equal(
        hf["model.embed_tokens.weight"].float(), full["model.embed_tokens.weight"][:256].float()
    )


MONITOR = """\
monitor_config:
  monitor_on: true
  dump_path: {dump}
  step_interval: 1
  local_norm_format: log
  device_local_norm_format: log
  optimizer_state_format: log
"""


def _monitor_values(stdout: str, iteration: int) -> dict[str, float]:
    line = next(x for x in stdout.splitlines() if x.startswith(f"[Rank 1] iteration {iteration} |"))
    fields = line.rstrip(" |").split(" | ")[1:]
    return {k: float(v) for k, v in (f.split(": ") for f in fields)}


def test_monitor_norms_under_the_distributed_optimizer(setup):
    """monitor_config's per-parameter gradient and Adam moment norms: the gradients and moments exist only
    as each DP rank's owned pieces; summed over DP they give the replicated optimizer's numbers."""
    root, flags, _ = setup
    cfg = root / "monitor.yaml"
    cfg.write_text(MONITOR.format(dump=root / "dump"))
    plain = _run(2, flags("--af-monitor-config", str(cfg), iters=2))
    sharded = _run(2, flags(DO, "--af-monitor-config", str(cfg), iters=2))
    for it in (1, 2):
        ref, got = _monitor_values(plain, it), _monitor_values(sharded, it)
        assert set(got) == set(ref)
        assert any(k.startswith("local_norm/model.layers.0.") for k in got)
        assert any(k.startswith("adam_v_norm/") for k in got) == (it == 2)  # moments after the first step
        for k, v in ref.items():
            assert got[k] == pytest.approx(v, rel=1e-4, abs=1e-8), k


@SLOW
def test_lora_adapters_in_megatrons_layout(setup):
    """With LoRA only the adapters train: distrib_optim.pt holds PEFT's `lora_A`/`lora_B` tensors in
    Megatron's buffer order (`lora_A` registered before `lora_B`), and a resume is exact."""
    root, flags, _ = setup
    lora = ["--lora-target-modules", "linear_qkv", "linear_fc2", "--lora-r", "4", "--lora-alpha", "8"]
    full, part = root / "lora_full", root / "lora_part"
    ref = T.losses_from_log(_run(2, flags(DO, *lora, "--save", str(full))))
    _run(2, flags(DO, *lora, "--save", str(part), "--exit-interval", "2"))
    assert T.losses_from_log(_run(2, flags(DO, *lora, "--save", str(part), load=part))) == {
        k: v for k, v in ref.items() if k > 2
    }
    folder = "iter_0000004/mp_rank_00"
    model = torch.load(full / folder / "model_optim_rng.pt", weights_only=False)["model"]
    adapters = {k: v for k, v in model.items() if ".lora_" in k}
    assert len(adapters) == 2 * 2 * 2  # 2 layers x 2 targets x (A, B)
    layout = megatron_buffer.build_layout(
        [(n, adapters[n].numel()) for n in sorted(adapters, key=megatron_buffer.registration_key)], dp=2
    )
    entry = torch.load(full / folder / "distrib_optim.pt", weights_only=False)[0][
        (torch.float32, torch.float32)
    ]
    assert entry["numel_unpadded"] == layout.numel_unpadded
    assert torch.equal(entry["param"], megatron_buffer.to_world(adapters, layout))
    again = torch.load(part / folder / "distrib_optim.pt", weights_only=False)[0][
        (torch.float32, torch.float32)
    ]
    assert all(torch.equal(entry[k], again[k]) for k in ("param", "exp_avg", "exp_avg_sq"))
