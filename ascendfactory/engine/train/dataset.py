"""Training (and validation / test) samples on top of Megatron indexed datasets, in a deterministic order
fixed by `--seed`.

`--split` cuts the documents into train / valid / test ranges with Megatron's rule
(`megatron/legacy/data/dataset_utils.py` `get_train_valid_test_split_`, which MindSpeed-LLM's instruction
datasets use too): normalised weights, cumulative `round(w * n)`, then every boundary shifted by the rounding
excess so the last one is `n`. Each part samples only its own documents; valid and test use their own seeded
order.

- Pre-training (`<prefix>_text_document`): the training split's sequences, in a seeded order per epoch, are
  read as one token stream and cut into windows of `seq_length + 1` tokens that share their boundary token
  (Megatron GPTDataset); samples are then shuffled. tokens = w[:-1], labels = w[1:].
- Instruction (`<prefix>_packed_{input_ids,labels}_document`): one sequence per sample, seeded order per
  epoch, truncated/padded to `seq_length` (pad labels -100), then shifted: tokens = ids[:-1],
  labels = labels[1:].

With `--reset-position-ids` / `--reset-attention-mask` (`packed.py`) each sample also gives its rows'
position ids and document ids (from the end-of-document token, or with `--neat-pack` from the
`_packed_attention_mask_document` sample numbers), shifted like the tokens.

Global sample `k` of iteration `it` is `consumed + k`; micro-batch `m` of DP rank `r` takes samples
`m * MBS * DP + r * MBS + [0, MBS)` of the global batch (Megatron's pretraining sampler).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ascendfactory.engine.data.indexed import IndexedDataset, exists
from ascendfactory.engine.train.packed import PackingSpec
from ascendfactory.errors import ConfigError, Problem

IGNORE_INDEX = -100
INSTRUCTION_SUFFIXES = ("_packed_input_ids_document", "_packed_labels_document")
MASK_SUFFIX = "_packed_attention_mask_document"  # --neat-pack: each sample's number within its row


def split_ranges(split: str, n: int) -> list[tuple[int, int]]:
    """The [train, valid, test] document ranges of `n` items under Megatron's `--split` ("969,30,1")."""
    try:
        weights = [float(x) for x in split.replace("/", ",").split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            Problem(
                key="--split",
                message=f"'{split}' is not a list of numbers",
                fix="write it like 100,0,0",
                source="command line",
            )
        ) from None
    weights = (weights + [0.0] * 3)[:3]
    total = sum(weights)
    if total <= 0 or any(w < 0 for w in weights):
        raise ConfigError(
            Problem(
                key="--split",
                message=f"'{split}' sums to 0" if total <= 0 else f"'{split}' has a negative part",
                fix="write it like 100,0,0",
                source="command line",
            )
        )
    bounds = [0]
    for w in weights:
        bounds.append(bounds[-1] + int(round(w / total * float(n))))
    excess = bounds[-1] - n
    bounds = [bounds[0]] + [b - excess for b in bounds[1:]]
    return [(bounds[i], bounds[i + 1]) for i in range(3)]


def split_range(split: str, n: int) -> tuple[int, int]:
    """The train part `[0, end)` of `n` items under Megatron's `--split` (e.g. "969,30,1" or "100,0,0")."""
    return split_ranges(split, n)[0]


PART_NAMES = ("training", "validation", "test")


def _epoch_order(n: int, seed: int, epoch: int, shuffle: bool, part: int = 0) -> np.ndarray:
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    key = [seed, epoch] if part == 0 else [seed, epoch, part]
    return np.random.default_rng(key).permutation(n).astype(np.int64)


