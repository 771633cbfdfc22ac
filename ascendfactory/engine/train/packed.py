"""Packed sequences: several documents per row, each attending only to itself, with its own positions.

MindSpeed-LLM's flags, as it reads them (2.1.0):
- `--reset-position-ids`: positions restart after each end-of-document token (pre-training: Megatron's
  `_get_ltor_masks_and_position_ids`, `mindspeed_llm/core/datasets/gpt_dataset.py`; instruction data:
  `DecoderPackedMTFDataset._get_reset_position_ids`, after each EOS of a row packed by preprocessing's
  `--pack`), and attention is restricted to each document: the positions' zeros are the documents' starts
  (`training/utils.py` `compute_actual_seq_len`, the cumulative lengths of the flash-attention kernel's TND
  layout, set by `pretrain_gpt.get_batch` and the SFT trainer's `get_batch`).
- `--reset-attention-mask` (pre-training): attention restricted to each document, a document ending with
  its end-of-document token (Megatron's mask: no token after EOD i sees tokens up to i); positions
  restart only with `--reset-position-ids`.
- `--neat-pack` (needs `--reset-position-ids`, MindSpeed-LLM's validate rule): the rows' attention masks
  number their samples 1, 2, 3, ... (preprocessing's `--neat-pack`); positions count within each sample
  (`_get_neat_pack_position_ids`: per mask value in order, then 0 for every padding token), and each
  position 0 starts a document as above (so every padding token is one of its own).

Attention over the documents (`attention_forward`, registered as an HF attention implementation):
- on CUDA, in bf16 / fp16 and without attention dropout, torch's variable-length flash attention
  (`torch.nn.attention.varlen.varlen_attn`, torch >= 2.10) on the rows flattened to one token stream
  with the documents' cumulative lengths (MindSpeed's TND layout); no mask is made;
- elsewhere (CPU, fp32, dropout, older torch) SDPA with a boolean block-diagonal causal mask [B, 1, S, S]:
  the same attention, the (S x S) mask made once per micro-batch.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported where it runs: the dataset (and its readers) need only numpy here
    import torch

ATTENTION = "af_packed_sdpa"  # the HF attention implementation name registered by `use_packed_attention`


@dataclass(frozen=True)
class PackingSpec:
    """What the dataset needs to lay out packed rows: the flags and the end-of-document token id."""

    reset_position_ids: bool
    reset_attention_mask: bool
    neat_pack: bool
    eod: int | None  # None with --neat-pack (its documents come from the attention mask)

    @classmethod
    def from_args(cls, args: Any, eod: int | None) -> PackingSpec | None:
        if not (args.reset_position_ids or args.reset_attention_mask):
            return None
        return cls(bool(args.reset_position_ids), bool(args.reset_attention_mask), bool(args.neat_pack), eod)

    def layout(
        self, tokens: np.ndarray, neat_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(position ids, document ids) of one row of `tokens` [L] (the row's attention-mask values
        [L] with --neat-pack). Document ids increase along the row; attention stays within one."""
        n = len(tokens)
        if self.neat_pack:
            assert neat_mask is not None
            positions = neat_positions(neat_mask)
        elif self.reset_position_ids:
            positions = reset_positions(tokens, self.eod)
        else:
            positions = np.arange(n, dtype=np.int64)
        if self.reset_position_ids:
            documents = np.cumsum(positions == 0) - 1  # each position 0 starts a document
        else:  # --reset-attention-mask alone: a document ends with its EOD token
            ends = (tokens == self.eod).astype(np.int64)
            documents = np.concatenate([[0], np.cumsum(ends[:-1])])
        return positions, documents.astype(np.int64)


def reset_positions(tokens: np.ndarray, eod: int | None) -> np.ndarray:
    """Positions that restart at 0 after every `eod` token (Megatron's loop over the EOD indices)."""
    n = len(tokens)
    positions = np.arange(n, dtype=np.int64)
    if eod is None:
        return positions
    starts = np.zeros(n, dtype=np.int64)
    after = np.flatnonzero(tokens[:-1] == eod) + 1  # each token after an EOD starts a document
    starts[after] = after
    return positions - np.maximum.accumulate(starts)


def neat_positions(mask: np.ndarray) -> np.ndarray:
    """MindSpeed-LLM's `_get_neat_pack_position_ids`: for each sample number (mask value) in increasing
    order, 0 .. its length - 1; then one 0 per padding token (mask 0)."""
    counts = Counter(int(x) for x in mask)
    pads = counts.pop(0, 0)
    out = [i for key in sorted(counts) for i in range(counts[key])] + [0] * pads
    return np.asarray(out, dtype=np.int64)


