"""Regenerate `ascendfactory/backends/mindspeed_llm/keys/*.txt`: the argument names MindSpeed-LLM accepts,
per MindSpeed-LLM version (`--version`; each version's files are named `<kind>_<version>.txt`).

Two ways of reading a program's arguments, chosen per file in `VERSIONS`:

- read (`Source`): parse the framework sources with `ast` and keep the `--long-option` strings of every
  `add_argument(...)` call, with the value argparse takes for each: its `type=`, `nargs`, `choices`, or no
  value (`store_true`). Used for the programs with one plain parser (preprocess_data.py, the converters).
- built (`Built`): the training parser, built as the training program builds it (Megatron's `parse_args`
  wrapped by MindSpeed-LLM's `parse_args_decorator`: 2.1.0 adds its argument groups and features, 26.x
  registers every feature of `mindspeed_llm/features_manager/__init__.py` `create_features_list`, some of
  which change other arguments' choices), in a child process with the checkouts on `sys.path` and the
  stand-ins the differential judge uses for what cannot import here (`tests/diffval/workers/standins.py`),
  listing `parser._actions`. Reading the source instead would list arguments a function defines but the
  parser never registers, and miss choices added at run time.

    python scripts/gen_mindspeed_args.py --version 2.1.0 --from-files \
        --mindspeed-llm /work/ext/MindSpeed-LLM-2.1.0 --megatron /work/ext/Megatron-LM-core_r0.8.0 \
        --mindspeed /work/ext/MindSpeed-2c085cc9 \
        --commit llm=3186197571e7 --commit megatron=<sha> --commit mindspeed=2c085cc9473f
    python scripts/gen_mindspeed_args.py --version 26.1.0 --from-files \
        --mindspeed-llm /work/ext/MindSpeed-LLM-26.1.0 --megatron /work/ext/Megatron-LM-core_v0.12.1 \
        --mindspeed /work/ext/MindSpeed-26.1.0_core_r0.12.1 \
        --commit llm=2b7130ca7bea --commit megatron=a845aa7e12b3 --commit mindspeed=57a33053c4ec

Read sources come from `git -C <repo> show <ref>:<path>` (bare mirrors work); pass `--from-files` to read
the checkouts' working files instead (the refs are then only written into the headers, with the commits
given by `--commit`). A built parser needs `--from-files`: it imports the checkouts.
"""

from __future__ import annotations

import argparse
import ast
import enum
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "ascendfactory" / "backends" / "mindspeed_llm" / "keys"
STANDINS = REPO / "tests" / "diffval" / "workers" / "standins.py"


@dataclass(frozen=True)
class Source:
    repo: str  # key into the --mindspeed-llm / --megatron / --mindspeed paths
    name: str  # GitHub name, for the header
    ref: str
    paths: tuple[str, ...]  # files, or directories ending in "/" (every *.py below them)


@dataclass(frozen=True)
class Built:
    """The training parser as the entry scripts build it (module docstring), at these refs."""

    llm_ref: str
    megatron_ref: str
    mindspeed_ref: str


@dataclass(frozen=True)
class BuiltFsdp2:
    """The keys of train_fsdp2.py's YAML (MindSpeed-LLM 26.x's FSDP2 trainer), from the dataclasses its
    `Arguments` nests (train_fsdp2.py) as mindspeed_llm/fsdp2/utils/arguments.py reads them: one row per
    `section.key` with its type, choices (Literal), default and whether it is required."""

    llm_ref: str


LLM, MEGATRON, MINDSPEED = "Ascend/MindSpeed-LLM", "NVIDIA/Megatron-LM", "Ascend/MindSpeed"
V1_CONVERTER = (
    "convert_ckpt.py",
    "mindspeed_llm/tasks/checkpoint/loader_hf.py",
    "mindspeed_llm/tasks/checkpoint/loader_mg.py",
    "mindspeed_llm/tasks/checkpoint/saver.py",
)
# The v2 converter's list is 26.1.0's for every version (backends/mindspeed_llm/versions.py): 26.1.0 is the
# first release whose convert_ckpt_v2.py takes --hf-cfg-dir, --model-type-hf qwen25 and the LoRA flags.
V2_CONVERTER = [Source("llm", LLM, "v26.1.0", ("convert_ckpt_v2.py",))]