class PretrainSamples:
    """Windows of `seq_length + 1` tokens over the seeded stream of training sequences."""

    def __init__(
        self,
        prefix: str,
        *,
        seq_length: int,
        split: str,
        seed: int,
        num_samples: int,
        shuffle: bool,
        part: int = 0,
        packing: PackingSpec | None = None,
    ):
        self.packing = packing
        self.data = IndexedDataset(prefix)
        lo, hi = split_ranges(split, len(self.data))[part]
        sizes = self.data.sizes[lo:hi].astype(np.int64)
        tokens_per_epoch = int(sizes.sum())
        # validation/test windows may span repeated epochs of a small part (Megatron's GPTDataset does)
        if hi == lo or tokens_per_epoch <= (seq_length if part == 0 else 1):
            raise ConfigError(
                Problem(
                    key="--data-path" if part == 0 else "--split",
                    message=f"{prefix}: the {PART_NAMES[part]} split has {tokens_per_epoch} tokens"
                    + (", fewer than --seq-length + 1" if part == 0 else ""),
                    fix="use more data, a shorter --seq-length, or --split 100,0,0"
                    if part == 0
                    else f"give the {PART_NAMES[part]} part more documents, or --eval-iters 0",
                    source="command line",
                )
            )
        self.seq_length, self.first = seq_length, lo
        epochs = 1
        while (epochs * tokens_per_epoch - 1) // seq_length < num_samples:
            epochs += 1
        self.order = np.concatenate([_epoch_order(hi - lo, seed, e, shuffle, part) for e in range(epochs)])
        self.starts = np.concatenate([[0], np.cumsum(sizes[self.order])])
        count = int((self.starts[-1] - 1) // seq_length)
        self.shuffle_idx = _epoch_order(count, seed, 1 << 20, shuffle, part)

    def __len__(self) -> int:
        return len(self.shuffle_idx)

    def __getitem__(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        i = int(self.shuffle_idx[k % len(self.shuffle_idx)])
        lo, hi = i * self.seq_length, (i + 1) * self.seq_length + 1
        first = int(np.searchsorted(self.starts, lo, side="right")) - 1
        parts, pos = [], lo
        while pos < hi:
            seq = int(self.order[first])
            offset = pos - int(self.starts[first])
            take = min(hi - pos, int(self.starts[first + 1]) - pos)
            parts.append(self.data.get(self.first + seq, offset, take))
            pos += take
            first += 1
        window = np.concatenate(parts).astype(np.int64)
        if self.packing is None:
            return window[:-1], window[1:]
        return (window[:-1], window[1:], *self.packing.layout(window[:-1]))


class InstructionSamples:
    """One packed sft sequence per sample, padded to `seq_length`; labels -100 on prompt and padding."""

    def __init__(
        self,
        prefix: str,
        *,
        seq_length: int,
        split: str,
        seed: int,
        num_samples: int,
        shuffle: bool,
        pad_id: int = 0,
        part: int = 0,
        packing: PackingSpec | None = None,
    ):
        self.packing = packing
        self.masks = IndexedDataset(prefix + MASK_SUFFIX) if packing and packing.neat_pack else None
        self.ids = IndexedDataset(prefix + INSTRUCTION_SUFFIXES[0])
        self.labels = IndexedDataset(prefix + INSTRUCTION_SUFFIXES[1])
        lo, hi = split_ranges(split, len(self.ids))[part]
        if hi == lo:
            raise ConfigError(
                Problem(
                    key="--split",
                    message=f"{prefix}: the {PART_NAMES[part]} split is empty",
                    fix="use --split 100,0,0",
                    source="command line",
                )
            )
        self.seq_length, self.pad_id = seq_length, pad_id
        epochs = max(1, -(-num_samples // (hi - lo)))
        self.order = lo + np.concatenate(
            [_epoch_order(hi - lo, seed, e, shuffle, part) for e in range(epochs)]
        )

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        i = int(self.order[k % len(self.order)])
        ids = np.full(self.seq_length, self.pad_id, dtype=np.int64)
        labels = np.full(self.seq_length, IGNORE_INDEX, dtype=np.int64)
        raw_ids, raw_labels = self.ids.get(i)[: self.seq_length], self.labels.get(i)[: self.seq_length]
        ids[: len(raw_ids)] = raw_ids
        labels[: len(raw_labels)] = raw_labels
        if self.packing is None:
            return ids[:-1], labels[1:]
        mask = None
        if self.masks is not None:
            mask = np.zeros(self.seq_length, dtype=np.int64)
            raw = self.masks.get(i)[: self.seq_length]
            mask[: len(raw)] = raw
        positions, documents = self.packing.layout(ids, mask)
        return ids[:-1], labels[1:], positions[:-1], documents[:-1]


def build_samples(
    args, *, num_samples: int, pad_id: int = 0, part: int = 0, packing: PackingSpec | None = None
) -> PretrainSamples | InstructionSamples | None:
    """The samples the flags describe (`--data-path`, `--split`, `--seed`, `--is-instruction-dataset`).

    `part`: 0 training, 1 validation, 2 test; an empty validation / test part gives None (Megatron then
    sets do_valid / do_test to false)."""
    if len(args.data_path) != 1:
        raise ConfigError(
            Problem(
                key="--data-path",
                message=f"{len(args.data_path)} values; dataset blending "
                "is not supported by the embedded trainer",
                fix="give one dataset prefix",
                source="command line",
            )
        )
    prefix = args.data_path[0]
    common = dict(
        seq_length=args.seq_length,
        split=args.split,
        seed=args.seed,
        num_samples=num_samples,
        shuffle=not args.no_shuffle,
        part=part,
        packing=packing,
    )
    if args.is_instruction_dataset or args.stage == "sft":
        if not exists(prefix + INSTRUCTION_SUFFIXES[0]):
            raise ConfigError(
                Problem(
                    key="--data-path",
                    message=f"{prefix}{INSTRUCTION_SUFFIXES[0]}.idx not found",
                    fix="for sft give the prefix before _packed_* (the preprocess --output-prefix)",
                    source="command line",
                )
            )
        if part and _empty_part(prefix + INSTRUCTION_SUFFIXES[0], args.split, part):
            return None
        if packing is not None and packing.neat_pack and not exists(prefix + MASK_SUFFIX):
            raise ConfigError(
                Problem(
                    key="--neat-pack",
                    message=f"{prefix}{MASK_SUFFIX}.idx not found (the samples' numbers within each row)",
                    fix="preprocess the data with --neat-pack",
                    source="command line",
                )
            )
        return InstructionSamples(prefix, pad_id=pad_id, **common)
    if not exists(prefix) and exists(prefix + "_text_document"):
        prefix += "_text_document"
    if not exists(prefix):
        raise ConfigError(
            Problem(
                key="--data-path",
                message=f"{prefix}.bin/.idx not found",
                fix="give the prefix <output-prefix>_text_document written by preprocess",
                source="command line",
            )
        )
    if part and _empty_part(prefix, args.split, part):
        return None
    return PretrainSamples(prefix, **common)


def _empty_part(prefix: str, split: str, part: int) -> bool:
    lo, hi = split_ranges(split, len(IndexedDataset(prefix)))[part]
    return hi == lo


@dataclass(frozen=True)
class BatchPlan:
    micro_batch_size: int
    global_batch_size: int
    dp_size: int
    dp_rank: int

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp_size)

    def indices(self, consumed: int) -> list[int]:
        """Global sample numbers of this DP rank's micro-batches (micro-batch major) for one iteration."""
        mbs, dp = self.micro_batch_size, self.dp_size
        return [
            consumed + m * mbs * dp + self.dp_rank * mbs + j
            for m in range(self.num_microbatches)
            for j in range(mbs)
        ]


def get_batch(samples, plan: BatchPlan, consumed: int) -> tuple[np.ndarray, ...]:
    """(tokens, labels) of shape [num_microbatches * MBS, L] for this DP rank; with packed sequences also
    (position ids, document ids)."""
    rows = [samples[k] for k in plan.indices(consumed)]
    return tuple(np.stack([r[j] for r in rows]) for j in range(len(rows[0])))


def pad_id_from(model_dir: str) -> int:
    """The pad id of the tokenizer in `model_dir` (config.json's pad/eos id as a fallback; 0 if none)."""
    import json

    for name in ("tokenizer_config.json", "config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            with open(path) as f:
                cfg = json.load(f)
            for key in ("pad_token_id", "eos_token_id"):
                value = cfg.get(key)
                if isinstance(value, list):
                    value = value[0] if value else None
                if isinstance(value, int):
                    return value
    return 0


def eod_id_from(model_dir: str) -> int | None:
    """The end-of-document token id (the tokenizer's EOS, as Megatron's HF tokenizer's `eod`): from the
    tokenizer in `model_dir`, else config.json / generation_config.json's eos_token_id; None if none.
    (Only a folder with tokenizer files is asked: transformers makes a default tokenizer for the model type
    of a folder without any.)"""
    import json

    tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    if any(os.path.isfile(os.path.join(model_dir, n)) for n in tokenizer_files):
        from transformers import AutoTokenizer

        eos = AutoTokenizer.from_pretrained(model_dir).eos_token_id
        if isinstance(eos, int):
            return eos
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            with open(path) as f:
                value = json.load(f).get("eos_token_id")
            if isinstance(value, list):
                value = value[0] if value else None
            if isinstance(value, int):
                return value
    return None
