"""Opt-in: `megatron_buffer` against Megatron-LM's own code (core_r0.8.0, the Megatron of MindSpeed-LLM
2.1.0), on the CPU. Set AF_MEGATRON_LM to a checkout of that branch (the folder holding `megatron/`).

It builds Megatron's GPTModel (local spec) for a tiny Qwen2 shape, checks that our converter's Megatron
names and shapes are that model's and that `registration_key` gives its `named_parameters()` order; then
Megatron's ParamAndGradBuffer (distributed optimizer on) lays the parameters out and its
DistributedOptimizer.get_parameter_state_dp_zero writes the file dict, which must equal ours.
Stand-ins, none of which changes a rule: `pkg_resources.packaging` (gone from new setuptools) is the
`packaging` package; `torch.cuda.current_device()` returns "cpu" (where the buffers are allocated); the
data-parallel world size is reported as DP for the layout (one process: the dp-zero gather runs with DP 1
on a real gloo group); Apex is absent, so the norms are Megatron's torch LayerNorm, whose biases are not
trained here (our models have none).
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ascendfactory.engine.convert.shard_map import hf_local_to_megatron
from ascendfactory.engine.train import megatron_buffer as mb
from tests.support import training as T

ROOT = os.environ.get("AF_MEGATRON_LM", "")
pytestmark = pytest.mark.skipif(
    not (ROOT and (Path(ROOT) / "megatron" / "core").is_dir()),
    reason="set AF_MEGATRON_LM to a Megatron-LM core_r0.8.0 checkout to compare with Megatron's own code",
)


@pytest.fixture(scope="module")
def megatron():
    import packaging.version  # noqa: F401

    sys.path.insert(0, ROOT)
    if "pkg_resources" not in sys.modules:
        shim = types.ModuleType("pkg_resources")
        shim.packaging = sys.modules["packaging"]  # type: ignore[attr-defined]
        sys.modules["pkg_resources"] = shim
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29581")
        dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel()
    yield SimpleNamespace(root=ROOT)
    parallel_state.destroy_model_parallel()
    sys.path.remove(ROOT)


def _gpt_model(hf_cfg, pre_process=True):
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        num_layers=hf_cfg.num_hidden_layers,
        hidden_size=hf_cfg.hidden_size,
        ffn_hidden_size=hf_cfg.intermediate_size,
        num_attention_heads=hf_cfg.num_attention_heads,
        num_query_groups=hf_cfg.num_key_value_heads,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=True,
        use_cpu_initialization=True,
    )
    return GPTModel(
        cfg,
        get_gpt_layer_local_spec(),
        vocab_size=hf_cfg.vocab_size,
        max_sequence_length=hf_cfg.max_position_embeddings,
        position_embedding_type="rope",
        share_embeddings_and_output_weights=False,
        pre_process=pre_process,
    )


@pytest.fixture(scope="module")
def models(megatron, tmp_path_factory):
    hf = T.make_tiny_model(tmp_path_factory.mktemp("hf"), family="qwen2", num_hidden_layers=2)
    ours = hf_local_to_megatron(
        {k: v.detach() for k, v in hf.state_dict().items()}, cfg=hf.config, tp=1, tp_rank=0, layer_offset=0
    )
    model = _gpt_model(hf.config)
    for name, p in model.named_parameters():
        p.requires_grad_(name in ours)  # the torch LayerNorm's biases: not parameters of our models
    return ours, model


def test_names_shapes_and_registration_order(models):
    ours, model = models
    theirs = [(n, p.shape) for n, p in model.named_parameters() if p.requires_grad]
    assert {n: s for n, s in theirs} == {n: t.shape for n, t in ours.items()}
    assert sorted(ours, key=mb.registration_key) == [n for n, _ in theirs]


def _buffer(model, dp, bucket_size, monkeypatch):
    import torch.distributed as dist
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.param_and_grad_buffer import ParamAndGradBuffer

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    real = dist.get_world_size
    with monkeypatch.context() as m:
        m.setattr(dist, "get_world_size", lambda group=None: dp)
        params = [p for p in model.parameters() if p.requires_grad]
        names = {p: n for n, p in model.named_parameters()}
        buf = ParamAndGradBuffer(
            DistributedDataParallelConfig(use_distributed_optimizer=True),
            torch.float32,
            torch.float32,
            params,
            dist.group.WORLD,
            bucket_size,
            names,
            1.0,
        )
    assert dist.get_world_size is real
    return buf, names


OUT = "output_layer.weight"


@pytest.mark.parametrize(
    "dp,bucket_size,shared",
    [(1, None, None), (2, None, None), (3, 5000, None), (8, 20000, None), (2, None, OUT), (4, 5000, OUT)],
)
def test_layout_is_megatrons(models, monkeypatch, dp, bucket_size, shared):
    ours, model = models
    if shared:  # language_module on the last stage of a tied model with PP > 1
        monkeypatch.setattr(model.output_layer.weight, "shared_embedding", True, raising=False)
    buf, names = _buffer(model, dp, bucket_size, monkeypatch)
    order = sorted(ours, key=mb.registration_key)
    lay = mb.build_layout(
        [(n, ours[n].numel()) for n in order], dp=dp, bucket_size=bucket_size, shared_embedding=shared
    )
    assert not lay.straddle_fixed
    assert {names[p]: (s, e) for p, (s, e, _) in buf.param_index_map.items()} == lay.index
    assert [(b.start, b.end) for b in lay.buckets] == buf.bucket_indices
    assert [b.numel_unpadded for b in lay.buckets] == [b.numel_unpadded for b in buf.buckets]
    assert buf.numel == lay.numel and buf.numel_unpadded == lay.numel_unpadded
    assert len(lay.buckets) > 1 or (bucket_size is None and not shared)


def test_first_stage_shared_embedding_straddles_in_core_r080(models, monkeypatch):
    """The deviation in `megatron_buffer`'s docstring, shown with Megatron's code: on the first stage the
    shared embedding comes last, at a 64-aligned start that is not 128-aligned here, while its bucket
    starts at the next multiple of 128; Megatron's optimizer set-up then refuses its own buffer."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer as MDO

    ours, model = models
    emb = model.embedding.word_embeddings.weight
    monkeypatch.setattr(emb, "shared_embedding", True, raising=False)
    buf, _ = _buffer(model, 1, None, monkeypatch)
    start = buf.param_index_map[emb][0]
    assert start % 128 == 64 and buf.bucket_indices[-1][0] == start + 64
    with pytest.raises(AssertionError, match="single bucket"):
        MDO._build_model_param_gbuf_map([MDO._build_gbuf_range_map(buf)])
    order = sorted(ours, key=mb.registration_key)
    name = "embedding.word_embeddings.weight"
    lay = mb.build_layout([(n, ours[n].numel()) for n in order], dp=1, shared_embedding=name)
    assert lay.straddle_fixed and lay.index[name][0] == buf.bucket_indices[-1][0]


