"""`distopt_file`: Megatron's distrib_optim.pt dict from named states and back, with Megatron's checks."""

from __future__ import annotations

import pytest
import torch

from ascendfactory.engine.train import distopt_file as F
from ascendfactory.errors import ConfigError

SPEC = F.FileLayout(F.buffer_key(torch.bfloat16), dp=2, bucket_sizes=(None,), shared=(None,))


def _to_chunks(local):  # stand-in for the checkpoint's name mapping: HF "a.weight" -> Megatron name
    names = {"a": "decoder.layers.0.input_layernorm.weight", "b": "decoder.layers.0.mlp.linear_fc2.weight"}
    return {"model": {names[n]: t for n, t in local.items()}}


def _to_local(chunk, _c):
    back = {"decoder.layers.0.input_layernorm.weight": "a", "decoder.layers.0.mlp.linear_fc2.weight": "b"}
    return {back[n]: t for n, t in chunk.items()}


def test_keys_dtypes_and_round_trip():
    # (param dtype, grad dtype): Megatron accumulates bf16 runs' gradients in fp32, fp16 ones in fp16
    assert F.buffer_key(torch.bfloat16) == (torch.bfloat16, torch.float32)
    assert F.buffer_key(torch.float16) == (torch.float16, torch.float16)
    named = {"a": torch.randn(3, 8), "b": torch.randn(3, 4, 5)}
    saved = F.to_file(named, _to_chunks, SPEC)
    assert saved["buckets_coalesced"] is True and list(saved[0]) == [SPEC.key]
    entry = saved[0][SPEC.key]
    # reversed registration order: fc2 (20 elements) at 0, the norm at the next multiple of 64
    assert entry["numel_unpadded"] == 64 + 8
    assert torch.equal(entry["exp_avg"][64:72], named["a"][1]) and not entry["param"][20:64].any()
    current = _to_chunks({n: t[0] for n, t in named.items()})
    back = F.from_file(saved, current, _to_local, SPEC, where="ckpt")
    assert all(torch.equal(back[n], t) for n, t in named.items())


def test_megatrons_refusals():
    named = {"a": torch.randn(3, 8), "b": torch.randn(3, 4, 5)}
    saved = F.to_file(named, _to_chunks, SPEC)
    current = _to_chunks({"a": torch.zeros(16), "b": torch.zeros(4, 5)})  # another model
    with pytest.raises(ConfigError, match=r"current run \(80\) and checkpoint \(72\)"):
        F.from_file(saved, current, _to_local, SPEC, where="ckpt")
    fp32 = F.FileLayout(F.buffer_key(torch.float32), dp=1, bucket_sizes=(None,), shared=(None,))
    with pytest.raises(ConfigError, match="has no buffer 0"):
        F.from_file(saved, _to_chunks({n: t[0] for n, t in named.items()}), _to_local, fp32, where="ckpt")
    with pytest.raises(ConfigError, match="af_param_order"):
        F.from_file({**saved, F.OLD_ORDER_KEY: []}, current, _to_local, SPEC, where="ckpt")
