"""The `mindspeed-rl` backend: Ascend MindSpeed-RL GRPO (cli/train_grpo.py on Ray).

The experiment itself (reader, keys, rules, load decision, output tree) is
`backends/common/mindspeed_rl_experiment/`, shared with `torch` (`stage: grpo`); this package holds what runs
MindSpeed-RL's own programs:

backend.py      the plan (preprocess, hf2mg, Ray train, mg2hf, plot), the checkouts, the cluster checks
steps.py        the steps' argv in the MindSpeed-RL and MindSpeed-LLM checkouts
environment.py  the MindSpeed-RL / MindSpeed-LLM checkouts, the version in use, install.sh, doctor
programs/       metric_lines.py (the driver's metric lines into a log of their own)
"""

from ascendfactory.backends.mindspeed_rl import backend  # noqa: F401  (registers mindspeed-rl)
