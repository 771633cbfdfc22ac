"""Verification works on meta tensors without torch's Python meta `cat` (it imports torch._dynamo on first
use, over a second of a fresh converter process): `tensor_ops.cat` gives torch.cat's shape and dtype."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from ascendfactory.engine.convert.tensor_ops import cat
from tests.conftest import REPO


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_meta_cat_matches_torch_cat(dim):
    parts = [torch.zeros(2, 3, 4, dtype=torch.bfloat16), torch.zeros(2, 3, 4, dtype=torch.bfloat16)]
    real = torch.cat(parts, dim=dim)
    meta = cat([p.to("meta") for p in parts], dim=dim)
    assert meta.is_meta and meta.shape == real.shape and meta.dtype == real.dtype
    assert torch.equal(cat(parts, dim=dim), real)  # real tensors: torch.cat itself


def test_meta_cat_refuses_parts_that_do_not_fit():
    with pytest.raises(ValueError, match="does not fit"):
        cat([torch.empty(2, 3, device="meta"), torch.empty(2, 4, device="meta")], dim=0)


def test_verifying_a_conversion_does_not_import_torch_dynamo(tmp_path):
    from tests.support.tiny_model import build_tiny_model

    build_tiny_model(tmp_path / "hf", "llama2", num_layers=2)  # here: transformers may import torch._dynamo
    code = textwrap.dedent(
        f"""
        import sys
        from ascendfactory.engine.convert.__main__ import main
        rc = main(["--load-model-type", "hf", "--save-model-type", "mg", "--load-dir", "{tmp_path / "hf"}",
                   "--save-dir", "{tmp_path / "mg"}", "--target-tensor-parallel-size", "2",
                   "--target-pipeline-parallel-size", "2", "--model-type-hf", "llama2"])
        print(rc, "torch._dynamo" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stderr  # verification ran
    assert done.stdout.split() == ["0", "False"]
