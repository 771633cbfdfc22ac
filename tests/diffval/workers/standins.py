"""Stand-ins for the modules a framework imports but this machine cannot (an NPU's runtime, its compiler),
shared by the Megatron-family workers. They import nothing from ascendfactory or the tests.

A stand-in module gives any attribute as an inert placeholder: it can be imported from, subclassed and
decorated with at import time, but calling one during a verdict raises `StandInCalled`, which the worker
reports as "undecided" (the framework's answer would depend on the missing package), never as a refusal
or an acceptance. So a stand-in cannot change a rule: a rule that reaches one is not judged here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class StandInCalled(RuntimeError):
    pass


class Placeholder:
    """Any attribute of a stand-in module, and any attribute of that."""

    active = False  # set while a verdict runs: a call then raises; at import time it is inert

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        Finder.calls.append(self._name)
        if Placeholder.active:
            raise StandInCalled(f"stand-in {self._name} was called")
        if len(args) == 1 and callable(args[0]) and not kwargs:  # a decorator at import time
            return args[0]
        return Placeholder(f"{self._name}()")

    def __mro_entries__(self, bases):  # noqa: ANN001, ANN204 - a class derived from a stand-in
        return (object,)


class StandInModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self.__name__}.{attr}")


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a stand-in module for every name under `roots` (and the roots' submodules)."""

    calls: list[str] = []

    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = set(roots)
        self.used: set[str] = set()

    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001, ANN201
        self.used.add(spec.name)
        module = StandInModule(spec.name)
        module.__path__ = []
        module.__file__ = f"/nonexistent/stand-in/{spec.name.replace('.', '/')}/__init__.py"
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        pass


# Stand-in rows (module, why it cannot import here, what stands in) every Megatron-family worker shares.
TORCH_NPU = ("torch_npu", "Ascend's torch extension: needs the NPU driver", "inert placeholders")
TORCHAIR = ("torchair", "Ascend's graph compiler (MindSpeed's op builders import it)", "inert placeholders")
MINDIO_TTP = (
    "mindio_ttp",
    "MindIO's training fault tolerance (Ascend only): MindSpeed-LLM's high-availability feature checks "
    "that it imports before its own flag rules",
    "inert placeholders",
)
PKG_RESOURCES = (
    "pkg_resources",
    "gone from this setuptools; Megatron's tensor_parallel/random.py imports `packaging` from it",
    "a module holding the real `packaging`",
)


def install(roots: tuple[str, ...]) -> Finder:
    finder = Finder(roots)
    sys.meta_path.insert(0, finder)
    return finder


def empty_package(name: str, path: str) -> None:
    """A package whose __init__ is not run (its submodules import from `path` as usual)."""
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
