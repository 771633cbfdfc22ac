"""The MindSpeed-RL output tree (AscendFactory's output layout for MindSpeed-RL,
docs/sources.md#output-tree), one name per path.

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

from dataclasses import dataclass

from ascendfactory.output_tree import LOGS, OutputTree

TRAIN_CONFIG = "mindspeed_rl_grpo"  # --config-name of cli/train_grpo.py
DATA_CONFIG = "mindspeed_rl_data"  # the config name cli/preprocess_data.py takes as its first argument
METRICS_LOG = "grpo_metrics-{time}.log"


@dataclass(frozen=True)
class RLOutputTree(OutputTree):
    """The house's paths (`ascendfactory.output_tree`), plus MindSpeed-RL's own entries."""

    @property
    def preprocessed(self) -> str:
        return self.path("preprocessed_data")

    def converted(self, tp: int, pp: int) -> str:
        return self.path(f"converted_hf2mg_weight_TP{tp}PP{pp}")

    @property
    def mg2hf(self) -> str:
        return self.path("converted_mg2hf_weight")

    @property
    def logs(self) -> str:
        return self.logs_dir

    @property
    def metrics_log(self) -> str:
        return self.path(LOGS, METRICS_LOG)

    @property
    def train_yaml(self) -> str:
        return self.path(f"{TRAIN_CONFIG}.yaml")

    @property
    def data_yaml(self) -> str:
        return self.path(f"{DATA_CONFIG}.yaml")

    def hydra_dir(self, step: str) -> str:
        """Where Hydra writes its `.hydra/` record of a step (not outputs/<date>/ in MindSpeed-RL's dir)."""
        return self.records("hydra", step)
