"""Regenerate `ascendfactory/backends/mindspeed_mm/keys/`: what MindSpeed-MM accepts, per generation.

For each generation (2.1.0: MindSpeed-MM 2.1.0 on Megatron-LM core_r0.8.0; master: MindSpeed-MM master on
core_v0.12.1, each with the MindSpeed commit its Qwen2.5-VL README checks out) it writes:

    training_<gen>.txt   the `--names` pretrain_vlm.py accepts: every add_argument() of Megatron-LM's
                         megatron/training/arguments.py, MindSpeed's arguments.py and features_manager/,
                         and MindSpeed-MM's own (mindspeed_mm/arguments.py, mindspeed_mm/configs/config.py)
    mm_convert_<gen>.txt mm-convert's converters (checkpoint/__init__.py), their subcommands (public static
                         methods) and every `--<param>.<dotted.key>` of each subcommand, expanded from the
                         pydantic models of the `cfg` annotation (type, required or default)
    data_json_<gen>.txt  the data.json sections backed by a dataclass or a function (unknown keys are a
                         TypeError there): dataset_param.preprocess_parameters (ProcessorArguments),
                         dataset_param.basic_parameters (DataArguments), dataset_param.attr (DatasetAttr),
                         dataloader_param (prepare_sampler_dataloader's keywords); the keys
                         get_qwen2vl_dataset rejects with their message; the keys build_mm_dataset and
                         build_mm_dataloader require
    path_params.txt      the data/model/tool json keys whose values are paths (master's validate_params.json)
    presets_<gen>.json   per Qwen2.5-VL size: the example script's exported variables, `source`d scripts,
                         parallel defaults, GPT_ARGS / OUTPUT_ARGS flags in order (plan-set values as
                         "${VAR}"), the entry script and its trailing flags; the example data_*.json,
                         model_*.json, mindspeed_mm/tools/tools.json; the converter the README runs

Sources are read with `git -C <repo> show <ref>:<path>` (bare mirrors work):

    python scripts/gen_mindspeed_mm_data.py --mindspeed-mm /path/MindSpeed-MM --megatron /path/Megatron-LM \
        --mindspeed /path/MindSpeed
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_mindspeed_args import Reader, Spec, option_specs  # noqa: E402

OUT_DIR = Path(__file__).resolve().parents[1] / "ascendfactory" / "backends" / "mindspeed_mm" / "keys"


@dataclass(frozen=True)
class Generation:
    mm_ref: str  # MindSpeed-MM branch or commit
    megatron_ref: str  # what the Qwen2.5-VL README checks out and copies into the checkout
    mindspeed_ref: str  # the MindSpeed commit the README checks out


GENERATIONS = {
    # examples/qwen2.5vl/README.md on branch 2.1.0: Megatron-LM core_r0.8.0, MindSpeed 077c4137.
    "2.1.0": Generation("2.1.0", "core_r0.8.0", "077c41370332460fbf749ea94fe1a994f367f4bf"),
    # the same README on master (57069cd5): Megatron-LM core_v0.12.1, MindSpeed 69f41000.
    "master": Generation(
        "57069cd55a8ab16d5affe379a2e2c5f0a4d962b9", "core_v0.12.1", "69f41000786438204b5f2ffdb788c055788f7378"
    ),
}
SIZES = ("3b", "7b", "32b", "72b")
EXAMPLES = "examples/qwen2.5vl"
MM_TRAINING_FILES = ("mindspeed_mm/arguments.py", "mindspeed_mm/configs/config.py")
MINDSPEED_FILES = ("mindspeed/arguments.py", "mindspeed/features_manager/")
DATA_CLASSES = (
    (
        "dataset_param.preprocess_parameters",
        "mindspeed_mm/data/data_utils/func_utils/model_args.py",
        "ProcessorArguments",
    ),
    ("dataset_param.basic_parameters", "mindspeed_mm/data/data_utils/func_utils/convert.py", "DataArguments"),
    ("dataset_param.attr", "mindspeed_mm/data/data_utils/func_utils/convert.py", "DatasetAttr"),
)
PATH_PARAMS = "mindspeed_mm/configs/validate_params.json"
PATH_SECTIONS = ("mm_data", "mm_model", "mm_tool")
DATALOADER = ("dataloader_param", "mindspeed_mm/data/dataloader/dataloader.py", "prepare_sampler_dataloader")
# prepare_sampler_dataloader's parameters the framework passes itself (not data.json keys).
DATALOADER_INTERNAL = {"dataset", "process_group", "consumed_samples", "dataset_param"}


def provenance(name: str, ref: str, commit: str, path: str) -> str:
    return f"{name} @ {ref} ({commit[:12]}): {path}"


# -- training flags -------------------------------------------------------------------------------------
def training_names(readers: dict[str, Reader], gen: Generation) -> tuple[list[str], dict[str, Spec]]:
    """The flags and the value each takes. Read in the order the parser adds them (a later add_argument of
    the same name replaces the earlier, conflict_handler "resolve"): Megatron's, then MindSpeed-MM's
    (pretrain's extra_args_provider), then MindSpeed's (parse_args_wrapper runs its process_args last)."""
    header: list[str] = []
    specs: dict[str, Spec] = {}
    sources = (
        ("megatron", "NVIDIA/Megatron-LM", gen.megatron_ref, ("megatron/training/arguments.py",)),
        ("mm", "Ascend/MindSpeed-MM", gen.mm_ref, MM_TRAINING_FILES),
        ("mindspeed", "Ascend/MindSpeed", gen.mindspeed_ref, MINDSPEED_FILES),
    )
    for key, name, ref, paths in sources:
        reader = readers[key]
        commit = reader.commit(ref)
        for path in paths:
            for f in reader.files(ref, path):
                found = option_specs(reader.read(ref, f))
                if found:
                    specs.update(found)
                    header.append(f"#   {provenance(name, ref, commit, f)} ({len(found)} names)")
    return header, specs


def write_training(out: Path, gen_name: str, header: list[str], specs: dict[str, Spec], tail: str) -> None:
    write_lines(
        out / f"training_{gen_name}.txt",
        [
            f"# Flags (without --) pretrain_vlm.py accepts in the MindSpeed-MM {gen_name} generation.",
            "# Generated by scripts/gen_mindspeed_mm_data.py from the add_argument() calls of:",
            *header,
            "# name<TAB>kind (flag: no value; int, float, str: argparse's type=; other: a function)"
            "<TAB>nargs<TAB>choices (|-separated)<TAB>default (argparse's, a Python literal; empty: "
            "computed in the source)",
            f"# {len(specs)} names. {tail}",
        ],
        [specs[n].row(n) for n in sorted(specs)],
    )


# -- mm-convert -----------------------------------------------------------------------------------------
class Package:
    """The `checkpoint` package's modules at one ref, parsed, with name resolution across `from` imports."""

    def __init__(self, reader: Reader, ref: str):
        self.reader, self.ref = reader, ref
        self.modules: dict[str, ast.Module | None] = {}
        self.paths: set[str] = set()  # the files read

    def module(self, dotted: str) -> ast.Module | None:
        if dotted not in self.modules:
            path = dotted.replace(".", "/")
            self.modules[dotted] = None
            for candidate in (f"{path}.py", f"{path}/__init__.py"):
                try:
                    text = self.reader.read(self.ref, candidate)
                except Exception:  # noqa: BLE001 - not at this path
                    continue
                self.modules[dotted] = ast.parse(text)
                self.paths.add(candidate)
                break
        return self.modules[dotted]

    def resolve(self, module: str, name: str) -> tuple[str, ast.ClassDef | ast.FunctionDef] | None:
        """Where `name`, as seen from `module`, is defined (a class or function of the package)."""
        tree = self.module(module)
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                return module, node
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("checkpoint"):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return self.resolve(node.module, alias.name)
        return None


def _annotation_names(node: ast.expr | None) -> list[str]:
    """Plain names in an annotation, outermost first (Optional[List[X]] -> Optional, List, X)."""
    if node is None:
        return []
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Subscript):
        return _annotation_names(node.value) + _annotation_names(node.slice)
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _annotation_names(elt)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.BinOp):  # X | None
        return _annotation_names(node.left) + _annotation_names(node.right)
    return []


