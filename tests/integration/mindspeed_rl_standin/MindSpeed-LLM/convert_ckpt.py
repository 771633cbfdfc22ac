"""Stand-in for MindSpeed-LLM's v1 convert_ckpt.py: the flags its Qwen2.5 scripts pass, both directions."""

import argparse
import json
import os

p = argparse.ArgumentParser()
for flag in ("--use-mcore-models", "--add-qkv-bias", "--load-hf-from-config"):
    p.add_argument(flag, action="store_true")
for flag in (
    "--model-type",
    "--load-model-type",
    "--save-model-type",
    "--load-dir",
    "--save-dir",
    "--tokenizer-model",
    "--model-type-hf",
    "--params-dtype",
):
    p.add_argument(flag)
p.add_argument("--target-tensor-parallel-size", type=int)
p.add_argument("--target-pipeline-parallel-size", type=int)
a = p.parse_args()
assert a.use_mcore_models and a.model_type == "GPT"
if a.load_model_type == "hf":
    assert os.path.isfile(os.path.join(a.load_dir, "config.json"))
    for t in range(a.target_tensor_parallel_size):
        for s in range(a.target_pipeline_parallel_size):
            rank = f"mp_rank_{t:02d}" + (f"_{s:03d}" if a.target_pipeline_parallel_size > 1 else "")
            os.makedirs(os.path.join(a.save_dir, "iter_0000001", rank), exist_ok=True)
            open(os.path.join(a.save_dir, "iter_0000001", rank, "model_optim_rng.pt"), "wb").close()
    with open(os.path.join(a.save_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
else:
    with open(os.path.join(a.load_dir, "latest_checkpointed_iteration.txt")) as f:
        it = int(f.read())
    assert a.load_hf_from_config and os.path.isfile(os.path.join(a.save_dir, "config.json"))
    out = os.path.join(a.save_dir, "mg2hf")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "w") as f:
        f.write(json.dumps({"converted_from_iteration": it}))
print("converted", a.load_model_type, "->", a.save_model_type, flush=True)
