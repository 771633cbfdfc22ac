"""`ascendfactory-cli eval`: the trained HF weights of a run on MMLU, C-Eval and GSM8K, with
lm-evaluation-harness in an environment of its own (`sh install.sh eval`), on local files only.

env.py       the eval environment (where, how it installs, what it lacks)
datasets.py  the local dataset files each benchmark reads (AF_EVAL_DATA_DIR), checked before anything runs
weights.py   which HF weights a run produced (mg2hf output, LLaMA-Factory's merged model or adapter)
run.py       the spec handed to `programs/lm_eval_run.py`, the subprocess, the results read back
"""