def _fields(pkg: Package, module: str, cls: ast.ClassDef) -> dict[str, tuple[str, ast.AnnAssign]]:
    """Annotated fields of a class and its package bases (bases first, subclasses override in place), each
    with the module it is declared in (where its annotation's names resolve)."""
    fields: dict[str, tuple[str, ast.AnnAssign]] = {}
    for base in cls.bases:
        names = _annotation_names(base)
        found = pkg.resolve(module, names[0]) if names else None
        if found and isinstance(found[1], ast.ClassDef):
            fields.update(_fields(pkg, found[0], found[1]))
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            if name.startswith("_") or "ClassVar" in _annotation_names(node.annotation):
                continue
            fields[name] = (module, node)
    return fields


def _is_model(pkg: Package, module: str, cls: ast.ClassDef) -> bool:
    """A pydantic model (BaseModel among its bases, through the package)."""
    for base in cls.bases:
        names = _annotation_names(base)
        if not names:
            continue
        if names[0] == "BaseModel":
            return True
        found = pkg.resolve(module, names[0])
        if found and isinstance(found[1], ast.ClassDef) and _is_model(pkg, *found):
            return True
    return False


def expand(pkg: Package, module: str, prefix: str, annotation: ast.expr | None, required: bool) -> list[str]:
    """`prefix<TAB>type<TAB>required|optional` lines, expanding package pydantic models into dotted keys
    (a key is required when it and every model above it have no default)."""
    names = _annotation_names(annotation)
    for n in names:
        found = pkg.resolve(module, n)
        if found and isinstance(found[1], ast.ClassDef) and _is_model(pkg, *found):
            lines = []
            for fname, (fmodule, node) in _fields(pkg, *found).items():
                lines += expand(
                    pkg, fmodule, f"{prefix}.{fname}", node.annotation, required and node.value is None
                )
            return lines
    kind = ast.unparse(annotation) if annotation is not None else "Any"
    return [f"{prefix}\t{kind}\t{'required' if required else 'optional'}"]


