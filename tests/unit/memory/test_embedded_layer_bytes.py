"""The embedded trainer's per-layer activation bytes (`memory.megatron.LAYER_BYTES`) re-measured:
autograd's saved-tensor hooks count what one HF Qwen2 decoder layer (and a Qwen3 one: its per-head q/k
RMSNorm) keeps for backward, in fp32 and held in bf16 (the trainer's `--bf16`: weights and activations in
bf16, no autocast)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ascendfactory.memory.megatron import MegatronJob, layer_activation  # noqa: E402
from ascendfactory.memory.shape import ModelShape  # noqa: E402
from tests.support.saved_tensors import bytes_saved_for_backward  # noqa: E402


def saved_bytes(*, hidden, ffn, heads, kv_heads, head_dim, seq, dtype, model="qwen2") -> tuple[float, float]:
    """(bytes the layer saves for backward, bytes of the shared rotary cos/sin among them)."""
    cfg = transformers.AutoConfig.for_model(
        model,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        num_hidden_layers=1,
        vocab_size=128,
        max_position_embeddings=4096,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype or torch.float32)
    hidden_states = torch.randn(1, seq, hidden, dtype=dtype or torch.float32, requires_grad=True)
    pos = torch.arange(seq).unsqueeze(0)
    cos_sin = model.model.rotary_emb(hidden_states, pos)
    total = bytes_saved_for_backward(
        lambda: model.model.layers[0](
            hidden_states, position_embeddings=cos_sin, attention_mask=None, position_ids=pos
        ),
        exclude=[*model.parameters(), hidden_states],
    )
    rotary = sum(t.numel() * t.element_size() for t in cos_sin)
    return total - rotary, rotary


@pytest.mark.parametrize("model", ["qwen2", "qwen3"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "dims", [(256, 704, 8, 2, 32), (512, 704, 8, 2, 64), (256, 1408, 8, 8, 32), (256, 704, 16, 2, 64)]
)
def test_embedded_layer_bytes_match_the_hf_layer(precision, dims, model):
    hidden, ffn, heads, kv, head_dim = dims
    seq = 128
    measured, _ = saved_bytes(
        hidden=hidden,
        ffn=ffn,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        seq=seq,
        dtype=torch.bfloat16 if precision == "bf16" else None,
        model=model,
    )
    shape = ModelShape(
        name="t",
        layers=1,
        hidden=hidden,
        ffn=ffn,
        heads=heads,
        kv_heads=kv,
        vocab=128,
        tied=False,
        head_dim=head_dim,
        qk_norm=model == "qwen3",
    )
    job = MegatronJob(shape=shape, seq=seq, mbs=1, engine="embedded", precision=precision)
    # fp32: the first RMSNorm keeps the layer's input itself (the previous layer's output, not counted
    # above); bf16: it keeps an fp32 copy of it (counted above)
    layer_input = 4 * seq * hidden if precision == "fp32" else 0
    assert layer_activation(job) == pytest.approx(measured + layer_input, rel=0.01)
