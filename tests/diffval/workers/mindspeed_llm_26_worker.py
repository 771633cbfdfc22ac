"""MindSpeed-LLM 26.1.0's own verdict (with its MindSpeed 26.1.0_core_r0.12.1 and Megatron-LM core_v0.12.1)
on training command lines, many per process, on CPU: run with a python that has torch.

    python mindspeed_llm_26_worker.py MINDSPEED_LLM_DIR MINDSPEED_DIR < cases.jsonl > verdicts.jsonl
    python mindspeed_llm_26_worker.py --stand-ins          (the stand-in table, as JSON)

MINDSPEED_LLM_DIR is a MindSpeed-LLM 26.1.0 checkout with Megatron-LM core_v0.12.1's megatron/ copied into it
(as its install guide does), MINDSPEED_DIR a MindSpeed checkout at 26.1.0_core_r0.12.1. Requests and
verdicts as in megatron_worker.py (`{"id", "args": {"argv", "world_size", "env"}}` -> `{"id", "ok",
"error"}`; `ok` null when a stand-in was reached).

26.1.0 wires its argument handling through MindSpeed's features manager: `mindspeed_llm/__init__.py` runs
`tasks/megatron_adaptor_v2.py`, which applies every feature's patches (`features_manager/__init__.py`
create_features_list) before Megatron is used. The patches that decide a verdict before any device is used,
applied here as that adaptor applies them (a name ending in `wrapper`/`decorator` wraps the function, in
registration order, first registered innermost; any other name replaces it: mindspeed/patch_utils.py):

- megatron_basic (MindSpeed-LLM's MegatronBasicFeature, always): `parse_args` <- parse_args_decorator (every
  feature registers its arguments), `validate_args` and `validate_yaml` <- validate_args_v2_decorator (each
  feature's pre_validate_args, Megatron's validate_args, post_validate_args, validate_args),
  `TransformerConfig.__post_init__` <- mindspeed_llm/core/transformer/transformer_config.py's wrapper;
- grouped-matmul (GroupedMatmulFeature, always): `torch.cuda.get_device_capability` answers (9, 0);
- fusions (FusedMoEPermuteFeature, with `--moe-permute-fusion` and `--moe-token-dispatcher-type
  alltoall_seq`): `TransformerConfig.__post_init__` <- its wrapper;
- tensor parallel (TP2dFeature, with `--tp-2d`): `TransformerConfig.__post_init__` replaced by MindSpeed's
  tp_2d one;
- moe (MoERouter, always): `TransformerConfig.__post_init__` <- mindspeed_llm/core/transformer/moe/router.py's
  wrapper;
- num-layer-list (NumLayerListFeature, with `--num-layer-list`): `core_transformer_config_from_args` <-
  core_transformer_config_from_args_wrapper.

What decides, in the order the entry scripts run it before any device is used:

1. `initialize_megatron` (Megatron core_v0.12.1): `parse_args` under RANK=0 and WORLD_SIZE=N as torchrun sets
   them; `--ckpt-convert-format` needs `--ckpt-convert-save` and `--load`; `--use-checkpoint-args` needs
   `--load` (and no local non-persistent checkpoints); `validate_yaml` with `--yaml-cfg`, else
   `validate_args`;
2. `set_global_variables`' first check, the micro-batch calculator;
3. posttrain_gpt.py: `AutoTrainer` picks the trainer of `--stage` (only sft and dpo have one);
4. `core_transformer_config_from_args`, what `model_provider` does first: TransformerConfig's own checks.

Where it stops: the next steps build the tokenizer, start torch.distributed and allocate the model.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402
import standins  # noqa: E402

STAND_INS = (
    standins.TORCH_NPU,
    ("acl", "CANN's Python runtime (mindspeed_llm/training/utils.py imports it)", "inert placeholders"),
    standins.TORCHAIR,
    standins.MINDIO_TTP,
    ("einops", "not installed in this python (tensor reshaping in MindSpeed's context parallel)", "inert"),
    standins.PKG_RESOURCES,
    (
        "mindspeed_llm/__init__.py",
        "runs tasks/megatron_adaptor_v2.py: every feature's patches (model and kernel patches that need "
        "torch_npu)",
        "an empty package; the patches of the argument handling applied as the adaptor applies them (the "
        "module docstring's list)",
    ),
    (
        "mindspeed_llm/core/__init__.py",
        "imports the model code (layers that need TransformerEngine or the adaptor's stand-ins for it)",
        "an empty package (the config and router modules the patches come from import as usual)",
    ),
)
STAND_IN_MODULES = ("torch_npu", "acl", "torchair", "einops", "mindio_ttp")
NPU_CAPABILITY = (9, 0)  # MindSpeed 26.1.0_core_r0.12.1 mindspeed/core/fusions/grouped_matmul.py
# mindspeed_llm/tasks/posttrain/launcher.py get_trainer: the stages that have a trainer.
POSTTRAIN_STAGES = ("sft", "dpo")


def load(llm_dir: str, mindspeed_dir: str) -> None:
    """The checkouts on sys.path, the stand-ins installed, mindspeed_llm an empty package."""
    import packaging

    sys.path[:0] = [llm_dir, mindspeed_dir]
    standins.install(STAND_IN_MODULES)
    pkg = standins.StandInModule("pkg_resources")
    pkg.packaging = packaging
    sys.modules["pkg_resources"] = pkg
    standins.empty_package("mindspeed_llm", os.path.join(llm_dir, "mindspeed_llm"))
    standins.empty_package("mindspeed_llm.core", os.path.join(llm_dir, "mindspeed_llm", "core"))


class Framework:
    def __init__(self, llm_dir: str, mindspeed_dir: str) -> None:
        load(llm_dir, mindspeed_dir)
        import megatron.training.arguments as margs
        import megatron.training.global_vars as global_vars
        import torch
        from megatron.core.num_microbatches_calculator import _build_num_microbatches_calculator
        from megatron.core.transformer.transformer_config import TransformerConfig
        from mindspeed_llm.core.transformer.moe.router import (
            transformer_config_post_init_wrapper as router_post_init,
        )
        from mindspeed_llm.core.transformer.transformer_config import (
            transformer_config_post_init_wrapper as llm_post_init,
        )
        from mindspeed_llm.training import arguments as llm_args

        torch.cuda.get_device_capability = lambda *_: NPU_CAPABILITY  # GroupedMatmulFeature's patch
        margs.parse_args = llm_args.parse_args_decorator(margs.parse_args)
        margs.validate_args = llm_args.validate_args_v2_decorator(margs.validate_args)
        import megatron.training.yaml_arguments as yargs

        yargs.validate_yaml = llm_args.validate_args_v2_decorator(yargs.validate_yaml)
        self.margs, self.yargs, self.global_vars = margs, yargs, global_vars
        self.microbatches = _build_num_microbatches_calculator  # what init_num_microbatches_calculator builds
        self.config_class = TransformerConfig
        self.post_init = TransformerConfig.__post_init__
        self.tp2d_post_init = None  # imported when a case sets --tp-2d (the module pulls in the model code)
        self.llm_post_init, self.router_post_init = llm_post_init, router_post_init
        self.config_from_args = margs.core_transformer_config_from_args
        self.config_wrapper = llm_args.core_transformer_config_from_args_wrapper
        try:
            from mindspeed.core.fusions.fused_moe_permute import transformer_config_post_init_wrapper
        except ImportError:  # pragma: no cover - the module needs NPU ops at import
            transformer_config_post_init_wrapper = None
        self.permute_post_init = transformer_config_post_init_wrapper

    def post_init_for(self, args):  # noqa: ANN001, ANN201
        """`TransformerConfig.__post_init__` as the adaptor patches it for these arguments."""
        func = self.post_init
        if getattr(args, "tp_2d", False):
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
        entry = os.path.basename(argv[0])
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)})
        sys.argv = list(argv)
        self.global_vars._GLOBAL_ARGS = None
        args = self.margs.parse_args(None, False)
        if args.ckpt_convert_format is not None:
            assert args.ckpt_convert_save is not None
            assert args.load is not None
        if args.use_checkpoint_args:
            assert args.load is not None, "--use-checkpoint-args requires --load argument"
            assert args.non_persistent_ckpt_type != "local", (
                "--use-checkpoint-args is not supported with --non_persistent_ckpt_type=local"
            )
        if args.yaml_cfg is not None:
            args = self.yargs.validate_yaml(args, {})
        else:
            self.margs.validate_args(args, {})
        self.global_vars._GLOBAL_ARGS = args
        self.microbatches(
            args.rank,
            args.rampup_batch_size,
            args.global_batch_size,
            args.micro_batch_size,
            args.data_parallel_size,
            args.decrease_batch_size_if_needed,
        )
        if entry == "posttrain_gpt.py" and args.stage not in POSTTRAIN_STAGES:
            raise AttributeError(f"posttrain_gpt.py has no trainer for --stage {args.stage!r}")
        self.config_class.__post_init__ = self.post_init_for(args)
        try:
            build = (
                self.config_wrapper(self.config_from_args) if args.num_layer_list else self.config_from_args
            )
            build(args)
        finally:
            self.config_class.__post_init__ = self.post_init


def verdict(framework: Framework, request: dict) -> judging.Verdict:
    return judging.judge_argv(
        lambda: framework.judge(request["argv"], int(request["world_size"])), request.get("env", {})
    )


def main() -> int:
    return judging.serve(STAND_INS, lambda: Framework(*sys.argv[1:3]), verdict)


if __name__ == "__main__":
    sys.exit(main())
