"""What a run prints and writes: training_log lines parsed back, memory and checkpoint lines,
TensorBoard events
read back with tensorboard's EventAccumulator, monitor_config metrics, SFT loss masking, error messages."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ascendfactory.engine.train.logline import parse_log_line
from tests.support import training as T

pytestmark = pytest.mark.integration

LINE = re.compile(
    r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): \d+\.\d \| throughput per GPU \(TFLOP/s/GPU\): \d+\.\d \| "
    r"learning rate: \d\.\d{6}E[+-]\d\d \| global batch size: +(\d+) \| lm loss: \d\.\d{6}E[+-]\d\d \| "
    r"loss scale: 1\.0 \| grad norm: \d+\.\d{3} \| number of skipped iterations: +0 \| "
    r"number of nan iterations: +0 \|$"
)
MONITOR_YAML = """\
seed: 0
monitor_config:
  monitor_on: true
  dump_path: {dump}
  target: ['layers\\.0\\.']
  step_interval: 2
  local_loss_format: ['log', 'tensorboard']
  local_norm_format: tensorboard
  device_local_norm_format: log
  optimizer_state_format: tensorboard
  weight_state_format: log
  throughput_baseline: 100
tensorboard:
  tensorboard_dir: {tb}
  tensorboard_queue_size: 5
  log_loss_scale_to_tensorboard: true
  log_timers_to_tensorboard: true
