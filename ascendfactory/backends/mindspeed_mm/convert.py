"""`mm-convert <Converter> hf_to_mm | mm_to_hf --cfg.*`: options of `convert_ckpt_*.cfg`, filled and checked.

mm-convert is the console script `checkpoint.convert_cli:main` (MindSpeed-MM's pyproject.toml); the plan runs
`<python> -m checkpoint.convert_cli ...` in the MindSpeed-MM directory, the same program whether or not the
console script is on PATH. jsonargparse reads `--cfg.<dotted.key> <value>`, each value as YAML.

Layer lists: hf_to_mm takes a list per virtual-pipeline chunk (`[[1,10,10,7]]`, VppParallelConfig), mm_to_hf
one flat list (`[1,10,10,7]`, ParallelConfig). A flat list given for hf_to_mm is wrapped, as AscendFactory's
documents write it flat; the lists, `tp_size` and the directories are filled from the training when unset, and
checked against it when set (mm-convert does not check this; a mismatch fails only when training loads).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.mindspeed_mm.checks import sourced
from ascendfactory.backends.mindspeed_mm.keys import ConvertOption, mm_convert, source_file
from ascendfactory.backends.mindspeed_mm.read import MMRun
from ascendfactory.backends.mindspeed_mm.rules import nearest
from ascendfactory.checkpoints.megatron import SHARD_FILE, tracker_text
from ascendfactory.errors import Problem

MODULE = "checkpoint.convert_cli"  # mm-convert = "checkpoint.convert_cli:main"
SECTION = {"hf_to_mm": "convert_ckpt_hf2mg", "mm_to_hf": "convert_ckpt_mg2hf"}
LISTS = ("llm_pp_layers", "vit_pp_layers")


def flatten(cfg: Mapping[str, Any], prefix: str = "cfg") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"cfg.a.b": 1}; lists and scalars are leaves."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        dotted = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, dotted))
        else:
            out[dotted] = value
    return out


def render(value: Any) -> str:
    """A value as jsonargparse reads it (YAML): lists compact, booleans lower-case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def argv(python: str, converter: str, subcommand: str, options: Mapping[str, Any]) -> list[str]:
    out = [python, "-m", MODULE, converter, subcommand]
    for key, value in options.items():
        if value is not None:
            out += [f"--{key}", render(value)]
    return out


# the cfg options that name directories (made absolute in the plan)
PATH_KEYS = ("cfg.mm_dir", "cfg.save_hf_dir", "cfg.hf_config.hf_dir", "cfg.llm_hf_config.hf_dir")


def without(cfg: Mapping[str, Any], dotted: str) -> dict[str, Any]:
    """A copy of a nested `cfg` mapping without the option `dotted` ("cfg.hf_config.hf_dir")."""
    first, _, rest = dotted.partition(".")[2].partition(".")
    out = dict(cfg)
    if not rest:
        out.pop(first, None)
    elif isinstance(out.get(first), Mapping):
        out[first] = without(out[first], f"cfg.{rest}")
    return out


CANONICAL = "cfg.common_model_config.enable_canonical_hf_struct"


def same_structure_problems(hf2mg: Mapping[str, Any], mg2hf: Mapping[str, Any] | None) -> list[Problem]:
    """hf_to_mm and mm_to_hf must agree on enable_canonical_hf_struct (master; the README: the HF layout
    without fused QKV / MLP): converting back with the other layout maps the weights by the wrong names."""
    if mg2hf is None or bool(hf2mg.get(CANONICAL)) == bool(mg2hf.get(CANONICAL)):
        return []
    return [
        Problem(
            f"backend_config.convert_ckpt_mg2hf.{CANONICAL}",
            f"is {bool(mg2hf.get(CANONICAL))}, but hf_to_mm converts with {bool(hf2mg.get(CANONICAL))}: the "
            "final conversion must read the layout the weights were converted to",
            fix=f"set {CANONICAL.split('.', 1)[1]} to the same value in convert_ckpt_hf2mg.cfg and "
            "convert_ckpt_mg2hf.cfg",
        )
    ]


