"""The embedded GRPO trainer (`torchrun ... -m ascendfactory.engine.rl`): MindSpeed-RL's yaml, in PyTorch."""