# What each version's names files are made of. (Not mindspeed_llm/tasks/megatron_adaptor.py at 2.1.0: its
# `_process_args_dummy` names belong to the adaptor's own pre-parse; the training parser refuses them, e.g.
# `--layerzero`.) Refs are those each version's install guide installs.
VERSIONS: dict[str, dict[str, list[Source] | Built | BuiltFsdp2]] = {
    # docs/pytorch/install_guide.md on branch 2.1.0: Megatron-LM core_r0.8.0, MindSpeed 2c085cc9. The training
    # parser is built, not read: reading every add_argument of mindspeed_llm/training/arguments.py listed
    # --trust-remote-code, which the parser never registers, and missed the `alibi` choice
    # MindSpeed-LLM adds to --position-embedding-type.
    "2.1.0": {
        "training_2.1.0.txt": Built("2.1.0", "core_r0.8.0", "2c085cc9"),
        "preprocess_2.1.0.txt": [Source("llm", LLM, "2.1.0", ("preprocess_data.py",))],
        "convert_v1_2.1.0.txt": [Source("llm", LLM, "2.1.0", V1_CONVERTER)],
        # (2.1.0 ships no v2 converter: its plans check v2 flags against 26.1.0's list, generated there)
    },
    # docs/zh/pytorch/training/install_guide.md at v26.1.0: Megatron-LM core_v0.12.1, MindSpeed branch
    # 26.1.0_core_r0.12.1.
    "26.1.0": {
        "training_26.1.0.txt": Built("v26.1.0", "core_v0.12.1", "26.1.0_core_r0.12.1"),
        "preprocess_26.1.0.txt": [Source("llm", LLM, "v26.1.0", ("preprocess_data.py",))],
        "convert_v1_26.1.0.txt": [Source("llm", LLM, "v26.1.0", V1_CONVERTER)],
        "convert_v2_26.1.0.txt": V2_CONVERTER,
        "fsdp2_26.1.0.txt": BuiltFsdp2("v26.1.0"),
    },
}


@dataclass(frozen=True)
class Spec:
    """What argparse does with one flag's value: `kind` flag (store_true/false, no value), int, float, str,
    or other (a converter function); `nargs` as written (empty: one value); `choices` when literal;
    `default`, the repr of argparse's default ("" where it is computed, not a literal)."""

    kind: str
    nargs: str = ""
    choices: tuple[str, ...] = ()
    default: str = "None"

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


def _literal_repr(value: object) -> str:
    """repr of a built parser's default when it is a literal (what ast.literal_eval reads back), else ""."""
    text = repr(value)
    try:
        return text if ast.literal_eval(text) == value else ""
    except (ValueError, SyntaxError):
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
    def __init__(self, root: str, *, from_files: bool, commit: str | None = None):
        self.root, self.from_files, self.given_commit = root, from_files, commit

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", self.root, *args], check=True, capture_output=True, text=True
        ).stdout

    def commit(self, ref: str) -> str:
        if self.from_files:
            return self.given_commit or "(working files)"
        return self._git("rev-parse", ref + "^{commit}").strip()

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


# -- a built parser -------------------------------------------------------------------------------------
def built(readers: dict[str, Reader], what: Built) -> tuple[list[str], dict[str, Spec]]:
    """Build the training parser in a child process (the imports stay out of this one) and read it."""
    roots = {k: readers[k] for k in ("llm", "megatron", "mindspeed")}
    if not all(r.from_files for r in roots.values()):
        raise SystemExit("a built parser imports the checkouts: pass --from-files with checkout directories")
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--dump-parser",
            roots["llm"].root,
            roots["megatron"].root,
            roots["mindspeed"].root,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"building the parser failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    specs = {name: Spec(*row) for name, row in report["options"].items()}
    refs = (
        (LLM, what.llm_ref, roots["llm"]),
        (MEGATRON, what.megatron_ref, roots["megatron"]),
        (MINDSPEED, what.mindspeed_ref, roots["mindspeed"]),
    )
    header = [f"#   {name} @ {ref} ({reader.commit(ref)[:12]})" for name, ref, reader in refs]
    header += [
        "#   built as posttrain_gpt.py / pretrain_gpt.py build it: Megatron-LM's",
        "#   megatron/training/arguments.py parse_args wrapped by mindspeed_llm/training/arguments.py",
        "#   parse_args_decorator (its own argument groups, and the arguments of the",
        f"#   {report['features']} features in mindspeed_llm/features_manager's features list);",
        f"#   stand-ins for what cannot import here: {', '.join(report['stand_ins']) or 'none'}",
    ]
    return header, specs


