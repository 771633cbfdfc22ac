"""The output tree of the Megatron-style backends (torch, mindspeed-llm, mindspeed-mm): the house's
(`ascendfactory.output_tree`) and the family's own entries, one name per path."""

from __future__ import annotations

from dataclasses import dataclass

from ascendfactory.output_tree import OutputTree as HouseTree


@dataclass(frozen=True)
class OutputTree(HouseTree):
    """The house's paths, plus the Megatron family's: the preprocessed data, the converted weights, the
    final conversion back to HF."""

    @property
    def preprocess_dir(self) -> str:
        return self.path("preprocess_data")

    def converted_weights(self, tp: int, pp: int, ep: int = 1) -> str:
        """`converted_weight_TP{tp}PP{pp}`, plus `EP{ep}` for an expert-parallel layout (other folders)."""
        return self.path(f"converted_weight_TP{tp}PP{pp}" + (f"EP{ep}" if ep > 1 else ""))

    @property
    def mg2hf_dir(self) -> str:
        return self.path("ckpt_converted_mg2hf")
