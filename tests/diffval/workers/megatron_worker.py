"""MindSpeed-LLM's own verdict (with its Megatron-LM and MindSpeed) on training command lines, many per
process, on CPU, at each version the backend plans for: run with a python that has torch.

    python megatron_worker.py VERSION MINDSPEED_LLM_DIR MINDSPEED_DIR < cases.jsonl > verdicts.jsonl
    python megatron_worker.py --stand-ins VERSION          (the stand-in table, as JSON)

VERSION is 2.1.0 (Megatron-LM core_r0.8.0, MindSpeed 2c085cc9) or 26.1.0 (core_v0.12.1, MindSpeed
26.1.0_core_r0.12.1). MINDSPEED_LLM_DIR is a MindSpeed-LLM checkout of that version with Megatron-LM's
megatron/ copied into it (as its install guide does), MINDSPEED_DIR a MindSpeed checkout at its pin. Each
input line: `{"id": ..., "args": {"argv": [entry, flags...], "world_size": N, "env": {...}}}`, the program and
flags our plan hands torchrun, and the environment its step sets. Each output line: `{"id", "ok", "error"}`;
`ok` is null when a stand-in was reached (the answer needs what is not here).

One judge; what differs between the versions is data (`VERSIONS`). What decides, in the order the entry
scripts run it before any device is used:

1. `initialize_megatron`: Megatron's `parse_args` with MindSpeed-LLM's `parse_args_decorator` (its own
   argument groups and its features'), under RANK=0 and WORLD_SIZE=N as torchrun sets them; `--use-checkpoint-
   args` needs `--load` (26.1.0, core_v0.12.1's initialize_megatron: also `--ckpt-convert-format` needs
   `--ckpt-convert-save` and `--load`, and no local non-persistent checkpoints with `--use-checkpoint-args`);
   then Megatron's `validate_args` (26.1.0: `validate_yaml` with `--yaml-cfg`) wrapped by MindSpeed-LLM's
   decorator: 2.1.0's `validate_args_decorator` (its `_validate_*` rules, each feature's `validate_args`),
   26.1.0's `validate_args_v2_decorator` (each feature's pre-validate, validate and post-validate, through
   MindSpeed's features manager);
2. `set_global_variables`' first check, the micro-batch calculator (the global batch is a multiple of the
   micro batch times the data-parallel size);
3. posttrain_gpt.py: `AutoTrainer` picks the trainer of `--stage` (a stage without one has none);
   2.1.0's pretrain_gpt.py: `pretrain` refuses `--enable-high-availability` on core_r0.8.0;
4. `core_transformer_config_from_args`, what `model_provider` does first: TransformerConfig's own checks
   (heads and query groups against TP, ...) and the num-layer-list sum. 2.1.0's adaptor wraps the function
   always; 26.1.0's NumLayerListFeature only with `--num-layer-list`, and 26.1.0's features wrap
   `TransformerConfig.__post_init__` (below).

Where it stops: the next steps build the tokenizer (set_global_variables, from the HF directory), start
torch.distributed and allocate the model on the device.

How each version's adaptor is applied here (the package `__init__` that runs it is a stand-in, and the
argument patches it registers are applied as it registers them; a name ending in `wrapper`/`decorator` wraps
the function, first registered innermost; mindspeed/patch_utils.py):

- 2.1.0 (mindspeed_llm/tasks/megatron_adaptor.py): patch_miscellaneous replaces `parse_args` <-
  parse_args_decorator, `validate_args` <- validate_args_decorator, `core_transformer_config_from_args` <-
  core_transformer_config_from_args_wrapper, and initialize_megatron decorates `parse_args` once more;
  patch_core_transformers makes `torch.cuda.get_device_capability` answer MindSpeed's
  grouped_gemm_util.get_device_capability (9, 0).
- 26.1.0 (mindspeed_llm/tasks/megatron_adaptor_v2.py, every feature of features_manager/__init__.py
  create_features_list): megatron_basic's `parse_args` <- parse_args_decorator, `validate_args` and
  `validate_yaml` <- validate_args_v2_decorator, `TransformerConfig.__post_init__` <- mindspeed_llm/core/
  transformer/transformer_config.py's wrapper; GroupedMatmulFeature's (9, 0) device capability;
  FusedMoEPermuteFeature's `__post_init__` wrapper (with `--moe-permute-fusion` and the alltoall_seq
  dispatcher); TP2dFeature's `__post_init__` (with `--tp-2d`); MoERouter's `__post_init__` wrapper;
  NumLayerListFeature's `core_transformer_config_from_args` wrapper (with `--num-layer-list`).
"""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402
import standins  # noqa: E402