def dump_parser(llm: str, megatron: str, mindspeed: str) -> None:
    """Child process: build the parser and print {options: {name: [kind, nargs, choices]}, ...} as JSON."""
    sys.path.insert(0, str(STANDINS.parent))
    import standins  # the judge's stand-ins (tests/diffval/workers/standins.py)

    sys.path[:0] = [llm, megatron, mindspeed]
    finder = standins.install(("torch_npu", "acl", "torchair", "einops"))
    import packaging

    pkg = standins.StandInModule("pkg_resources")
    pkg.packaging = packaging  # type: ignore[attr-defined]
    sys.modules["pkg_resources"] = pkg
    # mindspeed_llm/__init__.py runs the whole adaptor (patches that need NPUs); the parser needs none of it
    standins.empty_package("mindspeed_llm", os.path.join(llm, "mindspeed_llm"))
    import megatron.training.arguments as margs
    from mindspeed_llm.training.arguments import parse_args_decorator

    captured: dict[str, argparse.ArgumentParser] = {}
    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        captured["parser"] = self
        return original(self, *args, **kwargs)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    sys.argv = ["posttrain_gpt.py"]
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        parse_args_decorator(margs.parse_args)(None, False)
    options = {}
    for action in captured["parser"]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for option in action.option_strings:
            if option.startswith("--"):
                row = list(_action_spec(action))
                if any(root in row[3] for root in (llm, megatron, mindspeed)):
                    row[3] = ""  # a default computed from where the checkout is (prompt-type-path)
                options[option[2:]] = row
    try:  # 26.x: the features the manager registered; 2.1.0: MindSpeed-LLM's own FEATURES_LIST
        from mindspeed.features_manager.features_manager import MindSpeedFeaturesManager

        features = len(MindSpeedFeaturesManager.FEATURES_LIST)
    except ImportError:
        from mindspeed_llm.features_manager import FEATURES_LIST

        features = len(FEATURES_LIST)
    report = {
        "options": options,
        "features": features,
        "stand_ins": sorted({name.split(".")[0] for name in finder.used}),
    }
    print(json.dumps(report))


def fsdp2_rows(readers: dict[str, Reader], what: BuiltFsdp2) -> tuple[list[str], list[str]]:
    """(header, rows) of the FSDP2 trainer's keys, read in a child process (module docstring)."""
    llm = readers["llm"]
    if not llm.from_files:
        raise SystemExit("the FSDP2 keys import the checkout: pass --from-files with checkout directories")
    done = subprocess.run(
        [sys.executable, __file__, "--dump-fsdp2", llm.root], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"reading the FSDP2 arguments failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    header = [
        f"#   {LLM} @ {what.llm_ref} ({llm.commit(what.llm_ref)[:12]}): train_fsdp2.py Arguments",
        f"#   ({', '.join(report['sections'])}): the dataclasses of mindspeed_llm/fsdp2/utils/arguments.py",
        "#   section.key<TAB>type<TAB>required or empty<TAB>choices<TAB>default",
        "#   (types: bool, int, float, str, list, dict, dict|str)",
    ]
    return header, report["rows"]


