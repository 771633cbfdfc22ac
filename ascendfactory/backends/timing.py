"""The time to train, before anything queues: the step-time model (`ascendfactory.speed`) of the job the
memory estimate reads, on the run's device, into `plan.timing` (display and the run summary only).

The job is the backend's memory job (`Backend.memory_target(run).job`, the values the framework will
parse); a job that offers `workload(devices_per_node=)` (Megatron layouts: torch, mindspeed-llm,
mindspeed-mm's LLM, mindspeed-rl's actor) is timed, others say they have no time model yet. The device is
`cpu` for `accelerator: cpu` (one thread per process when a node runs several, as torchrun sets it, else
every core), else the one the memory check named (`memory_check.device` or the probe's), looked up in
`speed.devices`.
"""

from __future__ import annotations

import os
from typing import Any

from ascendfactory.config.load import LoadedExperiment
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.plan import Plan
from ascendfactory.speed.devices import device_names, device_speed
from ascendfactory.speed.model import predict

# The backends whose memory job is a Megatron layout (`memory.megatron.MegatronJob.workload`): the ones the
# time model covers (a test plans each and finds `plan.timing`).
TIMED_BACKENDS = ("torch", "mindspeed-llm", "mindspeed-mm", "mindspeed-rl")


def device_name(loaded: LoadedExperiment, plan: Plan) -> str | None:
    if loaded.config.accelerator == "cpu":
        return "cpu"
    named = (plan.memory or {}).get("device") or loaded.config.memory_check.device
    if not named:
        return None
    return str(named).lower().removeprefix("nvidia").strip().replace(" ", "-")


def attach_timing(
    plan: Plan, target: MemoryTarget | None, loaded: LoadedExperiment, *, per_node: int
) -> None:
    make = getattr(target.job, "workload", None) if target is not None else None
    if make is None:
        return
    workload = make(devices_per_node=per_node)
    name = device_name(loaded, plan)
    speed = device_speed(name)
    if speed is None:
        plan.timing = {
            "device": name,
            "note": (
                "device unknown: set memory_check.device to one of " + ", ".join(device_names())
                if not name
                else f"no speed profile for device '{name}' (known: {', '.join(device_names())})"
            ),
        }
        return
    if speed.name == "cpu":
        threads = 1 if per_node > 1 else (os.cpu_count() or 1)
        speed = speed.with_(threads_per_process=threads)
    prediction = predict(workload, speed)
    timing: dict[str, Any] = prediction.to_dict()
    timing["workload"] = workload.to_dict()
    timing["threads_per_process"] = speed.threads_per_process
    plan.timing = timing
