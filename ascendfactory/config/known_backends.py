"""What loading an experiment needs to know of the registered backends, handed in by the caller.

`ascendfactory.backends.registry.directory()` builds it; the config layer imports no backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Backends:
    """What loading needs to know of the registered backends."""

    known: Callable[[str], bool]  # is this a registered backend (imports only that backend)
    canonical: Callable[[str], str | None]  # its registered spelling (names fold case, `-` and `_`)
    names: Callable[[], tuple[str, ...]]  # every registered name (imports them all: error messages only)
    legacy_keys: Callable[[str], Mapping[str, tuple[str, ...]]]  # old-style flat key -> dotted keys
    legacy_rest: Callable[[str], str | None]  # where other flat keys go (None: they are errors)
