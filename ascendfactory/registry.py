"""One registry type for every open set of the house, and the plugins that extend them.

    backends           backends.registry        (`@register_backend`; `backend:` in an experiment)
    log formats        metrics.formats          (`register_format`; `LogSpec.format`, `logs --format`)
    throughput formulas metrics.throughput      (`register_formula`; `ThroughputSpec.formula`)
    checkpoint schemes checkpoints              (`register_scheme`; `CheckpointSpec.scheme`)
    trackers           trackers.registry        (`register_tracker`; `report_to`)
    schedulers         submit.scheduler         (`register_scheduler`; `submit <name>`)

Every one is a `Registry[T]`: names are folded (case, `-` and `_` alike), an entry may have aliases, a
name registered twice by two different entries and an unknown name are both a `RegistryError` (a
`ConfigError`: the key that named it, the valid names, the nearest one).

Plugins: a distribution extends any of them by declaring an entry point in the group `ascendfactory.plugins`
(in its pyproject.toml, `[project.entry-points."ascendfactory.plugins"] my-backend = "my_pkg.backend"`).
The value is a module, imported once, whose import registers what it brings (the same decorators and
`register_*` calls a module of this package uses), or a `module:function` called once with no arguments.
Plugins are loaded lazily: only when a name is not found, or when a complete list is needed (help texts,
`experiments`, format detection), so a command that names only built-in entries never reads the installed
distributions' metadata (importing `importlib.metadata` alone costs ~25 ms). Every command reaches them
the same way, including the `ascendfactory-cli train` that `submit` writes for each node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from ascendfactory.errors import ConfigError, Problem

GROUP = "ascendfactory.plugins"
T = TypeVar("T")


class RegistryError(ConfigError):
    """A name no registry entry has, or one name registered by two different entries."""


def fold(name: str) -> str:
    """The form names are compared in: case-insensitive, `-` and `_` alike, outer blanks ignored."""
    return name.strip().lower().replace("-", "_")


def did_you_mean(word: str, candidates: Iterable[str], *, n: int = 3) -> str:
    """' (did you mean: a, b?)' or '' when nothing is close."""
    import difflib  # only for a name that is wrong: not at start-up

    cands = list(candidates)
    norm = {fold(c): c for c in cands}
    if fold(word) in norm and norm[fold(word)] != word:
        return f" (did you mean: {norm[fold(word)]}?)"
    close = difflib.get_close_matches(word, cands, n=n, cutoff=0.6)
    return f" (did you mean: {', '.join(close)}?)" if close else ""


_plugins_loaded = False


def load_plugins() -> None:
    """Import every `ascendfactory.plugins` entry point of the installed distributions (once per process).
    A plugin that fails to load is a RegistryError naming it and its distribution."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True  # before loading: a plugin's own lookups must not load the plugins again
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            loaded = ep.load()
            if callable(loaded) and ":" in ep.value:
                loaded()
        except RegistryError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of a plugin's import is reported the same way
            dist = getattr(ep.dist, "name", None) or "?"
            raise RegistryError(
                Problem(
                    key=f"plugin {ep.name}",
                    message=f"the entry point {ep.value} (distribution {dist}) failed to load: "
                    f"{type(e).__name__}: {e}",
                    fix=f"fix or reinstall {dist}, or uninstall it (pip uninstall {dist})",
                    source=GROUP,
                )
            ) from None


