"""Every parallel layout trains the same model as one process: same per-step loss and the same final weights.

Tolerance (fp32, tiny Qwen2, 4 iterations, GBS 4, MBS 1, seq 32): per-step `lm loss` relative 1e-5
(the log prints 7 significant digits), grad norm 2e-3 absolute (printed with 3 decimals), final weights
max |diff| <= 2e-5. Measured: losses and grad norms identical as printed for every layout; final weights
bit-identical for PP, max |diff| 1.2e-6 (DP=2) and 2.9e-6 (TP=2, TP=2 x PP=2) after AdamW at lr 5e-3.
"""

from __future__ import annotations

import pytest
import torch

from tests.support import training as T

pytestmark = pytest.mark.integration

COMMON = [
    "--data-path",
    "{data}",
    "--seq-length",
    "32",
    "--micro-batch-size",
    "1",
    "--global-batch-size",
    "4",
    "--train-iters",
    "4",
    "--lr",
    "5e-3",
    "--min-lr",
    "5e-4",
    "--lr-decay-style",
    "cosine",
    "--lr-warmup-iters",
    "1",
    "--log-interval",
    "1",
    "--split",
    "100,0,0",
    "--finetune",
    "--seed",
    "7",
]
LAYOUTS = {  # name: (processes, converted checkpoint (tp, pp, num_layer_list), extra flags)
    "dp2": (2, (1, 1, None), []),
    "tp2": (2, (2, 1, None), ["--tensor-model-parallel-size", "2"]),
    "pp2_uneven": (2, (1, 2, [1, 3]), ["--pipeline-model-parallel-size", "2", "--num-layer-list", "1,3"]),
    "tp2_pp2": (
        4,
        (2, 2, None),
        ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"],
    ),
}

CI_LAYOUTS = ("pp2_uneven", "tp2_pp2")  # dp2 and tp2 alone are `slow`: tp2_pp2 holds both kinds of split


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    T.make_tiny_model(root / "hf", family="qwen2")
    data = T.make_pretrain_data(root / "data" / "pt")

    def run(name, nproc, layout, extra):
        tp, pp, layers = layout
        ckpt = root / f"mg_{tp}_{pp}_{layers}"
        if not ckpt.exists():
            T.hf_to_megatron(root / "hf", ckpt, tp=tp, pp=pp, num_layer_list=layers)
        flags = [f.format(data=data) for f in COMMON] + [
            "--tokenizer-name-or-path",
            str(root / "hf"),
            "--load",
            str(ckpt),
            "--save",
            str(root / f"out_{name}"),
            *extra,
        ]
        proc = T.torchrun(nproc, flags, timeout=240)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout, T.megatron_to_hf_full(root / f"out_{name}")

    base = run("base", 1, (1, 1, None), ["--tensorboard-dir", str(root / "tb_base")])
    return run, base, root


@pytest.mark.parametrize(
    "name", [n if n in CI_LAYOUTS else pytest.param(n, marks=pytest.mark.slow) for n in LAYOUTS]
)
def test_layout_matches_single_process(world, name):
    run, (base_out, base_w), root = world
    nproc, layout, extra = LAYOUTS[name]
    if name == "dp2":
        extra = extra + ["--tensorboard-dir", str(root / "tb_dp2")]
    out, weights = run(name, nproc, layout, extra)
    ref, got = T.losses_from_log(base_out), T.losses_from_log(out)
    assert sorted(got) == [1, 2, 3, 4] and sorted(ref) == [1, 2, 3, 4]
    for it in ref:
        assert got[it] == pytest.approx(ref[it], rel=1e-5), (it, got, ref)
    norms = [_norms(o) for o in (base_out, out)]
    assert norms[0] == pytest.approx(norms[1], abs=2e-3)
    assert ref[4] != ref[1]  # it trained
    assert set(weights) == set(base_w)
    worst = max(float((weights[k] - base_w[k]).abs().max()) for k in base_w)
    rel = max(abs(got[i] - ref[i]) / ref[i] for i in ref)
    print(f"\n{name}: max loss rel diff {rel:.3g}, max final weight |diff| {worst:.3g}")
    assert worst <= 2e-5, worst
    start = T.megatron_to_hf_full(root / "mg_1_1_None")
    assert max(float((base_w[k] - start[k]).abs().max()) for k in base_w) > 1e-3
    if name == "dp2":
        assert sorted(p.name for p in (root / "tb_dp2").iterdir()) == ["rank_0", "rank_1"]


def _norms(stdout: str) -> list[float]:
    from ascendfactory.engine.train.logline import parse_log_line

    return [float(parse_log_line(x)["grad norm"]) for x in stdout.splitlines() if "grad norm:" in x]


def test_checkpoint_is_megatron_layout(world):
    _, _, root = world
    out = root / "out_base"
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "4"
    state = torch.load(out / "iter_0000004" / "mp_rank_00" / "model_optim_rng.pt", weights_only=False)
    assert state["checkpoint_version"] == 3.0 and state["iteration"] == 4
    assert state["args"].consumed_train_samples == 16 and state["args"].tensor_model_parallel_size == 1
    assert {"optimizer", "opt_param_scheduler", "rng_state", "num_floating_point_operations_so_far"} <= set(
        state
    )
    assert "decoder.layers.3.self_attention.linear_qkv.weight" in state["model"]
    assert "output_layer.weight" in state["model"] and len(state["rng_state"]) == 1


def test_tied_embeddings_tp2_matches_single_process(tmp_path):
    """Qwen2.5-0.5B-style tied embeddings: the vocab-sharded embedding and lm_head share one DTensor."""
    T.make_tiny_model(tmp_path / "hf", family="qwen2", tie_word_embeddings=True, num_hidden_layers=2)
    data = T.make_pretrain_data(tmp_path / "pt")
    runs = {}
    for tp in (1, 2):
        T.hf_to_megatron(tmp_path / "hf", tmp_path / f"mg{tp}", tp=tp)
        flags = [f.format(data=data) for f in COMMON] + [
            "--tokenizer-name-or-path",
            str(tmp_path / "hf"),
            "--load",
            str(tmp_path / f"mg{tp}"),
            "--tensor-model-parallel-size",
            str(tp),
        ]
        proc = T.torchrun(tp, flags, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[tp] = T.losses_from_log(proc.stdout)
    assert sorted(runs[2]) == [1, 2, 3, 4]
    assert runs[2] == pytest.approx(runs[1], rel=1e-5)


def test_two_node_rendezvous_matches_single_process(world):
    """Two torchrun agents (--nnodes 2, one process each) on this host: DP=2 across 'nodes'."""
    import os
    import subprocess
    import sys

    _, (base_out, _), root = world
    flags = [f.format(data=root / "data" / "pt_text_document") for f in COMMON] + [
        "--tokenizer-name-or-path", str(root / "hf"), "--load", str(root / "mg_1_1_None"),
        "--save", str(root / "out_two_nodes"),
    ]  # fmt: skip
    port = str(T.free_port())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node-rank",
                str(node),
                "--nproc-per-node",
                "1",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                port,
                "-m",
                "ascendfactory.engine.train",
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        for node in (0, 1)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[1][1][-3000:]
    assert "using world size: 2, data-parallel size: 2" in outs[0][0]
    losses = T.losses_from_log(outs[1][0])  # the last global rank prints the iteration lines
    assert losses == pytest.approx(T.losses_from_log(base_out), rel=1e-5) and sorted(losses) == [1, 2, 3, 4]
    assert (root / "out_two_nodes" / "latest_checkpointed_iteration.txt").read_text() == "4"
