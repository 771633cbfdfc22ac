"""The embedded backend's trainer: `torchrun <dist args> -m ascendfactory.engine.train <megatron flags>`."""
