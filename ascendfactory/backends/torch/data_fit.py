"""The data-fit check of the embedded backend's SFT experiments (`check_data_fit`, default true).

Before the train step, the sft samples are held against `seq-length` (`ascendfactory.engine.data.fit`):

- data already preprocessed (`training.data-path` / `processed_data_dir`): counted while planning, so
  `--dry-run` shows it; a warning in the plan, or a configuration error when most samples would train on
  nothing;
- data preprocessed by this run: a `data-fit` CHECK step after `preprocess` runs the same count on its
  output (exit 2 with the same message when it refuses). With `--pack`, the preprocess program itself
  counts the samples longer than `--seq-length` that packing leaves out (`--on-unfit-data`).

`check_data_fit: false` keeps the warning and never refuses.
"""

from __future__ import annotations

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.megatron.run import MegatronRun
from ascendfactory.backends.megatron.skeleton import process
from ascendfactory.plan import Plan, Role, Step

KEY = "backend_config.training.seq-length"
NOT_SFT_HANDLERS = ("R1AlpacaStyleInstructionHandler", "Math17kAlpacaStyleInstructionHandler")


def _applies(run: MegatronRun) -> tuple[int, str] | None:
    """(the seq-length the trainer will parse, the data prefix) to check, or None when the check does not
    apply."""
    seq = run.launch.seq_length if run.launch else None
    if not run.data_is_instruction or not isinstance(run.data_path, str) or seq is None:
        return None
    if run.handler in NOT_SFT_HANDLERS or seq < 1:
        return None
    return seq, run.data_path


def add_data_fit(ctx: PlanContext, run: MegatronRun, plan: Plan) -> None:
    """A plan-time count (data given) or a `data-fit` CHECK step after `preprocess`; ConfigError: refused."""
    found = _applies(run)
    if found is None:
        return
    seq, data_path = found
    enforce = ctx.config.check_data_fit
    pre = plan.step("preprocess")
    if pre is not None and not pre.skipped:
        argv = [ctx.python, "-m", "ascendfactory.engine.data.fit", "--data-path", data_path]
        argv += ["--seq-length", str(seq), "--on-unfit", "fail" if enforce else "warn", "--key", KEY]
        check = Step(
            name="data-fit",
            role=Role.CHECK,
            launch=process(argv),
            inputs=list(pre.outputs),
            only_node0=pre.only_node0,
            notes=[f"sft answers against seq-length {seq} (check_data_fit: {str(enforce).lower()})"],
        )
        plan.steps.insert(plan.steps.index(pre) + 1, check)
        return
    _count_now(ctx, data_path, seq, plan, enforce=enforce)


def _count_now(ctx: PlanContext, prefix: str, seq: int, plan: Plan, *, enforce: bool) -> None:
    from ascendfactory.engine.data import fit
    from ascendfactory.engine.data.indexed import exists

    if not exists(prefix + fit.LABELS_SUFFIX):
        return  # a missing input is reported by the path checks
    report = fit.check(prefix, seq)
    if report.fits:
        return
    if report.refuse and enforce:
        from ascendfactory.errors import ConfigError

        raise ConfigError(
            [
                ctx.problem(
                    KEY,
                    f"the data does not fit: {report.describe(what='seq-length')}",
                    fix=f"seq-length: {report.keep_95} (or shorter prompts); check_data_fit: false trains "
                    "anyway (micro-batches without answer tokens have a NaN loss)",
                )
            ]
        )
    plan.warnings.append(f"{KEY}: {report.describe(what='seq-length')}")
