"""Checkpoint layout helpers: folder names, tracker, PP split and its errors."""

from __future__ import annotations

import pytest

from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.errors import ConfigError


def test_checkpoint_dir_names(tmp_path):
    assert mio.checkpoint_dir(tmp_path, 1, 3, 0, 1) == tmp_path / "iter_0000001" / "mp_rank_03"
    assert mio.checkpoint_dir(tmp_path, 250, 0, 2, 4) == tmp_path / "iter_0000250" / "mp_rank_00_002"


def test_tracker_round_trip_and_errors(tmp_path):
    with pytest.raises(ConfigError, match="latest_checkpointed_iteration.txt is missing"):
        mio.read_tracker(tmp_path)
    mio.write_tracker(tmp_path, 7)
    assert (tmp_path / mio.TRACKER).read_text() == "7" and mio.read_tracker(tmp_path) == 7
    (tmp_path / mio.TRACKER).write_text("release")
    with pytest.raises(ConfigError, match="'release'"):
        mio.read_tracker(tmp_path)


def test_layers_per_stage():
    assert mio.layers_per_stage(8, 2, None) == [4, 4]
    assert mio.layers_per_stage(8, 2, "3,5") == [3, 5]
    assert mio.layers_per_stage(8, 2, [5, 3]) == [5, 3]
    assert mio.layer_offsets([3, 5]) == [0, 3]


@pytest.mark.parametrize(
    ("pp", "lst", "text"),
    [
        (3, None, r"use PP in \[1, 2, 4, 8\]"),
        (2, "3,3", r"sum \(6\)"),
        (2, "8", "1 entries"),
        (2, "8,0", "at least one layer"),
        (2, "a,b", "comma-separated"),
    ],
)
def test_layers_per_stage_errors(pp, lst, text):
    with pytest.raises(ConfigError, match=text):
        mio.layers_per_stage(8, pp, lst)


def test_discover_layout(tmp_path):
    for tp in range(2):
        for pp in range(3):
            d = mio.checkpoint_dir(tmp_path, 5, tp, pp, 3)
            d.mkdir(parents=True)
            (d / mio.SHARD_FILE).write_bytes(b"")
    assert mio.discover_layout(tmp_path, 5) == (2, 3)
    (mio.checkpoint_dir(tmp_path, 5, 1, 1, 3) / mio.SHARD_FILE).unlink()
    with pytest.raises(ConfigError, match="incomplete checkpoint"):
        mio.discover_layout(tmp_path, 5)
