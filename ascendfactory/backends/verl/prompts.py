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

`check(config, train_batch_size, strict=...)` turns the counts into the plan's facts, problems and
warnings (all prompts dropped, fewer left than one batch, files missing) and `total_steps` into the number
of training steps verl will run (the step of its last checkpoint).

pyarrow, tokenizers and transformers are imported here only, when the check runs (never at CLI start-up).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.common.hydra.schema import get_path
from ascendfactory.errors import Problem


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


def total_steps(config: dict[str, Any], steps_per_epoch: int | None) -> int | None:
    """verl's number of training steps: `trainer.total_training_steps`, else the prompts left after its
    filter // data.train_batch_size x trainer.total_epochs (what its trainer computes), when known."""
    given = get_path(config, ["trainer", "total_training_steps"])
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given
    epochs = _whole(get_path(config, ["trainer", "total_epochs"]))
    return steps_per_epoch * epochs if steps_per_epoch and epochs else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check(
    config: dict[str, Any], tbs: int | None, *, strict: bool
) -> tuple[dict[str, Any], list[Problem], list[str]]:
    """Facts, problems (keyed in verl's config) and warnings about the prompts of the data files, with
    what verl does with them: `data.filter_overlong_prompts` drops them, else the agent loop truncates."""
    facts: dict[str, Any] = {}
    problems: list[Problem] = []
    warnings: list[str] = []
    given = config.get("data")
    data: dict[str, Any] = given if isinstance(given, dict) else {}
    max_len = data.get("max_prompt_length")
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        return facts, problems, warnings  # the types rule reports it
    actor = config.get("actor_rollout_ref")
    model = actor.get("model") if isinstance(actor, dict) else None
    model = model if isinstance(model, dict) else {}
    tokenizer = str(model.get("tokenizer_path") or model.get("path") or "")
    counter = None
    why_not = "not counted: no actor_rollout_ref.model.path"
    if tokenizer:
        counter, why_not = make_counter(tokenizer, data.get("apply_chat_template_kwargs") or {})
    filtering = data.get("filter_overlong_prompts") is True
    for key, samples_key in (("train_files", "train_max_samples"), ("val_files", "val_max_samples")):
        files = as_files(data.get(key))
        if not files:
            problems.append(
                Problem(f"data.{key}", "no data file given", f"set data.{key} (parquet, json or jsonl)")
            )
            continue
        samples = data.get(samples_key)
        try:
            found = count(
                f"data.{key}",
                files,
                prompt_key=str(data.get("prompt_key") or "prompt"),
                max_length=max_len,
                max_samples=samples if isinstance(samples, int) and not isinstance(samples, bool) else -1,
                counter=counter,
                why_not=why_not,
            )
        except ImportError as e:  # pyarrow or tokenizers missing in this environment
            warnings.append(
                f"backend_config.data.{key}: prompts not checked ({e}; install ascendfactory-cli[torch])"
            )
            continue
        for path in found.missing:
            text = f"{path} does not exist on this machine"
            if strict:
                problems.append(Problem(f"data.{key}", text, "check the path (verl reads it on every node)"))
            else:
                warnings.append(f"backend_config.data.{key}: {text}")
        for error in found.errors:
            problems.append(
                Problem(
                    f"data.{key}", error, f"fix the file, or data.prompt_key (now '{data.get('prompt_key')}')"
                )
            )
        if found.missing or found.errors or not found.total:
            continue
        short = "train" if key == "train_files" else "val"
        facts[f"{short}_prompts"] = found.total
        if not found.counted:
            warnings.append(f"backend_config.data.{key}: {found.total} prompts; lengths {found.how}")
            continue
        _judge_lengths(key, found, max_len, filtering, tbs, config, facts, problems, warnings)
    return facts, problems, warnings


def _judge_lengths(
    key: str,
    found: Count,
    max_len: int,
    filtering: bool,
    tbs: int | None,
    config: dict[str, Any],
    facts: dict[str, Any],
    problems: list[Problem],
    warnings: list[str],
) -> None:
    """One data file's counted prompts against `data.max_prompt_length`: the facts, and what verl then does
    with the long ones (drops them with `filter_overlong_prompts`, else truncates them at rollout)."""
    short = "train" if key == "train_files" else "val"
    facts[f"{short}_prompts_over_max_prompt_length"] = found.over
    facts[f"{short}_longest_prompt_tokens"] = found.longest
    detail = (
        f"{found.over} of {found.total} prompts are longer than data.max_prompt_length {max_len} tokens "
        f"(longest {found.longest}; chat template applied, counted with {found.how})"
    )
    remain = found.remaining if filtering else found.total
    if key == "train_files" and tbs:
        facts["steps_per_epoch"] = remain // tbs
        facts["total_training_steps"] = total_steps(config, remain // tbs)
    if not found.over:
        return
    if not filtering:
        warnings.append(
            f"backend_config.data.{key}: {detail}; with data.filter_overlong_prompts false verl "
            "left-truncates them at "
            "rollout"
        )
    elif remain == 0:
        problems.append(
            Problem(
                f"data.{key}",
                f"{detail}: verl would drop every one and then fail with 'num_samples=0'",
                f"raise data.max_prompt_length to at least {found.longest}, or use shorter prompts",
            )
        )
    elif key == "train_files" and tbs and remain < tbs:
        problems.append(
            Problem(
                f"data.{key}",
                f"{detail}: verl drops them, and the {remain} left are fewer than "
                f"data.train_batch_size {tbs}, "
                "so not one training step would run",
                f"raise data.max_prompt_length (longest {found.longest}) or lower data.train_batch_size",
            )
        )
    else:
        warnings.append(f"backend_config.data.{key}: {detail}; verl drops them: {remain} remain")