def overwrite_problems(
    hf_dir: str, hf2mg: Mapping[str, Any], mg2hf: Mapping[str, Any] | None
) -> list[Problem]:
    """Neither conversion may write into the original HF directory (mm-convert would overwrite it)."""
    out = []
    for section, options, key in (
        ("convert_ckpt_hf2mg", hf2mg, "cfg.mm_dir"),
        ("convert_ckpt_mg2hf", mg2hf or {}, "cfg.save_hf_dir"),
    ):
        target = options.get(key)
        if isinstance(target, str) and os.path.abspath(target) == os.path.abspath(hf_dir):
            out.append(
                Problem(
                    f"backend_config.{section}.{key}",
                    f"is the HF model directory {hf_dir}: mm-convert would write into the original weights",
                    fix="use another directory (the default is in af_output_dir)",
                )
            )
    return out


def depth(value: Any) -> int:
    """0 for a scalar, 1 for a flat list, 2 for a list of lists."""
    return 1 + depth(value[0]) if isinstance(value, list) and value else (1 if isinstance(value, list) else 0)


def convert_options(
    *,
    subcommand: str,
    user: Mapping[str, Any],
    planned: Mapping[str, Any],
    training: Mapping[str, Any],
) -> tuple[dict[str, Any], list[Problem]]:
    """The `cfg.*` options: the planned ones, then the user's (flattened). `training` holds the training's
    lists and TP ({"cfg.parallel_config.llm_pp_layers": [...], ...}): user values must agree with it."""
    section = SECTION[subcommand]
    flat_user = flatten(user)
    problems: list[Problem] = []
    options = {**planned}
    for key, value in flat_user.items():
        name = key.split(".")[-1]
        where = f"backend_config.{section}.{key}"
        if name in LISTS and isinstance(value, list):
            want = training[key]
            nested = depth(value) == 2
            flat = [v for chunk in value for v in chunk] if nested else value
            if nested and len(value) > 1:
                problems.append(
                    Problem(
                        where,
                        f"has {len(value)} virtual-pipeline chunks; this backend plans no virtual pipeline",
                        fix=f"give one list: {want}",
                    )
                )
            elif flat != want:
                problems.append(
                    Problem(
                        where,
                        f"is {value}, but the training splits the layers as {want} "
                        "(backend_config.model pipeline_num_layers); mm-convert does not check this and the "
                        "training fails when it loads the checkpoint",
                        fix=f"remove it (the training's lists are used) or set it to {want}",
                    )
                )
            value = [flat] if subcommand == "hf_to_mm" else flat
        elif key == "cfg.parallel_config.tp_size" and value != training[key]:
            problems.append(
                Problem(
                    where,
                    f"is {value}, but the training runs with tensor-model-parallel-size {training[key]}; "
                    "mm-convert does not check this and the converted layout will not load",
                    fix=f"remove it (the training's TP is used) or set it to {training[key]}",
                )
            )
        options[key] = value
    return options, problems


def option_problems(
    generation: str, converter: str, subcommand: str, options: Mapping[str, Any], user_keys: set[str]
) -> list[Problem]:
    """Every option must be one mm-convert defines for the subcommand; every required one must be set."""
    section = SECTION[subcommand]
    known: dict[str, ConvertOption] | None = mm_convert(generation).get((converter, subcommand))
    if known is None:
        subs = sorted(s for c, s in mm_convert(generation) if c == converter)
        return [
            Problem(
                f"backend_config.{section}",
                f"mm-convert {converter} has no subcommand {subcommand} in MindSpeed-MM {generation}",
                fix=f"its subcommands: {', '.join(subs) or 'none (unknown converter)'}",
            )
        ]
    problems = []
    for key in options:
        if key not in known:
            origin = "your key" if key in user_keys else "a planned option"
            problems.append(
                Problem(
                    f"backend_config.{section}.{key}",
                    f"is not an option of mm-convert {converter} {subcommand} in MindSpeed-MM {generation} "
                    f"({origin}){nearest(key, frozenset(known))}",
                    fix=f"use an option listed in {source_file('mm_convert', generation)}, or remove it",
                )
            )
    for key, option in known.items():
        if option.required and options.get(key) is None:
            problems.append(
                Problem(
                    f"backend_config.{section}.{key}",
                    f"is required by mm-convert {converter} {subcommand}",
                    fix=f"set backend_config.{section}.{key}",
                )
            )
    return problems


