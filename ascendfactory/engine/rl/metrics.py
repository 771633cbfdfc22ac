"""One iteration's metrics, gathered over the data-parallel ranks: MindSpeed-RL's line and the RL phase
metrics of docs/sources.md.

Sums and counts are all-reduced (means over every sample), maxima and minima with MAX, phase times with
MAX (MindSpeed-RL takes the latest end minus the earliest start over its workers). The resharding
timings are 0: the rollout samples from the training weights, there is nothing to reshard.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

import torch

from ascendfactory.engine.rl import logline as rl_log


class Spans:
    """Wall-clock (start, end) of each named phase of an iteration."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}

    @contextmanager
    def __call__(self, name: str):
        start = time.time()
        try:
            yield
        finally:
            self.spans[name] = (start, time.time())

    def seconds(self, name: str) -> float:
        start, end = self.spans[name]
        return end - start


class IterationMetrics:
    def __init__(
        self,
        trainer: Any,
        prompts: list[list[int]],
        responses: list[list[int]],
        scores: list[float],
        per_verifier: dict[str, list[float]],
        actor: dict[str, float],
    ) -> None:
        self.trainer = trainer
        resp = torch.tensor([len(r) for r in responses], dtype=torch.float64)
        prompt = torch.tensor([len(p) for p in prompts], dtype=torch.float64)
        score = torch.tensor(scores, dtype=torch.float64)
        names = sorted(per_verifier)
        self.names, self.actor_keys = names, sorted(actor)
        sums = [score.sum(), resp.sum(), prompt.sum(), torch.tensor(float(len(scores)))]
        sums += [torch.tensor(sum(per_verifier[k]), dtype=torch.float64) for k in names]
        sums += [torch.tensor(actor[k], dtype=torch.float64) for k in self.actor_keys]
        device = trainer.env.device  # NCCL / HCCL reduce device tensors only (HCCL: no float64)
        self.dtype = torch.float64 if device.type == "cpu" else torch.float32
        self.sums = trainer.all_reduce(torch.stack(sums).to(device, self.dtype)).cpu().to(torch.float64)
        maxes = [score.max(), resp.max(), prompt.max(), -score.min(), -resp.min(), -prompt.min()]
        self.maxes = torch.stack(maxes).to(torch.float64)
        self.line: dict[str, float] = {}
        self.phases: dict[str, float] = {}
        self.system_tps = 0.0

    def finish(self, spans: Spans, phases: dict[str, float], wall_s: float) -> None:
        tr = self.trainer
        timing = {f"timing/{k}": spans.seconds(k) for k in spans.spans}
        timing["timing/all"] = wall_s
        keys = sorted(timing)
        both = torch.cat([self.maxes, torch.tensor([timing[k] for k in keys], dtype=torch.float64)])
        both = tr.all_reduce(both.to(tr.env.device, self.dtype), op=torch.distributed.ReduceOp.MAX).cpu()
        timing = dict(zip(keys, both[6:].tolist()))
        mx = both[:6].tolist()
        s = self.sums.tolist()
        count = s[3]
        dp = tr.dims.dp
        data = {
            "grpo/score/mean": s[0] / count,
            "grpo/score/max": mx[0],
            "grpo/score/min": -mx[3],
            "response_length/mean": s[1] / count,
            "response_length/max": mx[1],
            "response_length/min": -mx[4],
            "prompt_length/mean": s[2] / count,
            "prompt_length/max": mx[2],
            "prompt_length/min": -mx[5],
        }
        trainer_metrics = {k: v for k, v in timing.items()}
        trainer_metrics["timing/resharding_to_infer"] = 0.0
        trainer_metrics["timing/resharding_to_train"] = 0.0
        trainer_metrics.update(rl_log.non_overlap_timings(spans.spans))
        for i, k in enumerate(self.names):
            trainer_metrics[k] = s[4 + i] / count
        for i, k in enumerate(self.actor_keys):  # each rank's mean over its micro-batches
            trainer_metrics[k] = s[4 + len(self.names) + i] / dp
        use_max = bool(tr.rl["log_max_throughput"])
        common = dict(gbs=tr.gbs, n=tr.n, world_size=tr.env.world_size, use_max=use_max)
        data["e2e_tps"] = rl_log.tps(data, seconds=timing["timing/all"], **common)
        data["update_tps"] = rl_log.tps(data, seconds=timing["timing/update"], **common)
        data["vllm_tps"] = rl_log.tps(data, seconds=timing["timing/rollout"], **common)
        self.line = rl_log.order_metrics(trainer_metrics, data)
        self.phases = phases
        self.system_tps = (s[1] + s[2]) / timing["timing/all"] if timing["timing/all"] > 0 else 0.0
