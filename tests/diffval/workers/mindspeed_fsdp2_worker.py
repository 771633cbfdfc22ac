"""MindSpeed-LLM's FSDP2 trainer's own verdict on the YAML a plan writes, many per process, on CPU.

    python mindspeed_fsdp2_worker.py MINDSPEED_LLM_DIR < cases.jsonl > verdicts.jsonl

A request is `{"id", "args": {"yaml": TEXT, "world_size": N}}`; the verdict `{"id", "ok", "error", "at"}`,
where an accepted YAML's `error` lists the keys the parser only logged as unused (`"unused: --section.key
..."`), which the trainer would go on without.

What decides: `train_fsdp2.py`'s first step, `MindSpeedAutoTrainer._parse_args`, which runs
`fsdp2_parse_args(Arguments)` (mindspeed_llm/fsdp2/utils/arguments.py: the YAML merged into `--section.key`
arguments, argparse built from the dataclass fields, the dataclasses' `__post_init__` checks and
`_validate_cross_args`). `Arguments` is train_fsdp2.py's own class, read from that file. The next steps
initialise torch.distributed on a device and build the mesh (its rules are ours, from
mindspeed_llm/fsdp2/distributed/parallel_state.py, and not judged here). Only `mindspeed_llm.fsdp2.utils` is
imported (its parent packages are left uninitialised: their __init__ imports the Megatron stack); it needs
PyYAML and nothing else."""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, field  # noqa: F401  (train_fsdp2.py's Arguments uses them)
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402
import standins  # noqa: E402


class Framework:
    def __init__(self, llm_dir: str) -> None:
        sys.path.insert(0, llm_dir)
        standins.empty_package("mindspeed_llm", os.path.join(llm_dir, "mindspeed_llm"))
        standins.empty_package("mindspeed_llm.fsdp2", os.path.join(llm_dir, "mindspeed_llm", "fsdp2"))
        import mindspeed_llm.fsdp2.utils.arguments as arguments

        self.arguments = arguments
        self.unused: list[str] = []
        arguments.logger.info_rank0 = self._log  # the "not used by the ArgumentParser" line
        source = open(os.path.join(llm_dir, "train_fsdp2.py"), encoding="utf-8").read()
        cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Arguments")
        namespace: dict[str, Any] = {"dataclass": dataclass, "field": field, **vars(arguments)}
        exec(compile(ast.Module([cls], []), "train_fsdp2.py", "exec"), namespace)  # noqa: S102
        self.root = namespace["Arguments"]

    def _log(self, message: str, *args: Any, **kwargs: Any) -> None:
        if "not used by the ArgumentParser" in str(message):
            self.unused.append(str(message).split(":", 1)[1].strip())


def verdict(framework: Framework, request: dict) -> judging.Verdict:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as f:
        f.write(request["yaml"])
        path = f.name
    saved = sys.argv
    sys.argv = ["train_fsdp2.py", path]
    framework.unused.clear()
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(request.get("world_size", 1))}
    try:
        ok, error = judging.judge_argv(lambda: framework.arguments.fsdp2_parse_args(framework.root), env)
    finally:
        sys.argv = saved
        os.unlink(path)
    if ok and framework.unused:
        return True, "unused: " + " ".join(framework.unused)
    return ok, error


def main() -> int:
    llm_dir = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--stand-ins" else ""
    return judging.serve((), lambda: Framework(llm_dir), verdict)


if __name__ == "__main__":
    raise SystemExit(main())