def _methods(pkg: Package, module: str, cls: ast.ClassDef) -> dict[str, tuple[str, ast.FunctionDef]]:
    """Public methods (subcommands) of a class and its package bases; abstract ones excluded."""
    out: dict[str, tuple[str, ast.FunctionDef]] = {}
    for base in cls.bases:
        names = _annotation_names(base)
        found = pkg.resolve(module, names[0]) if names else None
        if found and isinstance(found[1], ast.ClassDef):
            out.update(_methods(pkg, *found))
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            decorators = [n for d in node.decorator_list for n in _annotation_names(d)]
            if "classmethod" in decorators:  # Commandable.add_command: registration, not a subcommand
                continue
            if "abstractmethod" in decorators:
                out.pop(node.name, None)
            else:
                out[node.name] = (module, node)
    return out


def mm_convert_lines(reader: Reader, ref: str) -> tuple[list[str], list[str]]:
    pkg = Package(reader, ref)
    init = pkg.module("checkpoint")
    assert init is not None, "checkpoint/__init__.py not found"
    converters: list[tuple[str, str]] = []
    for node in init.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("checkpoint."):
            for alias in node.names:
                if alias.name not in ("Converter", "Commandable"):
                    converters.append((node.module, alias.name))
    lines: list[str] = []
    for module, name in converters:
        found = pkg.resolve(module, name)
        if not found or not isinstance(found[1], ast.ClassDef):
            continue
        for sub, (mod, fn) in sorted(_methods(pkg, *found).items()):
            params = [a for a in fn.args.args if a.arg not in ("self", "cls")]
            defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
            for arg, default in zip(params, defaults):
                for line in expand(pkg, mod, arg.arg, arg.annotation, default is None):
                    lines.append(f"{name}\t{sub}\t{line}")
    return sorted(pkg.paths), lines


