"""The embedded trainer's MoE layer on the tiny demo Qwen3-MoE and DeepSeek-V2-Lite (`engine/demo.py`),
loaded from the converter's Megatron checkpoints: expert parallelism 2 trains as expert parallelism 1
(the same per-step LM and load-balancing losses and grad norms; weight updates within 0.1%), a resume is
exact, the shards are Megatron's (`mp_rank_TT_EEE`, the grouped-GEMM layout), the HF weights come back
through the converter and load in transformers; TP (with sequence parallelism) and PP, alone and with EP,
and DeepSeek-V2-Lite with EP and PP give the same losses (slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import training as T

pytestmark = pytest.mark.integration

REL = 1e-5  # EP 2 vs EP 1: float reordering only (measured <= 6e-6 here)
REL_TP_PP = 5e-5  # TP / PP vs DP: more reordering (vocab-parallel loss, sharded matmuls; measured 1.3e-5)
# under TP a token near a tie between two experts may route the other way: the load-balancing loss moves by
# a count (measured 6e-5 relative, TP 2 x EP 2); the LM loss and grad norm hold REL_TP_PP
REL_AUX_TP = 2e-4


def convert(src: Path, dst: Path, *flags: str, to_hf: bool = False) -> Path:
    """The converter program (`python -m ascendfactory.engine.convert`), hf -> mg or mg -> hf."""
    kinds = ["--load-model-type", "mg", "--save-model-type", "hf"] if to_hf else ["--params-dtype", "fp32"]
    cmd = [
        sys.executable,
        "-m",
        "ascendfactory.engine.convert",
        "--load-dir",
        str(src),
        "--save-dir",
        str(dst),
    ]
    proc = subprocess.run([*cmd, *kinds, *flags], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return dst


def log_fields(stdout: str) -> dict[int, dict[str, float]]:
    """iteration -> the log line's lm loss, load_balancing_loss and grad norm."""
    from ascendfactory.engine.train.logline import parse_log_line

    out = {}
    for line in stdout.splitlines():
        if "elapsed time per iteration (ms):" in line:
            f = parse_log_line(line)
            keys = ("lm loss", "load_balancing_loss", "grad norm")
            out[int(f["iteration"].split("/")[0])] = {k: float(f[k]) for k in keys if k in f}
    return out


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    from ascendfactory.engine.demo import make_demo_model

    root = tmp_path_factory.mktemp("moe")
    hf = make_demo_model(root / "hf", family="qwen3_moe")
    data = T.make_pretrain_data(root / "pt", vocab=900)
    mg = {ep: convert(hf, root / f"mg_ep{ep}", "--target-expert-parallel-size", str(ep)) for ep in (1, 2)}
    return root, hf, data, mg


def flags(hf: Path, data: str, load: Path, *extra: str, iters: int = 3) -> list[str]:
    return [
        "--tokenizer-name-or-path", str(hf), "--data-path", data, "--seq-length", "32",
        "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", str(iters), "--lr", "5e-3",
        "--log-interval", "1", "--split", "100,0,0", "--seed", "7", "--moe-aux-loss-coeff", "0.01",
        "--moe-token-dispatcher-type", "alltoall", "--load", str(load), "--finetune", *extra,
    ]  # fmt: skip


