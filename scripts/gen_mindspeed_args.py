"""Regenerate `ascendfactory/backends/mindspeed_llm/args/*.txt`: the argument names MindSpeed-LLM accepts.

Reads the framework sources (from a git repository at a ref, or from a checkout's files), parses them with
`ast`, and keeps the `--long-option` strings of every `add_argument(...)` call, with the value
argparse takes for each: its `type=`, `nargs`, `choices`, or no value (`store_true`), and its default as
argparse sets it when the flag is not given (a Python literal; empty where the source computes it).

    python scripts/gen_mindspeed_args.py \
        --mindspeed-llm /path/to/MindSpeed-LLM --megatron /path/to/Megatron-LM --mindspeed /path/to/MindSpeed

Each source is read with `git -C <repo> show <ref>:<path>` (bare mirrors work); pass `--from-files` to read
the checkout's working files instead (the refs are then only written into the headers).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from dataclasses import dataclass
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parents[1] / "ascendfactory" / "backends" / "mindspeed_llm" / "args"


@dataclass(frozen=True)
class Source:
    repo: str  # key into the --mindspeed-llm / --megatron / --mindspeed paths
    name: str  # GitHub name, for the header
    ref: str
    paths: tuple[str, ...]  # files, or directories ending in "/" (every *.py below them)


# What each names file is made of. (Not mindspeed_llm/tasks/megatron_adaptor.py: its `_process_args_dummy`
# names belong to the adaptor's own pre-parse; the training parser refuses them, e.g. `--layerzero`.)
# Refs are those MindSpeed-LLM 2.1.0 installs (README / install guide), except the v2 converter: 26.1.0 is
# the first release whose convert_ckpt_v2.py takes --hf-cfg-dir, --model-type-hf qwen25 and the LoRA flags.
FILES: dict[str, list[Source]] = {
    "training_2.1.0.txt": [
        Source("megatron", "NVIDIA/Megatron-LM", "core_r0.8.0", ("megatron/training/arguments.py",)),
        Source(
            "llm",
            "Ascend/MindSpeed-LLM",
            "2.1.0",
            (
                "mindspeed_llm/training/arguments.py",
                "mindspeed_llm/features_manager/",
            ),
        ),
        Source(
            "mindspeed",
            "Ascend/MindSpeed",
            "2c085cc9",
            ("mindspeed/features_manager/tensor_parallel/unaligned_linear_feature.py",),
        ),
    ],
    "preprocess_2.1.0.txt": [Source("llm", "Ascend/MindSpeed-LLM", "2.1.0", ("preprocess_data.py",))],
    "convert_v1_2.1.0.txt": [
        Source(
            "llm",
            "Ascend/MindSpeed-LLM",
            "2.1.0",
            (
                "convert_ckpt.py",
                "mindspeed_llm/tasks/checkpoint/loader_hf.py",
                "mindspeed_llm/tasks/checkpoint/loader_mg.py",
                "mindspeed_llm/tasks/checkpoint/saver.py",
            ),
        )
    ],
    "convert_v2_26.1.0.txt": [Source("llm", "Ascend/MindSpeed-LLM", "26.1.0", ("convert_ckpt_v2.py",))],
}


@dataclass(frozen=True)
class Spec:
    """What argparse does with one flag's value: `kind` flag (store_true/false, no value), int, float, str,
    or other (a converter function); `nargs` as written (empty: one value); `choices` when literal."""

    kind: str
    nargs: str = ""
    choices: tuple[str, ...] = ()
    default: str = "None"  # repr of argparse's default; "" where the source computes it

    def row(self, name: str) -> str:
        return "\t".join((name, self.kind, self.nargs, "|".join(self.choices), self.default))


_ACTION_KINDS = {"store_true": "flag", "store_false": "flag", "store_const": "flag", "count": "flag"}


def _spec(call: ast.Call) -> Spec:
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    action = kw.get("action")
    default = _default(kw.get("default"))
    if isinstance(action, ast.Constant) and action.value in _ACTION_KINDS:
        if "default" not in kw and action.value in ("store_true", "store_false"):
            default = repr(action.value == "store_false")  # argparse: the opposite of the stored value
        return Spec("flag", default=default)
    kind = "str"
    tp = kw.get("type")
    if isinstance(tp, ast.Name):
        kind = tp.id if tp.id in ("int", "float", "str") else "other"
    elif tp is not None:
        kind = "other"
    if isinstance(action, ast.Constant) and action.value == "append":
        nargs = "append"
    else:
        n = kw.get("nargs")
        nargs = str(n.value) if isinstance(n, ast.Constant) else ("?" if n is not None else "")
    choices: tuple[str, ...] = ()
    ch = kw.get("choices")
    if isinstance(ch, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in ch.elts):
        choices = tuple(str(e.value) for e in ch.elts)
    return Spec(kind, nargs, choices, default)


def _default(node: ast.expr | None) -> str:
    """repr of a literal `default=` (None when absent, as argparse); "" for a computed one."""
    if node is None:
        return "None"
    try:
        return repr(ast.literal_eval(node))
    except ValueError:
        return ""


def option_specs(source_text: str) -> dict[str, Spec]:
    """`--name` (without dashes) -> Spec, for every `*.add_argument(...)` call."""
    specs: dict[str, Spec] = {}
    for node in ast.walk(ast.parse(source_text)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                specs[arg.value[2:]] = _spec(node)
    return specs


def option_names(source_text: str) -> set[str]:
    """The `--name` strings (without dashes) passed to any `*.add_argument(...)` call."""
    return set(option_specs(source_text))


class Reader:
    def __init__(self, root: str, *, from_files: bool):
        self.root, self.from_files = root, from_files

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", self.root, *args], check=True, capture_output=True, text=True
        ).stdout

    def commit(self, ref: str) -> str:
        return self._git("rev-parse", ref + "^{commit}").strip() if not self.from_files else "(working files)"

    def files(self, ref: str, path: str) -> list[str]:
        if not path.endswith("/"):
            return [path]
        if self.from_files:
            return sorted(str(p.relative_to(self.root)) for p in (Path(self.root) / path).rglob("*.py"))
        listing = self._git("ls-tree", "-r", "--name-only", ref, path).splitlines()
        return sorted(p for p in listing if p.endswith(".py"))

    def read(self, ref: str, path: str) -> str:
        if self.from_files:
            return (Path(self.root) / path).read_text(encoding="utf-8")
        return self._git("show", f"{ref}:{path}")


def build(readers: dict[str, Reader], sources: list[Source]) -> tuple[list[str], dict[str, Spec]]:
    """The header lines and every flag's Spec; a later source's definition wins (MindSpeed-LLM re-adds
    Megatron's flags with its own parser settings)."""
    header: list[str] = []
    specs: dict[str, Spec] = {}
    for src in sources:
        reader = readers[src.repo]
        commit = reader.commit(src.ref)
        for path in src.paths:
            for f in reader.files(src.ref, path):
                found = option_specs(reader.read(src.ref, f))
                specs.update(found)
                if found:
                    header.append(f"#   {src.name} @ {src.ref} ({commit[:12]}): {f} ({len(found)} names)")
    return header, specs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mindspeed-llm", required=True, help="MindSpeed-LLM git repository")
    p.add_argument("--megatron", required=True, help="Megatron-LM git repository")
    p.add_argument("--mindspeed", required=True, help="MindSpeed git repository")
    p.add_argument("--from-files", action="store_true", help="read working files instead of git refs")
    p.add_argument("--out", default=str(OUT_DIR))
    a = p.parse_args()
    readers = {
        k: Reader(v, from_files=a.from_files)
        for k, v in (("llm", a.mindspeed_llm), ("megatron", a.megatron), ("mindspeed", a.mindspeed))
    }
    for filename, sources in FILES.items():
        header, specs = build(readers, sources)
        text = [
            "# Argument names (without the leading --) accepted by the MindSpeed-LLM program(s) below.",
            "# Generated by scripts/gen_mindspeed_args.py from the add_argument() calls of:",
            *header,
            "# name<TAB>kind (flag: no value; int, float, str: argparse's type=; other: a function)"
            "<TAB>nargs (empty: one value; append: repeated flag)<TAB>choices (|-separated)"
            "<TAB>default (argparse's, a Python literal; empty: computed in the source)",
            f"# {len(specs)} names. Facts from their source; regenerate, do not edit by hand.",
            *(specs[n].row(n) for n in sorted(specs)),
        ]
        (Path(a.out) / filename).write_text("\n".join(text) + "\n", encoding="utf-8")
        print(f"{filename}: {len(specs)} names")


if __name__ == "__main__":
    main()