# What cannot import here, why, and what stands in. Each row is a module the import chain of the argument
# code reaches; none of them is called by a rule (a call makes the case undecided, see standins.py).
COMMON_STAND_INS = (
    standins.TORCH_NPU,
    ("acl", "CANN's Python runtime (mindspeed_llm/training/utils.py imports it)", "inert placeholders"),
    standins.TORCHAIR,
    standins.MINDIO_TTP,
    ("einops", "not installed in this python (tensor reshaping in MindSpeed's context parallel)", "inert"),
    standins.PKG_RESOURCES,
)
# Device queries that are not patched (torch.cuda.* on this CPU machine) make a case undecided too.
STAND_IN_MODULES = ("torch_npu", "acl", "torchair", "einops", "mindio_ttp")
NPU_CAPABILITY = (9, 0)  # what MindSpeed answers for the device (the `capability` of each version below)


@dataclass(frozen=True)
class Version:
    """What a MindSpeed-LLM version's judge does differently."""

    empty: tuple[str, ...]  # packages whose `__init__` is a stand-in (an empty package)
    stand_ins: tuple[tuple[str, str, str], ...]  # their rows of the stand-in table
    capability: str  # where MindSpeed answers NPU_CAPABILITY (the patch applied here)
    validate: str  # MindSpeed-LLM's decorator of validate_args (mindspeed_llm/training/arguments.py)
    microbatches: str  # megatron/core/num_microbatches_calculator.py: what set_global_variables builds
    posttrain_stages: tuple[str, ...]  # mindspeed_llm/tasks/posttrain/launcher.py get_trainer
    features_manager: bool  # 26.1.0: core_v0.12.1's initialize and the TransformerConfig wrappers


VERSIONS = {
    "2.1.0": Version(
        empty=("mindspeed_llm", "mindspeed_llm.training"),
        stand_ins=(
            (
                "mindspeed_llm/__init__.py",
                "runs the whole adaptor (model and kernel patches that need torch_npu)",
                "an empty package; the adaptor's argument patches applied as patch_miscellaneous registers "
                "them: parse_args <- parse_args_decorator, validate_args <- validate_args_decorator, "
                "core_transformer_config_from_args <- core_transformer_config_from_args_wrapper; and, as "
                "patch_core_transformers registers it, torch.cuda.get_device_capability answers (9, 0), what "
                "MindSpeed's grouped_gemm_util.get_device_capability returns",
            ),
            (
                "mindspeed_llm/training/__init__.py",
                "imports the trainer (training.py and its NPU imports)",
                "an empty package (arguments.py and utils.py import as usual)",
            ),
        ),
        capability="MindSpeed 2c085cc9 mindspeed/core/transformer/moe/grouped_gemm_util.py",
        validate="validate_args_decorator",
        microbatches="build_num_microbatches_calculator",
        posttrain_stages=("sft", "dpo", "orm", "prm", "simpo", "trl_ppo"),
        features_manager=False,
    ),
    "26.1.0": Version(
        empty=("mindspeed_llm", "mindspeed_llm.core"),
        stand_ins=(
            (
                "mindspeed_llm/__init__.py",
                "runs tasks/megatron_adaptor_v2.py: every feature's patches (model and kernel patches that "
                "need torch_npu)",
                "an empty package; the patches of the argument handling applied as the adaptor applies them "
                "(the module docstring's list)",
            ),
            (
                "mindspeed_llm/core/__init__.py",
                "imports the model code (layers that need TransformerEngine or the adaptor's stand-ins for "
                "it)",
                "an empty package (the config and router modules the patches come from import as usual)",
            ),
        ),
        capability="MindSpeed 26.1.0_core_r0.12.1 mindspeed/core/fusions/grouped_matmul.py",
        validate="validate_args_v2_decorator",
        microbatches="_build_num_microbatches_calculator",
        posttrain_stages=("sft", "dpo"),
        features_manager=True,
    ),
}


