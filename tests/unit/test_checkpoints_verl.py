"""The `verl` checkpoint scheme: complete steps, tracker repair, retention (global_step_N + tracker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascendfactory.checkpoints import get_scheme
from ascendfactory.checkpoints import verl as scheme


def fsdp_role(path: Path, world: int = 2, *, shards: int | None = None) -> None:
    path.mkdir(parents=True)
    (path / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    for r in range(world if shards is None else shards):
        (path / f"model_world_size_{world}_rank_{r}.pt").write_bytes(b"x")
    (path / "huggingface").mkdir()


def step(root: Path, n: int, *, complete: bool = True, critic: bool = False, megatron: bool = False) -> Path:
    d = root / f"global_step_{n}"
    if megatron:
        (d / "actor" / "model" / "dist_ckpt").mkdir(parents=True)
        (d / "actor" / "ckpt_contents.json").write_text("{}")
    else:
        fsdp_role(d / "actor", shards=None if complete else 1)
    if critic:
        fsdp_role(d / "critic")
    (d / "data.pt").write_bytes(b"d")
    return d


def test_a_step_is_complete_when_every_shard_and_data_pt_are_there(tmp_path):
    assert scheme.step_complete(str(step(tmp_path, 1)))
    assert scheme.step_complete(str(step(tmp_path, 2, megatron=True)))
    assert not scheme.step_complete(str(step(tmp_path, 3, complete=False)))  # rank 1's shard missing
    no_data = step(tmp_path, 4)
    (no_data / "data.pt").unlink()  # verl writes data.pt after the roles, the tracker after data.pt
    assert not scheme.step_complete(str(no_data))
    half_critic = step(tmp_path, 5)
    (half_critic / "critic").mkdir()
    assert not scheme.step_complete(str(half_critic))
    assert scheme.step_complete(str(step(tmp_path, 6, critic=True)))
    assert [n for n, _, done in scheme.steps(str(tmp_path)) if done] == [1, 2, 6]


@pytest.mark.parametrize(
    "tracker,expected_text,start",
    [
        (None, "missing", "global_step_2"),  # no tracker: verl would start over
        ("3", "names step 3, which has no complete global_step_3/", "global_step_2"),
        ("9", "names step 9", "global_step_2"),  # no such directory
        ("1", None, "global_step_1"),  # a complete step chosen by the user is kept
    ],
)
def test_repair_points_the_tracker_at_the_newest_complete_step(tmp_path, tracker, expected_text, start):
    step(tmp_path, 1)
    step(tmp_path, 2)
    step(tmp_path, 3, complete=False)  # crashed while saving
    if tracker is not None:
        (tmp_path / scheme.TRACKER).write_text(tracker)
    resume, repaired = get_scheme("verl").repair_tracker(str(tmp_path))
    assert resume == start
    if expected_text is None:
        assert repaired is None and (tmp_path / scheme.TRACKER).read_text() == tracker
    else:
        assert expected_text in repaired and (tmp_path / scheme.TRACKER).read_text() == "2"
    assert scheme.newest_complete(str(tmp_path)).endswith(start)


def test_nothing_to_repair_in_an_empty_root(tmp_path):
    assert get_scheme("verl").repair_tracker(str(tmp_path)) == (None, None)
    assert not (tmp_path / scheme.TRACKER).exists()


def test_retention_keeps_the_newest_and_never_the_tracker_or_newer(tmp_path):
    for n in (2, 4, 6, 8):
        step(tmp_path, n)
    step(tmp_path, 10, complete=False)  # being written right now
    (tmp_path / scheme.TRACKER).write_text("6")  # step 8 is newer than the tracker: may be being written
    removed = get_scheme("verl").apply_retention(str(tmp_path), 2)
    assert [Path(p).name for p in removed] == ["global_step_2"]
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == [
        "global_step_10",
        "global_step_4",
        "global_step_6",
        "global_step_8",
    ]


def test_retention_removes_what_verls_own_rotation_left_behind(tmp_path):
    for n in (1, 2, 3):
        step(tmp_path, n)
    for n in (1, 2):  # max_actor_ckpt_to_keep deleted global_step_N/actor, leaving data.pt
        import shutil

        shutil.rmtree(tmp_path / f"global_step_{n}" / "actor")
    (tmp_path / scheme.TRACKER).write_text("3")
    removed = scheme.apply_retention(str(tmp_path), 1)
    assert sorted(Path(p).name for p in removed) == ["global_step_1", "global_step_2"]
    assert [p.name for p in tmp_path.glob("global_step_*")] == ["global_step_3"]


def test_retention_does_nothing_without_a_valid_tracker_or_a_limit(tmp_path):
    for n in (1, 2, 3):
        step(tmp_path, n)
    assert scheme.apply_retention(str(tmp_path), 1) == []  # which one is in use cannot be told
    (tmp_path / scheme.TRACKER).write_text("3")
    assert scheme.apply_retention(str(tmp_path), 0) == []  # 0 keeps all
    assert len(list(tmp_path.glob("global_step_*"))) == 3


def test_the_merge_program_picks_the_trackers_complete_actor_else_the_newest(tmp_path, capsys):
    from ascendfactory.backends.verl.programs import verl_merge

    assert verl_merge.main([str(tmp_path), "--backend", "fsdp"]) == 2  # nothing to merge: a clear exit
    assert "no complete actor checkpoint" in capsys.readouterr().out
    step(tmp_path, 2)
    step(tmp_path, 4)
    step(tmp_path, 6, complete=False)
    (tmp_path / scheme.TRACKER).write_text("6")  # names a step whose actor is incomplete
    assert verl_merge.pick_step(str(tmp_path)) == 4
    (tmp_path / scheme.TRACKER).write_text("2")  # a complete step the tracker names wins
    assert verl_merge.pick_step(str(tmp_path)) == 2
    step(tmp_path, 8, megatron=True)
    (tmp_path / scheme.TRACKER).unlink()
    assert verl_merge.pick_step(str(tmp_path)) == 8
