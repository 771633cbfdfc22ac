"""The output tree: where everything a run leaves lies under `af_output_dir`, decided here for every backend.

    {af_output_dir}/
      exp-config.yaml          the resolved experiment (secrets masked), written before any step
      logs/                    every step's log, each rank's run_log, the runner's own log
      training_loss.png        the plot step's panels
      saved_checkpoints/       the training's checkpoints (each framework's own layout inside)
      tensorboard/             TensorBoard event files (unless the experiment names another folder)
      trackers/                tracker stores and offline runs; trackers/runs.json: each tracker's run id
      .af/                     the tool's own records: step manifests, summary.json, submit.json,
                               submit/ (the job scripts and manifests `submit` writes)

A backend family adds its own entries by subclassing `OutputTree` (the Megatron family's converted
weights, `backends/common/megatron/tree.py`; MindSpeed-RL's yaml files,
`backends/common/mindspeed_rl_experiment/tree.py`); the names above are never spelled anywhere else. It is a
module of its own, below every other, so the plan, the runner, the log readers, the trackers, the backends and
`submit` all read the same names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

EXP_CONFIG = "exp-config.yaml"
LOGS = "logs"
LOSS_PLOT = "training_loss.png"
CHECKPOINTS = "saved_checkpoints"
TENSORBOARD = "tensorboard"
TRACKERS = "trackers"
RECORDS = ".af"
SUMMARY = "summary.json"
SUBMIT_RECORD = "submit.json"


@dataclass(frozen=True)
class OutputTree:
    """Paths under `root` (an `af_output_dir`), one name per path (module docstring)."""

    root: str

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def exp_config(self) -> str:
        return self.path(EXP_CONFIG)

    @property
    def logs_dir(self) -> str:
        return self.path(LOGS)

    @property
    def loss_plot(self) -> str:
        return self.path(LOSS_PLOT)

    @property
    def saved_checkpoints(self) -> str:
        return self.path(CHECKPOINTS)

    @property
    def tensorboard_dir(self) -> str:
        return self.path(TENSORBOARD)

    def trackers(self, *parts: str) -> str:
        """`trackers/` or a path inside it (a tracker's store: `trackers/mlflow/mlflow.db`)."""
        return self.path(TRACKERS, *parts)

    @property
    def runs_file(self) -> str:
        return self.trackers("runs.json")

    @property
    def manifest_dir(self) -> str:
        return self.path(RECORDS)

    def records(self, *parts: str) -> str:
        """A file or folder of the tool's own records under `.af/`."""
        return self.path(RECORDS, *parts)

    @property
    def summary(self) -> str:
        return self.records(SUMMARY)

    @property
    def submit_record(self) -> str:
        return self.records(SUBMIT_RECORD)

    def submitted(self, name: str) -> str:
        """A job script or manifest `submit` writes (`.af/submit/slurm.sbatch`)."""
        return self.records("submit", name)
