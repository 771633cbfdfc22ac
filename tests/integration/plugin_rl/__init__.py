"""A Ray RL backend defined outside `ascendfactory/backends/` (`rl-demo`): group-normalised policy gradient
(GRPO's advantage) on a bandit, rollouts as Ray tasks, OpenRLHF-style log lines and DeepSpeed-style
`global_stepN/` checkpoints with a `latest` file, all registered from this package."""
