"""What tests (and benchmarks) share, kept out of the package:

megatron_trees.py compare_megatron_trees(): two Megatron trees, file by file and tensor by tensor
peer_standins.py runs a framework script with stand-ins for Ascend-only packages (torch_npu, acl, ...)
ports.py        free_port(): a free TCP port on 127.0.0.1 (torchrun rendezvous, Ray, fake servers)
runner_fakes.py tiny fake step programs (a Megatron-like trainer) and plan builders for the runner tests
training.py     the embedded trainer's helpers: a tiny HF model, its Megatron checkpoint, tiny datasets,
                torchrun on a free port, losses from a log
tiny_model.py   small random HF models of a family (llama2, qwen25, qwen3) built from an inline config

Import them as `from tests.support import ...` (pytest puts the repository root on sys.path).
"""
