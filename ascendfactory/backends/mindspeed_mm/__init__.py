"""The `mindspeed-mm` backend: Ascend MindSpeed-MM (mm-convert, pretrain_vlm.py). Validated only so far."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ascendfactory.backends.doctor import Check, ascend_checks
from ascendfactory.backends.install import InstallStep, third_party_dir
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.validated_only import ValidatedOnlyBackend


@register_backend
class MindSpeedMMBackend(ValidatedOnlyBackend):
    name = "mindspeed-mm"
    description = "Ascend MindSpeed-MM (mm-convert, pretrain_vlm.py)"
    stages = ("sft",)
    launcher = "torchrun"
    order = 5
    required = ("data.dataset_param.preprocess_parameters.model_name_or_path",)
    throughput = "mindspeed_mm"

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return ascend_checks(environ, torch_npu_required=False)

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        target = os.path.join(third_party_dir(environ), "MindSpeed-MM")
        return [
            InstallStep(
                "clone MindSpeed-MM",
                ("git", "clone", "--depth", "1", "https://gitcode.com/Ascend/MindSpeed-MM.git", target),
                skip_if_exists=target,
            )
        ]
