"""The shared MindSpeed-RL experiment (`backends/common/mindspeed_rl_experiment/`) registers no backend
(tests/unit/backends/common/test_toolkits_register_nothing.py), and
`torch` with `stage: grpo` plans it without importing (or instantiating) the `mindspeed-rl` backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_torch_grpo_plans_without_the_mindspeed_rl_backend(tmp_path):
    from ascendfactory.engine.demo import _config

    model = tmp_path / "warm"
    model.mkdir()
    _config("qwen2", 960, bos_id=0, eos_id=2, pad_id=0).to_json_file(str(model / "config.json"))
    done = run(
        f"""
        import sys
        from ascendfactory.backends.planner import make_plan
        from ascendfactory.config.load import load_experiment
        args = ["--af_output_dir={tmp_path / "out"}", "--backend=torch",
                "--backend_config.megatron_training.tokenizer_name_or_path={model}"]
        plan = make_plan(load_experiment("{REPO / "cfgs" / "quickstart_grpo.yaml"}", args), dry_run=True)
        names = ",".join(s.name for s in plan.steps)
        print(plan.backend, names, "ascendfactory.backends.mindspeed_rl" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torch", "preprocess,hf2mg,train,mg2hf,plot", "False"]
