"""Model chunks of a virtual pipeline in the trainer's checkpoints: which tensors go in `model0`, `model1`,
... and the message when a checkpoint's chunks are not the run's."""

from __future__ import annotations

import argparse

import pytest
import torch

from ascendfactory.engine.train.checkpoint import Checkpointer, Topology, _chunk_part
from ascendfactory.errors import ConfigError


def _checkpointer(chunks: tuple[tuple[int, int], ...]) -> Checkpointer:
    topo = Topology(tp=1, pp=3, tp_rank=0, pp_rank=0, dp_rank=0, layer_offset=0, dp_group=None, chunks=chunks)
    args = argparse.Namespace(load="/ckpt", lora_target_modules=[])
    return Checkpointer(
        args=args, megatron_args=argparse.Namespace(), topo=topo, device=torch.device("cpu"), log=print
    )


def test_chunk_part_splits_layers_embedding_and_head():
    t = torch.zeros(1)
    local = {
        "model.embed_tokens.weight": t,
        "model.layers.0.mlp.up_proj.weight": t,
        "model.layers.3.mlp.up_proj.weight": t,
        "model.layers.3.self_attn.q_proj.lora_A.default.weight": t,
        "model.norm.weight": t,
        "lm_head.weight": t,
    }
    spans = [(0, 1), (3, 1)]  # PP rank 0 of PP 3, 2 chunks of 1 layer: layers 0 and 3
    assert sorted(_chunk_part(local, spans, 0)) == [
        "model.embed_tokens.weight",
        "model.layers.0.mlp.up_proj.weight",
    ]
    assert sorted(_chunk_part(local, spans, 1)) == [
        "lm_head.weight",
        "model.layers.3.mlp.up_proj.weight",
        "model.layers.3.self_attn.q_proj.lora_A.default.weight",
        "model.norm.weight",
    ]


def test_chunk_states_follow_megatrons_keys_and_refuse_another_layout():
    vpp = _checkpointer(((0, 1), (3, 1)))
    state = {"model0": {"a": 0}, "model1": {"b": 1}, "iteration": 2}
    assert vpp._chunk_states(state) == [({"a": 0}, 0), ({"b": 1}, 3)]
    plain = _checkpointer(())
    assert plain._chunk_states({"model": {"c": 2}}) == [({"c": 2}, 0)]
    with pytest.raises(ConfigError) as e:
        plain._chunk_states(state)
    assert "/ckpt holds model chunks model0, model1 but this run has model" in str(e.value)
    with pytest.raises(ConfigError) as e:
        vpp._chunk_states({"model": {}})
    assert "holds model chunks model but this run has model0, model1" in str(e.value)
    assert "--num-layers-per-virtual-pipeline-stage" in str(e.value)
