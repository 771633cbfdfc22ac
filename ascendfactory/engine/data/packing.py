"""`--pack`: several instruction samples per `--seq-length` row, as MindSpeed-LLM's packed datasets.

Samples are packed greedily: each row takes the longest remaining sample that still fits, until none
does (deterministic: ties go by input order). Each row is padded to `seq_length`: input ids with the pad
id, labels with -100, attention mask with 0. The attention mask is 1 on every real token, or with
`--neat-pack` the 1-based index of the sample within the row (so attention can be restricted to each
sample).
"""

from __future__ import annotations

import bisect

import numpy as np

from ascendfactory.engine.data.handlers import IGNORE_INDEX


def greedy_knapsack(lengths: list[int], capacity: int) -> list[list[int]]:
    """Bins of sample indices (each bin's lengths sum to <= capacity); longer samples are left out.

    Each bin is filled by repeatedly taking the longest remaining sample that still fits (binary search
    over the remaining samples sorted by (length, index)), so packing is O(n log n) plus list moves.
    """
    items = sorted((n, i) for i, n in enumerate(lengths) if n <= capacity)
    keys = [n for n, _ in items]
    bins: list[list[int]] = []
    while items:
        free, members = capacity, []
        while items:
            pos = bisect.bisect_right(keys, free)
            if pos == 0:
                break
            n, i = items.pop(pos - 1)
            keys.pop(pos - 1)
            members.append(i)
            free -= n
        bins.append(members)
    return bins


def pack(
    samples: list[dict[str, np.ndarray]], *, seq_length: int, pad_id: int, neat: bool = False
) -> tuple[list[dict[str, np.ndarray]], int]:
    """Packed rows of exactly `seq_length` tokens, and how many samples were too long to pack."""
    lengths = [len(s["input_ids"]) for s in samples]
    bins = greedy_knapsack(lengths, seq_length)
    rows = []
    for members in bins:
        ids = np.full(seq_length, pad_id, dtype=np.int64)
        labels = np.full(seq_length, IGNORE_INDEX, dtype=np.int64)
        mask = np.zeros(seq_length, dtype=np.int64)
        pos = 0
        for k, i in enumerate(members):
            n = lengths[i]
            ids[pos : pos + n] = samples[i]["input_ids"]
            labels[pos : pos + n] = samples[i]["labels"]
            mask[pos : pos + n] = k + 1 if neat else 1
            pos += n
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows, sum(1 for n in lengths if n > seq_length)
