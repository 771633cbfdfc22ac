"""The `llamafactory` backend: LLaMA-Factory (llamafactory-cli train / export). Validated only so far."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.doctor import Check
from ascendfactory.backends.install import InstallStep
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.validated_only import ValidatedOnlyBackend

TEMPLATES = {"qwen25": "qwen", "qwen3": "qwen3", "llama2": "llama3", "glm4": "glm4"}


@register_backend
class LlamaFactoryBackend(ValidatedOnlyBackend):
    name = "llamafactory"
    description = "LLaMA-Factory (llamafactory-cli train / export)"
    stages = ("pt", "sft", "dpo")
    launcher = "torchrun"
    order = 2
    required = ("training.model_name_or_path", "training.dataset")
    log_format = "llamafactory"
    throughput = "llamafactory"

    def template_values(self, arch: Any, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        return {"lf_template": TEMPLATES.get(arch.model_type_hf, "default")}

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        found = shutil.which("llamafactory-cli")
        return [
            Check("llamafactory-cli", "ok" if found else "missing", found or "sh install.sh llamafactory")
        ]

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        import sys

        return [
            InstallStep("install LLaMA-Factory", (sys.executable, "-m", "pip", "install", "llamafactory"))
        ]
