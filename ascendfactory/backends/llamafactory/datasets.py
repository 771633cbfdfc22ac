"""`dataset` entries: names in a `dataset_info.json`, or paths of the user's own data files.

LLaMA-Factory only reads datasets registered in `<dataset_dir>/dataset_info.json`. A `dataset` entry that
is a path to a .json / .jsonl file is registered automatically: its format is read from its first record

    {"instruction", "output"[, "input"]}           alpaca        (sft)
    {"instruction", "chosen", "rejected"}          alpaca, ranking (dpo)
    {"conversations": [{"from", "value"}, ...]}    sharegpt
    {"messages": [{"role", "content"}, ...]}       sharegpt with OpenAI-style tags
    {"text"}                                       plain text    (pt)

and the merged registry (the user's `dataset_dir` entries, with absolute file names, plus the new ones)
is written to `{af_output_dir}/lf_data/dataset_info.json`, which becomes the run's `dataset_dir`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.errors import Problem

INFO = "dataset_info.json"
DATA_SUFFIXES = (".json", ".jsonl")


@dataclass
class Datasets:
    names: list[str]  # what `dataset` becomes
    dataset_dir: str | None  # what `dataset_dir` becomes (None: leave the user's)
    info: dict[str, Any] | None  # the registry to write into dataset_dir (None: nothing to write)
    problems: list[Problem] = field(default_factory=list)
    missing: list[Problem] = field(default_factory=list)  # files not found: errors on a real run


def is_path(entry: str) -> bool:
    return entry.endswith(DATA_SUFFIXES) or os.sep in entry


def first_record(path: str) -> dict[str, Any] | None:
    """The first record of a .json array or a .jsonl file (reads only what it needs of a .jsonl)."""
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            for line in f:
                if line.strip():
                    value = json.loads(line)
                    return value if isinstance(value, dict) else None
            return None
        value = json.load(f)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return value[0]
    return None


def describe(record: dict[str, Any]) -> dict[str, Any] | None:
    """The dataset_info.json entry (without file_name) for a record's shape; None when unknown."""
    keys = set(record)
    if {"chosen", "rejected"} <= keys:
        columns = {"prompt": "instruction", "chosen": "chosen", "rejected": "rejected"}
        if "input" in keys:
            columns["query"] = "input"
        return {"ranking": True, "columns": columns}
    if {"instruction", "output"} <= keys:
        columns = {"prompt": "instruction", "response": "output"}
        if "input" in keys:
            columns["query"] = "input"
        if "system" in keys:
            columns["system"] = "system"
        return {"columns": columns}
    for key in ("conversations", "messages"):
        turns = record.get(key)
        if isinstance(turns, list) and turns and isinstance(turns[0], dict):
            entry: dict[str, Any] = {"formatting": "sharegpt", "columns": {"messages": key}}
            if "role" in turns[0] and "content" in turns[0]:
                entry["tags"] = {
                    "role_tag": "role",
                    "content_tag": "content",
                    "user_tag": "user",
                    "assistant_tag": "assistant",
                    "system_tag": "system",
                }
            return entry
    if "text" in keys:
        return {"columns": {"prompt": "text"}}
    return None


def _name_for(path: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.splitext(os.path.basename(path))[0]) or "data"
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


def read_info(dataset_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(dataset_dir, INFO), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def resolve(dataset: Any, dataset_dir: str | None, out_dir: str, *, key: str = "dataset") -> Datasets:
    """Resolve `dataset` (a comma-separated string or a list) against `dataset_dir`; register paths."""
    entries = dataset if isinstance(dataset, list) else str(dataset).split(",")
    entries = [str(e).strip() for e in entries if str(e).strip()]
    base_dir = os.path.abspath(dataset_dir or "data")
    user_info = read_info(base_dir)
    result = Datasets(names=[], dataset_dir=None, info=None)
    new: dict[str, Any] = {}
    for entry in entries:
        if not is_path(entry):
            if user_info is None:
                result.missing.append(
                    Problem(
                        key,
                        f"'{entry}' is a dataset name, but {os.path.join(base_dir, INFO)} cannot be read",
                        "set dataset_dir to the folder holding dataset_info.json, "
                        "or give the data file's path",
                    )
                )
            elif entry not in user_info:
                from ascendfactory.config.suggest import did_you_mean

                result.problems.append(
                    Problem(
                        key,
                        f"'{entry}' is not in {os.path.join(base_dir, INFO)}"
                        f"{did_you_mean(entry, list(user_info))}",
                        "use a name registered there, or give the data file's path",
                    )
                )
            result.names.append(entry)
            continue
        path = os.path.abspath(os.path.expanduser(entry))
        if not os.path.isfile(path):
            result.missing.append(
                Problem(key, f"data file {path} not found", "give an existing .json or .jsonl file")
            )
            continue
        try:
            record = first_record(path)
        except (OSError, ValueError) as e:
            result.problems.append(Problem(key, f"{path} is not valid JSON/JSONL: {e}", "fix the file"))
            continue
        entry_info = describe(record) if record else None
        if entry_info is None:
            shape = sorted(record) if record else "no records"
            result.problems.append(
                Problem(
                    key,
                    f"{path}: cannot tell its format from its first record ({shape})",
                    "use alpaca (instruction/input/output), sharegpt (conversations or messages), "
                    "dpo (instruction/chosen/rejected) or pt (text) records, "
                    "or register it in a dataset_info.json",
                )
            )
            continue
        name = _name_for(path, set(new) | set(user_info or {}))
        new[name] = {"file_name": path, **entry_info}
        result.names.append(name)
    if new:
        merged = {
            name: (
                {**spec, "file_name": os.path.join(base_dir, spec["file_name"])}
                if "file_name" in spec
                else spec
            )
            for name, spec in (user_info or {}).items()
            if isinstance(spec, dict)
        }
        merged.update(new)
        result.info = merged
        result.dataset_dir = os.path.join(out_dir, "lf_data")
    return result
