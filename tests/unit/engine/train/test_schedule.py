"""LR schedule: Megatron OptimizerParamScheduler arithmetic (steps in samples, warm-up `<=`, decay, floor)."""

import math
from types import SimpleNamespace

import pytest

from ascendfactory.engine.train.schedule import LRSchedule


def _args(**kw):
    base = dict(
        lr=1e-3,
        min_lr=1e-4,
        lr_decay_style="cosine",
        lr_decay_iters=None,
        train_iters=10,
        lr_warmup_fraction=None,
        lr_warmup_iters=0,
        lr_warmup_init=0.0,
    )
    return SimpleNamespace(**{**base, **kw})


class _Opt:
    param_groups = [{"lr": 0.0}, {"lr": 0.0}]


def _lrs(sched, n, gbs):
    opt = _Opt()
    out = [sched.apply(opt)]
    for _ in range(n):
        out.append(sched.step(opt, gbs))
    assert opt.param_groups[0]["lr"] == opt.param_groups[1]["lr"] == out[-1]
    return out


def test_warmup_is_linear_from_init_and_inclusive():
    s = LRSchedule.from_args(_args(lr_warmup_iters=2), global_batch_size=4)
    assert (s.warmup_steps, s.decay_steps) == (8, 40)
    lrs = _lrs(s, 2, 4)
    assert lrs == pytest.approx([0.0, 5e-4, 1e-3])


def test_cosine_reaches_min_lr_and_stays_there():
    s = LRSchedule.from_args(_args(lr_warmup_iters=1), global_batch_size=2)
    lrs = _lrs(s, 12, 2)
    ratio = (4 - 2) / (20 - 2)
    assert lrs[2] == pytest.approx(1e-4 + 0.5 * (math.cos(math.pi * ratio) + 1) * 9e-4)
    assert lrs[10] == pytest.approx(1e-4) and lrs[12] == pytest.approx(1e-4)


def test_linear_and_constant():
    lin = _lrs(LRSchedule.from_args(_args(lr_decay_style="linear"), global_batch_size=1), 10, 1)
    assert lin[5] == pytest.approx(1e-4 + 0.5 * 9e-4)
    const = _lrs(LRSchedule.from_args(_args(lr_decay_style="constant", lr_warmup_iters=2), 1), 10, 1)
    assert const[1] == pytest.approx(5e-4) and set(const[2:]) == {1e-3}


def test_warmup_fraction_and_decay_iters():
    s = LRSchedule.from_args(_args(lr_warmup_fraction=0.1, lr_decay_iters=20), global_batch_size=8)
    assert (s.warmup_steps, s.decay_steps) == (16, 160)


def test_state_round_trip():
    s = LRSchedule.from_args(_args(), global_batch_size=4)
    _lrs(s, 3, 4)
    t = LRSchedule.from_args(_args(), global_batch_size=4)
    t.load_state_dict(s.state_dict())
    assert t.lr() == s.lr() and t.num_steps == 12
