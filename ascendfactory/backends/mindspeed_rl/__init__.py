"""The `mindspeed-rl` backend: Ascend MindSpeed-RL (cli/train_grpo.py on Ray). Validated only so far."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ascendfactory.backends.doctor import Check, ascend_checks, module_check
from ascendfactory.backends.install import InstallStep, third_party_dir
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.validated_only import ValidatedOnlyBackend


@register_backend
class MindSpeedRLBackend(ValidatedOnlyBackend):
    name = "mindspeed-rl"
    description = "Ascend MindSpeed-RL (cli/train_grpo.py on Ray)"
    stages = ("grpo",)
    launcher = "ray"
    order = 4
    required = ("megatron_training.tokenizer_name_or_path",)
    log_format = "mindspeed_rl"
    throughput = "mindspeed_rl"

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return [*ascend_checks(environ, torch_npu_required=False), module_check("ray")]

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        target = os.path.join(third_party_dir(environ), "MindSpeed-RL")
        return [
            InstallStep(
                "clone MindSpeed-RL",
                ("git", "clone", "--depth", "1", "https://gitcode.com/Ascend/MindSpeed-RL.git", target),
                skip_if_exists=target,
            )
        ]
