"""The embedded trainer's DeepSeek-V2 (MLA) attention bytes on the host's CPU
(`memory.megatron.mla_host_attention`) re-measured: autograd's saved-tensor hooks count what HF's
DeepseekV2 attention keeps for backward through SDPA's math path (different q/k and v head dims), in fp32
and held in bf16, with and without a q latent."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ascendfactory.memory.megatron import MegatronJob, mla_host_attention  # noqa: E402
from ascendfactory.memory.shape import MLAShape, ModelShape  # noqa: E402
from tests.support.saved_tensors import bytes_saved_for_backward  # noqa: E402


def saved_bytes(*, seq, dtype, heads, kv_lora, q_lora, qk_nope, qk_rope, v_head, mbs=2) -> int:
    cfg = transformers.AutoConfig.for_model(
        "deepseek_v2",
        hidden_size=64,
        intermediate_size=176,
        moe_intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        n_routed_experts=4,
        n_shared_experts=2,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        q_lora_rank=q_lora,
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=qk_nope,
        qk_rope_head_dim=qk_rope,
        v_head_dim=v_head,
        vocab_size=128,
        max_position_embeddings=4096,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    x = torch.randn(mbs, seq, 64, dtype=dtype, requires_grad=True)
    pos = torch.arange(seq).unsqueeze(0)
    rotary = model.model.rotary_emb(x, pos)
    rotary_tensors = rotary if isinstance(rotary, (tuple, list)) else (rotary,)
    return bytes_saved_for_backward(
        lambda: model.model.layers[0].self_attn(
            x, position_embeddings=rotary, attention_mask=None, position_ids=pos
        ),
        exclude=[*model.parameters(), x, *rotary_tensors],
    )


@pytest.mark.parametrize("mbs", [1, 2])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "dims",
    [(4, 32, None, 16, 8, 16), (8, 64, None, 32, 16, 32), (4, 32, 48, 16, 8, 32), (2, 16, None, 24, 8, 16)],
)
def test_mla_host_bytes_match_hf_deepseek_v2_attention(precision, dims, mbs):
    heads, kv_lora, q_lora, qk_nope, qk_rope, v_head = dims
    seq = 96
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    q, k = torch.randn(1, heads, 8, qk_nope + qk_rope), torch.randn(1, heads, 8, qk_nope + qk_rope)
    # the premise: PyTorch's CPU SDPA picks its math path for these head dims (0: SDPBackend.MATH)
    assert torch._fused_sdp_choice(q, k, torch.randn(1, heads, 8, v_head)) == 0
    measured = saved_bytes(
        seq=seq, dtype=dtype, heads=heads, kv_lora=kv_lora, q_lora=q_lora, qk_nope=qk_nope,
        qk_rope=qk_rope, v_head=v_head, mbs=mbs,
    )  # fmt: skip
    shape = ModelShape(
        name="t", layers=1, hidden=64, ffn=176, heads=heads, kv_heads=heads, vocab=128, tied=False,
        experts=4, moe_topk=2, moe_ffn=32,
        mla=MLAShape(q_lora=q_lora, kv_lora=kv_lora, qk_nope=qk_nope, qk_rope=qk_rope, v_head=v_head),
    )  # fmt: skip
    job = MegatronJob(shape=shape, seq=seq, mbs=mbs, engine="embedded", precision=precision, host=True)
    per_token, per_pair = mla_host_attention(job)
    assert per_token * seq * mbs + per_pair * seq * seq * mbs == measured
