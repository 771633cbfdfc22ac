"""Virtual pipeline (interleaved 1F1B): PP 3 with 2 model chunks of 1 layer per rank trains exactly as plain
PP 3 (same losses, same final weights), tied embeddings included; checkpoints hold Megatron's `model0`,
`model1`; resume is exact.

Megatron core_r0.8.0 needs PP > 1 for the interleaved schedule (PP > 2 with --no-overlap-p2p-communication)
and a micro-batch count divisible by PP: 6 layers, GBS 3, MBS 1 (PP 2: the slow test at the end).
"""

from __future__ import annotations

import pytest
import torch

from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.engine.convert.__main__ import main as convert
from ascendfactory.engine.convert.megatron_source import MegatronSource
from tests.support import training as T

pytestmark = pytest.mark.integration

VPP = ["--num-layers-per-virtual-pipeline-stage", "1"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("vpp")
    # tied embeddings: the embedding in rank 0's first chunk, its output copy in the last rank's last chunk
    T.make_tiny_model(root / "hf", family="qwen2", num_hidden_layers=6, tie_word_embeddings=True)
    data = T.make_pretrain_data(root / "data" / "pt")
    for name, extra in (("mg_pp3", []), ("mg_vpp", VPP)):
        argv = ["--load-dir", root / "hf", "--save-dir", root / name, "--target-pipeline-parallel-size", 3]
        assert convert([str(a) for a in argv + extra]) == 0

    def flags(*extra: str, load) -> list[str]:
        return [
            *("--data-path", data, "--seq-length", "32", "--micro-batch-size", "1"),
            *("--global-batch-size", "3", "--train-iters", "4", "--lr", "5e-3", "--min-lr", "5e-4"),
            *("--lr-decay-style", "cosine", "--log-interval", "1", "--split", "100,0,0", "--seed", "7"),
            *("--eval-iters", "0", "--pipeline-model-parallel-size", "3"),
            *("--tokenizer-name-or-path", str(root / "hf"), "--load", str(load), *extra),
        ]

    def run(*extra: str, load) -> str:
        proc = T.torchrun(3, flags(*extra, load=load), timeout=240)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    return root, run


def test_vpp_matches_plain_pp_and_saves_model_chunks(setup):
    root, run = setup
    plain = run("--finetune", "--save", str(root / "out_pp3"), load=root / "mg_pp3")
    vpp = run("--finetune", "--save", str(root / "out_vpp"), *VPP, load=root / "mg_vpp")
    assert "virtual pipeline: 2 model chunks of 1 layer(s) per stage" in vpp
    ref, got = T.losses_from_log(plain), T.losses_from_log(vpp)
    assert sorted(got) == [1, 2, 3, 4] and ref[4] != ref[1]
    assert got == pytest.approx(ref, rel=1e-6), (got, ref)
    a = MegatronSource(root / "out_pp3").full_state()
    b = MegatronSource(root / "out_vpp").full_state()
    assert set(a) == set(b)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= 1e-6, worst
    start = MegatronSource(root / "mg_pp3").full_state()
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-3  # it trained
    for r in range(3):
        shard = mio.load_shard(root / "out_vpp", 4, 0, r, 3)
        assert "model" not in shard and {"model0", "model1"} <= set(shard)
        assert {"optimizer", "opt_param_scheduler", "rng_state"} <= set(shard)
        for c in range(2):
            held = shard[f"model{c}"]["decoder.layers.0.self_attention.linear_proj.weight"]
            assert torch.equal(held, b[f"model.layers.{c * 3 + r}.self_attn.o_proj.weight"])
        assert shard["args"].virtual_pipeline_model_parallel_size == 2
        assert ("embedding.word_embeddings.weight" in shard["model0"]) == (r == 0)
        assert ("output_layer.weight" in shard["model1"]) == (r == 2)


def test_vpp_resume_is_exact(setup):
    root, run = setup
    full = root / "out_vpp"
    if not (full / "iter_0000004").is_dir():
        run("--finetune", "--save", str(full), *VPP, load=root / "mg_vpp")
    ref = MegatronSource(full).full_state()
    part = root / "part_vpp"
    run("--finetune", "--save", str(part), "--exit-interval", "2", *VPP, load=root / "mg_vpp")
    second = run("--save", str(part), *VPP, load=part)
    assert f" loading checkpoint from {part} at iteration 2" in second
    assert sorted(T.losses_from_log(second)) == [3, 4]
    got = MegatronSource(part).full_state()
    assert all(torch.equal(got[k], ref[k]) for k in ref)


@pytest.mark.slow  # five 2-process runs: about two minutes on a loaded 2-core runner
def test_pp2_vpp_with_distributed_optimizer(tmp_path):
    """PP 2 with a virtual pipeline (Megatron core_r0.8.0 allows it: p2p overlap is on by default): the
    losses of plain PP 2; with --use-distributed-optimizer one Megatron buffer per model chunk in
    distrib_optim.pt (the tied embedding in its own bucket on both ends), and an exact resume."""
    from ascendfactory.engine.train import megatron_buffer

    T.make_tiny_model(tmp_path / "hf", family="qwen2", num_hidden_layers=4, tie_word_embeddings=True)
    for name, extra in (("mg", []), ("mg_v", VPP)):
        argv = [
            "--load-dir",
            tmp_path / "hf",
            "--save-dir",
            tmp_path / name,
            "--target-pipeline-parallel-size",
            2,
        ]
        assert convert([str(a) for a in argv + extra]) == 0
    data = T.make_pretrain_data(tmp_path / "pt")

    def run(*extra, load):
        argv = [
            *("--tokenizer-name-or-path", str(tmp_path / "hf"), "--data-path", data, "--seq-length", "32"),
            *("--micro-batch-size", "1", "--global-batch-size", "4", "--train-iters", "4", "--lr", "5e-3"),
            *("--log-interval", "1", "--split", "100,0,0", "--eval-iters", "0", "--seed", "3"),
            *("--pipeline-model-parallel-size", "2", "--load", str(load), *extra),
        ]
        proc = T.torchrun(2, argv, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return T.losses_from_log(proc.stdout)

    do = ["--use-distributed-optimizer", *VPP]
    plain = run("--finetune", load=tmp_path / "mg")
    assert run("--finetune", *do, "--save", str(tmp_path / "full"), load=tmp_path / "mg_v") == plain
    part = tmp_path / "part"
    run("--finetune", *do, "--save", str(part), "--exit-interval", "2", load=tmp_path / "mg_v")
    assert run(*do, "--save", str(part), load=part) == {k: v for k, v in plain.items() if k > 2}
    for r in range(2):
        folder = f"mp_rank_00_{r:03d}"
        shard = torch.load(
            tmp_path / "full" / "iter_0000004" / folder / "model_optim_rng.pt", weights_only=False
        )
        full = torch.load(
            tmp_path / "full" / "iter_0000004" / folder / "distrib_optim.pt", weights_only=False
        )
        again = torch.load(part / "iter_0000004" / folder / "distrib_optim.pt", weights_only=False)
        assert set(full) == {"buckets_coalesced", 0, 1}
        groups = shard["optimizer"]["optimizer"]["param_groups"]  # rank 1's first parameter: a layer norm
        assert [g["wd_mult"] for g in groups] == ([1.0, 0.0] if r == 0 else [0.0, 1.0])
        for c in range(2):
            model = shard[f"model{c}"]
            shared = "embedding.word_embeddings.weight" if (r, c) == (0, 0) else "output_layer.weight"
            layout = megatron_buffer.build_layout(
                [(n, model[n].numel()) for n in sorted(model, key=megatron_buffer.registration_key)],
                dp=1,
                shared_embedding=shared if shared in model else None,
            )
            entry = full[c][(torch.float32, torch.float32)]
            assert entry["numel_unpadded"] == layout.numel_unpadded
            assert torch.equal(entry["param"], megatron_buffer.to_world(model, layout))  # fp32 weights
            resumed = again[c][(torch.float32, torch.float32)]
            assert all(torch.equal(entry[k], resumed[k]) for k in ("param", "exp_avg", "exp_avg_sq"))
