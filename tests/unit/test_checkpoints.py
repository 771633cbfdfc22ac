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


# -- torch_dist: what Megatron-LM core_v0.12.1 (MindSpeed-LLM 26.1.0's default without --ckpt-format torch)
# writes into iter_N/: dist_checkpointing/serialization.py `save` writes common.pt (save_common), then the
# torch DCP shards (__<rank>_<n>.distcp) and their .metadata, and metadata.json (core.py save_config:
# json.dump(asdict(CheckpointingConfig))) last, after every shard.
DIST_CONFIG = (
    '{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", '
    '"common_backend_version": 1}'
)


def _dist_iter(root: Path, it: int, *, ranks: int = 2, finished: bool = True) -> Path:
    d = root / f"iter_{it:07d}"
    d.mkdir(parents=True)
    (d / "common.pt").write_bytes(b"common")
    for r in range(ranks):
        (d / f"__{r}_0.distcp").write_bytes(b"shard")
    if finished:
        (d / ".metadata").write_bytes(b"dcp")
        (d / "metadata.json").write_text(DIST_CONFIG)
    return d


def test_torch_dist_iterations_are_complete_once_metadata_json_is_written(tmp_path):
    _dist_iter(tmp_path, 10)
    _dist_iter(tmp_path, 20, finished=False)  # shards written, metadata.json not yet: still being saved
    _iter(tmp_path, 5)  # a torch-layout iteration beside them (a run that changed --ckpt-format)
    assert ck.iteration_dirs(str(tmp_path)) == [5, 10]
    assert ck.checkpoint_format(str(tmp_path / "iter_0000010")) == "torch_dist"
    assert ck.checkpoint_format(str(tmp_path / "iter_0000005")) == "torch"
    assert ck.checkpoint_format(str(tmp_path / "iter_0000020")) is None


def test_torch_dcp_iterations_count_by_their_metadata(tmp_path):
    d = tmp_path / "iter_0000004"
    d.mkdir()
    (d / "__0_0.distcp").write_bytes(b"shard")
    (d / ".metadata").write_bytes(b"dcp")
    assert ck.checkpoint_format(str(d)) == "torch_dcp" and ck.iteration_dirs(str(tmp_path)) == [4]


def test_resume_repair_and_retention_read_torch_dist_checkpoints(tmp_path):
    for it in (10, 20, 30):
        _dist_iter(tmp_path, it)
    _dist_iter(tmp_path, 40, finished=False)
    ck.write_tracker(tmp_path, 40)  # a crash between the tracker and metadata.json cannot happen in
    state, repaired = ck.repair_tracker(str(tmp_path))  # Megatron, but a hand-edited tracker can
    assert state.resumable and state.tracker == 30 and "rewrote it to 30" in str(repaired)
    removed = ck.apply_retention(str(tmp_path), 2)
    assert [Path(p).name for p in removed] == ["iter_0000010"]
    assert ck.iteration_dirs(str(tmp_path)) == [20, 30]
    assert (tmp_path / "iter_0000040").is_dir()  # newer than the tracker: never deleted
