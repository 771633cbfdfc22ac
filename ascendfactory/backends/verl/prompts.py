"""How many prompts of verl's data files fit `data.max_prompt_length`, counted as verl counts them.

verl (0.9.1, `verl/utils/dataset/rl_dataset.py`) reads each file (`.parquet`, `.json`, `.jsonl`), takes the
`data.prompt_key` column (chat messages), and with `data.filter_overlong_prompts` drops every row whose
`tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)` is longer than
`data.max_prompt_length` (without it, the agent loop left-truncates long prompts at rollout). When every row
is dropped it fails much later with `num_samples=0`; when fewer than `data.train_batch_size` remain it runs
no step at all. This module counts the same lengths before the cluster starts:

- the prompts are read with pyarrow (parquet) or json, only the prompt column;
- the chat template (`chat_template.jinja` or `tokenizer_config.json`'s `chat_template`) is rendered with
  jinja2 the way transformers renders it (sandboxed, `trim_blocks`, `lstrip_blocks`, `tojson`,
  `raise_exception`, the tokenizer's named special tokens, `data.apply_chat_template_kwargs`);
- the text is tokenized without special tokens by the `tokenizers` library when the tokenizer directory
  determines AutoTokenizer exactly (`engine.data.fast_tokenizer.fast_backend`), else by
  `transformers.AutoTokenizer` when it is importable;
- when the tokenizer is not on this machine (a hub id) or cannot be loaded, nothing is counted and the
  result says why.

pyarrow, tokenizers and transformers are imported here only, when the check runs (never at CLI start-up).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Count:
    key: str  # data.train_files | data.val_files
    files: list[str]
    total: int = 0  # prompts read (after data.*_max_samples when that takes the first rows)
    over: int = 0  # longer than max_prompt_length
    longest: int = 0
    counted: bool = False
    how: str = ""  # how the lengths were counted, or why they were not
    missing: list[str] = field(default_factory=list)  # files not on this machine
    errors: list[str] = field(default_factory=list)  # unreadable files, a missing prompt column

    @property
    def remaining(self) -> int:
        return self.total - self.over


def as_files(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return []


def read_prompts(path: str, prompt_key: str) -> list[Any]:
    """The `prompt_key` column of one data file, as Python objects."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        if prompt_key not in schema.names:
            raise KeyError(f"{path} has no column '{prompt_key}' (columns: {', '.join(schema.names)})")
        return pq.read_table(path, columns=[prompt_key]).column(prompt_key).to_pylist()
    if path.endswith((".json", ".jsonl")):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        stripped = text.lstrip()
        rows = (
            json.loads(text)
            if stripped.startswith("[")
            else [json.loads(x) for x in text.splitlines() if x.strip()]
        )
        if rows and prompt_key not in rows[0]:
            raise KeyError(f"{path} has no field '{prompt_key}' (fields: {', '.join(rows[0])})")
        return [r.get(prompt_key) for r in rows]
    raise ValueError(f"{path}: verl reads .parquet, .json and .jsonl files only")


class Counter:
    """Chat-templated prompt lengths in tokens, as verl's dataset filter computes them."""

    def __init__(self, tokenizer_dir: str, template_kwargs: dict[str, Any] | None = None) -> None:
        self.dir = tokenizer_dir
        self.kwargs = dict(template_kwargs or {})
        config = _read_json(os.path.join(tokenizer_dir, "tokenizer_config.json")) or {}
        jinja_file = os.path.join(tokenizer_dir, "chat_template.jinja")
        template = None
        if os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                template = f.read()
        elif isinstance(config.get("chat_template"), str):
            template = config["chat_template"]
        if template is None:
            raise LookupError(
                f"{tokenizer_dir} has no chat template (chat_template.jinja or tokenizer_config.json)"
            )
        self.specials = {
            k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")
        }
        self.template = _compile(template)
        self.encode, self.how = _encoder(tokenizer_dir)

    def render(self, messages: Any) -> str:
        if isinstance(messages, dict):
            messages = [messages]
        return self.template.render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=True,
            **{k: v for k, v in self.specials.items() if v is not None},
            **self.kwargs,
        )

    def lengths(self, prompts: list[Any]) -> list[int]:
        return self.encode([self.render(p) for p in prompts])


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _compile(template: str) -> Any:
    import datetime

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template)


def _encoder(path: str) -> tuple[Any, str]:
    from ascendfactory.engine.data.fast_tokenizer import fast_backend

    try:
        found = fast_backend(path)
    except ImportError:
        found = None
    if found is not None:
        backend = found[0]
        return (
            lambda texts: [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)],
            f"the tokenizer of {path} (tokenizers library)",
        )
    from transformers import AutoTokenizer  # a tokenizer tokenizers alone cannot reproduce

    tok = AutoTokenizer.from_pretrained(path)
    return (
        lambda texts: [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]],
        f"the tokenizer of {path} (transformers AutoTokenizer)",
    )


def count(
    key: str,
    files: list[str],
    *,
    prompt_key: str,
    max_length: int,
    max_samples: int,
    counter: Counter | None,
    why_not: str = "",
) -> Count:
    """Count the prompts of `files` longer than `max_length` tokens (see the module docstring)."""
    result = Count(key=key, files=files)
    prompts: list[Any] = []
    for path in files:
        full = os.path.expanduser(path)
        if not os.path.isfile(full):
            result.missing.append(path)
            continue
        try:
            prompts += read_prompts(full, prompt_key)
        except (OSError, ValueError, KeyError, ImportError) as e:
            result.errors.append(str(e).strip("'\""))
    if 0 < max_samples < len(prompts):
        prompts = prompts[:max_samples]
    result.total = len(prompts)
    if counter is None:
        result.how = why_not
        return result
    try:
        lengths = counter.lengths(prompts) if prompts else []
    except Exception as e:  # noqa: BLE001 - a template or tokenizer failure is reported, not raised
        result.how = f"not counted: the chat template or tokenizer failed ({type(e).__name__}: {e})"
        return result
    result.counted = True
    result.how = counter.how
    result.over = sum(1 for n in lengths if n > max_length)
    result.longest = max(lengths, default=0)
    return result


def make_counter(tokenizer: str, template_kwargs: dict[str, Any] | None) -> tuple[Counter | None, str]:
    """(a counter, '') or (None, why the lengths cannot be counted here)."""
    path = os.path.expanduser(tokenizer)
    if not os.path.isdir(path):
        return None, f"not counted: the tokenizer {tokenizer} is not a directory on this machine"
    try:
        return Counter(path, template_kwargs), ""
    except (LookupError, OSError, ValueError, ImportError) as e:
        return None, f"not counted: {e}"
    except Exception as e:  # noqa: BLE001 - transformers' own errors when loading an unusual tokenizer
        return None, f"not counted: the tokenizer at {path} did not load ({type(e).__name__}: {e})"
