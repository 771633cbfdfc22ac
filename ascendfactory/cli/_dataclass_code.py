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
same objects the text gives.

The code objects are kept by the module that defines the class (the `globals` dataclasses passes), one file
per module, so that a start reads only the files of the modules it imports:
`<AF_CODE_CACHE_DIR>/<interpreter build, bytecode magic, -O level>/<module>.marshal` (default folder
`$XDG_CACHE_HOME/ascendfactory/dataclass-code`, else `~/.cache/ascendfactory/dataclass-code`;
`AF_CODE_CACHE_DIR=off` keeps nothing). A module's file is
written at exit when the run compiled one of its texts (marshal, the format of `.pyc` files; it keeps the
file's earlier texts too until there are more than `_MAX_ENTRIES`, then only this run's), and read back by
the next run: a file another user owns, one others may write, or one that does not read back as text -> code
is ignored (and replaced at exit).
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import marshal
import os
import re
import sys
import tempfile
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType
from typing import Any

_MAX_ENTRIES = 256  # texts kept for one module
_MODULE = re.compile(r"[A-Za-z_][\w.]*\Z")  # a module name that is a safe file name


class _Module:
    """One module's code objects: those its file holds, those this run compiled or used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept = _read(path)
        self.used: dict[str, CodeType] = {}
        self.compiled = 0

    def code(self, source: str) -> CodeType:
        code = self.used.get(source) or self.kept.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
        self.used[source] = code
        return code

    def write(self) -> None:
        if not self.compiled:
            return
        fits = len(self.kept) + self.compiled <= _MAX_ENTRIES
        entries = {**self.kept, **self.used} if fits else self.used
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps(entries))
            os.replace(tmp, self.path)  # whole or not at all, whichever run writes last
        except (OSError, ValueError):
            pass  # a read-only home: the next run compiles, as without the cache


class _CodeCache:
    """Code objects by defining module and source text, kept in `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.modules: dict[str, _Module] = {}

    @property
    def compiled(self) -> int:
        """Texts this run compiled (none of its modules' files held them)."""
        return sum(m.compiled for m in self.modules.values())

    @property
    def used(self) -> int:
        return sum(len(m.used) for m in self.modules.values())

    def exec(self, source: Any, globals: Any = None, locals: Any = None, /) -> None:  # noqa: A002
        """`exec` for `dataclasses`: a text is compiled once, then run from its code object."""
        name = globals.get("__name__") if isinstance(globals, dict) else None
        if type(source) is not str or not isinstance(name, str) or not _MODULE.match(name):
            return builtins.exec(source, globals, locals)  # nothing to keep it by: as the builtin does
        module = self.modules.get(name)
        if module is None:
            module = self.modules[name] = _Module(self.folder / f"{name}.marshal")
        return builtins.exec(module.code(source), globals, locals)

    def write(self) -> None:
        """Keep the code objects of each module this run compiled a text of, for the next run."""
        for module in self.modules.values():
            module.write()


def cache_folder(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path | None:
    """Where the code objects of this interpreter build are kept; None: `AF_CODE_CACHE_DIR=off`."""
    folder = environ.get("AF_CODE_CACHE_DIR")
    if folder == "off":
        return None
    if not folder:
        home = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        folder = os.path.join(home, "ascendfactory", "dataclass-code")
    tag = sys.implementation.cache_tag or sys.implementation.name
    return Path(folder) / f"{tag}-{MAGIC_NUMBER.hex()}-O{sys.flags.optimize}"


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
        folder = cache_folder()
        if folder is None:
            return None
        _installed = _CodeCache(folder)
        dataclasses.exec = _installed.exec  # type: ignore[attr-defined]
        atexit.register(_installed.write)
    return _installed
