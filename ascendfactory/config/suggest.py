"""'Did you mean' for unknown keys."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str], *, n: int = 3) -> str:
    """' (did you mean: a, b?)' or '' when nothing is close."""
    cands = list(candidates)
    norm = {c.replace("-", "_").lower(): c for c in cands}
    key = word.replace("-", "_").lower()
    if key in norm and norm[key] != word:
        return f" (did you mean: {norm[key]}?)"
    close = difflib.get_close_matches(word, cands, n=n, cutoff=0.6)
    return f" (did you mean: {', '.join(close)}?)" if close else ""
