"""Targeted cases proposed for the statements of a map: values that make a statement's condition true, found
by searching candidates through the framework's own judge.

The candidates come from the condition's text: each attribute it reads that is a key of ours (a flag of the
framework's parser, a config key) is given the constants the condition compares it with (and their
neighbours), the choices of its kind, and the usual boundaries (0, 1, 2, -1, true); singles first, then
pairs and triples. Each candidate is applied to a shipped template and handed to the judge exactly as the
plan would hand it (the adapter's `carry`); the first whose refusal's traceback passes through the statement
(or its guard) is proposed. A person then reads the proposal, checks what our dry run says, and writes the
row's `map` (rule, near miss, fix): `scripts/gen_validation_map.py PIN --propose`.

Key finders exist for the backends whose conditions read a parser's flags: mindspeed-llm (the training
flags of its generated flag list) and mindspeed-mm (`backend_config.training`'s flags of pretrain_vlm.py,
and `args.mm.model.*` / `args.mm.data.*`, the json configs MindSpeed-MM merges into the arguments, as
`backend_config.model.*` / `.data.*`); a backend without one cannot be proposed for.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.diffval.cases import DELETE
from tests.diffval.coverage import Run, mutations

ATTR = re.compile(r"\b([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)")
NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?(?:e-?\d+)?)(?![\w.])")
TEXT = re.compile(r"'([^'\\]{1,40})'|\"([^\"\\]{1,40})\"")
OWNERS = {"args", "self", "global_args", "config"}  # what a Megatron-family condition reads flags from


@dataclass
class KeyKind:
    key: str  # the case key (below the backend's section)
    kind: str  # flag | int | float | str | list
    choices: tuple[str, ...] = ()


def megatron_keys(table: dict[str, Any]) -> Any:
    """A key finder for Megatron-family conditions: `args.seq_length`, `self.num_moe_experts` -> the flag of
    the training argv (`seq-length`), when the parser has it."""

    def find(owner: str, chain: list[str]) -> KeyKind | None:
        if owner not in OWNERS or not chain:
            return None
        flag = chain[-1].replace("_", "-")
        spec = table.get(flag)
        if spec is None:
            return None
        kind = "flag" if spec.kind == "flag" else spec.kind if spec.kind in ("int", "float") else "str"
        if getattr(spec, "nargs", "") in ("+", "*"):
            kind = "list"
        return KeyKind(flag, kind, tuple(spec.choices or ()))

    return find


def mm_keys(table: dict[str, Any], names: frozenset[str], model: dict[str, Any]) -> Any:
    """A key finder for MindSpeed-MM's conditions: flags (`args.seq_length`) -> `training.seq-length` when
    pretrain_vlm.py has the flag (`names`; `table` gives Megatron's kinds); `args.mm.model.a.b` ->
    `model.a.b` (MindSpeed-MM's merge_mm_args puts model.json there: mindspeed_mm/configs/config.py), its
    kind from the example's model.json (`model`), int where the example lacks it; `args.mm.data.a` ->
    `data.a` likewise."""
    flags = megatron_keys(table)

    def find(owner: str, chain: list[str]) -> KeyKind | None:
        if owner not in OWNERS or not chain:
            return None
        if chain[0] == "mm" and len(chain) > 2 and chain[1] in ("model", "data"):
            node: Any = model if chain[1] == "model" else None
            for part in chain[2:]:
                node = node.get(part) if isinstance(node, dict) else None
            kind = {bool: "flag", float: "float", str: "str", list: "list"}.get(type(node), "int")
            return KeyKind(".".join(chain[1:]), "int" if kind == "flag" else kind)
        flag = chain[-1].replace("_", "-")
        if flag not in names:
            return None
        found = flags(owner, chain)
        if found is None:
            return KeyKind(f"training.{flag}", "str")  # a flag only MindSpeed(-MM) has: a word
        return KeyKind(f"training.{found.key}", found.kind, found.choices)

    return find


def _values(k: KeyKind, numbers: list[float], texts: list[str]) -> list[Any]:
    if k.kind == "flag":
        return [True, DELETE]
    out: list[Any] = []
    if k.choices:
        out += (
            [c for c in k.choices if c in texts] + [c for c in k.choices if c not in texts] + ["not-a-choice"]
        )
    elif k.kind == "int":
        near = [int(n) + d for n in numbers if n == int(n) for d in (0, 1, -1)]
        out += [*near, 2, 0, 1, 3, 4, 8, -1, 16]
    elif k.kind == "float":
        out += [*numbers, 0.5, 0.0, 1.0, 2.0, -1.0]
    elif k.kind == "list":
        out += [[1], [1, 2], [2, 2, 2]]
    else:
        out += [*texts, "x"]
    seen: list[Any] = []
    for v in [*out, DELETE]:  # the key taken away (the template's value, the framework's default)
        if v not in seen:
            seen.append(v)
    return seen


def candidates(condition: str, find: Any, cap: int = 80) -> list[dict[str, Any]]:
    """Case mappings worth trying for a condition: singles, then pairs, then triples of the keys it reads."""
    keys: list[KeyKind] = []
    for owner, rest in ATTR.findall(condition):
        k = find(owner, rest.strip(".").split("."))
        if k is not None and k.key not in [x.key for x in keys]:
            keys.append(k)
    numbers = [float(n) for n in NUMBER.findall(condition)]
    texts = [a or b for a, b in TEXT.findall(condition)]
    values = {k.key: _values(k, numbers, texts) for k in keys}
    out: list[dict[str, Any]] = []
    for k in keys:
        out += [{k.key: v} for v in values[k.key]]
    for size, width in ((2, 4), (3, 3)):
        for group in itertools.combinations(keys, size):
            for combo in itertools.product(*(values[k.key][:width] for k in group)):
                out.append(dict(zip((k.key for k in group), combo)))
    return out[:cap]


def finder(backend: str) -> Any:
    """The key finder for a backend's conditions (LookupError when there is none)."""
    name, _, version = backend.partition("@")  # mindspeed-llm (2.1.0's judge) or mindspeed-llm@26.1.0
    if name == "mindspeed-llm":
        from ascendfactory.backends.mindspeed_llm.keys import specs

        return megatron_keys(specs("training", version or "2.1.0"))
    if backend == "mindspeed-mm":
        from ascendfactory.backends.common.megatron.flag_specs import Spec
        from ascendfactory.backends.mindspeed_mm.keys import (
            preset_name,
            presets,
            training_names,
            training_values,
        )
        from tests.diffval.backends import MM_MODEL, MM_OWNED

        preset = presets("2.1.0")["models"][preset_name(MM_MODEL, None, "2.1.0")]
        names = frozenset(n for n in training_names("2.1.0") if n not in MM_OWNED)
        values = training_values("2.1.0")
        table = {n: Spec(kind, nargs, choices) for n, (kind, nargs, choices) in values.items()}
        return mm_keys(table, names, preset["model"])
    raise LookupError(f"no key finder for {backend}'s conditions")


def review(
    doc: dict[str, Any], rows: list[dict[str, Any]], workdir: Path, cap: int = 80
) -> list[dict[str, Any]]:
    """For each row: the case the judge refuses at its statement (or none found), and our verdict on it."""
    from tests.diffval.backends import ADAPTERS
    from tests.diffval.cases import Case, apply
    from tests.diffval.ours import verdict

    adapter = ADAPTERS[doc["backend"]]
    found = search(doc, rows, finder(doc["backend"]), workdir, cap)
    base = adapter.bases(workdir)[0]
    out: list[dict[str, Any]] = []
    for st in rows:
        item: dict[str, Any] = {
            "id": st["id"],
            "at": f"{st['file']}:{st['line']}",
            "condition": st["condition"],
        }
        case = found.get(st["id"])
        if case is None:
            item["case"] = None  # no candidate reached it: read the code (equal or device, or a case by hand)
            out.append(item)
            continue
        tree = copy.deepcopy(base.tree)
        muts = mutations(doc["backend"], case)
        for mu in muts:
            apply(tree, mu)
        ours = verdict(Case(f"propose-{st['id']}", base.name, tree, muts), workdir, dry_run=adapter.dry_run)
        item["case"] = case
        item["ours"] = "accept" if ours.accepted else ours.messages
        out.append(item)
    return out


def search(
    doc: dict[str, Any], rows: list[dict[str, Any]], find: Any, workdir: Path, cap: int = 80
) -> dict[str, dict]:
    """{statement id: the first candidate case the judge refuses at that statement}, on the first base."""
    from tests.diffval.backends import ADAPTERS
    from tests.diffval.judge import _base_payload, ask_framework

    adapter = ADAPTERS[doc["backend"]]
    argv = adapter.worker()
    if argv is None:
        raise RuntimeError(adapter.unavailable())
    base = adapter.bases(workdir)[0]
    payload = _base_payload(adapter, base, workdir)
    tried: list[tuple[dict[str, Any], dict[str, Any], str, Any]] = []
    for st in rows:
        # a raising helper's check is its first argument (`ensure_valid(cond, msg)`), written in `message`
        text = st["condition"] if st["kind"] != "call" else f"{st['condition']} {st['message']}"
        for i, case in enumerate(candidates(text, find, cap)):
            carried = adapter.carry(payload, mutations(doc["backend"], case))
            tried.append((st, case, f"{st['id']}#{i}", carried))
    frames: dict[str, list[str]] = {}
    answers = ask_framework(argv, [(cid, carried) for _, _, cid, carried in tried], frames=frames)
    found: dict[str, dict] = {}
    for st, case, cid, _ in tried:
        ok = answers[cid][0]
        if st["id"] not in found and ok is False:
            run = Run(doc["pin"], st["id"], "case", base.name, None, theirs_ok=ok, at=frames.get(cid, []))  # type: ignore[arg-type]
            if run.fired(st):
                found[st["id"]] = case
    return found
