"""Checks run after a conversion: tensor names, shapes and dtypes; optionally logits of a short prompt."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from ascendfactory.errors import AscendFactoryError

log = logging.getLogger("ascendfactory.convert")

Signature = dict[str, tuple[tuple[int, ...], str]]


class VerificationError(AscendFactoryError):
    """The converted checkpoint does not match its source (a tensor is missing, extra or differs)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def signature(sd: Mapping[str, torch.Tensor]) -> Signature:
    """name -> (shape, dtype name) of a state dict."""
    return {k: (tuple(v.shape), dtype_name(v.dtype)) for k, v in sd.items()}


def compare_signatures(expected: Signature, actual: Signature, *, what: str) -> None:
    """VerificationError naming the first tensors that are missing, extra, or of another shape or dtype."""
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    problems = [f"missing tensor '{k}' {expected[k]}" for k in missing[:5]]
    problems += [f"unexpected tensor '{k}' {actual[k]}" for k in extra[:5]]
    for k in sorted(set(expected) & set(actual)):
        if expected[k] != actual[k]:
            (es, ed), (as_, ad) = expected[k], actual[k]
            problems.append(f"tensor '{k}': source shape {list(es)} {ed}, converted shape {list(as_)} {ad}")
    if problems:
        raise VerificationError(
            f"verification of {what} failed ({len(expected)} tensors expected, {len(actual)} found):\n  "
            + "\n  ".join(problems[:10])
            + "\n  (run with --no-verify to keep the output anyway)"
        )
    log.info("verified %s: %d tensors, names, shapes and dtypes match the source", what, len(actual))


def _hf_model(config: Any, sd: Mapping[str, torch.Tensor], what: str) -> Any:
    """The HF model with the weights `sd` (float32), loaded by `from_pretrained` from a temporary folder:
    transformers' own key conversions then apply (transformers 5 fuses the per-expert tensors of the Hub
    layout into one tensor per layer). Weights that do not fit raise VerificationError."""
    import tempfile

    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory(prefix="af-verify-") as tmp:
        config.save_pretrained(tmp)
        save_file({k: v.float().contiguous() for k, v in sd.items()}, f"{tmp}/model.safetensors")
        model, info = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    unexpected, mismatched = list(info["unexpected_keys"]), list(info["mismatched_keys"])
    if missing or unexpected or mismatched:
        raise VerificationError(
            f"--verify-logits ({what}): weights do not fit the HF model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}, other shapes {sorted(map(str, mismatched))[:5]}"
        )
    return model.eval()


def verify_logits(
    config: Any,
    reference: Mapping[str, torch.Tensor],
    converted: Mapping[str, torch.Tensor],
    *,
    what: str,
    seq_len: int = 16,
) -> float:
    """Run the HF model with `reference` and with `converted` weights on one short prompt; compare logits.

    Exact equality is required when both sides have the same dtypes, else a max abs difference <= 1e-2.
    Returns the max abs difference.
    """
    from transformers import AutoConfig

    if isinstance(config, dict):
        config = AutoConfig.for_model(**config)
    logits = []
    for sd in (reference, converted):
        model = _hf_model(config, sd, what)
        ids = (torch.arange(seq_len, dtype=torch.long) * 7919 % config.vocab_size).unsqueeze(0)
        with torch.no_grad():
            logits.append(model(input_ids=ids).logits)
    diff = (logits[0] - logits[1]).abs().max().item()
    same_dtypes = signature(reference) == signature(converted)
    limit = 0.0 if same_dtypes else 1e-2
    if diff > limit:
        raise VerificationError(
            f"--verify-logits ({what}): logits differ by up to {diff:.3e} (limit {limit})"
        )
    log.info("verified %s logits on a %d-token prompt: max abs difference %.3e", what, seq_len, diff)
    return diff
