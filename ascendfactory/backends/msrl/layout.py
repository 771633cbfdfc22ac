"""The MindSpeed-RL output tree (seed 000: AscendFactory's output layout, MindSpeed-RL), one name per path.

{af_output_dir}/
  preprocessed_data/                      cli/preprocess_data.py output (<name>_packed_*_document.{bin,idx})
  converted_hf2mg_weight_TP{tp}PP{pp}/    the HF weights in Megatron-mcore format (MindSpeed-LLM converter)
  saved_checkpoints/                      actor_config.save: iter_%07d/ + latest_checkpointed_iteration.txt
  converted_mg2hf_weight/                 the trained weights back in HF format
  logs/grpo_metrics-<time>.log            the driver's per-iteration metric lines
  logs/<model>-<exp>-<stamp>-run_log-N<nodes>-<node>.txt, ...-npu_info-R<node>.txt
  exp-config.yaml, training_loss.png      (AscendFactory's, as for the other backends)
  mindspeed_rl_grpo.yaml, mindspeed_rl_data.yaml   the MindSpeed-RL yaml and the dataset yaml
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TRAIN_CONFIG = "mindspeed_rl_grpo"  # --config-name of cli/train_grpo.py
DATA_CONFIG = "mindspeed_rl_data"  # the config name cli/preprocess_data.py takes as its first argument
METRICS_LOG = "grpo_metrics-{time}.log"


@dataclass(frozen=True)
class RLOutputTree:
    root: str

    def _p(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def preprocessed(self) -> str:
        return self._p("preprocessed_data")

    def converted(self, tp: int, pp: int) -> str:
        return self._p(f"converted_hf2mg_weight_TP{tp}PP{pp}")

    @property
    def saved_checkpoints(self) -> str:
        return self._p("saved_checkpoints")

    @property
    def mg2hf(self) -> str:
        return self._p("converted_mg2hf_weight")

    @property
    def logs(self) -> str:
        return self._p("logs")

    @property
    def metrics_log(self) -> str:
        return self._p("logs", METRICS_LOG)

    @property
    def train_yaml(self) -> str:
        return self._p(f"{TRAIN_CONFIG}.yaml")

    @property
    def data_yaml(self) -> str:
        return self._p(f"{DATA_CONFIG}.yaml")

    @property
    def loss_plot(self) -> str:
        return self._p("training_loss.png")

    def hydra_dir(self, step: str) -> str:
        """Where Hydra writes its `.hydra/` record of a step (not outputs/<date>/ in MindSpeed-RL's dir)."""
        return self._p(".af", "hydra", step)


RLLayout = RLOutputTree  # the old name ("layout" also means the parallel layout)
