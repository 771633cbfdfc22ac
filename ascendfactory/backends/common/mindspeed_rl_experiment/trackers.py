"""MindSpeed-RL's tracker switches as `report_to` fills them in: the mindspeed-rl backend's yaml and the
embedded GRPO trainer's (which reads the same keys, `engine/rl/trackers.py`)."""

from __future__ import annotations

from ascendfactory.backends.report_to import TrackerKeys

# MindSpeed-RL's tracker switches (config_cls/rl_config.py RLConfig): use_tensorboard, use_wandb with
# wandb_project / wandb_exp_name / wandb_save_dir, and (master) use_swanlab with swanlab_*; no MLflow.
MSRL_TRACKERS: dict[str, TrackerKeys] = {
    "tensorboard": TrackerKeys(set={"rl_config.use_tensorboard": True}),
    "wandb": TrackerKeys(
        set={
            "rl_config.use_wandb": True,
            "rl_config.wandb_project": "{project}",
            "rl_config.wandb_exp_name": "{run_name}",
            "rl_config.wandb_save_dir": "{location}",
        }
    ),
    "swanlab": TrackerKeys(
        set={
            "rl_config.use_swanlab": True,
            "rl_config.swanlab_project": "{project}",
            "rl_config.swanlab_exp_name": "{run_name}",
            "rl_config.swanlab_mode": "{mode}",
            "rl_config.swanlab_save_dir": "{location}",
        }
    ),
}
