"""HF <-> Megatron-core weight conversion (`python -m ascendfactory.engine.convert`).

Modules: `tensor_ops` (pure tensor maths), `families` (name tables), `dims` (model shapes), `shard_map`
(one TP shard <-> the trainer's local HF shard), `megatron_io` (checkpoint layout), `hf_io` (safetensors),
`run` (the three conversions), `verify`, `__main__` (argparse and `main`). Nothing heavy is imported here.
"""
