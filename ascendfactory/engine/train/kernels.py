"""The fused kernels torch offers for the embedded trainer's layers, and the opt-in compilation of a layer.

- AdamW: torch's fused kernel (`fused=True`, CPU and CUDA) always (`step.adamw`).
- RMSNorm: `--use-fused-rmsnorm` (MindSpeed-LLM's flag: `torch_npu.npu_rms_norm` there) runs every RMSNorm
  of the stage (the layers' two, Qwen3's q/k norms, the final one) as `torch.nn.functional.rms_norm`: one
  kernel that normalises and scales in fp32 and rounds once, where HF's module (and Megatron's unfused
  RMSNorm) rounds the normalised value to the input's dtype before multiplying by the weight. The weight
  stays the same parameter, under the same name.
- RoPE and SwiGLU: torch has no fused kernel for either (`--use-fused-rotary-pos-emb`, `--use-fused-swiglu`
  stay accepted and ignored); `--af-torch-compile` fuses them with the rest of the layer.
- `--af-torch-compile`: each decoder layer is `torch.compile`d in place (torchtitan compiles each
  transformer block the same way, `parallelize_llama.apply_compile`); the first iterations pay for the
  compilation (minutes on CPU), later ones run the generated kernels. Parameters, names and checkpoints
  are unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FusedRMSNorm(nn.Module):
    """`torch.nn.functional.rms_norm` with an HF RMSNorm's weight (the same parameter) and epsilon."""

    def __init__(self, weight: nn.Parameter, eps: float):
        super().__init__()
        self.weight = weight
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def is_rmsnorm(module: nn.Module) -> bool:
    """An HF RMSNorm module (Qwen2RMSNorm, LlamaRMSNorm, ...), not one replaced already."""
    name = type(module).__name__
    return name.endswith("RMSNorm") and name != FusedRMSNorm.__name__ and hasattr(module, "weight")


def use_fused_rmsnorm(model: nn.Module) -> int:
    """Replace every HF RMSNorm module of `model` by `FusedRMSNorm` (before tensor parallelism is applied,
    so its plan wraps the new module); returns how many were replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if is_rmsnorm(child):
                eps = getattr(child, "variance_epsilon", getattr(child, "eps", 1e-6))
                setattr(parent, name, FusedRMSNorm(child.weight, float(eps)))
                replaced += 1
    return replaced


def compile_layers(layers: list[nn.Module]) -> None:
    """`torch.compile` each decoder layer in place (its forward; parameters and names unchanged)."""
    for layer in layers:
        layer.compile()
