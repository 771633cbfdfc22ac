"""The output tree of the Megatron-style backends (spec ascendfactory.md section 3.3), one name per path."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class OutputTree:
    """Paths under `af_output_dir` for the Megatron-style backends (torch, mindspeed-llm, mindspeed-mm)."""

    root: str

    def _p(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def preprocess_dir(self) -> str:
        return self._p("preprocess_data")

    def converted_weights(self, tp: int, pp: int, ep: int = 1) -> str:
        """`converted_weight_TP{tp}PP{pp}`, plus `EP{ep}` for an expert-parallel layout (other folders)."""
        return self._p(f"converted_weight_TP{tp}PP{pp}" + (f"EP{ep}" if ep > 1 else ""))

    @property
    def saved_checkpoints(self) -> str:
        return self._p("saved_checkpoints")

    @property
    def mg2hf_dir(self) -> str:
        return self._p("ckpt_converted_mg2hf")

    @property
    def logs_dir(self) -> str:
        return self._p("logs")

    @property
    def exp_config(self) -> str:
        return self._p("exp-config.yaml")

    @property
    def loss_plot(self) -> str:
        return self._p("training_loss.png")

    @property
    def tensorboard_dir(self) -> str:
        return self._p("tensorboard")

    @property
    def manifest_dir(self) -> str:
        return self._p(".af")


OutputLayout = OutputTree  # the old name ("layout" also means the parallel layout)
