"""Megatron checkpoint directories: complete iterations, tracker repair, retention."""

from __future__ import annotations

from pathlib import Path

from ascendfactory.checkpoints import megatron as ck


def _iter(root: Path, it: int, *, complete: bool = True, suffix: str = "") -> Path:
    d = root / f"iter_{it:07d}{suffix}" / "mp_rank_00"
    d.mkdir(parents=True)
    if complete:
        (d / "model_optim_rng.pt").write_text(str(it))
    return d.parent


def test_only_complete_iteration_dirs_count(tmp_path):
    _iter(tmp_path, 10)
    _iter(tmp_path, 20)
    _iter(tmp_path, 30, suffix=".tmp")  # being written
    _iter(tmp_path, 40, complete=False)  # no shard file yet
    (tmp_path / "iter_bogus").mkdir()
    assert ck.iteration_dirs(str(tmp_path)) == [10, 20]
    assert ck.inspect(str(tmp_path)).newest == 20


def test_tracker_parsing(tmp_path):
    assert ck.read_tracker(str(tmp_path)) is None
    for text, want in (("20\n", 20), ("release", "release"), ("0", None), ("abc", None)):
        (tmp_path / ck.TRACKER).write_text(text)
        assert ck.read_tracker(str(tmp_path)) == want
    ck.write_tracker(str(tmp_path), 7)
    assert (tmp_path / ck.TRACKER).read_text() == "7"


def test_repair_missing_tracker_uses_newest_complete(tmp_path):
    _iter(tmp_path, 10)
    _iter(tmp_path, 20)
    state, what = ck.repair_tracker(str(tmp_path))
    assert state.resumable and state.tracker == 20
    assert "missing" in what and "iter_0000020" in what
    assert (tmp_path / ck.TRACKER).read_text() == "20"


def test_repair_tracker_pointing_at_missing_dir(tmp_path):
    _iter(tmp_path, 10)
    (tmp_path / ck.TRACKER).write_text("30")  # the save of 30 crashed before its dir was renamed
    state, what = ck.repair_tracker(str(tmp_path))
    assert state.tracker == 10 and "iteration 30" in what


def test_repair_leaves_a_valid_earlier_tracker_alone(tmp_path):
    _iter(tmp_path, 10)
    _iter(tmp_path, 20)
    # the user chose to resume from 10 (docs/sources.md#resume-and-fault-recovery)
    (tmp_path / ck.TRACKER).write_text("10")
    state, what = ck.repair_tracker(str(tmp_path))
    assert what is None and state.tracker == 10


def test_repair_without_checkpoints_changes_nothing(tmp_path):
    state, what = ck.repair_tracker(str(tmp_path))
    assert what is None and state.newest is None and not (tmp_path / ck.TRACKER).exists()


def test_retention_keeps_newest_and_never_the_tracker_or_newer(tmp_path):
    for it in (10, 20, 30, 40):
        _iter(tmp_path, it)
    (tmp_path / ck.TRACKER).write_text("30")  # 40 is complete on disk but its tracker write is pending
    removed = ck.apply_retention(str(tmp_path), 2)
    assert [Path(p).name for p in removed] == ["iter_0000010"]
    assert ck.iteration_dirs(str(tmp_path)) == [20, 30, 40]
    (tmp_path / ck.TRACKER).write_text("40")
    ck.apply_retention(str(tmp_path), 1)
    assert ck.iteration_dirs(str(tmp_path)) == [40]


def test_retention_spares_temp_dirs_and_needs_a_tracker(tmp_path):
    _iter(tmp_path, 10)
    _iter(tmp_path, 20)
    _iter(tmp_path, 30, suffix=".tmp")
    assert ck.apply_retention(str(tmp_path), 1) == []  # no tracker: cannot tell what is in use
    (tmp_path / ck.TRACKER).write_text("20")
    assert ck.apply_retention(str(tmp_path), 0) == []  # 0 keeps all
    ck.apply_retention(str(tmp_path), 1)
    assert ck.iteration_dirs(str(tmp_path)) == [20]
    assert (tmp_path / "iter_0000030.tmp").is_dir()
