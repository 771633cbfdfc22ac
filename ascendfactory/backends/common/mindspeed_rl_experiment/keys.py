"""MindSpeed-RL's configuration facts per version, as data: the keys each config class accepts (with their
defaults), the checked sub-dicts, the verifier names, the prompt templates and the handlers preprocessing
accepts, the reward metric's name.

Where they come from: `keys/<version>.txt` beside this module, written by `scripts/gen_mindspeed_rl_keys.py`
from MindSpeed-RL's source (each file's header names the repository, ref, commit and files). The same
parser (`read_sources`) reads a MindSpeed-RL checkout at plan time, so the installed version is checked
with its own keys even when it matches no shipped file.

What a key is (MindSpeed-RL `mindspeed_rl/config_cls/base_config.py`, `BaseConfig.update`): an attribute
the class's `__init__` assigns before calling `self.update(...)`; any other key raises
`ValueError("The key: X is missing, ...")` since 2.1.0 (a warning in 2.0.0: `unknown_keys`). Dashes
are accepted (`-` becomes `_` before the check).

    KeySet.classes        {"MegatronConfig": ConfigClass, "RLConfig": ..., "GenerateConfig": ...,
                           "ProfilerConfig": ..., "MsprobeConfig": ..., "DataHandlerConfig": ...}
    ConfigClass.keys      {key: default}   (a Python value, or an `Expr` the source computes)
    ConfigClass.checked   {key: (sub-keys,)}  sub-dicts whose keys the class checks (actor_resource,
                          sampling_config)
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

KEYS_DIR = Path(__file__).resolve().parent / "keys"
CONFIG_DIR = "mindspeed_rl/config_cls"
SOURCE_FILES = {
    "MegatronConfig": f"{CONFIG_DIR}/megatron_config.py",
    "RLConfig": f"{CONFIG_DIR}/rl_config.py",
    "GenerateConfig": f"{CONFIG_DIR}/generate_config.py",
    "ProfilerConfig": f"{CONFIG_DIR}/mindstudio_config.py",
    "MsprobeConfig": f"{CONFIG_DIR}/mindstudio_config.py",
    "DataHandlerConfig": f"{CONFIG_DIR}/data_handler_config.py",
}
BASE_CONFIG = f"{CONFIG_DIR}/base_config.py"
VALIDATE = f"{CONFIG_DIR}/validate_config.py"
VERIFIERS = "mindspeed_rl/models/rule_verifier.py"
TEMPLATES = "configs/model/templates.json"
# Versions in release order (rules say from which one they apply).
ORDER = ("2.1.0", "2.2.0", "2.3.0", "master")


@dataclass(frozen=True)
class Expr:
    """A default the source computes (`os.path.join(...)`, a module constant): kept as its text."""

    text: str

    def __repr__(self) -> str:
        return f"expr:{self.text}"


@dataclass(frozen=True)
class ConfigClass:
    name: str
    keys: dict[str, Any]  # key -> default, in source order
    checked: dict[str, tuple[str, ...]] = field(default_factory=dict)  # sub-dict -> its accepted keys


@dataclass(frozen=True)
class KeySet:
    """Every configuration fact of one MindSpeed-RL version (see the module docstring)."""

    version: str  # 2.1.0 | 2.2.0 | 2.3.0 | master, or "checkout" for keys read from a directory
    provenance: str  # repository, ref, commit (or the directory)
    unknown_keys: str  # error | warning
    classes: dict[str, ConfigClass]
    verifiers: tuple[str, ...]
    prompt_types: tuple[str, ...]
    prompt_type_handlers: tuple[str, ...]
    reward_metric: str  # e.g. "{verifier}_rewards/mean" (2.2.0 on) or "grpo/{verifier}_rewards/mean"
    closest: str = ""  # for a checkout: the shipped version whose rules apply

    @property
    def rules_version(self) -> str:
        """The shipped version whose rules and texts apply (itself, or the closest for a checkout)."""
        return self.closest or self.version

    def at_least(self, version: str) -> bool:
        return ORDER.index(self.rules_version) >= ORDER.index(version)

    def key_names(self) -> dict[str, frozenset[str]]:
        return {name: frozenset(c.keys) for name, c in self.classes.items()}


# -- parsing MindSpeed-RL's source ---------------------------------------------------------------------
def _calls_update(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "update"
            and isinstance(sub.func.value, ast.Name)
            and sub.func.value.id == "self"
        ):
            return True
    return False


def _default(node: ast.expr, source: str, known: dict[str, Any]) -> Any:
    """The default as a value: a literal; `config_dict.get('k', D)` -> D; `self.other` -> its default."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and len(node.args) == 2
    ):
        return _default(node.args[1], source, known)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return known.get(node.attr)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return Expr(ast.get_source_segment(source, node) or ast.dump(node))


