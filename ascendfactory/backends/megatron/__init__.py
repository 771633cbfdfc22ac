"""What the Megatron-style backends (`torch`, `mindspeed-llm`, `mindspeed-mm`) share.

    run.py       reading `backend_config` (preprocess_data, convert_ckpt_hf2mg, training, convert_ckpt_mg2hf),
                 the parallel layout, the data and checkpoint-loading decisions, flags as argv
    layout.py    the output tree (converted_weight_TP*PP*, saved_checkpoints, ckpt_converted_mg2hf, ...)
    skeleton.py  `MegatronBackend`: the five steps (preprocess, hf2mg, torchrun train, mg2hf, plot), the log
                 and checkpoint specs; a backend supplies its programs' argv

This package registers no backend itself.
"""