# -- data.json ------------------------------------------------------------------------------------------
def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _default_text(node: ast.expr | None) -> str:
    if node is None:
        return "required"
    if isinstance(node, ast.Call) and _annotation_names(node.func) == ["field"]:
        for kw in node.keywords:
            if kw.arg == "default":
                return ast.unparse(kw.value)
            if kw.arg == "default_factory":
                return ast.unparse(kw.value) + "()"
        return "required"
    return ast.unparse(node)


def data_json_lines(reader: Reader, ref: str) -> tuple[list[str], list[str]]:
    lines: list[str] = []
    files: list[str] = []
    for section, path, cls_name in DATA_CLASSES:
        cls = _class(ast.parse(reader.read(ref, path)), cls_name)
        files.append(f"{path} ({cls_name})")
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                lines.append(f"key\t{section}\t{node.target.id}\t{_default_text(node.value)}")
    section, path, fn_name = DATALOADER
    fn = _function(ast.parse(reader.read(ref, path)), fn_name)
    files.append(f"{path} ({fn_name})")
    params = fn.args.args
    defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
    for arg, default in zip(params, defaults):
        if arg.arg not in DATALOADER_INTERNAL:
            lines.append(f"key\t{section}\t{arg.arg}\t{_default_text(default)}")
    lines.append(f"key\t{section}\tdataloader_mode\trequired")  # popped by build_mm_dataloader first
    # Keys get_qwen2vl_dataset rejects: `if "<key>" in basic_param.keys(): raise ValueError("<message>")`.
    ds_path = "mindspeed_mm/data/datasets/qwen2vl_dataset.py"
    fn = _function(ast.parse(reader.read(ref, ds_path)), "get_qwen2vl_dataset")
    files.append(f"{ds_path} (get_qwen2vl_dataset)")
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            key = node.test.left
            raise_ = next((n for n in node.body if isinstance(n, ast.Raise)), None)
            if isinstance(key, ast.Constant) and raise_ is not None and isinstance(raise_.exc, ast.Call):
                message = raise_.exc.args[0]
                text = message.value if isinstance(message, ast.Constant) else ast.unparse(message)
                lines.append(f"rejected\tdataset_param.basic_parameters\t{key.value}\t{text}")
    # Keys build_mm_dataset requires: `for check_key in [...]: if check_key not in dataset_param: raise`.
    init_path = "mindspeed_mm/data/__init__.py"
    tree = ast.parse(reader.read(ref, init_path))
    files.append(f"{init_path} (build_mm_dataset)")
    for node in ast.walk(_function(tree, "build_mm_dataset")):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.List):
            for elt in node.iter.elts:
                if isinstance(elt, ast.Constant):
                    lines.append(f"required\tdataset_param\t{elt.value}\tKey parameter missing: {elt.value}")
    return files, lines


# -- presets --------------------------------------------------------------------------------------------
def parse_script(text: str) -> dict:
    """The facts of a finetune_*.sh: exports, sources, assignments, argument groups, the torchrun line."""
    exports: dict[str, str] = {}
    sources: list[str] = []
    variables: dict[str, str] = {}
    groups: dict[str, list[list[str]]] = {}
    lines = text.splitlines()
    i = 0
    entry: dict = {}
    while i < len(lines):
        line = lines[i].split("#", 1)[0].strip() if not lines[i].strip().startswith("#!") else ""
        i += 1
        if not line:
            continue
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            exports[name.strip()] = shlex.split(value)[0] if value.strip() else ""
        elif line.startswith("source "):
            sources.append(line.split()[1])
        elif re.match(r"^[A-Z_]+=\"$", line):  # a multi-line group: NAME="
            name = line[:-2]
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != '"':
                body.append(lines[i].split("#", 1)[0].replace("\\", " "))
                i += 1
            i += 1
            groups[name] = _flags(" ".join(body).split())
        elif re.match(r"^[A-Z_]+=", line):
            name, _, value = line.partition("=")
            variables[name] = value.strip().strip('"')
        elif line.startswith("torchrun "):
            command = line
            while command.endswith("\\") and i < len(lines):
                command = command[:-1] + " " + lines[i].strip()
                i += 1
            tokens = [t for t in command.split("|", 1)[0].split() if ">" not in t]
            script = next(t for t in tokens if t.endswith(".py"))
            rest = tokens[tokens.index(script) + 1 :]
            entry = {
                "script": script,
                "groups": [t.lstrip("$").strip("{}") for t in rest if t.startswith("$")],
                "trailing": _flags([t for t in rest if not t.startswith("$")]),
            }
    return {"exports": exports, "sources": sources, "variables": variables, "groups": groups, "entry": entry}