class Registry(Generic[T]):
    """Named entries of one kind. `kind` names them in messages ("log format"); `key` is where a user names
    one (`backend`, `--format`); `how` is how a module registers one (shown when a name is unknown);
    `locate(name)` may import the module that registers `name` (a built-in found without loading
    anything else); `everything()` imports every built-in module (for a complete list); `same(a, b)`:
    whether registering `b` over `a` is the same entry again (default: the same object)."""

    def __init__(
        self,
        kind: str,
        *,
        key: str,
        how: str,
        locate: Callable[[str], None] | None = None,
        everything: Callable[[], None] | None = None,
        same: Callable[[T, T], bool] | None = None,
        order: Callable[[T], Any] | None = None,
    ) -> None:
        self.kind, self.key, self.how = kind, key, how
        self._order = order
        self._locate, self._everything = locate, everything
        self._same = same or (lambda a, b: a is b)
        self._entries: dict[str, T] = {}  # canonical name -> entry, in registration order
        self._folded: dict[str, str] = {}  # folded name or alias -> canonical name
        self._complete = False

    # -- registering ------------------------------------------------------------------------------------
    def register(self, name: str, entry: T, *, aliases: Iterable[str] = ()) -> T:
        """Add `entry` under `name` and `aliases`; the same entry again is a no-op, another entry under a
        taken name (or alias) is a RegistryError."""
        spellings = [name, *aliases]
        for spelling in spellings:
            owner = self._folded.get(fold(spelling))
            if owner is not None and not self._same(self._entries[owner], entry):
                raise RegistryError(
                    Problem(
                        key=self.kind,
                        message=f"{self.kind} name {spelling!r} is already registered (by {owner!r})",
                        fix=f"give the new {self.kind} another name",
                    )
                )
        self._entries[name] = entry
        for spelling in spellings:
            self._folded[fold(spelling)] = name
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry and its aliases (tests)."""
        canonical = self._folded.get(fold(name))
        if canonical is None:
            return
        del self._entries[canonical]
        self._folded = {k: v for k, v in self._folded.items() if v != canonical}

    # -- looking up -------------------------------------------------------------------------------------
    def _hit(self, name: str) -> T | None:
        canonical = self._folded.get(fold(name))
        return None if canonical is None else self._entries[canonical]

    def find(self, name: str) -> T | None:
        """The entry called `name` (or an alias), else None. A miss first asks `locate`, then the plugins."""
        if not isinstance(name, str):
            return None
        found = self._hit(name)
        if found is None and self._locate is not None:
            self._locate(name)
            found = self._hit(name)
        if found is None and not self._complete:
            load_plugins()
            found = self._hit(name)
        return found

    def get(self, name: object, *, key: str | None = None, source: str = "", hint: str = "") -> T:
        """The entry called `name`; a RegistryError naming `key`, the valid names and the nearest one.
        `hint`: more of the fix (`or leave it out to detect`)."""
        found = self.find(name) if isinstance(name, str) else None
        if found is not None:
            return found
        names = self.names()
        raise RegistryError(
            Problem(
                key=key or self.key,
                source=source,
                message=f"unknown {self.kind} {name!r}{did_you_mean(str(name), names)}",
                fix="use one of: " + (", ".join(names) or "(none registered)") + hint,
            )
        )

    def canonical(self, name: str) -> str | None:
        """The registered spelling of `name` (an alias or another case gives the entry's own name)."""
        return self._folded.get(fold(name)) if self.find(name) is not None else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    # -- listing ----------------------------------------------------------------------------------------
    def complete(self) -> None:
        """Import every built-in module and every plugin, once: the lists below are then complete."""
        if self._complete:
            return
        self._complete = True
        if self._everything is not None:
            self._everything()
        load_plugins()

    def items(self) -> Iterator[tuple[str, T]]:
        """Every (name, entry), in listing order (`order`, else registration order: built-ins first)."""
        self.complete()
        pairs = list(self._entries.items())
        if self._order is not None:
            order = self._order
            pairs.sort(key=lambda pair: order(pair[1]))
        return iter(pairs)

    def entries(self) -> list[T]:
        return [entry for _, entry in self.items()]

    def names(self) -> list[str]:
        return [name for name, _ in self.items()]

    def registered(self) -> dict[str, T]:
        """What is registered now, without loading anything (tests, the manifest check)."""
        return dict(self._entries)
