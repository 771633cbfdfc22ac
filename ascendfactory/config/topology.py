"""Fill the topology the experiment leaves unset from the cluster platform (`config.platforms`), and say
where each value came from.

Precedence (stated in `config.platforms`): command line > experiment file > platform > defaults. An
experiment *file* that pins what must differ per node, or contradicts the platform, is refused rather than
obeyed on every node alike: under a 2-node Slurm job, a file saying `NODE_RANK: 0` would make both nodes
rank 0. The command line is the user speaking for this one node and always wins.

Worked example, a 2-node Slurm job, the file setting only `MASTER_PORT: 29517`, the command line nothing:
NNODES=2 from SLURM_STEP_NUM_NODES, NODE_RANK=0/1 from SLURM_NODEID, MASTER_ADDR=the first host of
SLURM_STEP_NODELIST, MASTER_PORT=29517 from the file, NPUS_PER_NODE from SLURM_GPUS_ON_NODE (or the machine).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pydantic import ValidationError

from ascendfactory.config.load import LoadedExperiment
from ascendfactory.config.platforms import TOPOLOGY_KEYS, Detected, detect
from ascendfactory.config.schema import EnvConfig
from ascendfactory.errors import ConfigError, Problem

LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")
DEFAULT = "default"


def with_platform(loaded: LoadedExperiment, environ: Mapping[str, str]) -> LoadedExperiment:
    """`loaded` with the platform's values in the env keys the experiment leaves unset, and
    `topology` saying where each topology value came from."""
    given = loaded.tree.get("env")
    env_tree = given if isinstance(given, dict) else {}
    explicit = {k for k in TOPOLOGY_KEYS if env_tree.get(k) is not None}
    detected = detect(environ, given=explicit)
    sources = {
        k: loaded.source_of(f"env.{k}")
        if k in explicit
        else (detected.sources[k] if detected and k in detected.values else DEFAULT)
        for k in TOPOLOGY_KEYS
    }
    if detected is None:
        _check_rank(loaded.config.env.NODE_RANK, loaded.config.env.NNODES, sources, loaded.source)
        return dataclasses.replace(loaded, topology=sources)
    from_file = {k for k in explicit if sources[k] != "command line"}
    problems = _contradictions(loaded, detected, explicit, from_file)
    if "NODE_RANK" not in explicit:
        problems += detected.rank_problem
    if problems:
        raise ConfigError(problems)
    update = {k: v for k, v in detected.values.items() if k not in explicit}
    try:
        env = EnvConfig.model_validate({**loaded.config.env.model_dump(), **update})
    except ValidationError as e:
        shown = ", ".join(f"{k} from {sources[k]}" for k in TOPOLOGY_KEYS if sources[k] != DEFAULT)
        message = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ConfigError(Problem("env", f"{message} ({shown})", source=loaded.source)) from None
    _check_rank(env.NODE_RANK, env.NNODES, sources, loaded.source)
    config = loaded.config.model_copy(update={"env": env})
    platform_keys = {f"env.{k}": sources[k] for k in update}
    return dataclasses.replace(
        loaded, config=config, topology=sources, platform=detected.platform, platform_sources=platform_keys
    )


def _check_rank(rank: int, nnodes: int, sources: dict[str, str], file: str) -> None:
    if rank >= nnodes:
        raise ConfigError(
            Problem(
                "env.NODE_RANK",
                f"NODE_RANK ({rank}, from {sources['NODE_RANK']}) must be < NNODES ({nnodes}, from "
                f"{sources['NNODES']})",
                fix=f"set --env.NNODES as well (ranks are 0..NNODES-1), or a NODE_RANK in 0..{nnodes - 1}",
                source="command line" if sources["NODE_RANK"] == "command line" else file,
            )
        )


def _contradictions(
    loaded: LoadedExperiment, d: Detected, explicit: set[str], from_file: set[str]
) -> list[Problem]:
    nnodes = d.values.get("NNODES")
    if not isinstance(nnodes, int):
        return []
    env = loaded.config.env
    fix = (
        f"remove env.NNODES, env.NODE_RANK and env.MASTER_ADDR from {loaded.source} so that {d.platform} "
        "supplies them (or give them on the command line, per node)"
    )
    problems = []
    if "NNODES" in from_file and env.NNODES != nnodes:
        problems.append(
            Problem(
                "env.NNODES",
                f"is {env.NNODES}, but {d.platform} runs this command on {nnodes} nodes "
                f"({d.sources['NNODES']})",
                fix,
                loaded.source,
            )
        )
    if nnodes > 1 and "NODE_RANK" in from_file:
        problems.append(
            Problem(
                "env.NODE_RANK",
                f"is pinned to {env.NODE_RANK} in the file every one of the {nnodes} nodes reads "
                f"({d.sources['NNODES']}): they would all claim that rank",
                fix,
                loaded.source,
            )
        )
    if nnodes > 1 and "MASTER_ADDR" in from_file and env.MASTER_ADDR in LOOPBACK:
        problems.append(
            Problem(
                "env.MASTER_ADDR",
                f"is {env.MASTER_ADDR}, which the other {nnodes - 1} node(s) cannot reach",
                fix,
                loaded.source,
            )
        )
    return problems
