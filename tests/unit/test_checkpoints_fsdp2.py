"""The `mindspeed_fsdp2` checkpoint scheme on folders laid out as MindSpeed-LLM 26.1.0's FSDP2 trainer writes
them: `checkpoints/global_step_N/` with `extra_state/extra_state_rank_R.pt` first, the
torch.distributed.checkpoint shards, `.metadata` last (save_only_model: no extra_state)."""

from __future__ import annotations

from pathlib import Path

from ascendfactory.checkpoints import fsdp2, get_scheme


def write_step(root: Path, step: int, *, ranks: int = 2, metadata: bool = True, extra: bool = True) -> Path:
    folder = root / f"global_step_{step}"
    folder.mkdir(parents=True)
    if extra:
        (folder / "extra_state").mkdir()
        for r in range(ranks):
            (folder / "extra_state" / f"extra_state_rank_{r}.pt").write_bytes(b"x")
    for r in range(ranks):
        (folder / f"__{r}_0.distcp").write_bytes(b"x")
    if metadata:
        (folder / ".metadata").write_bytes(b"x")
    return folder


def test_complete_needs_metadata_and_resuming_needs_extra_state(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    write_step(root, 10)
    write_step(root, 20, extra=False)
    write_step(root, 30, metadata=False)
    (root / "global_step_x").mkdir()
    assert [(n, done) for n, _, done in fsdp2.steps(str(root))] == [(10, True), (20, True), (30, False)]
    assert fsdp2.newest_resumable(str(root)) == (10, str(root / "global_step_10"))
    assert fsdp2.newest_resumable(str(tmp_path / "none")) is None


def test_the_scheme_names_the_resume_point_and_keeps_the_newest(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for step in (10, 20, 30):
        write_step(root, step)
    write_step(root, 40, metadata=False)  # being written: never removed
    scheme = get_scheme("mindspeed_fsdp2")
    assert scheme.repair_tracker(str(root)) == ("global_step_30", None)
    removed = scheme.apply_retention(str(root), 2)
    assert removed == [str(root / "global_step_10")]
    assert sorted(p.name for p in root.iterdir()) == ["global_step_20", "global_step_30", "global_step_40"]
    assert scheme.apply_retention(str(root), 0) == []
    assert fsdp2.root_of("/out") == "/out/checkpoints"