def _flags(tokens: list[str]) -> list[list[str]]:
    """`--a 1 --b --c $X` -> [["a", "1"], ["b"], ["c", "${X}"]]."""
    out: list[list[str]] = []
    for token in tokens:
        if token.startswith("$"):  # $VAR and ${VAR} alike: a value the plan fills in
            token = "${" + token.lstrip("$").strip("{}") + "}"
        if token.startswith("--"):
            out.append([token[2:]])
        elif out:
            out[-1].append(token)
    return out


def preset(reader: Reader, ref: str, size: str, commit: str) -> dict:
    script_path = f"{EXAMPLES}/finetune_qwen2_5_vl_{size}.sh"
    script = parse_script(reader.read(ref, script_path))
    readme = reader.read(ref, f"{EXAMPLES}/README.md")
    converter = re.search(r"mm-convert\s+(\w+)\s+hf_to_mm", readme)
    variables = script["variables"]
    defaults = {k: int(variables[k]) for k in ("TP", "PP", "CP", "MBS", "GRAD_ACC_STEP", "NPUS_PER_NODE")}
    return {
        "source": {
            "repository": "Ascend/MindSpeed-MM",
            "ref": ref,
            "commit": commit,
            "files": [
                script_path,
                f"{EXAMPLES}/data_{size}.json",
                f"{EXAMPLES}/model_{size}.json",
                f"{EXAMPLES}/README.md",
            ],
        },
        "converter": converter.group(1) if converter else None,
        "sources": script["sources"],
        "exports": script["exports"],
        "defaults": defaults,
        "paths": {k: variables[k] for k in ("MM_DATA", "MM_MODEL", "MM_TOOL", "LOAD_PATH", "SAVE_PATH")},
        "entry": script["entry"]["script"],
        "groups": {
            name: script["groups"][name] for name in script["entry"]["groups"] if name != "DISTRIBUTED_ARGS"
        },
        "trailing": script["entry"]["trailing"],
        "data": json.loads(reader.read(ref, f"{EXAMPLES}/data_{size}.json")),
        "model": json.loads(reader.read(ref, f"{EXAMPLES}/model_{size}.json")),
    }


