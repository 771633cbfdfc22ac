"""`train --dry-run` over many experiments in one process: a folder, a glob, several files, an old-style file
named without its model and experiment; one verdict each, the overrides applied to each, one exit status."""

from __future__ import annotations

import json
import shutil

import yaml

from ascendfactory.cli.app import main
from tests.conftest import REPO

CFGS = REPO / "cfgs"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def folder(tmp_path, *, broken: bool = False):
    """Three new-style files and the old-style one (its 8 model/experiment pairs); optionally one refused."""
    for name in ("quickstart.yaml", "quickstart_grpo_sft.yaml", "quickstart_llamafactory.yaml"):
        shutil.copy(CFGS / name, tmp_path / name)
    shutil.copy(CFGS / "multi_model_cfgs.yaml", tmp_path / "multi_model_cfgs.yaml")
    if broken:
        data = yaml.safe_load((CFGS / "quickstart.yaml").read_text())
        data["backend_config"]["training"]["tensor-model-parallel-size"] = 3
        (tmp_path / "zz_broken.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "notes.txt").write_text("not an experiment")
    return tmp_path


def test_a_folder_gets_one_verdict_per_experiment(tmp_path, capsys):
    code, out, _ = run(capsys, "train", str(folder(tmp_path)), "--dry-run")
    assert code == 0, out
    verdicts = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")][:-1]
    assert verdicts == ["ok"] * 11  # 8 old-style pairs + 3 files; notes.txt is no experiment
    assert "multi_model_cfgs.yaml qwen2.5-7b full-4k" in out and "quickstart_llamafactory.yaml" in out
    assert out.splitlines()[-1] == "11 experiments: 11 ok, 0 refused, 0 failed"


def test_one_refused_experiment_names_its_problems_and_sets_the_exit_status(tmp_path, capsys):
    code, out, _ = run(capsys, "train", str(folder(tmp_path, broken=True)), "--dry-run")
    assert code == 2
    refused = out[out.index("\nrefused") + 1 :]
    assert "zz_broken.yaml" in refused.splitlines()[0]
    assert "tensor-model-parallel-size" in refused
    assert out.splitlines()[-1] == "12 experiments: 11 ok, 1 refused, 0 failed"


def test_a_glob_several_files_and_overrides_applied_to_each(tmp_path, capsys):
    folder(tmp_path)
    pattern = str(tmp_path / "quickstart*.yaml")
    code, out, _ = run(capsys, "train", pattern, "--dry-run", "--format", "json", "--save_total_limit=3")
    assert code == 0, out
    report = json.loads(out)
    files = [e["file"] for e in report["experiments"]]
    assert files == sorted(files) and len(files) == 3 and report["ok"] == 3
    torch = [e["plan"] for e in report["experiments"] if e["plan"]["backend"] == "torch"]
    assert len(torch) == 2 and {p["checkpoints"]["retain"] for p in torch} == {3}  # each got it
    code, out, _ = run(
        capsys,
        "train",
        str(tmp_path / "quickstart.yaml"),
        str(tmp_path / "quickstart_grpo_sft.yaml"),
        "--dry-run",
    )
    assert code == 0 and out.splitlines()[-1] == "2 experiments: 2 ok, 0 refused, 0 failed"


def test_an_old_style_file_without_names_plans_every_pair(capsys):
    code, out, _ = run(capsys, "train", str(CFGS / "multi_model_cfgs.yaml"), "--dry-run")
    assert code == 0, out
    assert out.splitlines()[-1] == "8 experiments: 8 ok, 0 refused, 0 failed"


def test_several_experiments_need_the_dry_run(tmp_path, capsys):
    code, _, err = run(capsys, "train", str(folder(tmp_path)))
    assert code == 2 and "--dry-run" in err and "a run takes one experiment" in err


def test_one_experiment_and_the_old_style_names_are_planned_as_before(capsys):
    code, out, _ = run(
        capsys, "train", str(CFGS / "multi_model_cfgs.yaml"), "qwen2.5-7b", "full-4k", "--dry-run"
    )
    assert code == 0 and out.startswith("plan  backend=mindspeed-llm")


def test_each_backend_the_files_name_is_prepared_once_before_planning(tmp_path, capsys, monkeypatch):
    from ascendfactory.backends.base import Backend

    folder(tmp_path)
    data = yaml.safe_load((CFGS / "quickstart.yaml").read_text())
    (tmp_path / "another.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "unknown.yaml").write_text(yaml.safe_dump({**data, "backend": "no-such-backend"}))
    prepared = []
    monkeypatch.setattr(Backend, "prepare_bulk", lambda self, environ: prepared.append(self.name))
    code, out, _ = run(capsys, "train", str(tmp_path), "--dry-run")
    assert code == 2, out  # the unknown backend is refused by its own verdict
    # torch (quickstart.yaml, another.yaml, quickstart_grpo_sft.yaml) once, llamafactory once; an old-style
    # file names its backend per model and prepares none
    assert sorted(prepared) == ["llamafactory", "torch"], prepared
    assert "unknown.yaml" in out and "no-such-backend" in out
