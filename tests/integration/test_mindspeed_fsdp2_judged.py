"""The FSDP2 mode judged by MindSpeed-LLM 26.1.0's own parser (opt-in: `AF_MINDSPEED_LLM_26_DIR`, a
MindSpeed-LLM 26.1.0 checkout, as for the 26.1.0 judge).

tests/diffval/workers/mindspeed_fsdp2_worker.py runs `fsdp2_parse_args` with train_fsdp2.py's own `Arguments`
on the YAML our plan writes: the golden (the example's YAML), the `fsdp2-4k` template, every argument rule's
breaking example from the unit tests (the framework must refuse each, as we do) and a misspelt key (the
framework only logs it as unused; we refuse it: README's stricter table). The mesh rules need devices and are
not judged here (`MESH`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from tests.unit.backends.conftest import make_checkout
from tests.unit.backends.mindspeed_llm.test_mindspeed_fsdp2 import (
    BASE,
    EXAMPLES,
    GOLDEN,
    MESH,
    REPO,
    example_config,
    experiment,
)

pytestmark = pytest.mark.integration

CHECKOUT = os.environ.get("AF_MINDSPEED_LLM_26_DIR", "")
WORKER = REPO / "tests" / "diffval" / "workers" / "mindspeed_fsdp2_worker.py"
READY = bool(CHECKOUT) and Path(CHECKOUT, "mindspeed_llm", "fsdp2", "utils", "arguments.py").is_file()


def ask(requests: list[dict]) -> dict[str, dict]:
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    done = subprocess.run(
        [sys.executable, str(WORKER), CHECKOUT], input=lines, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {v["id"]: v for v in map(json.loads, done.stdout.splitlines())}


def written(path: Path, *overrides: str) -> str:
    plan = make_plan(load_experiment(str(path), list(overrides)), dry_run=True)
    return plan.files[plan.facts["fsdp2_config"]]


@pytest.mark.skipif(not READY, reason="needs AF_MINDSPEED_LLM_26_DIR: a MindSpeed-LLM 26.1.0 checkout")
def test_the_trainer_accepts_our_yaml_and_refuses_each_rule_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = make_checkout(tmp_path / "MindSpeed-LLM")
    (site / "train_fsdp2.py").write_text("", encoding="utf-8")
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(site))
    monkeypatch.setenv("AF_THIRD_PARTY_DIR", str(tmp_path / "third-party"))
    monkeypatch.chdir(REPO)
    requests = [{"id": "golden", "args": {"yaml": written(GOLDEN), "world_size": 8}}]
    rendered = tmp_path / "template.yaml"
    from ascendfactory.features.templates import render_experiment

    rendered.write_text(
        render_experiment(
            backend="mindspeed-llm", model_name="qwen3-8b", exp_name="fsdp2-4k", output_file="x"
        ),
        encoding="utf-8",
    )
    requests.append({"id": "template", "args": {"yaml": written(rendered), "world_size": 8}})
    requests.append(
        {"id": "base", "args": {"yaml": written(experiment(tmp_path / "base", BASE)), "world_size": 8}}
    )
    # the examples: our plan refuses them, so the YAML is BASE's with the example's changes, written as the
    # plan writes an accepted one (its owned keys filled)
    base_doc = written(experiment(tmp_path / "b2", BASE))
    import yaml

    for name in sorted(set(EXAMPLES) - MESH):
        doc = yaml.safe_load(base_doc)
        for section, body in example_config(name).items():
            doc[section] = {**doc.get(section, {}), **body}
        for section, body in EXAMPLES[name][0].items():
            for key, value in body.items():
                if value is None:
                    doc[section].pop(key, None)
        requests.append({"id": name, "args": {"yaml": yaml.safe_dump(doc), "world_size": 8}})
    misspelt = yaml.safe_load(base_doc)
    misspelt["training"]["learning_rate"] = 1e-4
    requests.append({"id": "misspelt", "args": {"yaml": yaml.safe_dump(misspelt), "world_size": 8}})
    got = ask(requests)
    for accepted in ("golden", "template", "base"):
        assert got[accepted]["ok"] is True and got[accepted]["error"] is None, got[accepted]
    wrong = [f"{n}: {got[n]}" for n in sorted(set(EXAMPLES) - MESH) if got[n]["ok"] is not False]
    assert not wrong, "\n".join(wrong)
    assert got["misspelt"]["ok"] is True and "--training.learning_rate" in got["misspelt"]["error"]
