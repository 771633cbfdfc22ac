"""What the MindSpeed-MM training loads (`--load`, `--no-load-optim`, `--no-load-rng`), in one rule.

1. `train_auto_resume: true` and `{af_output_dir}/saved_checkpoints` holds a complete checkpoint: resume from
   it (`--load saved_checkpoints`, the iteration continues). The example saves no optimizer / RNG state
   (`--no-save-optim --no-save-rng`): as long as the training keeps those, they are not loaded either (the
   optimizer restarts), with a warning.
2. Otherwise `ckpt_load_type`: 0 = no `--load`; 1 (default) = the converted weights
   (`convert_ckpt_hf2mg.cfg.mm_dir`, or `user_converted_ckpt_path`) with `--no-load-optim --no-load-rng`, as
   MindSpeed-MM's scripts load them (a `release` checkpoint starts at iteration 0, no `--finetune`);
   2 = `user_converted_ckpt_path` with optimizer and RNG (a checkpoint saved without `--no-save-*`).
3. `backend_config.training.load` replaces the path chosen above; `no-load-optim` / `no-load-rng` set in
   `training` win over the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.megatron.read import LoadDecision, MegatronRun, load_by_rule
from ascendfactory.errors import Problem

if TYPE_CHECKING:
    from ascendfactory.backends.mindspeed_mm.read import MMRun

WEIGHTS_ONLY = {"no-load-optim": True, "no-load-rng": True}


def decide_load(ctx: PlanContext, mm: MMRun, run: MegatronRun, problems: list[Problem]) -> LoadDecision:
    cfg = ctx.config
    user = mm.user_training
    explicit = user.get("load")
    saves_optim = (
        not mm.flags.get("no-save-optim") if "no-save-optim" not in user else not user["no-save-optim"]
    )
    saves_rng = not mm.flags.get("no-save-rng") if "no-save-rng" not in user else not user["no-save-rng"]
    converted = (mm.hf2mg or {}).get("cfg.mm_dir") or mm.layout.converted_weights(mm.tp, mm.pp)
    decision = load_by_rule(
        ctx,
        saved=mm.layout.saved_checkpoints,
        explicit=explicit,
        problems=problems,
        resume_flags={"no-load-optim": not saves_optim, "no-load-rng": not saves_rng},
        weights_only=LoadDecision(
            load=explicit or cfg.user_converted_ckpt_path or converted,
            flags=dict(WEIGHTS_ONLY),
            reason="ckpt_load_type 1: weights only (--no-load-optim --no-load-rng, as MindSpeed-MM's "
            "scripts)",
        ),
    )
    if decision.resume_iteration is not None and not (saves_optim and saves_rng):
        mm.warnings.append(
            "train_auto_resume: the checkpoints hold no "
            + " / ".join(n for n, kept in (("optimizer", saves_optim), ("RNG", saves_rng)) if not kept)
            + " state (--no-save-optim / --no-save-rng, as in MindSpeed-MM's example): a resume restarts "
            "it; set backend_config.training.no-save-optim / no-save-rng: false to save it"
        )
    return decision