def train(nproc: int, argv: list[str]) -> dict[int, dict[str, float]]:
    proc = T.torchrun(nproc, argv, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return log_fields(proc.stdout)


def assert_same_training(
    got: dict, ref: dict, keys=("lm loss", "load_balancing_loss", "grad norm"), rel: float = REL
) -> None:
    assert sorted(got) == sorted(ref)
    for it in ref:
        for k in keys:
            assert got[it][k] == pytest.approx(ref[it][k], rel=rel), (it, k)


def test_expert_parallel_2_trains_as_expert_parallel_1_and_resumes_exactly(qwen, tmp_path):
    root, hf, data, mg = qwen
    ep2 = ["--expert-model-parallel-size", "2", "--moe-grouped-gemm"]
    ref = train(2, flags(hf, data, mg[1], "--save", str(tmp_path / "ep1")))
    got = train(2, flags(hf, data, mg[2], *ep2, "--save", str(tmp_path / "ep2")))
    assert all(0.5 < v["load_balancing_loss"] < 2.0 for v in ref.values())  # E x sum f_e P_e: about 1
    assert_same_training(got, ref)
    shards = sorted(p.name for p in (tmp_path / "ep2" / "iter_0000003").iterdir())
    assert shards == ["mp_rank_00_000", "mp_rank_00_001"]
    one = torch.load(tmp_path / "ep2/iter_0000003/mp_rank_00_001/model_optim_rng.pt", weights_only=False)
    assert one["args"].expert_model_parallel_size == 2 and one["args"].moe_grouped_gemm
    assert {k for k in one["model"] if ".experts." in k} == {  # Megatron's GroupedMLP layout
        f"decoder.layers.{n}.mlp.experts.weight{i}" for n in (0, 1) for i in (1, 2)
    }

    # a resume is exact: stop after iteration 2, continue to 3
    half = flags(hf, data, mg[2], *ep2, "--save", str(tmp_path / "half"), "--exit-interval", "2")
    train(2, half)
    again = flags(hf, data, tmp_path / "half", *ep2, "--save", str(tmp_path / "half"))
    resumed = train(2, [a for a in again if a != "--finetune"])  # iteration, optimizer, RNG, data position
    assert sorted(resumed) == [3] and resumed[3] == got[3]
    for shard in shards:
        a, b = (torch.load(tmp_path / n / "iter_0000003" / shard / "model_optim_rng.pt", weights_only=False)
                for n in ("ep2", "half"))  # fmt: skip
        assert a["model"].keys() == b["model"].keys()
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])

    # back to HF through the converter: the same weights, and transformers runs them
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    back = {
        n: convert(tmp_path / n, tmp_path / f"{n}_hf", "--hf-cfg-dir", str(hf), to_hf=True)
        for n in ("ep1", "ep2")
    }
    a, b = (load_file(str(back[n] / "model.safetensors")) for n in ("ep1", "ep2"))
    start = load_file(str(hf / "model.safetensors"))
    assert a.keys() == b.keys() == start.keys()
    # the two runs' weight updates agree to 0.1% (Adam turns last-bit gradient differences of near-zero
    # gradients into visible ones, so the updates, not single elements, are compared)
    worst = max(float((a[k] - b[k]).norm() / ((a[k] - start[k]).norm() + 1e-12)) for k in a)
    assert worst < 1e-3, worst
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ep2_hf")
    ids = torch.randint(0, 900, (1, 16), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(model(ids, labels=ids).loss)


@pytest.mark.slow
def test_bf16_expert_parallel_2_trains_as_expert_parallel_1(qwen):
    """--bf16 (16-bit weights, fp32 main gradients in the mixed-precision optimizer's buffer): the routed
    experts' main gradients are reduced over the data-modulo-expert group and their squares summed over EP,
    as the fp32 path does. Reducing them over the whole DP group instead mixes two ranks' different experts
    (the first grad norm moves by far more than bf16 rounding)."""
    root, hf, data, mg = qwen
    ref = train(2, flags(hf, data, mg[1], "--bf16"))
    got = train(2, flags(hf, data, mg[2], "--bf16", "--expert-model-parallel-size", "2"))
    # bf16: the experts' matmuls run on differently grouped tokens (measured within 3e-3)
    assert_same_training(got, ref, ("lm loss", "grad norm"), rel=1e-2)


ALL = ("lm loss", "load_balancing_loss", "grad norm")
# The logged load-balancing loss is the last rank's micro-batches' (Megatron's): compared where the last
# rank's data-parallel rank sees the micro-batches the reference's (DP 2) does
LAYOUTS = {
    "tp2-sp": (2, ["--target-tensor-parallel-size", "2"], ["--tensor-model-parallel-size", "2",
               "--sequence-parallel"], ("lm loss", "grad norm")),
    "pp2": (2, ["--target-pipeline-parallel-size", "2"], ["--pipeline-model-parallel-size", "2"],
            ("lm loss", "grad norm")),
    "tp2-ep2": (4, ["--target-tensor-parallel-size", "2", "--target-expert-parallel-size", "2"],
                ["--tensor-model-parallel-size", "2", "--sequence-parallel",
                 "--expert-model-parallel-size", "2"], ALL),
    "pp2-ep2": (4, ["--target-pipeline-parallel-size", "2", "--target-expert-parallel-size", "2"],
                ["--pipeline-model-parallel-size", "2", "--expert-model-parallel-size", "2"], ALL),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_tp_and_pp_with_and_without_ep_match(qwen, tmp_path, layout):
    root, hf, data, mg = qwen
    nproc, mg_flags, extra, keys = LAYOUTS[layout]
    ref = train(2, flags(hf, data, mg[1]))
    got = train(nproc, flags(hf, data, convert(hf, tmp_path / "mg", *mg_flags), *extra))
    assert_same_training(got, ref, [k for k in keys if k != "load_balancing_loss"], rel=REL_TP_PP)
    if "load_balancing_loss" in keys:
        assert_same_training(got, ref, ["load_balancing_loss"], rel=REL_AUX_TP)


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    from ascendfactory.engine.demo import make_demo_model

    root = tmp_path_factory.mktemp("deepseek")
    hf = make_demo_model(root / "hf", family="deepseek_v2_lite")
    return root, hf, T.make_pretrain_data(root / "pt", vocab=900)


DEEPSEEK_ROUTING = ["--moe-router-load-balancing-type", "none", "--moe-router-pre-softmax", "--seq-aux"]


@pytest.mark.slow
def test_deepseek_v2_lite_expert_and_pipeline_parallel(deepseek, tmp_path):
    root, hf, data = deepseek
    mg1 = convert(hf, tmp_path / "mg1")
    ref = train(2, flags(hf, data, mg1, *DEEPSEEK_ROUTING))
    assert all(0.3 < v["load_balancing_loss"] < 1.5 for v in ref.values())  # 2 of 3 layers MoE
    mg2 = convert(hf, tmp_path / "mg2", "--target-expert-parallel-size", "2")
    assert_same_training(
        train(2, flags(hf, data, mg2, *DEEPSEEK_ROUTING, "--expert-model-parallel-size", "2")), ref
    )
    pp = convert(hf, tmp_path / "pp", "--target-pipeline-parallel-size", "2", "--num-layer-list", "2,1")
    got = train(2, flags(hf, data, pp, *DEEPSEEK_ROUTING, "--pipeline-model-parallel-size", "2",
                         "--num-layer-list", "2,1"))  # fmt: skip
    assert_same_training(got, ref, ("lm loss", "grad norm"), rel=REL_TP_PP)
