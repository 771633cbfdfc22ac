"""A plain, non-editable `pip install .` of the core (no torch extra) into a fresh environment works.

From outside the source tree, the installed CLI finds its catalog and templates (`models`, `experiments`,
`config` for every shipped template, `train --dry-run` of each), reads logs (`logs summary`), and runs a
mindspeed-llm plan through the runner: preprocessing and conversion run for real against a stand-in
MindSpeed-LLM checkout; training stops with a clear step failure because this environment has no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from tests.conftest import LOGS, REPO

pytestmark = pytest.mark.integration

FAKE_PROGRAM = """import os, sys
args = sys.argv[1:]
out = args[args.index("{flag}") + 1]
os.makedirs(os.path.dirname(out) if "{flag}" == "--output-prefix" else out, exist_ok=True)
open(out + "_done" if "{flag}" == "--output-prefix" else os.path.join(out, "done"), "w").write("ok")
print("fake {name} wrote", out, flush=True)
"""


@pytest.fixture(scope="module")
def core_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with `pip install <repo>` (core dependencies only, not editable)."""
    root = tmp_path_factory.mktemp("core-env")
    src = root / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "outputs", "demo_assets", "*.egg-info", "build", "__pycache__", ".pytest_cache"
        ),
    )
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    done = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", str(src)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shutil.rmtree(src)  # nothing may be read from the source tree
    return env_dir


def cli(
    env_dir: Path, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    exe = env_dir / "bin" / "ascendfactory-cli"
    return subprocess.run(
        [str(exe), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {}), "PYTHONPATH": ""},
    )


def test_core_install_has_no_torch_and_finds_its_data(core_env: Path, tmp_path: Path) -> None:
    py = core_env / "bin" / "python"
    probe = subprocess.run(
        [str(py), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "True"
    models = cli(core_env, "models", "--json", cwd=tmp_path)
    assert models.returncode == 0, models.stderr
    assert {"qwen2.5-7b", "tiny-demo"} <= {row["model"] for row in json.loads(models.stdout)}
    exps = cli(core_env, "experiments", "--json", cwd=tmp_path)
    rows = json.loads(exps.stdout)
    assert exps.returncode == 0 and all(row["experiments"] for row in rows), exps.stdout
    for row in rows:
        for exp in row["experiments"].split(", "):
            model = (
                "tiny-demo"
                if exp == "tiny-sft"
                else "qwen2.5-vl-7b"
                if row["backend"] == "mindspeed-mm"
                else "qwen2.5-7b"
            )
            path = tmp_path / f"{row['backend']}-{exp}.yaml"
            made = cli(
                core_env,
                "config",
                f"--backend={row['backend']}",
                f"--af_model_name={model}",
                f"--exp_name={exp}",
                f"--output_file_path={path}",
                cwd=tmp_path,
            )
            assert made.returncode == 0, made.stderr
            plan = cli(core_env, "train", str(path), "--dry-run", "--format", "json", cwd=tmp_path)
            assert plan.returncode == 0, (row["backend"], exp, plan.stderr)
            assert json.loads(plan.stdout)["backend"] == row["backend"]


def test_core_install_reads_logs(core_env: Path, tmp_path: Path) -> None:
    log = LOGS / "verl_grpo_console_ray.txt"
    done = cli(core_env, "logs", "summary", str(log), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)


def test_core_install_runs_a_mindspeed_llm_plan(core_env: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "MindSpeed-LLM"
    (checkout / "megatron").mkdir(parents=True)
    for script in ("pretrain_gpt.py", "posttrain_gpt.py"):
        (checkout / script).write_text("raise SystemExit('not used')\n")
    (checkout / "preprocess_data.py").write_text(
        FAKE_PROGRAM.format(flag="--output-prefix", name="preprocess")
    )
    (checkout / "convert_ckpt_v2.py").write_text(FAKE_PROGRAM.format(flag="--save-dir", name="converter"))
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 256,
                "max_position_embeddings": 512,
                "tie_word_embeddings": True,
            }
        )
    )
    data = tmp_path / "data.jsonl"
    data.write_text('{"instruction": "hi", "input": "", "output": "hello"}\n')
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        json.dumps(
            {
                "backend": "mindspeed-llm",
                "af_model_name": "tiny",
                "exp_name": "core",
                "af_output_dir": str(tmp_path / "out"),
                "env": {"NPUS_PER_NODE": 1, "MASTER_PORT": 29581},
                "scripts_dir": str(checkout),
                "backend_config": {
                    "preprocess_data": {"input": str(data)},
                    "convert_ckpt_mg2hf": None,
                    "training": {
                        "tokenizer-name-or-path": str(hf),
                        "seq-length": 64,
                        "global-batch-size": 1,
                        "micro-batch-size": 1,
                        "train-iters": 1,
                    },
                },
            }
        )
    )
    done = cli(core_env, "train", str(exp), cwd=tmp_path, env={"ASCEND_TOOLKIT_HOME": "/fake/toolkit"})
    assert done.returncode != 0
    assert "step 'train' failed" in done.stderr, done.stdout + done.stderr
    summary_steps = tmp_path / "out" / "logs"
    texts = "".join(p.read_text() for p in summary_steps.glob("*-runner.txt"))
    assert "step preprocess: done" in texts and "step hf2mg: done" in texts
    assert (tmp_path / "out" / "converted_weight_TP1PP1" / "done").exists()
    assert (tmp_path / "out" / "preprocess_data").is_dir()  # created by the runner before the program ran


def test_core_install_draws_the_loss_plot(core_env: Path, tmp_path: Path) -> None:
    """matplotlib is a core dependency: `logs plot` (and every run's plot step) works from `pip install .`."""
    log = tmp_path / "run_log-N1-0.txt"
    lines = [
        f" iteration {i:8d}/      30 | consumed samples: {16 * i:12d} |"
        " elapsed time per iteration (ms): 90.0 | learning rate: 1.0E-03 | global batch size:    16 |"
        f" lm loss: {7 - i / 10:.6E} | loss scale: 1.0 |"
        for i in range(1, 31)
    ]
    log.write_text("\n".join(lines) + "\n")
    done = cli(core_env, "logs", "plot", str(log), "-o", str(tmp_path / "loss.png"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "loss.png").stat().st_size > 1000


def test_core_install_refuses_a_real_torch_run_naming_the_extra(core_env: Path, tmp_path: Path) -> None:
    """The quickstart from a core install: refused when planning (exit 2, nothing written), naming
    `pip install ".[torch]"`, not a traceback from the preprocessing step."""
    shutil.copytree(REPO / "cfgs", tmp_path / "cfgs")
    shutil.copytree(REPO / "demo_assets" / "tiny-qwen2", tmp_path / "demo_assets" / "tiny-qwen2")
    done = cli(core_env, "train", "cfgs/quickstart.yaml", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join(done.stderr.split())
    assert "the embedded backend's programs need torch, transformers, safetensors, tokenizers" in text
    assert 'fix: pip install ".[torch]"' in text and "Traceback" not in done.stderr
    assert not (tmp_path / "outputs").exists()
    dry = cli(core_env, "train", "cfgs/quickstart.yaml", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "a real run stops here" in dry.stdout, dry.stdout + dry.stderr
