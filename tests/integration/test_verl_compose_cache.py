"""The Hydra toolkit's compose program's split composition (`backends/common/hydra/programs/hydra_compose.py
--serve`: the config tree of each set of group overrides composed once, each request's value overrides
applied to a copy) answers exactly what
`hydra.compose` of the whole request answers (`--serve --whole`), in verl 0.9.1's own environment: on
every shipped verl template for several models, and on variations of them generated from a fixed seed
(values of every kind, `${...}` that resolve and that do not, `oc.env`, unknown keys, `+` on a key that
exists, `++`, deletions, dict values, syntax errors, another model_engine, an unknown one, a sweep, a
`hydra.*` override)."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.backends.verl import environment
from ascendfactory.backends.verl.read import HYDRA_OVERRIDES
from ascendfactory.config.load import load_experiment
from ascendfactory.features.templates import render_experiment

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "ascendfactory" / "backends" / "common" / "hydra" / "programs" / "hydra_compose.py"
VERL_CONFIG = ["--package=verl", "--config-dir=trainer/config"]
ENV, _ = environment.find_env(None, os.environ)
PY = environment.python_of(ENV)
needs_verl = pytest.mark.skipif(
    bool(environment.missing(ENV)), reason=f"no verl environment at {ENV}: sh install.sh verl"
)
MODELS = ("qwen2.5-7b", "qwen2-0.5b")


def template_overrides(tmp_path: Path) -> list[list[str]]:
    """The overrides the composer sends for each shipped template: its train step's, less Hydra's own
    (the shipped key lists plan them)."""
    out = []
    for model in MODELS:
        for exp in ("ppo", "grpo", "dapo"):
            path = tmp_path / f"verl-{model}-{exp}.yaml"
            path.write_text(
                render_experiment(backend="verl", model_name=model, exp_name=exp, output_file=str(path))
            )
            loaded = load_experiment(path, [f"--af_output_dir={tmp_path / 'out'}"])
            environ = {**os.environ, "AF_VERL_ENV": str(tmp_path / "none")}
            plan = make_plan(loaded, dry_run=True, environ=environ)
            driver = plan.step("train").launch.driver[3:]  # after python -m verl.trainer.main_ppo
            out.append([t for t in driver if t not in HYDRA_OVERRIDES])
    return out


def key_of(text: str) -> str:
    return text.split("=", 1)[0].lstrip("+~")


def mutations(rng: random.Random, overrides: list[str]) -> list[str]:
    """One to three changes of a template's overrides."""
    values = [o for o in overrides if "=" in o and not o.startswith(("+", "~", "hydra"))]
    kinds = [
        lambda: f"{key_of(rng.choice(values))}={rng.choice(['7', '0.5', 'true', 'null', 'abc', '[1,2]'])}",
        lambda: f"{key_of(rng.choice(values))}=${{data.train_batch_size}}",
        lambda: f"{key_of(rng.choice(values))}=${{nope.{rng.randint(0, 9)}}}",
        lambda: f"{key_of(rng.choice(values))}=${{oc.env:AF_COMPOSE_TEST,{rng.randint(1, 9)}}}",
        lambda: "trainer.n_gpu_per_node=1",
        lambda: f"+{key_of(rng.choice(values))}=1",
        lambda: f"++trainer.extra_{rng.randint(0, 9)}=2",
        lambda: "~actor_rollout_ref.actor.optim.lr",
        lambda: "~trainer.no_such_key",
        lambda: (
            f"+actor_rollout_ref.model.override_config={{attn_implementation:eager,n:{rng.randint(1, 4)}}}"
        ),
        lambda: "data.train_files=[a,b",
        lambda: "model_engine=megatron",
        lambda: "model_engine=nope",
        lambda: "data.train_batch_size=1,2",
        lambda: "hydra.run.dir=/tmp/compose-test",
        lambda: "actor_rollout_ref.actor.optim={lr:1e-5}",
        lambda: "trainer.default_local_dir=${trainer.nope}/x",
    ]
    out = list(overrides)
    for _ in range(rng.randint(1, 3)):
        text = rng.choice(kinds)()
        out = [o for o in out if key_of(o) != key_of(text)]
        out.insert(rng.randint(0, len(out)), text)
    return out


def answers(requests: list[dict], *flags: str) -> list[dict]:
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    done = subprocess.run(
        [PY, str(COMPOSE), "--serve", *VERL_CONFIG, *flags],
        input=lines,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert len(out) == len(requests), done.stdout[-3000:]
    return out


@needs_verl
@pytest.mark.parametrize(
    "variations, seed", [(16, 41), pytest.param(150, 7, marks=pytest.mark.slow, id="150-slow")]
)
def test_the_split_composition_answers_what_hydra_compose_answers(tmp_path, variations, seed):
    rng = random.Random(seed)
    templates = template_overrides(tmp_path)
    environ = {**os.environ, "HYDRA_FULL_ERROR": "0", "AF_COMPOSE_TEST": "5"}
    requests = [{"overrides": t, "config_name": "ppo_trainer", "environ": environ} for t in templates]
    requests += [
        {"overrides": mutations(rng, rng.choice(templates)), "config_name": "ppo_trainer", "environ": environ}
        for _ in range(variations)
    ]
    split = answers(requests, "--warm=ppo_trainer")
    whole = answers(requests, "--whole")
    for request, a, b in zip(requests, split, whole):
        assert b["split"] is False
        a, b = ({k: v for k, v in x.items() if k not in ("compose_s", "split")} for x in (a, b))
        assert a == b, request["overrides"]
    # the variations reached every kind of answer, and most were composed split
    kinds = {p["kind"] for a in split for p in a["problems"]}
    assert kinds >= {"unknown_key", "append_exists", "syntax", "interpolation", "other"}, kinds
    assert sum(a["ok"] for a in split) >= len(templates)
    assert all(a["split"] for a in split[: len(templates)])
    assert sum(a["split"] for a in split) > len(requests) // 2