# -- writing --------------------------------------------------------------------------------------------
def write_lines(path: Path, header: list[str], lines: list[str]) -> None:
    path.write_text("\n".join([*header, *lines]) + "\n", encoding="utf-8")
    print(f"{path.name}: {len(lines)} lines")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mindspeed-mm", required=True, help="MindSpeed-MM git repository")
    p.add_argument("--megatron", required=True, help="Megatron-LM git repository")
    p.add_argument("--mindspeed", required=True, help="MindSpeed git repository")
    p.add_argument("--out", default=str(OUT_DIR))
    p.add_argument(
        "--training-only",
        metavar="GEN",
        help="write only training_<GEN>.txt, from the checkouts' working files (each at the commit "
        "presets_<GEN>.json pins)",
    )
    a = p.parse_args()
    files = a.training_only is not None
    readers = {
        "mm": Reader(a.mindspeed_mm, from_files=files),
        "megatron": Reader(a.megatron, from_files=files),
        "mindspeed": Reader(a.mindspeed, from_files=files),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if files:  # working files: the commits are the pins presets_<GEN>.json records for the checkouts
        pins = json.loads((out / f"presets_{a.training_only}.json").read_text(encoding="utf-8"))
        for key, pin in (("mm", "mindspeed_mm"), ("megatron", "megatron"), ("mindspeed", "mindspeed")):
            readers[key].commit = lambda ref, c=pins[pin]["commit"]: c  # type: ignore[method-assign]
    mm = readers["mm"]
    for gen_name, gen in GENERATIONS.items():
        if a.training_only and gen_name != a.training_only:
            continue
        commit = mm.commit(gen.mm_ref)
        tail = "Facts (names) only; regenerate with scripts/gen_mindspeed_mm_data.py, do not edit by hand."

        header, specs = training_names(readers, gen)
        write_training(out, gen_name, header, specs, tail)
        if a.training_only:
            continue

        files, lines = mm_convert_lines(mm, gen.mm_ref)
        write_lines(
            out / f"mm_convert_{gen_name}.txt",
            [
                f"# mm-convert (checkpoint/convert_cli.py) in the MindSpeed-MM {gen_name} generation: one",
                "# line per converter, subcommand and option:",
                "#   <Converter> <subcommand> <param.dotted.key> <type> <required|optional>",
                "# Generated by scripts/gen_mindspeed_mm_data.py from the converters that",
                "# checkpoint/__init__.py imports,",
                "# their public static methods and the pydantic models of their parameters, in",
                *(f"#   {provenance('Ascend/MindSpeed-MM', gen.mm_ref, commit, f)}" for f in files),
                f"# {len(lines)} options. {tail}",
            ],
            lines,
        )

        files, lines = data_json_lines(mm, gen.mm_ref)
        write_lines(
            out / f"data_json_{gen_name}.txt",
            [
                f"# data.json keys MindSpeed-MM {gen_name} checks (dataset_type huggingface), one a line:",
                "#   key <section> <name> <default>        a field (or keyword) the section is unpacked into",
                "#   rejected <section> <name> <message>   a key get_qwen2vl_dataset refuses (its message)",
                "#   required <section> <name> <message>   a key build_mm_dataset needs (its message)",
                "# Generated by scripts/gen_mindspeed_mm_data.py from:",
                *(f"#   {provenance('Ascend/MindSpeed-MM', gen.mm_ref, commit, f)}" for f in files),
                f"# {tail}",
            ],
            lines,
        )

        if gen_name == "master":  # validate_params.json exists from MindSpeed-MM 2.2.0 on
            params = json.loads(mm.read(gen.mm_ref, PATH_PARAMS))
            write_lines(
                out / "path_params.txt",
                [
                    "# Keys of data.json / model.json / tools.json whose values are paths (MindSpeed-MM",
                    "# checks them with args_external_path_checker): <file> <dotted.key>. The plan makes",
                    "# them absolute.",
                    "# Generated by scripts/gen_mindspeed_mm_data.py from",
                    f"#   {provenance('Ascend/MindSpeed-MM', gen.mm_ref, commit, PATH_PARAMS)}",
                    f"# {tail}",
                ],
                [f"{section}\t{key}" for section in PATH_SECTIONS for key in params[section]["params"]],
            )
        presets = {f"qwen2.5-vl-{size}": preset(mm, gen.mm_ref, size, commit) for size in SIZES}
        document = {
            "_generated": "scripts/gen_mindspeed_mm_data.py: MindSpeed-MM's Qwen2.5-VL example scripts and "
            "json files, as data; regenerate, do not edit by hand",
            "generation": gen_name,
            "mindspeed_mm": {"ref": gen.mm_ref, "commit": commit},
            "megatron": {"ref": gen.megatron_ref, "commit": readers["megatron"].commit(gen.megatron_ref)},
            "mindspeed": {"ref": gen.mindspeed_ref, "commit": readers["mindspeed"].commit(gen.mindspeed_ref)},
            "tools": {
                "source": provenance(
                    "Ascend/MindSpeed-MM", gen.mm_ref, commit, "mindspeed_mm/tools/tools.json"
                ),
                "content": json.loads(mm.read(gen.mm_ref, "mindspeed_mm/tools/tools.json")),
            },
            "models": presets,
        }
        path = out / f"presets_{gen_name}.json"
        path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{path.name}: {len(presets)} models")


if __name__ == "__main__":
    main()