@dataclass
class Packing:
    """One micro-batch's packed layout on the device: position ids and document ids [B, S]."""

    position_ids: torch.Tensor
    documents: torch.Tensor
    varlen: bool = False  # attention by cumulative lengths (CUDA flash) instead of a mask

    def mask(self) -> torch.Tensor:
        """[B, 1, S, S] bool: query i sees key j <= i of its own document (SDPA's True = attend)."""
        import torch

        d = self.documents
        s = d.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool, device=d.device).tril()
        return ((d.unsqueeze(2) == d.unsqueeze(1)) & causal).unsqueeze(1)

    def cumulative_lengths(self) -> tuple[torch.Tensor, int]:
        """The documents of the rows flattened into one stream: cumulative lengths (int32, from 0 to B x S)
        and the longest document (a row boundary always ends a document)."""
        import torch

        d = self.documents
        b, s = d.shape
        start = torch.ones_like(d, dtype=torch.bool)
        start[:, 1:] = d[:, 1:] != d[:, :-1]
        begins = torch.nonzero(start.reshape(-1)).squeeze(1)
        total = torch.tensor([b * s], device=d.device, dtype=begins.dtype)
        cu = torch.cat([begins, total]).to(torch.int32)
        return cu, int((cu[1:] - cu[:-1]).max())

    def layer_kwargs(self) -> dict[str, Any]:
        """What each decoder layer is called with: an attention mask, or the varlen kernel's lengths under
        the keyword names HF's flash-attention path uses."""
        if not self.varlen:
            return {"attention_mask": self.mask()}
        cu, longest = self.cumulative_lengths()
        return {
            "attention_mask": None,
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": longest,
            "max_length_k": longest,
        }


def make_packings(
    positions: np.ndarray, documents: np.ndarray, num_microbatches: int, device: torch.device, *, varlen: bool
) -> list[Packing]:
    """Per micro-batch `Packing` of a batch's [n x MBS, S] layout arrays (micro-batch major)."""
    import torch

    pos = torch.from_numpy(positions).to(device)
    doc = torch.from_numpy(documents).to(device)
    return [
        Packing(p, d, varlen=varlen) for p, d in zip(pos.chunk(num_microbatches), doc.chunk(num_microbatches))
    ]


# ---------------------------------------------------------------------------------------------- attention
def varlen_available(device: torch.device, dtype: torch.dtype, dropout: float) -> bool:
    """The variable-length flash kernel can run this batch (CUDA, 16-bit, no dropout, torch has it)."""
    import torch

    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16) or dropout > 0:
        return False
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True


def _varlen(query, key, value, cu, longest, scaling) -> torch.Tensor:
    """torch's varlen flash attention, causal within each document; q/k/v [B, H, S, D] -> [B, S, Hq, D]."""
    from torch.nn.attention.varlen import varlen_attn

    b, hq, s, d = query.shape
    q = query.transpose(1, 2).reshape(b * s, hq, d)
    k = key.transpose(1, 2).reshape(b * s, key.shape[1], d)
    v = value.transpose(1, 2).reshape(b * s, value.shape[1], d)
    params = inspect.signature(varlen_attn).parameters
    kwargs: dict[str, Any] = {"scale": scaling}
    if "window_size" in params:  # torch >= 2.11: causal is a window
        kwargs["window_size"] = (-1, 0)
    else:
        kwargs["is_causal"] = True
    if k.shape[1] != hq:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:  # grouped-query attention by repeating the key/value heads
            k = k.repeat_interleave(hq // k.shape[1], dim=1)
            v = v.repeat_interleave(hq // v.shape[1], dim=1)
    out = varlen_attn(q, k, v, cu, cu, longest, longest, **kwargs)
    return out.reshape(b, s, hq, d)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """HF's SDPA attention, or with `cu_seq_lens_q` the varlen kernel over the packed documents."""
    cu = kwargs.pop("cu_seq_lens_q", None)
    if cu is not None:
        return _varlen(query, key, value, cu, kwargs["max_length_q"], scaling), None
    for name in ("cu_seq_lens_k", "max_length_q", "max_length_k"):
        kwargs.pop(name, None)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )


def use_packed_attention(hf_config: Any) -> None:
    """Every layer built from `hf_config` attends through `attention_forward` (unless selective recompute
    registered its own, which calls it)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, attention_forward)
    if hf_config._attn_implementation in (None, "sdpa"):
        hf_config._attn_implementation = ATTENTION
