"""The `verl` backend: Volcano Engine RL (`python -m verl.trainer.main_ppo` on Ray), in its own environment.

backend.py      the plan: train (Ray), merge (verl.model_merger), plot
read.py         backend_config -> Hydra overrides (the user's, the plan's, the defaults)
schema.py       verl's key lists (keys/<version>/<engine>.txt) read into the Hydra toolkit's Schema
composer.py     the composed config: Hydra in verl's environment (backends/common/hydra/compose.py), else
                the key lists
rules.py        verl's validation rules and the ones it checks only on the workers, as a table
prompts.py      prompts longer than data.max_prompt_length, counted as verl counts them
environment.py  install.sh verl, doctor, where the environment is
"""

from ascendfactory.backends.verl import backend  # noqa: F401 - registers the backend
