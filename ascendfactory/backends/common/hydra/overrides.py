"""`backend_config` (a Hydra-configured framework's own keys, nested) -> Hydra overrides, one argv element
each (the examples are verl's).

    data: {train_batch_size: 32}                      ->  data.train_batch_size=32
    trainer: {logger: [console, tensorboard]}         ->  trainer.logger=[console,tensorboard]
    actor_rollout_ref: {model: {override_config: {"+attn_implementation": eager}}}
        ->  +actor_rollout_ref.model.override_config.attn_implementation=eager
    model_engine: megatron                            ->  model_engine=megatron   (a config group choice)

Nesting follows the framework's schema (`schema.Schema`): a mapping under a section of its config is walked
key by key; a mapping given for a key whose default is a value (or null) is one Hydra dict value. A key
written with a leading `+` asks for Hydra's `+key=value` (add a key the schema lacks, e.g. under an
open map such as `override_config: {}`); on a key the schema has, the `+` is dropped (Hydra refuses `+` on a
key that has a value). Values are written in Hydra's override grammar: strings unquoted when Hydra reads
them back as the same string (`vllm`, `/data/x.parquet`, `Qwen/Qwen2.5-7B-Instruct`), else single-quoted;
floats in their shortest form (`5e-08` as `5e-8`); lists `[a,b]`, dicts `{k:v}`, None `null`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from ascendfactory.backends.common.hydra.schema import Override, Schema

_UNQUOTED = re.compile(r"^[A-Za-z0-9_\-/+.$%*@?|]+$")  # Hydra's ID and UNQUOTED_CHAR characters
_NOT_A_STRING = re.compile(
    r"""^(?:[+-]?(?:\d[\d_]*)(?:\.[\d_]*)?(?:[eE][+-]?\d+)?    # int, float
    |[+-]?\.\d[\d_]*(?:[eE][+-]?\d+)?
    |[+-]?(?:inf|nan)
    |true|false|null)$""",
    re.X | re.I,
)


def format_value(value: Any) -> str:
    """`value` in Hydra's override grammar (parsed back by Hydra to the same value and type)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), text)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    return format_string(str(value))


def format_string(text: str) -> str:
    if text and _UNQUOTED.match(text) and not _NOT_A_STRING.match(text) and "\\" not in text:
        return text
    quote = "'" if "'" not in text or '"' in text else '"'
    body = text.replace("\\", "\\\\") if text.endswith("\\") else text
    body = body.replace(quote, "\\" + quote)
    return f"{quote}{body}{quote}"


def override_text(o: Override) -> str:
    return f"{'+' if o.plus else ''}{o.key}={format_value(o.value)}"


def flatten(config: dict[str, Any], schema: Schema) -> list[Override]:
    """The user's overrides, in the order of `config` (see the module docstring)."""
    return list(_walk(config, "", schema))


def _walk(node: dict[str, Any], prefix: str, schema: Schema) -> Iterator[Override]:
    for raw, value in node.items():
        name = str(raw)
        plus = name.startswith("+")
        key = f"{prefix}{name.lstrip('+')}"
        kind = schema.kind(key)
        if plus and kind is not None:
            plus = False  # in the schema: a plain override (Hydra refuses `+` on a key with a value)
        if isinstance(value, dict) and value and kind == "node":
            yield from _walk(value, key + ".", schema)
        elif isinstance(value, dict) and value and kind == "map":
            # children of an open map: each needs its own `+` (asked for by the user, checked by compose)
            yield from _walk(value, key + ".", schema)
        else:
            yield Override(key, value, plus=plus)
