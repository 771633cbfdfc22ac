"""The live display: training stats parsed from the loss rank, plain and live modes."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ascendfactory.pipeline.progress import Progress
from ascendfactory.plan import LogNaming, LogSpec, Process, Role, Step, ThroughputSpec

ITER = (
    " [2026-01-22 10:00:00] iteration {it:8d}/     100 | consumed samples: {cs:12d} | elapsed time per "
    "iteration (ms): 500.0 | learning rate: 1.000000E-05 | global batch size:    16 | "
    "lm loss: {loss:.6E} |"
)


LOGS = LogSpec(
    format="megatron",
    naming=LogNaming(prefix="m-e"),
    loss_rank="last",
    throughput=ThroughputSpec("megatron", devices=4),
)
TRAIN = dict(name="train", role=Role.TRAIN, launch=Process(("x",)))


def _feed(progress: Progress, train: Step) -> None:
    progress.start([train])
    progress.step_started(train, loss_rank=3)
    progress.feed(3, "  seq_length ...................................... 2048")
    progress.feed(0, ITER.format(it=99, cs=1, loss=9.0))  # not the loss rank: ignored
    for it in (1, 2):
        progress.feed(3, ITER.format(it=it, cs=it * 16, loss=3.0 / it))


def test_stats_follow_the_loss_rank_only():
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    progress = Progress(console, LOGS, live=False)
    train = Step(**TRAIN)
    _feed(progress, train)
    s = progress.stats
    assert (s.iteration, s.total, s.seq_length) == (2, 100, 2048)
    assert s.loss == pytest.approx(1.5)
    assert s.tokens_per_s_per_device() == pytest.approx(16 * 2048 / (4 * 500.0) * 1000)
    assert s.eta_s() == pytest.approx(98 * 0.5)
    assert progress.stats.line() == "iteration 2/100 | loss 1.5000 | 16,384 tokens/s/p | ETA 0:00:49"
    printed = console.file.getvalue()
    assert "lm loss" not in printed  # raw lines stay in the logs
    assert (
        printed == "[ascendfactory] train: iteration 1/100 | loss 3.0000 | 16,384 tokens/s/p | ETA 0:00:49\n"
    )
    progress.close()


def test_plain_progress_lines_come_every_tenth_of_the_run():
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    progress = Progress(console, LOGS, live=False)
    train = Step(**TRAIN)
    progress.start([train])
    progress.step_started(train, loss_rank=3)
    for it in range(1, 101):
        progress.feed(3, ITER.format(it=it, cs=it * 16, loss=1.0))
    lines = console.file.getvalue().splitlines()
    assert [line.split("iteration ")[1].split(" ")[0] for line in lines] == [
        f"{n}/100" for n in (1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
    ]


def test_verbose_echoes_the_loss_rank_lines():
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    progress = Progress(console, LOGS, live=False, verbose=True)
    _feed(progress, Step(**TRAIN))
    printed = console.file.getvalue()
    assert (
        "lm loss" in printed
        and "iteration       99" not in printed
        and "[ascendfactory] train:" not in printed
    )


@pytest.mark.parametrize(
    "line, done",
    [
        ("hf->mg: stage 2/4 layers 0-3: 2 TP shards written (0.1s)", 0.5),
        ("Loading checkpoint shards:  45%|####5     | 9/20 [00:01<00:02]", 0.45),
        ("Converting: 12/48 [00:03<00:09, 4.0it/s]", 0.25),
        ("Processed 1000 documents (50.0 docs/s)", None),
    ],
)
def test_fractions_from_program_output(line, done):
    from ascendfactory.pipeline.progress import fraction

    assert fraction(line) == (pytest.approx(done) if done is not None else None)


def test_live_panel_renders_steps_and_stats():
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    progress = Progress(console, LOGS, live=True)
    train = Step(**TRAIN)
    _feed(progress, train)
    snap = Console(file=io.StringIO(), width=200)
    snap.print(progress.panel())
    assert "iteration 2/100 | loss 1.5000" in snap.file.getvalue()
    assert "running" in snap.file.getvalue() and "lm loss" not in snap.file.getvalue()
    progress.step_done(train, "done", "1.0s")
    progress.close()
    assert "done" in console.file.getvalue()


def test_a_line_without_a_loss_never_shows_the_older_one():
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    progress = Progress(console, LOGS, live=False)
    train = Step(**TRAIN)
    progress.start([train])
    progress.step_started(train, loss_rank=3)
    progress.feed(3, ITER.format(it=1, cs=16, loss=2.5))
    assert progress.stats.loss == pytest.approx(2.5)
    no_loss = ITER.format(it=2, cs=32, loss=1.0).replace("lm loss: 1.000000E+00 |", "")
    progress.feed(3, no_loss)
    assert progress.stats.iteration == 2 and progress.stats.loss is None
    assert "loss" not in progress.stats.line()
    progress.feed(3, ITER.format(it=3, cs=48, loss=1.0).replace("1.000000E+00", "nan"))
    assert "loss nan" in progress.stats.line()
    progress.close()


def test_a_checks_warning_lines_reach_the_console():
    console = Console(file=io.StringIO(), force_terminal=False, width=300)
    progress = Progress(console, LOGS, live=False)
    check = Step(name="data-fit", role=Role.CHECK, launch=Process(("x",)))
    progress.start([check])
    progress.step_started(check)
    progress.feed(None, "WARNING: 30 of 50 samples (60%) have every answer token at or past seq-length 64")
    progress.feed(None, "[lf-check] WARNING: 3 of 4 samples have their answer cut short")
    progress.feed(None, "WARNING:root:a library's own logging line")
    progress.feed(None, "data fits")
    printed = console.file.getvalue().splitlines()
    assert printed == [
        "[ascendfactory] data-fit: WARNING: 30 of 50 samples (60%) have every answer token at or past "
        "seq-length 64",
        "[ascendfactory] data-fit: [lf-check] WARNING: 3 of 4 samples have their answer cut short",
    ]
    progress.close()
