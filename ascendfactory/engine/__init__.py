"""The embedded `torch` backend: convert (HF <-> Megatron weights), data (preprocessing), train (torchrun),
rl (the GRPO trainer, torchrun).

Each program is run as `python -m ascendfactory.engine.<program>`; see docs/engine-contract.md. Nothing is
imported here, so importing a program's light parser stays fast.
"""
