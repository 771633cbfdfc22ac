"""pydantic validation errors -> `Problem`s in the house style: the key as the user wrote it, a message that
shows the value, and a fix.

    unknown key   "unknown key (did you mean: lr?)"     fix "remove it, or use one of: <the model's keys>"
    missing key   "required key is missing"             fix "add `name: ...` (see `ascendfactory-cli config`)"
    bad value     "<pydantic's message> (got <value>)"  fix from the error: its `expected` choices, a bound,
                                                        or a `fix` the validator put in the error's context

The keys an unknown key is compared with are the fields of the model found by walking `model` along the
error's location (nested models, `X | None`, `dict[str, Model]`, `list[Model]`), so no key list is written
twice. A validator that knows the fix raises `PydanticCustomError(kind, message, {"fix": ...})`; `{key}` in
that fix becomes the full key (`backend_config.training.seq-length`).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

from pydantic import BaseModel, ValidationError

from ascendfactory.config.suggest import did_you_mean
from ascendfactory.errors import Problem

M = TypeVar("M", bound=BaseModel)
BOUND_WORDS = (
    ("ge", "set {key}: {bound} or more"),
    ("gt", "set {key} above {bound}"),
    ("le", "set {key}: {bound} or less"),
)
# Fixes by pydantic's error type, for the backends' sections (`validate_with_defaults`).
TYPE_FIXES = {
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "string_type": "write a text (quote it if it looks like a number)",
    "dict_type": "write a mapping of key: value",
    "int_type": "write a whole number",
    "int_parsing": "write a whole number",
}


def from_validation_error(
    err: ValidationError,
    *,
    source_of: Callable[[str], str],
    model: type[BaseModel] | None = None,
    prefix: str = "",
    elsewhere: Mapping[str, tuple[str, str]] | None = None,
    bound_notes: Mapping[str, str] | None = None,
    type_fixes: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Every error of `err` as a Problem (see `problem_from`)."""
    return [
        problem_from(
            e,
            source_of=source_of,
            model=model,
            prefix=prefix,
            elsewhere=elsewhere,
            bound_notes=bound_notes,
            type_fixes=type_fixes,
        )
        for e in err.errors()
    ]


def problem_from(
    err: Mapping[str, Any],
    *,
    source_of: Callable[[str], str],
    model: type[BaseModel] | None = None,
    prefix: str = "",
    elsewhere: Mapping[str, tuple[str, str]] | None = None,
    bound_notes: Mapping[str, str] | None = None,
    type_fixes: Mapping[str, str] | None = None,
) -> Problem:
    """One pydantic error (an item of `ValidationError.errors()`) as a Problem.

    `source_of(key)`: where the key came from (the file, or "command line"). `model`: the model validated,
    whose fields name the keys an unknown key could have meant. `prefix`: what stands before the model's
    keys in the experiment (`backend_config.training.`). `elsewhere`: top-level unknown keys that get their
    own (message, fix). `bound_notes`: text added to a bound's fix, by full key. `type_fixes`: the fix
    by pydantic's error type (`bool_type`), where nothing else gives one.
    """
    loc = [str(p) for p in err.get("loc", ())]
    key = prefix + ".".join(loc) if loc else (prefix.rstrip(".") or "(top level)")
    src = source_of(key)
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        if len(loc) == 1 and elsewhere and loc[0] in elsewhere:
            message, fix = elsewhere[loc[0]]
            return Problem(key=key, source=src, message=message, fix=fix)
        known = known_keys(model, loc[:-1]) if model is not None else []
        return Problem(
            key=key,
            source=src,
            message=f"unknown key{did_you_mean(loc[-1], known)}",
            fix="remove it, or use one of: " + ", ".join(sorted(known)),
        )
    if kind == "missing":
        return Problem(
            key=key,
            source=src,
            message="required key is missing",
            fix=f"add `{loc[-1]}: ...` (see `ascendfactory-cli config` for a commented template)",
        )
    value = err.get("input")
    msg = err.get("msg", "invalid value").removeprefix("Value error, ")
    shown = (
        f" (got {value!r})" if not isinstance(value, dict) and value is not None and "got" not in msg else ""
    )
    ctx = err.get("ctx") or {}
    fix = str(ctx["fix"]).replace("{key}", key) if "fix" in ctx else ""
    if "expected" in ctx and not fix:
        fix = f"use one of {ctx['expected']}"
    for bound, words in BOUND_WORDS:
        if bound in ctx and not fix:
            fix = words.format(key=key, bound=ctx[bound]) + (bound_notes or {}).get(key, "")
    if not fix:
        fix = (type_fixes or {}).get(kind, "")
    return Problem(key=key, source=src, message=f"{msg}{shown}", fix=fix)


def known_keys(model: type[BaseModel], parent: list[str]) -> list[str]:
    """The keys of the model found at `parent` (a location below `model`), as the user writes them (the
    alias where a field has one, and the names of a model with registered sections: `section_names()`);
    [] where the location leads to no model."""
    current: type[BaseModel] | None = model
    pending: Any = None  # a container annotation whose next location part is a key or an index
    for part in parent:
        if pending is not None:
            current, pending = _model_in(pending)
            continue
        if current is None:
            return []
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            current = _section(current, part)  # a model whose keys are registered names (`report_to`)
            continue
        current, pending = _model_in(field.annotation)
    if current is None or pending is not None:
        return []
    sections = getattr(current, "section_names", None)
    return [f.alias or n for n, f in current.model_fields.items()] + (
        sections() if callable(sections) else []
    )


def _section(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    """The model of `key` in a model with named sections beside its fields (`section_model(key)`)."""
    hook = getattr(model, "section_model", None)
    return hook(key) if callable(hook) else None


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, Any]:
    """(the model an annotation holds, None) for `Model` and `Model | None` (the first model of a union);
    (None, the item annotation) for `dict[str, X]` and `list[X]`, whose next location part is a key."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        for arg in args:
            found, pending = _model_in(arg)
            if found is not None or pending is not None:
                return found, pending
        return None, None
    if origin is typing.Annotated:
        return _model_in(args[0])
    if origin in (dict, Mapping) and len(args) == 2:
        return None, args[1]
    if origin in (list, tuple) and args:
        return None, args[0]
    return None, None


def validate_with_defaults(
    model: type[M],
    values: Mapping[str, Any],
    *,
    source_of: Callable[[str], str],
    prefix: str,
    problems: list[Problem],
) -> M:
    """`model` validated from `values`; each invalid value is reported as a Problem (in `problems`) and
    left out, so that its default applies and the checks that follow still run on the rest.

    Where no key names a field, none is required and other keys are allowed, nothing can be refused: the
    model is built without validating (pydantic builds a model's schema on its first validation; a plan
    starts faster without it).
    """
    data = dict(values)
    named = {n for n, f in model.model_fields.items() if n in data or (f.alias or n) in data}
    required = any(f.is_required() for f in model.model_fields.values())
    if not named and not required and model.model_config.get("extra") != "forbid":
        return model.model_construct(**data)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems += from_validation_error(
            e, source_of=source_of, model=model, prefix=prefix, type_fixes=TYPE_FIXES
        )
        for err in e.errors():
            loc = err.get("loc", ())
            if loc:
                data.pop(str(loc[0]), None)
    return model.model_validate(data)
