"""The backend registry: one record per framework, registered by a decorator on its `Backend` class.

Every list of backend names in the tool (the `backend` key's check, help texts, `config`, `experiments`,
`doctor`, `install.sh`) comes from here. A backend shipped here is one package under
`ascendfactory/backends/`, named after it (`mindspeed_llm/` registers `mindspeed-llm`, which
`register_backend` checks): that convention is the manifest, so looking one up imports only its package,
and a complete list imports every package once. A backend from elsewhere is a plugin: its distribution's
entry point (`ascendfactory.registry`) is loaded when a name is not found here, or for a complete list.

    @register_backend
    class VerlBackend(Backend):
        name = "verl"
        ...
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import TYPE_CHECKING, Any, TypeVar

from ascendfactory.registry import Registry

if TYPE_CHECKING:
    from ascendfactory.backends.base import Backend
    from ascendfactory.config.known_backends import Backends

B = TypeVar("B", bound="type[Backend]")
PACKAGE = "ascendfactory.backends"


def _package_of(name: str) -> str:
    return f"{PACKAGE}.{name.strip().lower().replace('-', '_')}"


def _locate(name: str) -> None:
    """Import the package of a backend shipped here (by the naming convention), if there is one."""
    if name.replace("-", "_").isidentifier() and importlib.util.find_spec(_package_of(name)) is not None:
        importlib.import_module(_package_of(name))


def _import_all() -> None:
    import ascendfactory.backends as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.ispkg:
            importlib.import_module(f"{pkg.__name__}.{info.name}")


BACKENDS: Registry[Backend] = Registry(
    "backend",
    key="backend",
    how="@ascendfactory.backends.registry.register_backend on the Backend class",
    locate=_locate,
    everything=_import_all,
    same=lambda a, b: type(a) is type(b),
    order=lambda b: (b.order, b.name),
)


def register_backend(cls: B) -> B:
    """Class decorator: register one instance of a `Backend` subclass under its `name`."""
    module = cls.__module__
    if module.startswith(PACKAGE + ".") and not (module + ".").startswith(_package_of(cls.name) + "."):
        raise RuntimeError(f"backend '{cls.name}' must live in the package {_package_of(cls.name)}")
    existing = BACKENDS.registered().get(cls.name)
    BACKENDS.register(cls.name, existing if type(existing) is cls else cls())
    return cls


def all_backends() -> list[Backend]:
    """Every registered backend, in listing order (`Backend.order`, then name)."""
    return BACKENDS.entries()


def backend_names() -> list[str]:
    return [b.name for b in all_backends()]


def find_backend(name: str) -> Backend | None:
    return BACKENDS.find(name)


def get_backend(name: Any, *, key: str = "backend", source: str = "") -> Backend:
    """The backend called `name`; a RegistryError (a ConfigError) naming the key, the valid names and the
    nearest one."""
    return BACKENDS.get(name, key=key, source=source)


def directory() -> Backends:
    """The registry as `config.load` needs it: the names and each backend's old-style flat keys."""
    from ascendfactory.config.known_backends import Backends

    def legacy_keys(name: str) -> Any:
        return backend.legacy_keys if (backend := find_backend(name)) else {}

    def legacy_rest(name: str) -> str | None:
        return backend.legacy_rest if (backend := find_backend(name)) else None

    return Backends(
        known=lambda name: find_backend(name) is not None,
        canonical=BACKENDS.canonical,
        names=lambda: tuple(backend_names()),
        legacy_keys=legacy_keys,
        legacy_rest=legacy_rest,
    )
