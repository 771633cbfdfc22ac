"""FLOPs of one training iteration by Megatron's formula, the figure its log's `throughput per GPU
(TFLOP/s/GPU)` divides by the time (Megatron-LM core_r0.8.0 `megatron/training/training.py`
`num_floating_point_operations`, line 73; the embedded trainer prints the same figure,
`ascendfactory/engine/train/logline.py`, and a unit test holds the two equal).

    12 x B x s x L x h^2 x ( (1 + g/a + s/h) x (a x c / h)      attention: QKV, scores, output
                             + f/h x k x (3/2 if SwiGLU)        MLP (k experts a token is routed to)
                             + V / (2 L h) )                    logits
"""

from __future__ import annotations


def megatron_flops(
    *,
    batch: int,
    seq: int,
    layers: int,
    hidden: int,
    ffn: int,
    heads: int,
    kv_heads: int,
    kv_channels: int,
    padded_vocab: int,
    swiglu: bool = True,
    routed_experts: int = 1,
) -> float:
    """Forward + backward FLOPs of `batch` sequences of `seq` tokens (no recompute), as Megatron counts."""
    q_ratio = kv_channels * heads / hidden
    gated = 3 / 2 if swiglu else 1
    return (
        12
        * batch
        * seq
        * layers
        * hidden
        * hidden
        * (
            (1 + kv_heads / heads + seq / hidden) * q_ratio
            + ffn / hidden * routed_experts * gated
            + padded_vocab / (2 * layers * hidden)
        )
    )


def logit_flops(*, batch: int, seq: int, hidden: int, padded_vocab: int) -> float:
    """The logit term of `megatron_flops` alone (6 B s h V): the output layer, on the last pipeline stage."""
    return 6.0 * batch * seq * hidden * padded_vocab


def score_flops(*, batch: int, seq: int, layers: int, heads: int, kv_channels: int) -> float:
    """The attention-score term of `megatron_flops` (12 B s^2 L a c): what selective recompute redoes."""
    return 12.0 * batch * seq * seq * layers * heads * kv_channels
