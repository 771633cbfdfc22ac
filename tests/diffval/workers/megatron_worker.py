"""MindSpeed-LLM 2.1.0's own verdict (with its Megatron-LM core_r0.8.0) on training command lines, many per
process, on CPU: run with a python that has torch.

    python megatron_worker.py MINDSPEED_LLM_DIR MINDSPEED_DIR < cases.jsonl > verdicts.jsonl
    python megatron_worker.py --stand-ins          (the stand-in table, as JSON)

MINDSPEED_LLM_DIR is a MindSpeed-LLM checkout with Megatron-LM's megatron/ copied into it (as its install
guide does), MINDSPEED_DIR a MindSpeed checkout. Each input line: `{"id": ..., "args": {"argv": [entry,
flags...], "world_size": N, "env": {...}}}`, the program and flags our plan hands torchrun, and the
environment its step sets. Each output line:
`{"id", "ok", "error"}`; `ok` is null when a stand-in was reached (the answer needs what is not here).

What decides, in the order the entry scripts run it before any device is used:

1. `initialize_megatron` (MindSpeed-LLM's, `mindspeed_llm/training/initialize.py`): Megatron's `parse_args`
   with MindSpeed-LLM's `parse_args_decorator` (its `process_args`: its own argument groups and those of
   its FEATURES_LIST), under RANK=0 and WORLD_SIZE=N as torchrun sets them; `--use-checkpoint-args` needs
   `--load`; then Megatron's `validate_args` wrapped by MindSpeed-LLM's `validate_args_decorator` (its
   `_validate_*` rules and each feature's `validate_args`);
2. `set_global_variables`' first check, the micro-batch calculator (the global batch is a multiple of
   the micro batch times the data-parallel size);
3. posttrain_gpt.py: `AutoTrainer` picks the trainer of `--stage` (an unknown stage has none);
   pretrain_gpt.py: `pretrain` refuses `--enable-high-availability` on core_r0.8.0;
4. `core_transformer_config_from_args` (with MindSpeed-LLM's wrapper), what `model_provider` does first:
   TransformerConfig's own checks (heads and query groups against TP, ...) and the num-layer-list sum.

Where it stops: the next steps build the tokenizer (set_global_variables, from the HF directory), start
torch.distributed and allocate the model on the device.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402
import standins  # noqa: E402

# What cannot import here, why, and what stands in. Each row is a module the import chain of the argument
# code reaches; none of them is called by a rule (a call makes the case undecided, see standins.py).
STAND_INS = (
    standins.TORCH_NPU,
    ("acl", "CANN's Python runtime (mindspeed_llm/training/utils.py imports it)", "inert placeholders"),
    standins.TORCHAIR,
    standins.MINDIO_TTP,
    ("einops", "not installed in this python (tensor reshaping in MindSpeed's context parallel)", "inert"),
    standins.PKG_RESOURCES,
    (
        "mindspeed_llm/__init__.py",
        "runs the whole adaptor (model and kernel patches that need torch_npu)",
        "an empty package; the adaptor's argument patches applied as patch_miscellaneous registers them: "
        "parse_args <- parse_args_decorator, validate_args <- validate_args_decorator, "
        "core_transformer_config_from_args <- core_transformer_config_from_args_wrapper; and, as "
        "patch_core_transformers registers it, torch.cuda.get_device_capability answers (9, 0), what "
        "MindSpeed's grouped_gemm_util.get_device_capability returns",
    ),
    (
        "mindspeed_llm/training/__init__.py",
        "imports the trainer (training.py and its NPU imports)",
        "an empty package (arguments.py and utils.py import as usual)",
    ),
)
# Device queries that are not patched (torch.cuda.* on this CPU machine) make a case undecided too.
STAND_IN_MODULES = ("torch_npu", "acl", "torchair", "einops", "mindio_ttp")
NPU_CAPABILITY = (9, 0)  # MindSpeed 2c085cc9 mindspeed/core/transformer/moe/grouped_gemm_util.py
# AutoTrainer's get_trainer (mindspeed_llm/tasks/posttrain/launcher.py): the stages that have a trainer.
POSTTRAIN_STAGES = ("sft", "dpo", "orm", "prm", "simpo", "trl_ppo")


class Framework:
    def __init__(self, llm_dir: str, mindspeed_dir: str) -> None:
        import packaging

        sys.path[:0] = [llm_dir, mindspeed_dir]
        self.finder = standins.install(STAND_IN_MODULES)
        pkg = standins.StandInModule("pkg_resources")
        pkg.packaging = packaging
        sys.modules["pkg_resources"] = pkg
        standins.empty_package("mindspeed_llm", os.path.join(llm_dir, "mindspeed_llm"))
        standins.empty_package("mindspeed_llm.training", os.path.join(llm_dir, "mindspeed_llm", "training"))
        import megatron.training.arguments as margs
        import torch
        from mindspeed_llm.training import arguments as llm_args

        # the adaptor's patch_core_transformers: the device query validate_args makes for moe-grouped-gemm
        # answers MindSpeed's grouped_gemm_util.get_device_capability (that module needs NPU ops to import)
        torch.cuda.get_device_capability = lambda *_: NPU_CAPABILITY

        # the adaptor's patch_miscellaneous: the module's functions are replaced (so Megatron's own calls
        # between them see the wrapped ones), then initialize_megatron decorates parse_args once more
        margs.parse_args = llm_args.parse_args_decorator(margs.parse_args)
        margs.validate_args = llm_args.validate_args_decorator(margs.validate_args)
        margs.core_transformer_config_from_args = llm_args.core_transformer_config_from_args_wrapper(
            margs.core_transformer_config_from_args
        )
        from megatron.core.num_microbatches_calculator import build_num_microbatches_calculator

        self.margs = margs
        self.microbatches = build_num_microbatches_calculator
        self.parse = llm_args.parse_args_decorator(margs.parse_args)

    def judge(self, argv: list[str], world_size: int) -> None:
        entry = os.path.basename(argv[0])
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)})
        sys.argv = list(argv)
        args = self.parse(None, False)
        if args.use_checkpoint_args and args.load is None:
            raise AssertionError("--use-checkpoints-args requires --load argument")
        self.margs.validate_args(args, {})
        # set_global_variables' first check: the global batch against micro batch x data parallel
        self.microbatches(
            args.rank,
            args.rampup_batch_size,
            args.global_batch_size,
            args.micro_batch_size,
            args.data_parallel_size,
        )
        if entry == "posttrain_gpt.py" and args.stage not in POSTTRAIN_STAGES:
            raise AttributeError(f"posttrain_gpt.py has no trainer for --stage {args.stage!r}")
        if entry == "pretrain_gpt.py" and args.enable_high_availability:
            raise AssertionError("High availability feature do not support core_r0.8.0")
        self.margs.core_transformer_config_from_args(args)


def verdict(framework: Framework, request: dict) -> judging.Verdict:
    return judging.judge_argv(
        lambda: framework.judge(request["argv"], int(request["world_size"])), request.get("env", {})
    )


def main() -> int:
    return judging.serve(STAND_INS, lambda: Framework(*sys.argv[1:3]), verdict)


if __name__ == "__main__":
    sys.exit(main())
