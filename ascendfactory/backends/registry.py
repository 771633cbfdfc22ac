"""The backend registry: one record per framework, registered by a decorator on its `Backend` class.

Every list of backend names in the tool (the `backend` key's check, help texts, `config`, `experiments`,
`doctor`, `install.sh`) comes from here. Backends are discovered by importing every package under
`ascendfactory/backends/` once, on first use: adding a backend means adding a package, nothing else.

    @register_backend
    class VerlBackend(Backend):
        name = "verl"
        ...
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any, TypeVar

from ascendfactory.config.suggest import did_you_mean
from ascendfactory.errors import ConfigError, Problem

if TYPE_CHECKING:
    from ascendfactory.backends.base import Backend
    from ascendfactory.config.load import Backends

B = TypeVar("B", bound="type[Backend]")
_REGISTRY: dict[str, Backend] = {}
_discovered = False


def register_backend(cls: B) -> B:
    """Class decorator: register one instance of a `Backend` subclass under its `name`."""
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise RuntimeError(f"backend name '{cls.name}' registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    import ascendfactory.backends as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.ispkg:
            importlib.import_module(f"{pkg.__name__}.{info.name}")


def all_backends() -> list[Backend]:
    """Every registered backend, in listing order (`Backend.order`, then name)."""
    _discover()
    return sorted(_REGISTRY.values(), key=lambda b: (b.order, b.name))


def backend_names() -> list[str]:
    return [b.name for b in all_backends()]


def get_backend(name: Any, *, key: str = "backend", source: str = "") -> Backend:
    """The backend called `name`; a ConfigError naming the key, the valid names and the nearest one."""
    _discover()
    if isinstance(name, str) and name in _REGISTRY:
        return _REGISTRY[name]
    names = backend_names()
    raise ConfigError(Problem(key=key, source=source,
                              message=f"unknown backend {name!r}{did_you_mean(str(name), names)}",
                              fix="use one of: " + ", ".join(names)))


def directory() -> Backends:
    """The registry as `config.load` needs it: the names and each backend's old-style flat keys."""
    from ascendfactory.config.load import Backends

    names = tuple(backend_names())  # discovers
    return Backends(names=names,
                    legacy_keys=lambda name: _REGISTRY[name].legacy_keys if name in _REGISTRY else {},
                    legacy_rest=lambda name: _REGISTRY[name].legacy_rest if name in _REGISTRY else None)
