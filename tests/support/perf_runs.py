"""Finished-run folders of several backends, in the layout and log formats each writes (the embedded /
MindSpeed-LLM run log, LLaMA-Factory's trainer_log.jsonl, verl's console metrics line), for the tests and
the benchmark of `ascendfactory-cli performance`. Each run's throughput is `tokens_per_s` per device."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ITERATION = (
    " [2026-11-27 10:00:{sec:02d}] iteration {i:8d}/{n:8d} | consumed samples: {samples:12d} | "
    "elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.000000E-04 | global batch size: {gbs:5d} | "
    "lm loss: {loss:.6E} | "
    "loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
MEMORY = (
    "[Rank {rank}] (after 2 iterations) memory (MB) | allocated: {mb:.1f} | max allocated: {peak:.1f} | "
    "reserved: {peak:.1f} | max reserved: {peak:.1f}"
)


def _exp(out: Path, backend: str, model: str, exp: str, seq: int, devices: int, device: str | None) -> None:
    cfg = {
        "backend": backend,
        "af_model_name": model,
        "exp_name": exp,
        "af_output_dir": str(out),
        "env": {"NNODES": 1, "NPUS_PER_NODE": devices},
        "memory_check": {"device": device},
        "backend_config": {
            "training": {"seq-length" if backend in ("torch", "mindspeed-llm") else "cutoff_len": seq}
        },
    }
    if backend == "llamafactory":
        cfg["backend_config"]["training"] = {"cutoff_len": seq}
    if backend == "verl":
        cfg["backend_config"] = {"data": {"max_prompt_length": seq // 2, "max_response_length": seq // 2}}
    (out / "exp-config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")


def megatron_run(
    out: Path,
    *,
    tokens_per_s: float,
    model: str = "qwen2.5-0.5b",
    exp: str = "pt-2k",
    backend: str = "torch",
    seq: int = 2048,
    gbs: int = 8,
    devices: int = 1,
    device: str = "h200",
    iterations: int = 20,
    peak_mb: float = 50000.0,
    predicted_step_s: float | None = None,
    predicted_in_range: bool = True,
) -> Path:
    """A Megatron-format run: every iteration at GBS x seq / (devices x tokens_per_s) seconds."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    _exp(out, backend, model, exp, seq, devices, device)
    ms = gbs * seq / (devices * tokens_per_s) * 1000
    lines = [
        ITERATION.format(sec=i % 60, i=i, n=iterations, samples=i * gbs, ms=ms, gbs=gbs, loss=5.0 - i * 0.1)
        for i in range(1, iterations + 1)
    ]
    lines.insert(2, MEMORY.format(rank=devices - 1, mb=peak_mb * 0.8, peak=peak_mb))
    last = devices - 1
    (out / "logs" / f"{model}-{exp}-20261127_100000-run_log-N1-{last}.txt").write_text(
        "\n".join(lines) + "\n"
    )
    if predicted_step_s is not None:
        summary = {
            "output_dir": str(out),
            "predicted": {
                "step_s": predicted_step_s,
                "tokens_per_s_per_device": gbs * seq / predicted_step_s / devices,
                "device": device,
                "calibration_error": 0.1,
                "in_range": predicted_in_range,
                "calibrated_hidden": [64, 896],
                "workload": {
                    "layers": 24,
                    "hidden": 896,
                    "ffn": 4864,
                    "heads": 14,
                    "kv_heads": 2,
                    "kv_channels": 64,
                    "vocab": 151936,
                    "seq": seq,
                },
            },
        }
        (out / ".af").mkdir(exist_ok=True)
        (out / ".af" / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return out


def llamafactory_run(
    out: Path,
    *,
    tokens_per_s: float,
    model: str = "qwen2.5-0.5b",
    exp: str = "lora-2k",
    seq: int = 2048,
    devices: int = 1,
    device: str = "h200",
    steps: int = 20,
) -> Path:
    """trainer_log.jsonl: one record per step, total_tokens growing at tokens_per_s x devices per second."""
    out.mkdir(parents=True, exist_ok=True)
    _exp(out, "llamafactory", model, exp, seq, devices, device)
    rows = []
    for step in range(1, steps + 1):
        seconds = step * 2
        rows.append(
            {
                "current_steps": step,
                "total_steps": steps,
                "loss": 2.0 - step * 0.01,
                "lr": 1e-4,
                "epoch": step / steps,
                "percentage": 100 * step / steps,
                "elapsed_time": f"0:{seconds // 60:02d}:{seconds % 60:02d}",
                "remaining_time": "0:00:10",
                "total_tokens": int(seconds * tokens_per_s * devices),
            }
        )
    (out / "trainer_log.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return out


def verl_run(
    out: Path,
    *,
    tokens_per_s: float,
    model: str = "qwen2.5-0.5b",
    exp: str = "grpo",
    device: str = "h200",
    steps: int = 12,
) -> Path:
    """verl's console metrics lines (`step:N - key:value - ...`) with perf/throughput per device."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    _exp(out, "verl", model, exp, 1024, 1, device)
    lines = [
        f"(TaskRunner pid=1) step:{s} - actor/pg_loss:0.01 - critic/score/mean:{0.1 * s:.2f} - "
        f"perf/time_per_step:{4.0:.2f} - perf/throughput:{tokens_per_s:.2f} - response_length/mean:100.0"
        for s in range(1, steps + 1)
    ]
    (out / "logs" / f"verl_grpo-{model}-20261127_100000-run_log-N1-WS1.txt").write_text(
        "\n".join(lines) + "\n"
    )
    return out