def _checked_subdicts(init: ast.FunctionDef) -> list[str]:
    """Sub-dicts the class checks: `for key, _ in config_dict["X"].items(): if key not in self.X: raise`."""
    found = []
    for node in ast.walk(init):
        if not isinstance(node, ast.For):
            continue
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
            it = it.func.value
        if (
            isinstance(it, ast.Subscript)
            and isinstance(it.slice, ast.Constant)
            and isinstance(it.slice.value, str)
            and any(isinstance(n, ast.Raise) for n in ast.walk(node))
        ):
            found.append(it.slice.value)
    return found


def parse_class(source: str, class_name: str) -> ConfigClass:
    """The keys a config class accepts: `self.X = ...` in `__init__` before its first `self.update(...)`."""
    tree = ast.parse(source)
    cls = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name),
        None,
    )
    if cls is None:
        raise ValueError(f"class {class_name} not found")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    keys: dict[str, Any] = {}
    for stmt in init.body:
        if _calls_update(stmt):
            break
        for node in ast.walk(stmt):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    if t.attr not in keys:
                        keys[t.attr] = _default(value, source, keys)
    checked = {}
    for name in _checked_subdicts(init):
        default = keys.get(name)
        if isinstance(default, dict):
            checked[name] = tuple(default)
    return ConfigClass(class_name, keys, checked)


def _unknown_key_behaviour(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "update":
            if any(isinstance(n, ast.Raise) for n in ast.walk(node)):
                return "error"
            return "warning"
    raise ValueError("BaseConfig.update not found")


def _verifiers(source: str) -> tuple[tuple[str, ...], str]:
    """(names of `rule_verifier_function` in `verifier()`, the reward metric's key pattern)."""
    tree = ast.parse(source)
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "verifier")
    names: tuple[str, ...] = ()
    metric = ""
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            t = node.targets[0]
            if (
                isinstance(t, ast.Name)
                and t.id == "rule_verifier_function"
                and isinstance(node.value, ast.Dict)
            ):
                names = tuple(
                    str(k.value)
                    for k in node.value.keys
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                )
            if (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Name)
                and t.value.id == "metrics"
                and isinstance(t.slice, ast.JoinedStr)
            ):
                parts = []
                for v in t.slice.values:
                    if isinstance(v, ast.Constant):
                        parts.append(str(v.value))
                    else:
                        parts.append("{verifier}")
                metric = "".join(parts)
    if not names or not metric:
        raise ValueError("rule_verifier_function / the reward metric not found in verifier()")
    return names, metric


def _prompt_type_handlers(source: str) -> tuple[str, ...]:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "support_prompt_type_handler"
        ):
            return tuple(ast.literal_eval(node.value))
    raise ValueError("support_prompt_type_handler not found")


def _templates(text: str) -> tuple[str, ...]:
    import json

    return tuple(t["name"] for t in json.loads(text))


def read_sources(read: Callable[[str], str], *, version: str, provenance: str) -> KeySet:
    """Parse MindSpeed-RL's sources; `read(path)` returns a file's text (a checkout, or `git show`)."""
    classes = {name: parse_class(read(path), name) for name, path in SOURCE_FILES.items()}
    verifiers, metric = _verifiers(read(VERIFIERS))
    return KeySet(
        version=version,
        provenance=provenance,
        unknown_keys=_unknown_key_behaviour(read(BASE_CONFIG)),
        classes=classes,
        verifiers=verifiers,
        prompt_types=_templates(read(TEMPLATES)),
        prompt_type_handlers=_prompt_type_handlers(read(VALIDATE)),
        reward_metric=metric,
    )


