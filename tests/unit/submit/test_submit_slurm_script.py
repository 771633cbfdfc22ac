"""`submit slurm --dry-run`: the sbatch script, and the checks made before anything queues."""

from __future__ import annotations

import shlex

import yaml
from typer.testing import CliRunner

from ascendfactory.cli.app import app, main
from tests.conftest import REPO

runner = CliRunner()


def cli(capsys, *args: str) -> tuple[int, str]:
    """Through the real entry point (its error boundary): exit code, stdout + stderr."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


QUICK = str(REPO / "cfgs" / "quickstart.yaml")


def unpinned(tmp_path, **extra) -> str:
    """The quickstart without the topology keys (a multi-node job supplies them)."""
    data = yaml.safe_load((REPO / "cfgs" / "quickstart.yaml").read_text())
    data["env"] = {"MASTER_PORT": 29517}
    data["af_output_dir"] = str(tmp_path / "out")
    data["backend_config"]["preprocess_data"]["input"] = str(REPO / "cfgs" / "data" / "demo_sft.jsonl")
    data.update(extra)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_dry_run_prints_the_script(tmp_path):
    exp = unpinned(tmp_path)
    r = runner.invoke(
        app,
        [
            "submit",
            "slurm",
            exp,
            "--nodes",
            "2",
            "--partition",
            "gpu",
            "--time",
            "04:00:00",
            "--account",
            "p1",
            "--gpus-per-node",
            "2",
            "--dry-run",
            "--backend_config.training.lr=1e-3",
        ],
    )
    assert r.exit_code == 0, r.output
    text = r.stdout
    out = tmp_path / "out"
    for flag in (
        "--nodes=2",
        "--ntasks-per-node=1",
        f"--output={out}/logs/slurm-%j.out",
        "--partition=gpu",
        "--time=04:00:00",
        "--account=p1",
        "--gpus-per-node=2",
        "--requeue",
    ):
        assert f"#SBATCH {flag}\n" in text, flag
    srun = text[text.index("exec srun") :].replace("\\\n", " ")
    argv = shlex.split(srun)
    assert argv[:4] == ["exec", "srun", "--kill-on-bad-exit=1", "--ntasks-per-node=1"]
    assert argv[4] == f"--output={out}/logs/slurm-%j-node%n.out"
    assert argv[6:] == ["train", exp, "--backend_config.training.lr=1e-3"]
    assert "--wait" not in srun  # node 0 converts the weights after the others are done
    assert not (out / ".af").exists()  # a dry run writes nothing


def test_no_requeue_without_auto_resume(tmp_path):
    r = runner.invoke(app, ["submit", "slurm", unpinned(tmp_path, train_auto_resume=False), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "#SBATCH --no-requeue\n" in r.stdout and "#SBATCH --requeue\n" not in r.stdout


def test_a_file_pinning_one_node_is_refused_for_two(capsys):
    code, output = cli(capsys, "submit", "slurm", QUICK, "--nodes", "2", "--dry-run")
    assert code == 2
    assert "env.NNODES: is 1, but Slurm runs this command on 2 nodes" in output
    assert "env.NODE_RANK" in output and "#SBATCH" not in output


def test_a_rank_on_the_command_line_is_refused_for_several_nodes(tmp_path, capsys):
    exp = unpinned(tmp_path)
    code, output = cli(capsys, "submit", "slurm", exp, "--nodes", "2", "--env.NODE_RANK=0", "--dry-run")
    assert code == 2 and "all 2 nodes would run with the same value" in output


def test_the_layout_is_checked_with_the_requested_devices(tmp_path, capsys):
    """8 devices per node x 2 nodes, TP 3: refused before anything queues, with the devices' source."""
    exp = unpinned(tmp_path)
    tp3 = "--backend_config.training.tensor-model-parallel-size=3"
    code, output = cli(
        capsys, "submit", "slurm", exp, "--nodes", "2", "--gpus-per-node", "8", "--dry-run", tp3
    )
    assert code == 2 and "tensor-model-parallel-size" in output and "SLURM_GPUS_ON_NODE=8" in output, output


def test_without_sbatch_the_error_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm commands
    code, output = cli(capsys, "submit", "slurm", unpinned(tmp_path), "--nodes", "1")
    assert code == 1 and "sbatch not found on PATH" in output
    assert not (tmp_path / "out" / ".af" / "submit.json").exists()  # nothing recorded


def test_node_errors_take_each_nodes_error_block(tmp_path):
    from ascendfactory.submit.slurm import node_errors

    (tmp_path / "slurm-7-node0.out").write_text(
        "[ascendfactory] step train: running\nerror: step 'train' failed with exit code 1\n  log: x.txt\n"
    )
    (tmp_path / "slurm-7-node1.out").write_text("[ascendfactory] step train: running\nRuntimeError: boom\n")
    (tmp_path / "slurm-8-node0.out").write_text("error: another job\n")
    assert node_errors(tmp_path, "7") == [
        "node0: error: step 'train' failed with exit code 1",
        "node0:   log: x.txt",
        "node1: RuntimeError: boom",
    ]
