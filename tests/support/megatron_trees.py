"""Two Megatron checkpoint trees compared tensor by tensor (a converter against the framework's own)."""

from __future__ import annotations

from pathlib import Path


def compare_megatron_trees(ours: Path, peer: Path) -> str:
    """Every `model_optim_rng.pt` of the two trees: the same files, names, shapes, dtypes and values."""
    import torch

    files = sorted(p.relative_to(ours) for p in ours.rglob("model_optim_rng.pt"))
    theirs = sorted(p.relative_to(peer) for p in peer.rglob("model_optim_rng.pt"))
    if files != theirs:
        return f"DIFFERENT files: ours {[str(f) for f in files]}, peer {[str(f) for f in theirs]}"
    tensors = 0
    for rel in files:
        a = torch.load(ours / rel, map_location="cpu", weights_only=False)["model"]
        b = torch.load(peer / rel, map_location="cpu", weights_only=False)["model"]
        a = {k: v for k, v in a.items() if isinstance(v, torch.Tensor)}
        b = {k: v for k, v in b.items() if isinstance(v, torch.Tensor)}
        if sorted(a) != sorted(b):
            only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
            return f"DIFFERENT names in {rel}: only ours {only_a}, only peer {only_b}"
        for k in a:
            if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k]):
                x, y = a[k], b[k]
                return f"DIFFERENT tensor {rel}:{k}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}"
            tensors += 1
    return f"identical: {len(files)} files, {tensors} tensors (names, shapes, dtypes, values)"
