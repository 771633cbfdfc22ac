"""When a job will not fit: the cheapest fixes, each with its new estimate; and the layout advisor.

Fixes are tried in the order that costs least throughput first (recompute, then sharding the optimizer
state, then more model parallelism, then a smaller micro-batch); each is one change to the job, named by
the key the user edits (`MemoryTarget.keys`).

The advisor (`estimate --suggest`) searches Megatron layouts on the same devices (TP, PP, VPP, MBS,
recompute, distributed optimizer; CP, GBS and sequence length as given), keeps those that pass
`parallel.validate_layout` and fit, and ranks them by an estimated step time:

    compute  = FLOPs / (devices x peak x EFFICIENCY)   FLOPs = (6, or 8 with full recompute) x N x tokens
                                                 + (12, or 16 recomputing attention) x L x s x h x tokens
    bubble   = compute x (PP - 1) / (VPP x micro-batches)  (1F1B; interleaving divides it by VPP)
    tp_comm  = 4 all-reduces of s x b x h x 2 bytes per layer and micro-batch, 2(t-1)/t of it on the wire,
               at TP_BANDWIDTH (within a node)
    step     = compute + bubble + tp_comm               (DP gradient traffic is assumed overlapped)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ascendfactory.memory.hf import HFJob
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.report import MemoryEstimate
from ascendfactory.memory.rl import RLJob
from ascendfactory.memory.target import MemoryTarget, estimate_job
from ascendfactory.parallel import LayoutInput, validate_layout

if TYPE_CHECKING:
    from ascendfactory.memory.target import Job

EFFICIENCY = 0.45  # achieved / peak matmul throughput of a well-tuned dense run (MFU of published runs)
PEAK_FLOPS = 312e12  # 16-bit dense peak assumed when the device is unknown (A100; 910B: ~313 TFLOPS)
TP_BANDWIDTH = 150e9  # bytes/s of a TP all-reduce inside one node (HCCS / NVLink, effective)


@dataclass(frozen=True)
class Fix:
    change: str  # "backend_config.training.recompute-granularity: full"
    job: Job
    estimate: MemoryEstimate


def cheapest_fixes(target: MemoryTarget, device_memory: int | None, usable: int | None) -> list[Fix]:
    """Single changes in cost order, each with its estimate; the ones that fit first, at most five."""
    fixes = [
        Fix(change, job, estimate_job(job, device_memory))
        for change, job in _candidates(target)
        if job != target.job
    ]
    if usable is not None:
        fixes.sort(key=lambda f: f.estimate.peak > usable)  # stable: cost order kept within each group
    return fixes[:5]


def _candidates(target: MemoryTarget) -> Iterator[tuple[str, Job]]:
    job, keys = target.job, target.keys
    if isinstance(job, RLJob):
        yield from _rl_candidates(job, keys)
        for change, actor in _candidates(MemoryTarget(job.actor, keys, target.world_size)):
            yield change, job.with_(actor=actor)
    elif isinstance(job, MegatronJob):
        yield from _megatron_candidates(job, keys, target.world_size)
    else:
        yield from _hf_candidates(job, keys)


def _key(keys: dict[str, str], knob: str, value: object) -> str:
    v = str(value).lower() if isinstance(value, bool) else value
    return f"{keys.get(knob, knob)}: {v}"


def _megatron_candidates(job: MegatronJob, keys: dict[str, str], world: int) -> Iterator[tuple[str, Job]]:
    if job.recompute == "none":
        yield _key(keys, "recompute", "selective"), job.with_(recompute="selective")
    if job.recompute != "full":
        yield (
            _key(keys, "recompute", "full")
            + f" (with {keys.get('recompute_method', 'recompute-method')}: uniform, "
            f"{keys.get('recompute_num_layers', 'recompute-num-layers')}: 1)",
            job.with_(recompute="full", recompute_method="uniform", recompute_num_layers=1),
        )
    if not job.distributed_optimizer and job.dp * job.cp > 1:
        yield _key(keys, "distributed_optimizer", True), job.with_(distributed_optimizer=True)
    for knob, factor in (("tp", 2), ("pp", 2)):
        tp = job.tp * (factor if knob == "tp" else 1)
        pp = job.pp * (factor if knob == "pp" else 1)
        changed = _relayout(job, world, tp=tp, pp=pp, vpp=job.vpp, mbs=job.mbs)
        if changed is not None:
            yield _key(keys, knob, tp if knob == "tp" else pp), changed
    if job.mbs > 1:
        yield _key(keys, "mbs", job.mbs // 2), job.with_(mbs=job.mbs // 2)


def _hf_candidates(job: HFJob, keys: dict[str, str]) -> Iterator[tuple[str, Job]]:
    if not job.gradient_checkpointing:
        yield _key(keys, "gradient_checkpointing", True), job.with_(gradient_checkpointing=True)
    if job.fsdp:
        if not job.offload_optimizer:
            yield _key(keys, "offload_optimizer", True), job.with_(offload_optimizer=True)
        if not job.offload_param:
            yield _key(keys, "offload_param", True), job.with_(offload_param=True)
    elif job.devices > 1 and job.finetuning == "full":
        for stage in range((job.zero if job.zero is not None else -1) + 1, 4):
            if stage >= 1:
                ds = f"examples/deepspeed/ds_z{stage}_config.json (LLaMA-Factory's ZeRO-{stage})"
                yield _key(keys, "zero", ds), job.with_(zero=stage)
        if (job.zero or 0) >= 2 and not job.offload_optimizer:
            yield (
                _key(keys, "offload_optimizer", f"examples/deepspeed/ds_z{job.zero}_offload_config.json"),
                job.with_(offload_optimizer=True),
            )
    if job.batch > 1:
        yield _key(keys, "mbs", job.batch // 2), job.with_(batch=job.batch // 2)


def _rl_candidates(job: RLJob, keys: dict[str, str]) -> Iterator[tuple[str, Job]]:
    for knob in ("offload_optimizer", "offload_grad", "offload_param"):
        if not getattr(job, knob):
            yield _key(keys, f"offload_train_{knob.split('_')[1]}", True), job.with_(**{knob: True})
    if job.rollout == "vllm" and job.gpu_memory_utilization > 0.3:
        lower = round(job.gpu_memory_utilization - 0.1, 2)
        yield _key(keys, "gpu_memory_utilization", lower), job.with_(gpu_memory_utilization=lower)


def _relayout(job: MegatronJob, world: int, *, tp: int, pp: int, vpp: int, mbs: int) -> MegatronJob | None:
    """`job` on the same devices with new TP/PP/VPP/MBS (DP is the rest), or None if a rule refuses it."""
    mp = tp * pp * job.cp
    if mp > world or world % mp:
        return None
    dp = world // mp
    s = job.shape
    report = validate_layout(
        LayoutInput(
            world_size=world,
            tp=tp,
            pp=pp,
            cp=job.cp,
            mbs=mbs,
            gbs=job.gbs,
            num_layers=s.layers,
            heads=s.heads,
            kv_heads=s.kv_heads,
            seq_length=job.seq,
            max_position_embeddings=max(job.seq, 1),
            sequence_parallel=job.sequence_parallel and tp > 1,
        )
    )
    if report.problems or s.layers % pp:
        return None
    if vpp > 1 and (pp == 1 or s.layers % (pp * vpp) or (job.gbs // (mbs * dp)) % pp):
        return None
    return job.with_(
        tp=tp,
        pp=pp,
        dp=dp,
        vpp=vpp,
        mbs=mbs,
        num_layer_list=None,
        sequence_parallel=job.sequence_parallel and tp > 1,
    )


# -- the advisor ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Suggestion:
    job: MegatronJob
    estimate: MemoryEstimate
    step_s: float

    def describe(self) -> str:
        j = self.job
        parts = (
            [f"TP{j.tp}", f"PP{j.pp}"]
            + ([f"VPP{j.vpp}"] if j.vpp > 1 else [])
            + [f"DP{j.dp}", f"MBS {j.mbs}"]
        )
        parts.append(f"recompute {j.recompute}")
        parts.append("dist-opt" if j.distributed_optimizer else "no dist-opt")
        return " ".join(parts)


def step_time(job: MegatronJob, peak_flops: float = PEAK_FLOPS) -> float:
    s, world = job.shape, job.tp * job.pp * job.dp * job.cp
    tokens = job.gbs * job.seq
    n = s.layers * s.layer_params()
    factor = 8 if job.recompute == "full" else 6
    attention = (16 if job.recompute in ("full", "selective") else 12) * s.layers * job.seq * s.hidden
    flops = factor * n * tokens + attention * tokens + 6 * s.vocab * s.hidden * tokens
    compute = flops / (world * peak_flops * EFFICIENCY)
    bubble = compute * (job.pp - 1) / (job.vpp * job.micro_batches)
    per_layer = 4 * 2 * job.seq / job.cp * job.mbs * s.hidden * 2 * (job.tp - 1) / job.tp
    tp_comm = per_layer * (s.layers / job.pp) * job.micro_batches / TP_BANDWIDTH
    return compute + bubble + tp_comm


def suggest_layouts(
    target: MemoryTarget, usable: int | None, *, peak_flops: float = PEAK_FLOPS, limit: int = 10
) -> list[Suggestion]:
    job = target.job.actor if isinstance(target.job, RLJob) else target.job
    if not isinstance(job, MegatronJob):
        return []
    world = target.world_size
    found: list[Suggestion] = []
    seen: set[tuple] = set()
    for tp in _divisors(world):
        for pp in _divisors(world // tp):
            for vpp in (1, 2, 4):
                for mbs in _mbs_values(job):
                    base = _relayout(job, world, tp=tp, pp=pp, vpp=vpp, mbs=mbs)
                    if base is None:
                        continue
                    for recompute in ("none", "selective", "full"):
                        for dist in (False, True):
                            cand = base.with_(
                                recompute=recompute,
                                recompute_method="uniform",
                                recompute_num_layers=1,
                                distributed_optimizer=dist,
                            )
                            key = (tp, pp, vpp, mbs, recompute, dist)
                            if key in seen:
                                continue
                            seen.add(key)
                            est = estimate_job(cand)
                            if usable is not None and est.peak > usable:
                                continue
                            if recompute == "selective" and est.peak >= _peak(base, dist):
                                continue  # saves nothing here (flash attention keeps no softmax)
                            found.append(Suggestion(cand, est, step_time(cand, peak_flops)))
    found.sort(key=lambda s: (s.step_s, s.estimate.peak))
    return found[:limit]


def _peak(job: MegatronJob, dist: bool) -> float:
    return estimate_job(job.with_(distributed_optimizer=dist)).peak


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _mbs_values(job: MegatronJob) -> list[int]:
    values = sorted({1, 2, 4, job.mbs})
    return [v for v in values if v <= max(job.mbs, 4)]