# -- the shipped files ---------------------------------------------------------------------------------
_SECTION = re.compile(r"^\[(\w+)(?:\.(\w+))?\]$")


def render(ks: KeySet, header: list[str]) -> str:
    """The text of `keys/<version>.txt` (what `scripts/gen_mindspeed_rl_keys.py` writes)."""
    lines = [f"# {h}" if h else "#" for h in header]
    lines += [
        f"version: {ks.version}",
        f"provenance: {ks.provenance}",
        f"unknown_keys: {ks.unknown_keys}",
        f"reward_metric: {ks.reward_metric}",
        "verifiers: " + " ".join(ks.verifiers),
        "prompt_types: " + " ".join(ks.prompt_types),
        "prompt_type_handlers: " + " ".join(ks.prompt_type_handlers),
    ]
    for cls in ks.classes.values():
        lines.append(f"[{cls.name}]")
        lines += [f"{k}\t{v!r}" for k, v in cls.keys.items()]
        for sub, names in cls.checked.items():
            lines.append(f"[{cls.name}.{sub}]")
            lines += names
    return "\n".join(lines) + "\n"


def _value(text: str) -> Any:
    if text.startswith("expr:"):
        return Expr(text[5:])
    return ast.literal_eval(text)


def parse_file(text: str) -> KeySet:
    meta: dict[str, str] = {}
    classes: dict[str, ConfigClass] = {}
    current: tuple[str, str | None] | None = None
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        m = _SECTION.match(raw)
        if m:
            current = (m.group(1), m.group(2))
            classes.setdefault(m.group(1), ConfigClass(m.group(1), {}, {}))
            if m.group(2):
                classes[m.group(1)].checked[m.group(2)] = ()
            continue
        if current is None:
            key, _, value = raw.partition(": ")
            meta[key] = value
        elif current[1] is None:
            key, _, value = raw.partition("\t")
            classes[current[0]].keys[key] = _value(value)
        else:
            cls = classes[current[0]]
            cls.checked[current[1]] = (*cls.checked[current[1]], raw.strip())
    return KeySet(
        version=meta["version"],
        provenance=meta["provenance"],
        unknown_keys=meta["unknown_keys"],
        classes=classes,
        verifiers=tuple(meta["verifiers"].split()),
        prompt_types=tuple(meta["prompt_types"].split()),
        prompt_type_handlers=tuple(meta["prompt_type_handlers"].split()),
        reward_metric=meta["reward_metric"],
    )


def shipped_versions() -> tuple[str, ...]:
    return tuple(v for v in ORDER if (KEYS_DIR / f"{v}.txt").is_file())


@lru_cache(maxsize=None)
def shipped(version: str) -> KeySet:
    """The key set of a shipped version (`keys/<version>.txt`); KeyError for another name."""
    path = KEYS_DIR / f"{version}.txt"
    if version not in ORDER or not path.is_file():
        raise KeyError(version)
    return parse_file(path.read_text(encoding="utf-8"))


def latest() -> KeySet:
    return shipped(shipped_versions()[-1])


def from_checkout(directory: str) -> KeySet:
    """The key set of a MindSpeed-RL checkout, named after the shipped version it equals (or the closest
    one, whose rules then apply)."""

    def read(path: str) -> str:
        return Path(directory, path).read_text(encoding="utf-8")

    ks = read_sources(read, version="checkout", provenance=os.path.abspath(directory))
    names = ks.key_names()
    best, best_score = "", -1.0
    for version in shipped_versions():
        other = shipped(version)
        theirs = other.key_names()
        same = sum(len(names.get(c, set()) & theirs.get(c, set())) for c in set(names) | set(theirs))
        union = sum(len(names.get(c, set()) | theirs.get(c, set())) for c in set(names) | set(theirs))
        score = same / union if union else 0.0
        if names == theirs and ks.verifiers == other.verifiers and ks.reward_metric == other.reward_metric:
            return other
        if score > best_score:
            best, best_score = version, score
    return KeySet(**{**ks.__dict__, "closest": best})
