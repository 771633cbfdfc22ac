"""The pipeline-stage model is the HF model: same logits; stages chain; the TP plan fits the converter."""

import pytest
import torch
import transformers

from ascendfactory.engine.convert.families import get_family
from ascendfactory.engine.train.model import build_stage, load_local_state, local_state, loss_fn, tp_plan
from ascendfactory.errors import ConfigError

CFG = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=64,
)


@pytest.mark.parametrize(
    "family,tied", [("Qwen2Config", False), ("LlamaConfig", True), ("Qwen3Config", False)]
)
def test_stages_reproduce_hf_logits(family, tied):
    cfg = getattr(transformers, family)(**CFG, tie_word_embeddings=tied)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    full = {k: v for k, v in hf.state_dict().items() if "rotary" not in k}
    x = torch.randint(0, 96, (2, 12))
    with torch.no_grad():
        ref = hf(x).logits
        one = build_stage(cfg, layers=[3], pp_rank=0, device=torch.device("cpu"))
        load_local_state(one, full)
        assert torch.equal(one(x), ref)
        if tied:
            assert one.lm_head.weight is one.model.embed_tokens.weight
            return
        stages = [build_stage(cfg, layers=[1, 2], pp_rank=r, device=torch.device("cpu")) for r in range(2)]
        for s in stages:
            load_local_state(s, {k: v for k, v in full.items() if k in dict(s.named_parameters())})
        assert list(stages[1].model.layers) == ["1", "2"] and stages[1].model.embed_tokens is None
        assert torch.equal(stages[1](stages[0](x)), ref)
        assert set(local_state(stages[0])) | set(local_state(stages[1])) == set(full)


def test_tied_embeddings_under_pp_give_the_last_stage_its_own_output_copy():
    """Megatron: the last stage of a tied model has its own output_layer.weight, equal to the embedding."""
    cfg = transformers.Qwen2Config(**CFG, tie_word_embeddings=True)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    full = {k: v for k, v in hf.state_dict().items() if "rotary" not in k}
    stages = [build_stage(cfg, layers=[2, 1], pp_rank=r, device=torch.device("cpu")) for r in range(2)]
    assert (
        not stages[0].shares_output and stages[1].lm_head is not None and stages[1].model.embed_tokens is None
    )
    load_local_state(stages[0], {k: v for k, v in full.items() if k in dict(stages[0].named_parameters())})
    last = {k: v for k, v in full.items() if k in dict(stages[1].named_parameters())}
    last["lm_head.weight"] = full["model.embed_tokens.weight"]
    load_local_state(stages[1], last)
    x = torch.randint(0, 96, (2, 12))
    with torch.no_grad():
        assert torch.equal(stages[1](stages[0](x)), hf(x).logits)
    with pytest.raises(ConfigError, match="lm_head.weight"):  # nothing silently missing
        load_local_state(stages[1], {k: v for k, v in last.items() if k != "lm_head.weight"})
    skipped = load_local_state(
        stages[1],
        {k: v for k, v in last.items() if k != "lm_head.weight"},
        missing_ok=lambda n: "lm_head" in n,
    )
    assert skipped == ["lm_head.weight"]


def test_tp_plan_agrees_with_converter_tp_dims():
    """Colwise = row chunk (dim 0), Rowwise on a Linear = column chunk (dim 1); embeddings are row chunks."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    dims = get_family("qwen25").tp_dims
    for module, style in tp_plan().items():
        name = module + ".weight"
        expected = 0 if isinstance(style, ColwiseParallel) or module == "model.embed_tokens" else 1
        assert isinstance(style, (ColwiseParallel, RowwiseParallel))
        assert dims[name] == expected, name


def test_loss_ignores_prompt_labels():
    logits = torch.randn(1, 4, 10)
    labels = torch.tensor([[-100, 3, -100, 5]])
    manual = torch.nn.functional.cross_entropy(logits[0, [1, 3]], torch.tensor([3, 5]))
    assert torch.allclose(loss_fn(logits, labels), manual)
