"""Backend registry as data: one frozen record per framework, and the adapter that plans its steps.

Adapters turn an `ExperimentConfig` into a validated `Plan`; they never start a process.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ascendfactory.errors import BackendNotFoundError


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    stages: tuple[str, ...]
    experiments: tuple[str, ...]  # templates shipped under cfgs/experiments/<name>/
    supports_distributed: bool
    adapter: str  # "module:Class"
    launcher: str  # torchrun | ray | in-process


_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    _REGISTRY[backend.name] = backend
    return backend


for _b in (
    Backend(
        "torch",
        "embedded PyTorch implementation of the MindSpeed-LLM contract (CPU/GPU/NPU)",
        ("pt", "sft"),
        ("full-4k", "tiny-sft"),
        True,
        "ascendfactory.backends.torch_backend:TorchAdapter",
        "torchrun",
    ),
    Backend(
        "mindspeed-llm",
        "Ascend MindSpeed-LLM (Megatron): convert_ckpt, preprocess_data, pretrain/posttrain_gpt",
        ("pt", "sft"),
        ("full-4k", "lora-4k"),
        True,
        "ascendfactory.backends.mindspeed_llm:MindSpeedLLMAdapter",
        "torchrun",
    ),
    Backend(
        "llamafactory",
        "LLaMA-Factory (llamafactory-cli train / export)",
        ("pt", "sft", "dpo"),
        ("full-4k", "lora-4k"),
        True,
        "ascendfactory.backends.others:LlamaFactoryAdapter",
        "torchrun",
    ),
    Backend(
        "verl",
        "Volcano Engine RL (python -m verl.trainer.main_ppo on Ray)",
        ("ppo", "grpo", "dapo"),
        ("ppo", "grpo", "dapo"),
        True,
        "ascendfactory.backends.others:VerlAdapter",
        "ray",
    ),
    Backend(
        "mindspeed-rl",
        "Ascend MindSpeed-RL (cli/train_grpo.py on Ray)",
        ("grpo",),
        ("grpo",),
        True,
        "ascendfactory.backends.others:MindSpeedRLAdapter",
        "ray",
    ),
    Backend(
        "mindspeed-mm",
        "Ascend MindSpeed-MM (mm-convert, pretrain_vlm.py)",
        ("sft",),
        ("full",),
        True,
        "ascendfactory.backends.others:MindSpeedMMAdapter",
        "torchrun",
    ),
):
    register_backend(_b)


def list_supported_backends() -> list[Backend]:
    return list(_REGISTRY.values())


def get_backend(name: str) -> Backend:
    if name not in _REGISTRY:
        raise BackendNotFoundError(f"unknown backend '{name}'; supported: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def get_adapter(name: str):
    """Instantiate the adapter of backend `name` (imported lazily)."""
    backend = get_backend(name)
    module, _, cls = backend.adapter.partition(":")
    return getattr(importlib.import_module(module), cls)(backend)