"""


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("logs")
    T.make_tiny_model(root / "hf", family="qwen3", num_hidden_layers=2)
    T.hf_to_megatron(root / "hf", root / "mg")
    return root, T.make_pretrain_data(root / "data" / "pt"), T.make_sft_data(root / "data" / "sft")


def _flags(root, data, *extra, iters=4):
    return [
        "--tokenizer-name-or-path",
        str(root / "hf"),
        "--load",
        str(root / "mg"),
        "--finetune",
        "--data-path",
        data,
        "--seq-length",
        "32",
        "--micro-batch-size",
        "2",
        "--global-batch-size",
        "4",
        "--train-iters",
        str(iters),
        "--lr",
        "1e-3",
        "--split",
        "100,0,0",
        *extra,
    ]


@pytest.fixture(scope="module")
def monitored(assets):
    root, data, _ = assets
    cfg = root / "exp.yaml"
    cfg.write_text(MONITOR_YAML.format(dump=root / "dump", tb=root / "tb"))
    proc = T.torchrun(
        1,
        _flags(
            root,
            data,
            "--log-interval",
            "2",
            "--log-throughput",
            "--save",
            str(root / "out"),
            "--save-interval",
            "2",
            "--af-monitor-config",
            str(cfg),
            "--use-flash-attn",
            "--overlap-grad-reduce",
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, proc.stdout


def test_log_lines_exact_format_and_parse_back(monitored):
    root, out = monitored
    lines = [x for x in out.splitlines() if "elapsed time per iteration" in x]
    assert len(lines) == 2
    for line, it in zip(lines, (2, 4)):
        m = LINE.match(line)
        assert m, line
        assert (int(m[1]), int(m[2]), int(m[3]), int(m[4])) == (it, 4, 4 * it, 4)
        fields = parse_log_line(line)
        assert float(fields["elapsed time per iteration (ms)"]) > 0
        assert float(fields["throughput per GPU (TFLOP/s/GPU)"]) >= 0
    memory = [x for x in out.splitlines() if "memory (MB)" in x]
    assert len(memory) == 1 and memory[0].startswith(
        "[Rank 0] (after 2 iterations) memory (MB) | allocated: "
    )
    assert f" loading checkpoint from {root / 'mg'} at iteration 1" in out
    assert f"saving checkpoint at iteration       2 to {root / 'out'} in torch format" in out
    assert f"  successfully saved checkpoint from iteration       4 to {root / 'out'}" in out
    info = [x for x in out.splitlines() if x.startswith("INFO: performance flags")]
    assert info == [
        "INFO: performance flags accepted and ignored by the embedded torch backend: --use-flash-attn "
        "--overlap-grad-reduce"
    ]
    assert "time/train_step/total:" in out and "time/checkpoint/total:" in out and "system/tps:" in out


def test_tensorboard_events_read_back(monitored):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, _ = monitored
    acc = EventAccumulator(str(root / "tb" / "rank_0"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    main = ["learning-rate", "batch-size", "loss", "loss-scale", "grad-norm", "iteration-time", "throughput"]
    assert set(main) | {f"{t}-vs-samples" for t in main} <= scalars
    assert {"model-flops-throughput-per-npu", "B-samples-per-day"} <= scalars
    assert "model-flops-throughput-per-npu-vs-samples" not in scalars
    assert [e.step for e in acc.Scalars("loss")] == [2, 4] and [
        e.step for e in acc.Scalars("loss-vs-samples")
    ] == [8, 16]
    assert acc.Scalars("batch-size")[0].value == 4
    for phase in ("train_step", "checkpoint"):
        assert {
            f"time/{phase}/total",
            f"time/{phase}/execute",
            f"memory/cpu/{phase}/start/rss",
            f"memory/cpu/{phase}/end/vms",
        } <= scalars
    assert {"system/tps", "system/samples", "local_loss", "throughput_linearity"} <= scalars
    norms = {t for t in scalars if t.startswith("local_norm/")}
    assert norms and all(".layers.0." in t for t in norms)
    assert any(t.startswith("adam_m_norm/model.layers.0.") for t in scalars)
    assert any(t.startswith("adam_v_norm/") for t in scalars)
    assert not any(t.startswith("weight_norm/") for t in scalars)  # weight_state_format: log only
    texts = set(acc.Tags()["tensors"])  # add_text is stored as a text-plugin tensor
    assert {"seed/text_summary", "lr/text_summary", "micro_batch_size/text_summary"} <= texts
    assert {"monitor_config/text_summary", "tensorboard/text_summary"} <= texts  # the config file's entries


def test_monitor_log_and_dump(monitored):
    root, out = monitored
    state = [x for x in out.splitlines() if x.startswith("[Rank 0] iteration")]
    assert len(state) == 2  # step_interval 2 over 4 iterations
    assert (
        "local_loss:" in state[0]
        and "device_local_norm:" in state[0]
        and "weight_norm/model.layers.0." in state[0]
    )
    assert "local_norm/" not in state[0]  # tensorboard only
    records = [json.loads(x) for x in (root / "dump" / "rank_0" / "monitor.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [2, 4] and "local_loss" in records[0]


def test_sft_trains_on_response_tokens(assets):
    root, _, sft = assets
    proc = T.torchrun(
        1,
        _flags(
            root,
            sft,
            "--stage",
            "sft",
            "--is-instruction-dataset",
            "--prompt-type",
            "qwen",
            "--log-interval",
            "1",
            iters=2,
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = T.losses_from_log(proc.stdout)
    assert sorted(losses) == [1, 2] and all(0 < v < 20 for v in losses.values())


def _direct(*argv):
    return subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.train", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_architecture_mismatch_is_one_clear_error(assets):
    root, data, _ = assets
    proc = _direct(
        *_flags(
            root,
            data,
            "--num-layers",
            "3",
            "--hidden-size",
            "64",
            "--swiglu",
            "--untie-embeddings-and-output-weights",
            "--num-attention-heads",
            "4",
            "--group-query-attention",
            "--num-query-groups",
            "2",
        )
    )
    assert proc.returncode == 2
    assert "--num-layers: 3 but config.json has num_hidden_layers = 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_refused_flags_exit_2(assets):
    root, data, _ = assets
    proc = _direct(*_flags(root, data, "--context-parallel-size", "2", "--lora-r", "8"))
    assert proc.returncode == 2
    assert "context parallelism (2) is not supported" in proc.stderr and "--lora-r" in proc.stderr