def section_options(
    ctx: PlanContext, mm: MMRun, sections: dict[str, Any], subcommand: str, problems: list[Problem]
) -> dict[str, Any] | None:
    """The mm-convert options of hf_to_mm / mm_to_hf; None for a disabled mm_to_hf."""
    section = SECTION[subcommand]
    if subcommand == "mm_to_hf" and (
        ("convert_ckpt_mg2hf" in (ctx.config.backend_config or {}) and sections.get(section) is None)
        or not ctx.config.convert_mg2hf_at_last
    ):
        return None
    user = dict((sections.get(section) or {}).get("cfg") or {})
    flat_user = flatten(user)
    for key in PATH_KEYS:
        value = flat_user.get(key)
        if value is not None and not (isinstance(value, str) and value.strip()):
            problems += sourced(
                ctx,
                [
                    Problem(
                        f"backend_config.{section}.{key}",
                        f"{value!r} is not a path",
                        fix="give a directory path as text, or remove the key for the default",
                    )
                ],
            )
            del flat_user[key]
            user = without(user, key)
    pc = "cfg.parallel_config."
    if subcommand == "hf_to_mm":
        mm_dir = flat_user.get("cfg.mm_dir") or mm.layout.converted_weights(mm.tp, mm.pp)
        planned = {
            "cfg.mm_dir": mm_dir,
            "cfg.hf_config.hf_dir": mm.hf_dir,
            pc + "llm_pp_layers": [mm.llm_layers],
            pc + "vit_pp_layers": [mm.vit_layers],
            pc + "tp_size": mm.tp,
        }
    else:
        planned = {
            "cfg.save_hf_dir": ctx.config.hf_save_dir or mm.layout.mg2hf_dir,
            "cfg.mm_dir": mm.layout.saved_checkpoints,
            "cfg.hf_config.hf_dir": mm.hf_dir,
            pc + "llm_pp_layers": mm.llm_layers,
            pc + "vit_pp_layers": mm.vit_layers,
            pc + "tp_size": mm.tp,
        }
        given = flat_user.get("cfg.mm_dir")
        if given and os.path.abspath(str(given)) != mm.layout.saved_checkpoints:
            mm.warnings.append(
                f"backend_config.{section}.cfg.mm_dir is {given}: mm_to_hf converts that, not this run's "
                f"{mm.layout.saved_checkpoints}"
            )
    training = {
        pc + "llm_pp_layers": mm.llm_layers,
        pc + "vit_pp_layers": mm.vit_layers,
        pc + "tp_size": mm.tp,
    }
    options, found = convert_options(subcommand=subcommand, user=user, planned=planned, training=training)
    found += option_problems(mm.generation, mm.converter, subcommand, options, set(flat_user))
    problems += sourced(ctx, found)
    for key in PATH_KEYS:
        if isinstance(options.get(key), str):
            options[key] = os.path.abspath(os.path.expanduser(options[key]))
    return options


def converted_already(mm_dir: str, tp: int, pp: int) -> str | None:
    """Why hf_to_mm need not run: `mm_dir` holds a complete conversion for this TP x PP (tracker `release`,
    one `release/mp_rank_TT[_PPP]` per rank, as hf_to_mm writes them), e.g. weights shared by experiments."""
    if tracker_text(mm_dir) != "release":
        return None
    shards = [f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") for t in range(tp) for p in range(pp)]
    if all(os.path.isfile(os.path.join(mm_dir, "release", s, SHARD_FILE)) for s in shards):
        return f"{mm_dir} already holds the TP{tp} PP{pp} conversion (release, {len(shards)} shards)"
    return None
