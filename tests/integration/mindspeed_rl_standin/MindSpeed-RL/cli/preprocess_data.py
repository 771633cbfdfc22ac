"""Stand-in for MindSpeed-RL's cli/preprocess_data.py: `<name> --config-path DIR [hydra overrides]`."""

import os
import sys

import yaml

KEYS = {"R1AlpacaStyleInstructionHandler": ["input_ids", "attention_mask"]}

name = sys.argv.pop(1)  # as MindSpeed-RL does: the first argument is the config name
args = sys.argv[1:]
path = os.path.join(args[args.index("--config-path") + 1], name + ".yaml")
with open(path) as f:
    cfg = yaml.safe_load(f)
for key in ("input", "tokenizer_name_or_path", "output_prefix"):
    assert os.path.isabs(cfg[key]), key
assert os.path.isdir(os.path.dirname(cfg["output_prefix"])), "validate_data_handler_config: no output folder"
with open(cfg["input"]) as f:
    rows = [line for line in f if line.strip()]
for key in KEYS[cfg["handler_name"]] + list(cfg.get("dataset_additional_keys") or []):
    for ext in ("bin", "idx"):
        with open(f"{cfg['output_prefix']}_packed_{key}_document.{ext}", "w") as f:
            f.write(f"{len(rows)} rows\n")
print(f"processed {len(rows)} rows into {cfg['output_prefix']}", flush=True)
