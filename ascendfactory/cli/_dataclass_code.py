"""The compiled methods of every dataclass, kept between runs of the CLI, as `__pycache__` keeps modules.

CPython writes each dataclass's `__init__`, `__repr__`, `__eq__`, `__hash__` and the frozen `__setattr__` /
`__delattr__` as source text and compiles it on every start: `exec(txt, globals, ns)` in
`dataclasses._create_fn` (Lib/dataclasses.py, line 433 at v3.11.7; line 473 at v3.12.1; 3.13's
`_FuncBuilder.add_fns_to_class` compiles one text per class the same way). The quickstart's dry run defines
about 60 dataclasses, and that compiling was ~300M of its 1,295M instructions.

A code object depends only on its text (and on the compiler flags, which here are none: `exec` of a string
inherits the calling frame's `__future__` flags, and `dataclasses` has none). So `install()` puts an `exec`
into the `dataclasses` module's namespace, where its functions look names up before the builtins: it
compiles a text once, keeps the code object by text, and runs it with the builtin `exec`, exactly as the
builtin would have run the text. Nothing else changes: the classes, their methods and their behaviour are the
same objects the text gives. The kept code objects are written at exit (marshal, the format of `.pyc`
files) to one file per interpreter build and optimisation level, in `AF_CODE_CACHE_DIR` (default
`$XDG_CACHE_HOME/ascendfactory`, else `~/.cache/ascendfactory`; `off` keeps nothing), and read back by the
next run: a file another user owns, one others may write, or one that does not read back as text -> code is
ignored (and replaced at exit). The file keeps the texts of earlier runs too (other commands define other
classes) until it holds more than `_MAX_ENTRIES`; then only this run's are written.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import marshal
import os
import sys
import tempfile
from pathlib import Path
from types import CodeType
from typing import Any

_MAX_ENTRIES = 4096


class _CodeCache:
    """Code objects by source text: those read from `path`, those compiled or used in this run."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.kept: dict[str, CodeType] = _read(path) if path else {}
        self.used: dict[str, CodeType] = {}
        self.compiled = 0  # texts this run compiled (not found in the file)

    def exec(self, source: Any, globals: Any = None, locals: Any = None, /) -> None:  # noqa: A002
        """`exec` for `dataclasses`: a text is compiled once, then run from its code object."""
        if type(source) is not str:
            return builtins.exec(source, globals, locals)
        code = self.used.get(source) or self.kept.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
        self.used[source] = code
        return builtins.exec(code, globals, locals)

    def write(self) -> None:
        """Keep this run's code objects (and the file's, while small) for the next run, if any was new."""
        if self.path is None or not self.compiled:
            return
        entries = {**self.kept, **self.used} if len(self.kept) + self.compiled <= _MAX_ENTRIES else self.used
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps(entries))
            os.replace(tmp, self.path)  # whole or not at all, whichever run writes last
        except (OSError, ValueError):
            pass  # a read-only home: the next run compiles, as without the cache


def cache_file(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path | None:
    """Where the code objects of this interpreter build are kept; None: `AF_CODE_CACHE_DIR=off`."""
    folder = environ.get("AF_CODE_CACHE_DIR")
    if folder == "off":
        return None
    if not folder:
        folder = os.path.join(
            environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ascendfactory"
        )
    tag = sys.implementation.cache_tag or sys.implementation.name
    return Path(folder) / f"dataclass-code.{tag}-O{sys.flags.optimize}.marshal"


def _read(path: Path) -> dict[str, CodeType]:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return {}  # only a file this user alone may write is run
            data = marshal.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict) or not all(type(k) is str and type(v) is CodeType for k, v in data.items()):
        return {}
    return data


_installed: _CodeCache | None = None


def install() -> _CodeCache | None:
    """Route `dataclasses`' compiling through the kept code objects (once per process); the cache, or None
    when `AF_CODE_CACHE_DIR=off`."""
    global _installed
    if _installed is None:
        path = cache_file()
        if path is None:
            return None
        _installed = _CodeCache(path)
        dataclasses.exec = _installed.exec  # type: ignore[attr-defined]
        atexit.register(_installed.write)
    return _installed