def initialize_checks(path: str) -> Any:
    """core_v0.12.1 initialize_megatron's argument checks after parse_args (the checkpoint conversion's and
    --use-checkpoint-args'), compiled from the framework's own file at their own lines; the rest of the
    function (CUDA, process groups, loading the checkpoint's arguments) needs a device and is left out."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.strip() == "if args.ckpt_convert_format is not None:"
    )
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "load_args_from_checkpoint(args)")
    block = textwrap.dedent("\n".join(lines[start:end]))
    return compile("\n" * start + block + "\n", path, "exec")


class Framework:
    def __init__(self, version: str, llm_dir: str, mindspeed_dir: str) -> None:
        import packaging

        self.v = v = VERSIONS[version]
        sys.path[:0] = [llm_dir, mindspeed_dir]
        standins.install(STAND_IN_MODULES)
        pkg = standins.StandInModule("pkg_resources")
        pkg.packaging = packaging
        sys.modules["pkg_resources"] = pkg
        for name in v.empty:
            standins.empty_package(name, os.path.join(llm_dir, *name.split(".")))
        import megatron.core.num_microbatches_calculator as calculator
        import megatron.training.arguments as margs
        import megatron.training.global_vars as global_vars
        import torch
        from mindspeed_llm.training import arguments as llm_args

        torch.cuda.get_device_capability = lambda *_: NPU_CAPABILITY  # the adaptor's patch (v.capability)
        margs.parse_args = llm_args.parse_args_decorator(margs.parse_args)
        margs.validate_args = getattr(llm_args, v.validate)(margs.validate_args)
        self.margs, self.global_vars = margs, global_vars
        self.microbatches = getattr(calculator, v.microbatches)
        self.config_from_args = margs.core_transformer_config_from_args
        self.config_wrapper = llm_args.core_transformer_config_from_args_wrapper
        if not v.features_manager:
            # patch_miscellaneous replaces the module's function (Megatron's own calls see the wrapped one),
            # then initialize_megatron decorates parse_args once more
            margs.core_transformer_config_from_args = self.config_wrapper(self.config_from_args)
            self.parse = llm_args.parse_args_decorator(margs.parse_args)
            return
        self.initialize_checks = initialize_checks(
            os.path.join(llm_dir, "megatron", "training", "initialize.py")
        )
        import megatron.training.yaml_arguments as yargs
        from megatron.core.transformer.transformer_config import TransformerConfig
        from mindspeed_llm.core.transformer.moe.router import (
            transformer_config_post_init_wrapper as router_post_init,
        )
        from mindspeed_llm.core.transformer.transformer_config import (
            transformer_config_post_init_wrapper as llm_post_init,
        )

        yargs.validate_yaml = llm_args.validate_args_v2_decorator(yargs.validate_yaml)
        self.yargs = yargs
        self.parse = margs.parse_args
        self.config_class = TransformerConfig
        self.post_init = TransformerConfig.__post_init__
        self.llm_post_init, self.router_post_init = llm_post_init, router_post_init
        try:
            from mindspeed.core.fusions.fused_moe_permute import transformer_config_post_init_wrapper
        except ImportError:  # pragma: no cover - the module needs NPU ops at import
            transformer_config_post_init_wrapper = None
        self.permute_post_init = transformer_config_post_init_wrapper

    def post_init_for(self, args):  # noqa: ANN001, ANN201
        """26.1.0: `TransformerConfig.__post_init__` as the adaptor patches it for these arguments."""
        func = self.post_init
        if getattr(args, "tp_2d", False):  # imported only then: the module pulls in the model code
            from mindspeed.core.tensor_parallel.tp_2d.adaptor import mindspeed_transformer_config_post_init

            func = mindspeed_transformer_config_post_init
        wrappers = [self.llm_post_init]
        if (
            getattr(args, "moe_permute_fusion", False)
            and getattr(args, "moe_token_dispatcher_type", None) == "alltoall_seq"
            and self.permute_post_init is not None
        ):
            wrappers.append(self.permute_post_init)
        wrappers.append(self.router_post_init)
        for wrapper in wrappers:
            func = wrapper(func)
        return func

    def judge(self, argv: list[str], world_size: int) -> None:
        v = self.v
        entry = os.path.basename(argv[0])
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)})
        sys.argv = list(argv)
        if v.features_manager:
            self.global_vars._GLOBAL_ARGS = None
        args = self.parse(None, False)
        if v.features_manager:  # initialize_megatron's own checks, run from its file (tracebacks name it)
            exec(self.initialize_checks, {"args": args, "args_defaults": {}})
        elif args.use_checkpoint_args:
            assert args.load is not None, "--use-checkpoint-args requires --load argument"
        if v.features_manager and args.yaml_cfg is not None:
            args = self.yargs.validate_yaml(args, {})
        else:
            self.margs.validate_args(args, {})
        if v.features_manager:  # 26.1.0's features read get_args() from here on
            self.global_vars._GLOBAL_ARGS = args
        sizes = [args.rank, args.rampup_batch_size, args.global_batch_size, args.micro_batch_size]
        sizes.append(args.data_parallel_size)
        if v.features_manager:
            sizes.append(args.decrease_batch_size_if_needed)
        self.microbatches(*sizes)
        if entry == "posttrain_gpt.py" and args.stage not in v.posttrain_stages:
            raise AttributeError(f"posttrain_gpt.py has no trainer for --stage {args.stage!r}")
        if not v.features_manager:
            if entry == "pretrain_gpt.py" and args.enable_high_availability:
                raise AssertionError("High availability feature do not support core_r0.8.0")
            self.margs.core_transformer_config_from_args(args)
            return
        self.config_class.__post_init__ = self.post_init_for(args)
        try:
            build = self.config_from_args
            if args.num_layer_list:
                build = self.config_wrapper(build)
            build(args)
        finally:
            self.config_class.__post_init__ = self.post_init


def verdict(framework: Framework, request: dict) -> judging.Verdict:
    return judging.judge_argv(
        lambda: framework.judge(request["argv"], int(request["world_size"])), request.get("env", {})
    )


def main() -> int:
    version = sys.argv[2] if sys.argv[1:2] == ["--stand-ins"] else sys.argv[1]
    stand_ins = COMMON_STAND_INS + VERSIONS[version].stand_ins
    return judging.serve(stand_ins, lambda: Framework(*sys.argv[1:4]), verdict)


if __name__ == "__main__":
    sys.exit(main())
