"""The MindSpeed-LLM versions this backend plans for, as data, and which one an experiment targets.

Each `Release` names what differs between versions: the Megatron-LM and MindSpeed its install guide pins,
its argument lists (`keys/<kind>_<version>.txt`, generated from that version's sources by
`scripts/gen_mindspeed_args.py --version V`), the converter its example scripts run, the training flags
every example of that version passes (filled by the plan; the user's value wins), and its maintenance
status in MindSpeed-LLM's README.

The version an experiment targets, in order:

1. `backend_config.mindspeed_llm_version` when set (one of `RELEASES`);
2. else the MindSpeed-LLM checkout the run uses: the Megatron-LM copied into it
   (`megatron/core/package_info.py`: core 0.8 -> 2.1.0, core 0.12 -> 26.1.0); a checkout without
   `megatron/` by its converters (no `convert_ckpt_v2.py`: 2.1.0, the last release without it);
3. else (no checkout: a dry run) `DEFAULT`, the newest maintained release, with a warning saying so.

Releases between 2.1.0 and 26.1.0 (2.2.0, 2.3.0, 26.0.0) run Megatron core_v0.12.1 too; their checkouts
are planned with 26.1.0's data and a warning naming the difference (they lack `pretrain_deepseek4.py`, new
in 26.1.0). Adding a version: generate its lists, add a `Release` here, its rules' applicability
(`rules.py`), its golden files (`cfgs/golden/`) and its README row.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Release:
    version: str  # "2.1.0", "26.1.0"
    megatron: str  # the Megatron-LM tag its install guide checks out (its megatron/ is copied in)
    megatron_minor: int  # megatron/core/package_info.py MINOR of that tag
    mindspeed: str  # the MindSpeed ref its install guide checks out
    status: str  # MindSpeed-LLM README's maintenance table
    converter: str  # the converter its example scripts run (v1 convert_ckpt.py, v2 convert_ckpt_v2.py)
    # kind -> keys/ file: training, preprocess, convert_v1, convert_v2
    names: Mapping[str, str] = field(default_factory=dict)
    # Training flags every example script of this version passes, filled by the plan (a user value wins).
    plan_flags: Mapping[str, Any] = field(default_factory=dict)
    install_guide: str = ""  # the file its install plan follows

    @property
    def label(self) -> str:
        return f"MindSpeed-LLM {self.version} (Megatron-LM {self.megatron}, MindSpeed {self.mindspeed})"


RELEASES: dict[str, Release] = {
    r.version: r
    for r in (
        Release(
            version="2.1.0",
            megatron="core_r0.8.0",
            megatron_minor=8,
            mindspeed="2c085cc9",
            status="end of life since 2025-12-30",
            converter="v1",
            names={
                "training": "training_2.1.0.txt",
                "preprocess": "preprocess_2.1.0.txt",
                "convert_v1": "convert_v1_2.1.0.txt",
                "convert_v2": "convert_v2_26.1.0.txt",  # 2.1.0 ships no v2: 26.1.0's, the first complete one
            },
            install_guide="docs/pytorch/install_guide.md (branch 2.1.0)",
        ),
        Release(
            version="26.1.0",
            megatron="core_v0.12.1",
            megatron_minor=12,
            mindspeed="26.1.0_core_r0.12.1",
            status="maintained (the newest release)",
            converter="v2",
            names={
                "training": "training_26.1.0.txt",
                "preprocess": "preprocess_26.1.0.txt",
                "convert_v1": "convert_v1_26.1.0.txt",
                "convert_v2": "convert_v2_26.1.0.txt",
            },
            # Every examples/mcore/**/{pretrain,tune}_*.sh of v26.1.0 passes both (223 of 225 scripts pass
            # --ckpt-format torch): Megatron core_v0.12.1 saves torch_dist by default
            # (megatron/training/arguments.py `--ckpt-format`), while convert_ckpt_v2.py writes and reads
            # the torch layout (mp_rank_XX/model_optim_rng.pt; tasks/checkpoint/convert_mg2hf.py
            # get_pt_path_by_tpppep_rank). `--transformer-impl local`: Megatron's default is
            # transformer_engine, which an NPU has not.
            plan_flags={"ckpt-format": "torch", "transformer-impl": "local"},
            install_guide="docs/zh/pytorch/training/install_guide.md (tag v26.1.0)",
        ),
    )
}
VERSIONS = tuple(RELEASES)
DEFAULT = "26.1.0"  # the newest maintained release (MindSpeed-LLM README, 2026)
KEY = "backend_config.mindspeed_llm_version"
NEWEST_MARKER = "pretrain_deepseek4.py"  # new in 26.1.0: a core 0.12 checkout without it is 2.2.0..26.0.0


@dataclass(frozen=True)
class VersionChoice:
    release: Release
    reason: str
    guessed: bool = False  # no checkout and no explicit version: DEFAULT, with a warning
    note: str | None = None  # a checkout of a release between the shipped ones: planned as `release`

    @property
    def version(self) -> str:
        return self.release.version


def megatron_minor(directory: str) -> int | None:
    """MINOR of the megatron/ copied into a checkout (megatron/core/package_info.py), None when absent."""
    try:
        with open(os.path.join(directory, "megatron", "core", "package_info.py"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    found = re.search(r"^MINOR\s*=\s*(\d+)", text, flags=re.M)
    return int(found.group(1)) if found else None


def checkout_version(directory: str) -> tuple[Release, str, str | None]:
    """(release, why, note) for an existing checkout (rule 2 of the module docstring)."""
    minor = megatron_minor(directory)
    if minor is not None:
        fitting = [r for r in RELEASES.values() if r.megatron_minor == minor]
        if not fitting:
            nearest = min(RELEASES.values(), key=lambda r: abs(r.megatron_minor - minor))
            note: str | None = (
                f"{directory}/megatron is Megatron-LM core 0.{minor}, which no planned MindSpeed-LLM version "
                f"runs on: planned as {nearest.version} (Megatron-LM {nearest.megatron})"
            )
            return nearest, f"{directory}/megatron is core 0.{minor}", note
        release = fitting[-1]
        why = f"{directory}/megatron is Megatron-LM core 0.{minor} ({release.megatron})"
    else:
        has_v2 = os.path.isfile(os.path.join(directory, "convert_ckpt_v2.py"))
        release = RELEASES["26.1.0" if has_v2 else "2.1.0"]
        why = f"{directory} has {'' if has_v2 else 'no '}convert_ckpt_v2.py and no megatron/"
    note = None
    if release.version == "26.1.0" and not os.path.isfile(os.path.join(directory, NEWEST_MARKER)):
        note = (
            f"{directory} is a MindSpeed-LLM release before 26.1.0 on Megatron-LM core_v0.12.1 (2.2.0, "
            f"2.3.0 or 26.0.0: no {NEWEST_MARKER}); planned with 26.1.0's argument lists and rules, the "
            f"nearest shipped ones (set {KEY}: 26.1.0 to silence this, or install 26.1.0)"
        )
    return release, why, note


def choose_version(explicit: str | None, checkout: str | None) -> VersionChoice:
    """The release an experiment targets, by the module docstring's order. `explicit` must be valid (or
    None); `checkout`: an existing MindSpeed-LLM directory, or None."""
    if explicit:
        return VersionChoice(RELEASES[explicit], f"{KEY}: {explicit}")
    if checkout and os.path.isdir(checkout):
        release, why, note = checkout_version(checkout)
        return VersionChoice(release, f"{why}: MindSpeed-LLM {release.version}", note=note)
    return VersionChoice(
        RELEASES[DEFAULT],
        f"no MindSpeed-LLM checkout found: planning for MindSpeed-LLM {DEFAULT}, the newest maintained "
        f"release; set {KEY}: 2.1.0 for the 2.1.0 line",
        guessed=True,
    )


def saved_format(flags: Mapping[str, Any], release: Release) -> tuple[str, str]:
    """(the checkpoint format training saves with these flags, the flag that chose it).

    core_r0.8.0 (2.1.0): the torch layout unless `--use-dist-ckpt`, then `--dist-ckpt-format` (default
    torch_dist) (megatron/training/arguments.py core_r0.8.0). core_v0.12.1 (26.1.0): `--ckpt-format`,
    default torch_dist (`--use-dist-ckpt` is deprecated there and has no effect).
    """
    if release.megatron_minor < 12:
        if flags.get("use-dist-ckpt"):
            return str(flags.get("dist-ckpt-format") or "torch_dist"), "use-dist-ckpt"
        return "torch", "use-dist-ckpt"
    return str(flags.get("ckpt-format") or "torch_dist"), "ckpt-format"


def version_problem(value: Any) -> str | None:
    """Why `backend_config.mindspeed_llm_version` is not a planned version (None when it is, or unset)."""
    if value is None or (isinstance(value, str) and value in RELEASES):
        return None
    return f"{value!r} is not a MindSpeed-LLM version this backend plans for"


def version_fix() -> str:
    return (
        "use one of: "
        + ", ".join(f"{v} ({r.status})" for v, r in RELEASES.items())
        + "; or remove the key to follow the installed MindSpeed-LLM"
    )
