"""The devices an experiment asks of a node, held against what the node has, before anything launches.

`env.NPUS_PER_NODE` (or the visibility variable that wins over it, `config.devices`) is the number of
training processes per node; with `accelerator: auto` each one takes a device. A node whose device files
show NPUs or GPUs, fewer than asked (after `ASCEND_RT_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`), cannot
start them: rank N would die in `set_device(N)` ("invalid device ordinal"). A real run is refused here, a
dry run warns (it may plan for another machine). A node without accelerators is held to nothing: its processes
run on CPU (backend torch) or its backend names what it needs. `accelerator: cpu` asks for CPU processes
whatever the node has: only backends whose programs train on CPU take it (`Backend.trains_on_cpu`).
"""

from __future__ import annotations

from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.config.devices import NodeAccelerators, node_accelerators
from ascendfactory.errors import Problem

KEY = "env.NPUS_PER_NODE"
ACCELERATOR_ENV = "AF_ACCELERATOR"  # `cpu`: the embedded trainers take no device (engine/train/parallel.py)
# A device mismatch the plan could not foresee, as a rank prints it: the embedded trainers' own line
# (engine/train/parallel.py) and CUDA's error; a restart cannot fix it, so auto-resume does not retry it.
UNRETRYABLE = ("devices visible to this process", "invalid device ordinal")


def device_problems(
    ctx: PlanContext, backend: Backend, *, node: NodeAccelerators | None = None
) -> tuple[list[Problem], list[Problem]]:
    """(problems of the experiment, problems of this node): the first refuse every plan, the second a
    real run only."""
    if ctx.config.accelerator == "cpu":
        if backend.trains_on_cpu:
            return [], []
        return [
            ctx.problem(
                "accelerator",
                f"cpu: backend {backend.name} trains on NPUs or GPUs only",
                fix="remove accelerator (auto), or use backend: torch for CPU processes",
            )
        ], []
    node = node_accelerators(ctx.environ) if node is None else node
    asked = ctx.devices.count
    if node.installed == 0 or asked <= node.visible:
        return [], []
    noun = node.noun + ("s" if node.visible != 1 else "")
    fixes = [f"set {KEY}: {node.visible}" if node.visible else f"make this node's {node.noun}s visible"]
    if backend.trains_on_cpu:
        fixes.append("or accelerator: cpu to train on CPU processes")
    if node.visible < node.installed:
        fixes.append(f"or list more of the node's {node.installed} {node.noun}s in its visibility variable")
    problem = Problem(
        key=KEY,
        message=f"asks {asked} devices per node ({ctx.devices.source}), but this node has {node.visible} "
        f"{noun} visible ({node.source}); local rank {node.visible} would find no device",
        fix=" ".join(fixes),
        source=ctx.loaded.source_of(KEY),
    )
    return [], [problem]
