"""MindSpeed-MM 2.1.0's own verdict (with its Megatron-LM core_r0.8.0 and MindSpeed 077c4137) on the training
command line and the data/model/tool json our plan writes, many per process, on CPU: run with a python that
has torch.

    python mm_worker.py MINDSPEED_MM_DIR MINDSPEED_DIR < cases.jsonl > verdicts.jsonl
    python mm_worker.py --stand-ins          (the stand-in table, as JSON)

MINDSPEED_MM_DIR is a MindSpeed-MM checkout with Megatron-LM's megatron/ copied into it (as its install
guide does), MINDSPEED_DIR a MindSpeed checkout. Each input line: `{"id": ..., "args": {"argv": [entry,
flags...], "world_size": N, "env": {...}, "json": {"mm-data": {...}, "mm-model": {...}, ...}}}`: the program
and flags our plan hands torchrun, the environment of its step and the json documents the plan writes (the
worker writes them to a temporary directory and points the argv's --mm-* flags there). Each output line:
`{"id", "ok", "error"}`; `ok` is null when a stand-in was reached (the answer needs what is not here).

What decides, in the order pretrain_vlm.py -> mindspeed_mm/training.py's `pretrain` runs it before any device
is used:

1. MindSpeed's `parse_args_wrapper` over Megatron's `parse_args` (MindSpeed's argument groups and those of its
   FEATURES_LIST), with MindSpeed-MM's `extra_args_provider_decorator(mm_extra_args_provider)` (--mm-data,
   --mm-model, --mm-tool and MindSpeed-MM's own groups), under RANK=0 and WORLD_SIZE=N as torchrun sets
   them; `initialize_megatron`'s `--use-checkpoint-args` needs `--load`;
2. Megatron's `validate_args` as MindSpeed-MM replaces it (mindspeed_mm/patchs/validate_args_patch.py, wrapped
   by MindSpeed's `validate_args_wrapper`, as that module's patch registration applies it): it first runs
   `merge_mm_args`, MindSpeed-MM's json loading (`MMConfig`: each existing json file read with json.loads
   into `ConfigReader`s, every `dtype` key mapped by `get_dtype`), then fills num_layers, hidden_size, heads,
   ... from model.json's text_decoder and runs its own copy of Megatron's checks;
3. `set_global_variables`' first check, the micro-batch calculator;
4. `pretrain`'s check after initialisation: save, log and eval intervals are not 0.

Where it stops: the next steps build the tokenizer, start torch.distributed, apply the json's patches
(PatchesManager) and build VLMModel from model.json (get_model_config, the model classes: they import
torch_npu kernels) and the dataset from data.json (the processor from the HF directory). So model.json and
data.json are judged as json and by what validate_args reads from them, not by the model or dataset builders.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402
import standins  # noqa: E402

STAND_INS = (
    standins.TORCH_NPU,
    ("acl", "CANN's Python runtime", "inert placeholders"),
    standins.TORCHAIR,
    ("einops", "not installed in this python (mindspeed_mm/utils/utils.py imports rearrange)", "inert"),
    standins.PKG_RESOURCES,
    (
        "mindspeed.megatron_adaptor",
        "pretrain_vlm.py imports it first: it applies all of MindSpeed's patches (kernels need torch_npu)",
        "not imported; its argument patches applied as megatron_training_adaptation_l0 registers them: "
        "parse_args <- parse_args_wrapper, validate_args <- validate_args_wrapper (then replaced by "
        "MindSpeed-MM's validate_args, see below), _print_args <- print_args_wrapper",
    ),
    (
        "mindspeed_mm/__init__.py, mindspeed_mm/patchs/__init__.py",
        "import the data, model and patch packages (torch_npu kernels, transformers processors)",
        "empty packages (configs/config.py, utils/utils.py, arguments.py and patchs/validate_args_patch.py "
        "import as usual; validate_args_patch.py's own patch registration runs)",
    ),
)
STAND_IN_MODULES = ("torch_npu", "acl", "torchair", "einops")
JSON_FLAGS = ("mm-data", "mm-model", "mm-tool")


class Framework:
    def __init__(self, mm_dir: str, mindspeed_dir: str) -> None:
        import packaging

        sys.path[:0] = [mm_dir, mindspeed_dir]
        self.finder = standins.install(STAND_IN_MODULES)
        pkg = standins.StandInModule("pkg_resources")
        pkg.packaging = packaging
        sys.modules["pkg_resources"] = pkg
        standins.empty_package("mindspeed_mm", os.path.join(mm_dir, "mindspeed_mm"))
        standins.empty_package("mindspeed_mm.patchs", os.path.join(mm_dir, "mindspeed_mm", "patchs"))
        import megatron.training.arguments as margs
        from mindspeed.arguments import parse_args_wrapper, validate_args_wrapper
        from mindspeed.yaml_arguments import print_args_wrapper

        # the adaptor's megatron_training_adaptation_l0 (the argument patches only), before MindSpeed-MM's
        # modules import from megatron.training.arguments
        margs.parse_args = parse_args_wrapper(margs.parse_args)
        margs.validate_args = validate_args_wrapper(margs.validate_args)
        margs._print_args = print_args_wrapper(margs._print_args)
        # MindSpeed-MM's replacement (force_patch) and its wrapper, applied by the module's own apply_patches
        import mindspeed_mm.patchs.validate_args_patch  # noqa: F401
        from megatron.core.num_microbatches_calculator import build_num_microbatches_calculator
        from mindspeed_mm.arguments import extra_args_provider_decorator
        from mindspeed_mm.configs.config import mm_extra_args_provider

        self.margs = margs
        self.microbatches = build_num_microbatches_calculator
        self.provider = extra_args_provider_decorator(mm_extra_args_provider)
        # mindspeed_mm/training.py pretrain: parse_args_wrapper over the (already patched) parse_args
        self.parse = parse_args_wrapper(margs.parse_args)

    def judge(self, argv: list[str], world_size: int) -> None:
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)})
        sys.argv = list(argv)
        args = self.parse(self.provider, False)
        if args.use_checkpoint_args and args.load is None:
            raise AssertionError("--use-checkpoints-args requires --load argument")
        self.margs.validate_args(args, {})
        self.microbatches(
            args.rank,
            args.rampup_batch_size,
            args.global_batch_size,
            args.micro_batch_size,
            args.data_parallel_size,
        )
        if args.save_interval == 0 or args.log_interval == 0 or args.eval_interval == 0:
            raise ValueError("save_interval, log_interval, and eval_interval cannot be 0")


def with_json(argv: list[str], docs: dict[str, object], directory: str) -> list[str]:
    """argv with each --mm-* flag that has a document pointed at that document, written under directory."""
    out = list(argv)
    for flag, doc in docs.items():
        path = os.path.join(directory, f"{flag}.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        if f"--{flag}" in out:
            i = out.index(f"--{flag}")
            out[i + 1] = path
    return out


def verdict(framework: Framework, request: dict) -> judging.Verdict:
    def judge() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            argv = with_json(request["argv"], request.get("json", {}), tmp)
            framework.judge(argv, int(request["world_size"]))

    return judging.judge_argv(judge, request.get("env", {}))


def main() -> int:
    return judging.serve(STAND_INS, lambda: Framework(*sys.argv[1:3]), verdict)


if __name__ == "__main__":
    sys.exit(main())
