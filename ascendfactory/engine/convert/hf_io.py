"""HF side of conversion: lazy safetensors reading, sharded safetensors writing, config/tokenizer copying."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from ascendfactory.errors import ConfigError, Problem

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
_WEIGHT_FILE = re.compile(r"^(model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json)$")
_NOT_COPIED = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_size(text: str | int) -> int:
    """'5GB' -> 5 * 10**9, '500MiB' -> 500 * 2**20, 1234 -> 1234 (HF's `max_shard_size` units)."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(text)
    if not m:
        raise ConfigError(
            Problem(
                key="--max-shard-size",
                message=f"'{text}' is not a size",
                fix="write it like 5GB, 500MB or 2GiB",
                source="command line",
            )
        )
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").upper()])


def read_config(path: str | Path) -> dict[str, Any]:
    """config.json of an HF model folder as a dict; ConfigError if absent."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise ConfigError(
            Problem(
                key=str(path),
                message="no config.json in this folder",
                fix="point at an HF model folder (config.json + *.safetensors)",
            )
        )
    return json.loads(cfg.read_text())


class HFReader:
    """Read tensors of an HF model folder one at a time (safetensors, single file or index)."""

    def __init__(self, folder: str | Path):
        from safetensors import safe_open

        self.folder = Path(folder)
        index = self.folder / INDEX
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            files = sorted(p.name for p in self.folder.glob("*.safetensors"))
        if not files:
            raise ConfigError(
                Problem(
                    key="--load-dir",
                    message=f"no *.safetensors weights in {folder}",
                    fix="convert .bin weights to safetensors first (save_pretrained)",
                    source="command line",
                )
            )
        self._handles = {f: safe_open(str(self.folder / f), framework="pt") for f in files}
        self._where: dict[str, str] = {}
        for f, h in self._handles.items():
            for k in h.keys():
                self._where[k] = f

    def keys(self) -> list[str]:
        return list(self._where)

    def meta(self, name: str) -> tuple[tuple[int, ...], str]:
        """(shape, dtype name) without reading the data."""
        sl = self._handles[self._where[name]].get_slice(name)
        return tuple(sl.get_shape()), _DTYPES.get(sl.get_dtype(), sl.get_dtype())

    def get(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        t = self._handles[self._where[name]].get_tensor(name)
        return t if dtype is None or t.dtype == dtype else t.to(dtype)

    def read(self, names: Iterable[str], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        return {n: self.get(n, dtype) for n in names}


_DTYPES = {
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F64": "float64",
    "I64": "int64",
    "I32": "int32",
    "U8": "uint8",
    "BOOL": "bool",
}


class HFShardWriter:
    """Write tensors into HF-style safetensors shards of at most `max_shard_size` bytes (HF's greedy rule).

    Tensors go to temp files while writing; `finish()` names them `model.safetensors` (one shard) or
    `model-0000i-of-0000n.safetensors` + `model.safetensors.index.json`, then removes stale weight files.
    """

    def __init__(self, folder: str | Path, max_shard_size: int):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max = max_shard_size
        self._buf: dict[str, torch.Tensor] = {}
        self._buf_bytes = 0
        self._done: list[tuple[Path, list[str]]] = []
        self.total_size = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self._buf and self._buf_bytes + size > self.max:
            self._flush()
        self._buf[name] = tensor.contiguous()
        self._buf_bytes += size
        self.total_size += size

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self.folder / f".tmp-shard-{len(self._done):05d}.safetensors"
        save_file(self._buf, str(path), metadata={"format": "pt"})
        self._done.append((path, list(self._buf)))
        self._buf, self._buf_bytes = {}, 0

    def finish(self) -> list[Path]:
        """Flush, rename into place, write the index when sharded; returns the weight files."""
        if self._buf or not self._done:
            self._flush()
        for p in self.folder.iterdir():
            if _WEIGHT_FILE.match(p.name):
                p.unlink()
        n = len(self._done)
        if n == 1:
            final = self.folder / SINGLE
            self._done[0][0].replace(final)
            return [final]
        weight_map, files = {}, []
        for i, (tmp, names) in enumerate(self._done, start=1):
            final = self.folder / f"model-{i:05d}-of-{n:05d}.safetensors"
            tmp.replace(final)
            files.append(final)
            weight_map.update({k: final.name for k in names})
        index = {"metadata": {"total_size": self.total_size}, "weight_map": dict(sorted(weight_map.items()))}
        (self.folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return files

    def abort(self) -> None:
        """Remove the temp shards of a failed conversion."""
        for tmp, _ in self._done:
            tmp.unlink(missing_ok=True)


def copy_model_files(
    src: str | Path, dst: str | Path, *, config_updates: dict[str, Any] | None = None
) -> list[str]:
    """Copy config, tokenizer and generation files (everything but weights) from `src` to `dst`."""
    src, dst = Path(src), Path(dst)
    copied = []
    for p in sorted(src.iterdir()):
        if not p.is_file() or p.name.endswith(_NOT_COPIED) or _WEIGHT_FILE.match(p.name):
            continue
        target = dst / p.name
        if target.resolve() != p.resolve():
            shutil.copy2(p, target)
        copied.append(p.name)
    if config_updates:
        cfg_path = dst / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.update(config_updates)
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    return copied
