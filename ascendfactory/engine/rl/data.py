"""GRPO prompts from MindSpeed-RL's preprocessed dataset (`<data_path>_packed_{input_ids,labels}_document`).

`input_ids` holds each prompt already rendered with its chat template (up to the assistant's turn),
`labels` the reference answer's tokens (R1AlpacaStyleInstructionHandler: `dataset_additional_keys:
[labels]`). Prompts are drawn in a seeded order per epoch (the SFT trainer's: numpy's generator seeded
with [seed, epoch]; `no_shuffle` keeps the file order); prompt `k` of the run is `order[k]`, so the data
position of a run is just the number of prompts consumed (iteration x global_batch_size).
"""

from __future__ import annotations

import numpy as np

from ascendfactory.engine.data.indexed import IndexedDataset, exists
from ascendfactory.engine.train.dataset import split_range
from ascendfactory.errors import ConfigError, Problem

SUFFIXES = {"input_ids": "_packed_input_ids_document", "labels": "_packed_labels_document"}


class PromptDataset:
    def __init__(self, prefix: str, *, split: str, seed: int, shuffle: bool, num_prompts: int, key: str):
        missing = [prefix + s for s in SUFFIXES.values() if not exists(prefix + s)]
        if missing:
            raise ConfigError(
                Problem(
                    key=key,
                    message=f"{', '.join(m + '.idx' for m in missing)} not found",
                    fix="give the prefix before _packed_* written by preprocessing with "
                    "R1AlpacaStyleInstructionHandler and dataset_additional_keys: [labels]",
                )
            )
        self.ids = IndexedDataset(prefix + SUFFIXES["input_ids"])
        self.labels = IndexedDataset(prefix + SUFFIXES["labels"])
        _, end = split_range(split, len(self.ids))
        if end == 0:
            raise ConfigError(
                Problem(key=key, message=f"{prefix}: the training split is empty", fix="use split: 100,0,0")
            )
        epochs = max(1, -(-num_prompts // end))
        self.order = np.concatenate(
            [
                np.random.default_rng([seed, e]).permutation(end) if shuffle else np.arange(end)
                for e in range(epochs)
            ]
        )

    def __len__(self) -> int:
        return len(self.order)

    def prompt(self, k: int) -> tuple[list[int], list[int]]:
        """(prompt tokens, answer tokens) of the run's prompt number `k`."""
        i = int(self.order[k % len(self.order)])
        return self.ids.get(i).astype(np.int64).tolist(), self.labels.get(i).astype(np.int64).tolist()

    def longest_prompt(self) -> int:
        return int(self.ids.sizes.max()) if len(self.ids) else 0
