"""Helpers for the data tests (a uniquely named module: `conftest` cannot be imported by name safely)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ascendfactory.engine.data.indexed import IndexedDataset


def write_jsonl(path: Path, records: list[Any]) -> Path:
    """Write records as JSON Lines; returns the path."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def read(prefix: Path) -> list[list[int]]:
    """Every sequence of the indexed dataset at `prefix`, as lists."""
    ds = IndexedDataset(prefix)
    return [ds[i].tolist() for i in range(len(ds))]
