"""Property: whatever an experiment file or override holds, `train --dry-run` exits 0, or exits 2 naming a key
the input touched; never a traceback, an internal error, another exit code or a hang (> 5 s).

The generator is `fuzz_configs.cases` (odd values, deleted/unknown/integer keys, scalar sections, corrupted
bytes, override lists); `benchmarks/fuzz_configs.py` runs thousands of the same cases and counts them.
"""

from __future__ import annotations

import os
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascendfactory.errors import Problem
from tests.unit.cli.fuzz_configs import Case, _named, bases, cases, names_a_touched_key, run_case

BASES = bases()
# verl experiments are checked against the shipped key lists here (in-process, milliseconds); composing with
# Hydra in verl's environment is what tests/integration/test_verl_backend.py and the benchmark fuzz run do.
NO_VERL_ENV = {"AF_VERL_ENV": "/nonexistent/verl-env"}


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_any_experiment_ends_in_a_named_answer(tmp_path_factory, data):
    case = data.draw(cases(BASES))
    with mock.patch.dict(os.environ, NO_VERL_ENV):
        verdict = run_case(case, tmp_path_factory.mktemp("fuzz"))
    assert not verdict.failed, (
        f"{verdict.kind} after {verdict.seconds:.2f}s: base={case.base} touched={case.touched} "
        f"overrides={case.overrides}\n{verdict.message}"
    )


def test_the_verdict_names_a_key_only_when_a_problem_does():
    deleted = ["qwen2.5-7b.full-4k"]
    assert names_a_touched_key(
        [Problem("<exp_name>", "model 'qwen2.5-7b' has no experiment 'full-4k'")], deleted
    )
    assert not names_a_touched_key([Problem("<exp_name>", "model 'qwen2.5-7b' has no experiments")], deleted)
    assert names_a_touched_key([Problem("data.train_path", "not a file")], ["data.train_path"])
    assert names_a_touched_key([Problem("env.NPUS_PER_NODE", "bad")], ["env.NPUS_PER_NODE.3"])  # by its list
    assert not names_a_touched_key([Problem("config", "something went wrong")], ["env.NPUS_PER_NODE"])
    assert not names_a_touched_key([Problem("env.NNODES", "bad")], ["env.NPUS_PER_NODE"])
    assert names_a_touched_key(
        [Problem("base.save-total-limit (save_total_limit)", "bad")], ["save_total_limit"]
    )


def test_an_old_style_flat_key_is_named_where_the_loader_puts_it():
    """`base.NPUS_PER_NODE` of an old-style file is the experiment's `env.NPUS_PER_NODE`; a message naming the
    latter names the key the case touched (config/oldstyle.py FLAT_KEY_MAP)."""
    case = Case(base="multi_model_cfgs.yaml", text="", touched=["base.NPUS_PER_NODE"])
    problem = Problem("pipeline-model-parallel-size", "world from a CPU-only machine (set env.NPUS_PER_NODE)")
    assert _named(case, [problem])
    assert not _named(Case(base="multi_model_cfgs.yaml", text="", touched=["base.seed"]), [problem])


def test_a_backend_key_may_be_named_in_the_frameworks_spelling():
    touched = ["backend_config.algorithm"]
    assert names_a_touched_key([Problem("critic.model.path", "algorithm.adv_estimator is 'gae'")], touched)
    assert not names_a_touched_key([Problem("critic.model.path", "no algorithms here")], touched)
    assert not names_a_touched_key([Problem("critic.model.path", "my_algorithm is off")], touched)
    assert names_a_touched_key(
        [Problem("training.lora-r", "LoRA is off without --lora-target-modules")],
        ["backend_config.training.lora-target-modules"],
    )
    assert not names_a_touched_key(
        [Problem("x", "--lora-target-modules-x")], ["backend_config.training.lora-target-modules"]
    )
    hydra = ["backend_config.reward.+reward_kwargs.overlong_buffer_cfg.enable"]
    assert names_a_touched_key(
        [Problem("backend_config.reward.reward_kwargs", "not valid Hydra syntax", source="f.yaml")], hydra
    )
    assert not names_a_touched_key([Problem("backend_config.reward", "not valid", source="f.yaml")], hydra)
    assert names_a_touched_key([Problem("backend_config.reward", "bad", source="command line")], hydra)