@pytest.mark.parametrize("bucket_size", [None, 5000])
def test_dp_zero_file_is_megatrons(models, monkeypatch, bucket_size):
    """Megatron's own get_parameter_state_dp_zero (DP 1, a real gloo group) on its own buffer, the state
    being known tensors, against `to_world` on our layout."""
    import torch.distributed as dist
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer as MDO

    ours, model = models
    buf, names = _buffer(model, 1, bucket_size, monkeypatch)
    gbuf_ranges = [MDO._build_gbuf_range_map(buf)]
    gen = torch.Generator().manual_seed(0)
    mains = {p: torch.randn(p.numel(), generator=gen) for p in buf.param_index_map}
    groups = [{"params": list(buf.param_index_map)}]
    index_map, _ = MDO._build_optimizer_group_ranges(groups, gbuf_ranges)
    inner = SimpleNamespace(
        param_groups=[{"params": [mains[p] for p in groups[0]["params"]]}],
        state={mains[p]: {"exp_avg": mains[p] * 2, "exp_avg_sq": mains[p] ** 2} for p in mains},
    )
    stand_in = SimpleNamespace(
        data_parallel_group_gloo=dist.group.WORLD,
        gbuf_ranges=gbuf_ranges,
        buffers=[buf],
        model_param_group_index_map=index_map,
        optimizer=inner,
    )
    theirs = MDO.get_parameter_state_dp_zero(stand_in)
    order = sorted(ours, key=mb.registration_key)
    lay = mb.build_layout([(n, ours[n].numel()) for n in order], dp=1, bucket_size=bucket_size)
    by_name = {names[p]: t for p, t in mains.items()}
    assert set(theirs) == {"buckets_coalesced", 0} and list(theirs[0]) == [(torch.float32, torch.float32)]
    entry = theirs[0][(torch.float32, torch.float32)]
    assert entry["numel_unpadded"] == lay.numel_unpadded
    assert torch.equal(entry["param"], mb.to_world(by_name, lay))
    assert torch.equal(entry["exp_avg"], mb.to_world({n: t * 2 for n, t in by_name.items()}, lay))
    assert torch.equal(entry["exp_avg_sq"], mb.to_world({n: t**2 for n, t in by_name.items()}, lay))


@pytest.mark.parametrize("first_stage", [True, False])
def test_param_group_order_is_megatrons(megatron, tmp_path, first_stage):
    """`distopt.group_kinds` against Megatron's `_get_param_groups` (the groups of model_optim_rng.pt's
    optimizer entry, which Megatron's loader pairs by position): the embedding's stage starts with the
    decay group, a later stage with the no-decay group (its first parameter is a layer norm)."""
    from megatron.core.optimizer import _get_param_groups

    from ascendfactory.engine.train.distopt import group_kinds

    hf = T.make_tiny_model(tmp_path / "hf", family="qwen2", num_hidden_layers=2)
    model = _gpt_model(hf.config, pre_process=first_stage)
    for name, p in model.named_parameters():
        p.requires_grad_(not (name.endswith("layernorm.bias") or name.endswith("final_layernorm.bias")))
    theirs = [g["wd_mult"] == 0.0 for g in _get_param_groups([model], None, None, 1.0, False)]
    named = [(n, p) for n, p in hf.named_parameters() if first_stage or "embed_tokens" not in n]
    assert group_kinds(named) == theirs


def test_moe_registration_order_is_megatrons(megatron):
    """A MoE layer's router and SequentialMLP experts, in Megatron's `named_parameters()` order."""
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        num_layers=2, hidden_size=32, ffn_hidden_size=16, num_attention_heads=4, gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, use_cpu_initialization=True, num_moe_experts=3,
        moe_router_topk=2,
    )  # fmt: skip
    model = GPTModel(cfg, get_gpt_layer_local_spec(num_experts=3), vocab_size=64, max_sequence_length=32,
                     position_embedding_type="rope")  # fmt: skip
    names = [n for n, p in model.named_parameters() if not n.endswith(".bias")]
    assert any(".mlp.router.weight" in n for n in names)
    assert any(".mlp.experts.local_experts.2.linear_fc2.weight" in n for n in names)
    assert sorted(names, key=mb.registration_key) == names