def dump_fsdp2(llm: str) -> None:
    """Child process: the FSDP2 trainer's sections and keys as JSON."""
    import dataclasses
    import typing

    sys.path.insert(0, str(STANDINS.parent))
    import standins

    sys.path.insert(0, llm)
    for pkg in ("mindspeed_llm", "mindspeed_llm.fsdp2", "mindspeed_llm.fsdp2.utils"):
        standins.empty_package(pkg, os.path.join(llm, *pkg.split(".")))
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import mindspeed_llm.fsdp2.utils.arguments as arguments
    # train_fsdp2.py's root class: `section: SomeArguments = field(default_factory=SomeArguments)`
    tree = ast.parse(Path(llm, "train_fsdp2.py").read_text(encoding="utf-8"))
    root = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Arguments")
    sections = [
        (n.target.id, n.annotation.id)  # type: ignore[attr-defined]
        for n in root.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]
    rows = []
    for section, cls_name in sections:
        cls = getattr(arguments, cls_name)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            kind, choices = _fsdp2_kind(hints[f.name])
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if f.default is not dataclasses.MISSING:
                default = _literal_repr(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = _literal_repr(f.default_factory())
            else:
                default = ""
            rows.append(
                "\t".join(
                    (f"{section}.{f.name}", kind, "required" if required else "", "|".join(choices), default)
                )
            )
    print(json.dumps({"sections": [s for s, _ in sections], "rows": rows}))


def _fsdp2_kind(hint: object) -> tuple[str, tuple[str, ...]]:
    """(kind, Literal choices) of a dataclass field's annotation (Optional unwrapped)."""
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _fsdp2_kind(inner[0])
        kinds = sorted({_fsdp2_kind(a)[0] for a in inner})
        return "|".join(kinds), ()
    if origin is typing.Literal:
        return "str", tuple(str(a) for a in args)
    if origin in (list, typing.List):  # noqa: UP006
        return "list", ()
    if origin in (dict, typing.Dict) or hint is dict:  # noqa: UP006
        return "dict", ()
    for t, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if hint is t:
            return name, ()
    return "str", ()


def _action_spec(action: argparse.Action) -> tuple[str, str, tuple[str, ...], str]:
    default = _literal_repr(action.default)
    if action.nargs == 0:  # store_true / store_false / store_const / count
        return "flag", "", (), default
    kind = {int: "int", float: "float", str: "str", None: "str"}.get(action.type, "other")  # type: ignore[arg-type]
    if isinstance(action, argparse._AppendAction):
        nargs = "append"
    else:
        nargs = "" if action.nargs is None else str(action.nargs)
    # an Enum choice (core_v0.12.1 --attention-backend: type=AttnBackend[name], choices=list(AttnBackend)) is
    # written by its name, the text argparse's type= converts
    choices = (
        tuple(c.name if isinstance(c, enum.Enum) else str(c) for c in action.choices)
        if isinstance(action.choices, (list, tuple))
        else ()
    )
    return kind, nargs, choices, default


def main() -> None:
    if sys.argv[1:2] == ["--dump-parser"]:
        dump_parser(*sys.argv[2:5])
        return
    if sys.argv[1:2] == ["--dump-fsdp2"]:
        dump_fsdp2(sys.argv[2])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", required=True, choices=sorted(VERSIONS), help="MindSpeed-LLM version")
    p.add_argument("--mindspeed-llm", required=True, help="MindSpeed-LLM git repository (or checkout)")
    p.add_argument("--megatron", required=True, help="Megatron-LM git repository (or checkout)")
    p.add_argument("--mindspeed", required=True, help="MindSpeed git repository (or checkout)")
    p.add_argument("--from-files", action="store_true", help="read working files instead of git refs")
    p.add_argument(
        "--commit",
        action="append",
        default=[],
        metavar="REPO=SHA",
        help="with --from-files: the commit a checkout is at, for the headers (llm=, megatron=, mindspeed=)",
    )
    p.add_argument("--out", default=str(OUT_DIR))
    a = p.parse_args()
    commits = dict(c.split("=", 1) for c in a.commit)
    readers = {
        k: Reader(v, from_files=a.from_files, commit=commits.get(k))
        for k, v in (("llm", a.mindspeed_llm), ("megatron", a.megatron), ("mindspeed", a.mindspeed))
    }
    for filename, sources in VERSIONS[a.version].items():
        if isinstance(sources, BuiltFsdp2):
            header, rows = fsdp2_rows(readers, sources)
            text = [
                "# Keys of MindSpeed-LLM's FSDP2 trainer YAML (train_fsdp2.py <config.yaml>).",
                f"# Generated by scripts/gen_mindspeed_args.py --version {a.version} from:",
                *header,
                f"# {len(rows)} keys. Facts from their source; regenerate, do not edit by hand.",
                *sorted(rows),
            ]
            (Path(a.out) / filename).write_text("\n".join(text) + "\n", encoding="utf-8")
            print(f"{filename}: {len(rows)} keys")
            continue
        header, specs = built(readers, sources) if isinstance(sources, Built) else build(readers, sources)
        how = "the parser built from" if isinstance(sources, Built) else "the add_argument() calls of"
        text = [
            "# Argument names (without the leading --) accepted by the MindSpeed-LLM program(s) below.",
            f"# Generated by scripts/gen_mindspeed_args.py --version {a.version} from {how}:",
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
