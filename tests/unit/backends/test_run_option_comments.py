"""`config` comments each run option with what it means for the chosen backend: no Megatron text above
another framework's keys."""

from __future__ import annotations

import re

import pytest

from ascendfactory.backends.registry import all_backends
from ascendfactory.features.templates import offered_models, render_experiment

MEGATRON_WORDS = re.compile(r"Megatron|iter_\*|--finetune|--no-load|hf2mg|latest_checkpointed_iteration")


def header(backend: str, tmp_path) -> str:
    """The rendered file down to `backend_config:` (the wrapper's comments and the run options)."""
    exp = all_backends_by_name()[backend].experiments()[0]
    text = render_experiment(
        backend=backend,
        model_name=offered_models(backend)[0],
        exp_name=exp,
        output_file=str(tmp_path / "x.yaml"),
    )
    return text.split("\nbackend_config:")[0]


def all_backends_by_name():
    return {b.name: b for b in all_backends()}


@pytest.mark.parametrize("backend", ["verl", "llamafactory"])
def test_a_non_megatron_backend_gets_no_megatron_comments(tmp_path, backend):
    top = header(backend, tmp_path)
    assert not MEGATRON_WORDS.search(top), MEGATRON_WORDS.search(top)


def test_verl_comments_name_verls_own_keys(tmp_path):
    top = header("verl", tmp_path)
    assert "trainer.resume_mode" in top and "global_step_N" in top and "max_actor_ckpt_to_keep" in top


@pytest.mark.parametrize("backend", ["torch", "mindspeed-llm", "mindspeed-mm", "mindspeed-rl"])
def test_the_megatron_backends_keep_their_flag_level_comments(tmp_path, backend):
    top = header(backend, tmp_path)
    assert "--finetune --no-load-optim --no-load-rng" in top
    assert "Keep the newest N iter_* checkpoints" in top
