"""Run a framework script on this CPU machine with stand-ins for the Ascend-only packages it imports.

    python tests/support/peer_standins.py [--without MODULE[,MODULE...]] SCRIPT [ARGS...]

MindSpeed-LLM's entry scripts import `torch_npu`, `torchair` and (through MindSpeed's patches) `apex` at
start-up, before any argument is read (and MindSpeed 26.x reads `torch.npu`, which torch_npu registers).
The stand-ins are empty modules: any attribute is an inert class, so importing and patching go through
while nothing they stand for runs. They hold no rule and no value the
script could read as data; a script whose result depended on them would fail, not pass. They make the
peer's start-up cheaper than on an NPU machine (no CANN, no op compilation), never dearer.

`--without`: modules not to stand in because the script's own adaptor does (MindSpeed 2.1.0's
megatron_adaptor registers dummy `transformer_engine` modules and then removes the package, so that
Megatron's `import transformer_engine` fails as it does on an NPU machine). On a machine without CUDA the
device random generator is a host one (`_device_rng_on_host`), for converters that build Megatron models.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import types

STANDINS = ("torch_npu", "torchair", "acl", "apex", "transformer_engine")
# what `import torch_npu` registers on torch (MindSpeed 26.x annotates signatures with torch.npu.Stream)
TORCH_ATTRIBUTES = ("npu",)


class _InertMeta(type):
    def __getattr__(cls, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return Inert

    def __call__(cls, *args: object, **kwargs: object) -> type:
        return Inert


class Inert(metaclass=_InertMeta):
    """What every attribute of a stand-in module is: callable, subscriptable by attribute, inert."""


class StandInModule(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return Inert


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: tuple[str, ...] = STANDINS) -> None:
        self.names = names

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = StandInModule(spec.name)
        # MindSpeed's op builders read the package's location at import
        module.__file__ = f"/standin/{spec.name.replace('.', '/')}/__init__.py"
        return module

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        return None


def _device_rng_on_host(torch) -> None:  # type: ignore[no-untyped-def]
    """The device's random generator (what torch_npu's `torch.cuda` answers on an NPU) as a host generator
    of its own: Megatron's RNG tracker seeds, saves and restores it while it builds a model
    (megatron/core/tensor_parallel/random.py `model_parallel_cuda_manual_seed`). What it draws only fills
    weights that a converter then overwrites; a weight left as drawn would differ from ours and fail."""
    generator = torch.Generator()
    torch.cuda.get_rng_state = lambda device="cuda": generator.get_state()
    torch.cuda.set_rng_state = lambda state, device="cuda": generator.set_state(state)
    torch.cuda.manual_seed = lambda seed: generator.manual_seed(seed)


def main() -> None:
    args = sys.argv[1:]
    without: set[str] = set()
    if args[:1] == ["--without"] and len(args) > 1:
        without, args = set(args[1].split(",")), args[2:]
    if not args:
        raise SystemExit(__doc__)
    script = os.path.abspath(args[0])
    sys.meta_path.insert(0, StandInFinder(tuple(n for n in STANDINS if n not in without)))
    import torch

    for name in TORCH_ATTRIBUTES:
        if not hasattr(torch, name):
            setattr(torch, name, StandInModule(f"torch.{name}"))
    if not torch.cuda.is_available():
        _device_rng_on_host(torch)
    sys.argv = [script, *args[1:]]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
