"""What the Megatron-style backends (`torch`, `mindspeed-llm`, `mindspeed-mm`) share.

    config.py      the keys of `backend_config` the plans read, typed (pydantic; every other key allowed)
    read.py        reading `backend_config` (preprocess_data, convert_ckpt_hf2mg, training,
                   convert_ckpt_mg2hf), the parallel layout, the data and checkpoint-loading decisions,
                   flags as argv; `MegatronRun[F]` carries the backend's own record
    flag_specs.py  a flag's argparse spec (`Spec`, read from a generated list) and a value checked against it
    tree.py        the output tree (converted_weight_TP*PP*, saved_checkpoints, ckpt_converted_mg2hf, ...)
    skeleton.py    `MegatronBackend`: the five steps (preprocess, hf2mg, torchrun train, mg2hf, plot), the
                   log and checkpoint specs; a backend supplies its programs' argv

This package registers no backend itself.
"""
