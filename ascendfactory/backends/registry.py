"""The backend registry: one record per framework, registered by a decorator on its `Backend` class.

Every list of backend names in the tool (the `backend` key's check, help texts, `config`, `experiments`,
`doctor`, `install.sh`) comes from here. Backends are discovered by importing every package under
`ascendfactory/backends/` once, when a list is needed: adding a backend means adding a package, nothing
else. Looking up one backend imports only its package: a backend shipped here is named after its package
(`mindspeed_llm/` registers `mindspeed-llm`), which `register_backend` checks. A backend defined elsewhere
(a plugin, a test) is registered by importing its module.

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
    from ascendfactory.config.known_backends import Backends

B = TypeVar("B", bound="type[Backend]")
_REGISTRY: dict[str, Backend] = {}
_discovered = False


PACKAGE = "ascendfactory.backends"


def _package_of(name: str) -> str:
    return f"{PACKAGE}.{name.replace('-', '_')}"


def register_backend(cls: B) -> B:
    """Class decorator: register one instance of a `Backend` subclass under its `name`."""
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise RuntimeError(f"backend name '{cls.name}' registered twice")
    module = cls.__module__
    if module.startswith(PACKAGE + ".") and not (module + ".").startswith(_package_of(cls.name) + "."):
        raise RuntimeError(f"backend '{cls.name}' must live in the package {_package_of(cls.name)}")
    _REGISTRY[cls.name] = cls()
    return cls


def _lookup(name: str) -> Backend | None:
    """The backend called `name`, importing only its own package when it is not registered yet."""
    if name not in _REGISTRY and not _discovered and name.replace("-", "_").isidentifier():
        import importlib.util

        if importlib.util.find_spec(_package_of(name)) is not None:
            importlib.import_module(_package_of(name))
    return _REGISTRY.get(name)


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
    if isinstance(name, str) and (backend := _lookup(name)) is not None:
        return backend
    names = backend_names()
    raise ConfigError(
        Problem(
            key=key,
            source=source,
            message=f"unknown backend {name!r}{did_you_mean(str(name), names)}",
            fix="use one of: " + ", ".join(names),
        )
    )


def directory() -> Backends:
    """The registry as `config.load` needs it: the names and each backend's old-style flat keys."""
    from ascendfactory.config.known_backends import Backends

    def legacy_keys(name: str) -> Any:
        return backend.legacy_keys if (backend := _lookup(name)) else {}

    def legacy_rest(name: str) -> str | None:
        return backend.legacy_rest if (backend := _lookup(name)) else None

    return Backends(
        known=lambda name: _lookup(name) is not None,
        names=lambda: tuple(backend_names()),
        legacy_keys=legacy_keys,
        legacy_rest=legacy_rest,
    )
