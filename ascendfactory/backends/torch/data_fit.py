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
from ascendfactory.backends.common.megatron.read import MegatronRun
from ascendfactory.backends.common.megatron.skeleton import process
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
        argv += [f"--{k}" if k == "stops-on-nan" else f"--{k}={v}" for k, v in _context(run).items() if v]
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
    _count_now(ctx, run, seq, plan, enforce=enforce)


def _context(run: MegatronRun) -> dict[str, int]:
    """What the data-fit program is told besides the data: the model's positions (its suggestion stays
    within them) and, with the trainer's NaN check on, the run's micro-batches (the odds of a NaN stop)."""
    args = run.launch
    if args is None:
        return {"max-positions": run.arch.max_pos}
    max_pos = args.number("max-position-embeddings") or run.arch.max_pos
    out = {"max-positions": max_pos}
    mbs, gbs, iters = args.micro_batch_size, args.global_batch_size(run.dp), args.number("train-iters")
    if not args.on("no-check-for-nan-in-loss-and-grad") and iters:
        out.update({"micro-batch-size": mbs, "micro-batches": iters * gbs // mbs, "stops-on-nan": 1})
    return out


def _count_now(ctx: PlanContext, run: MegatronRun, seq: int, plan: Plan, *, enforce: bool) -> None:
    from ascendfactory.engine.data import fit
    from ascendfactory.engine.data.indexed import exists

    prefix = run.data_path
    if not isinstance(prefix, str) or not exists(prefix + fit.LABELS_SUFFIX):
        return  # a missing input is reported by the path checks
    told = _context(run)
    report = fit.check(prefix, seq, told["max-positions"] or None)
    if report.fits:
        return
    if report.refuse and enforce:
        from ascendfactory.errors import ConfigError

        raise ConfigError(
            [
                ctx.problem(
                    KEY,
                    f"the data does not fit: {report.describe(what='seq-length')}",
                    fix=report.fix("seq-length"),
                )
            ]
        )
    odds = ""
    if told.get("stops-on-nan"):
        odds = fit.odds_sentence(
            report, micro_batch_size=told["micro-batch-size"], micro_batches=told["micro-batches"]
        )
    plan.warnings.append(f"{KEY}: {report.describe(what='seq-length')}{odds}")
