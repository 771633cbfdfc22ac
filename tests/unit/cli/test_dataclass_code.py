"""The dataclass code cache: the same classes as without it, compiled once across runs, and only from a file
this user alone may write."""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import subprocess
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest

from ascendfactory.cli import _dataclass_code
from ascendfactory.cli._dataclass_code import _CodeCache, cache_folder

REPO = Path(__file__).resolve().parents[3]


def _classes() -> list[type]:
    """Dataclasses of every shape `dataclasses` writes methods for."""

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        a: int
        b: str = "x"
        c: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(order=True, slots=True)
    class Ordered:
        a: int
        b: float = 1.5

    @dataclasses.dataclass(kw_only=True, eq=False)
    class KwOnly:
        a: int
        init: dataclasses.InitVar[int] = 0

        def __post_init__(self, init: int) -> None:
            self.a += init

    return [Frozen, Ordered, KwOnly]


def _methods(cls: type) -> dict[str, tuple]:
    out = {}
    for name, fn in vars(cls).items():
        code = getattr(fn, "__code__", None)
        if code is not None and name.startswith("__"):
            out[name] = (code.co_code, code.co_consts, code.co_names, code.co_varnames, code.co_flags,
                         code.co_filename, fn.__annotations__)  # fmt: skip
    return out


def test_classes_are_those_the_builtin_exec_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = [_methods(c) for c in _classes()]
    cache = _CodeCache(tmp_path)
    monkeypatch.setattr(dataclasses, "exec", cache.exec, raising=False)
    first = [_methods(c) for c in _classes()]
    compiled = cache.compiled
    again = [_methods(c) for c in _classes()]  # every text now comes from the kept code objects
    assert compiled > 0 and cache.compiled == compiled
    assert plain == first == again  # a `__future__` flag of this module leaking in would change co_flags
    frozen, ordered, kw = _classes()
    assert repr(frozen(1)).endswith("Frozen(a=1, b='x', c=[])") and frozen(1) == frozen(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen(1).a = 2  # type: ignore[misc]
    assert ordered(1) < ordered(2) and kw(a=1, init=2).a == 3


F1 = "def f():\n  return 1\n"


def _run(cache: _CodeCache, text: str, module: str = "pkg.mod") -> dict:
    ns: dict = {"__name__": module}
    cache.exec(text, ns)
    return ns


def test_written_at_exit_and_read_back_by_module(tmp_path: Path) -> None:
    cache = _CodeCache(tmp_path)
    assert _run(cache, "def f():\n  return 41\n")["f"]() == 41
    _run(cache, F1, module="other")
    _run(cache, F1, module="<not a module name>")  # compiled as the builtin does, not kept
    cache.write()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.marshal", "pkg.mod.marshal"]
    assert oct(os.stat(tmp_path / "pkg.mod.marshal").st_mode & 0o777) == "0o600"
    again = _CodeCache(tmp_path)
    assert _run(again, "def f():\n  return 41\n")["f"]() == 41
    assert again.compiled == 0 and again.used == 1 and list(again.modules) == ["pkg.mod"]  # other: not read
    before = os.stat(tmp_path / "pkg.mod.marshal").st_mtime_ns
    again.write()  # nothing new: not rewritten
    assert os.stat(tmp_path / "pkg.mod.marshal").st_mtime_ns == before


@pytest.mark.parametrize("damage", ["garbage", "not text->code", "others may write"])
def test_a_file_not_to_trust_is_ignored_and_replaced(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "pkg.mod.marshal"
    if damage == "garbage":
        path.write_bytes(b"\x00not marshal")
    elif damage == "not text->code":
        path.write_bytes(marshal.dumps({F1: "print('x')"}))
    else:  # a planted code object that returns 2 for the text that returns 1
        path.write_bytes(marshal.dumps({F1: compile("def f():\n  return 2\n", "<s>", "exec")}))
        path.chmod(0o666)
    cache = _CodeCache(tmp_path)
    assert _run(cache, F1)["f"]() == 1 and cache.compiled == 1
    cache.write()
    assert marshal.loads(path.read_bytes()).keys() == {F1} and path.stat().st_mode & 0o777 == 0o600


def test_a_file_keeps_earlier_runs_until_it_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dataclass_code, "_MAX_ENTRIES", 3)
    expected = [{"a=1\n", "b=1\n"}, {"a=1\n", "b=1\n", "c=1\n"}, {"d=1\n"}]  # full: this run's alone
    for texts, kept in zip((["a=1\n", "b=1\n"], ["c=1\n"], ["d=1\n"]), expected):
        cache = _CodeCache(tmp_path)
        for t in texts:
            _run(cache, t)
        cache.write()
        assert set(marshal.loads((tmp_path / "pkg.mod.marshal").read_bytes())) == kept


def test_where_it_is_kept() -> None:
    tag = f"{sys.implementation.cache_tag}-{MAGIC_NUMBER.hex()}-O{sys.flags.optimize}"
    assert cache_folder({"AF_CODE_CACHE_DIR": "/x"}) == Path("/x") / tag
    assert cache_folder({"AF_CODE_CACHE_DIR": "off"}) is None
    assert cache_folder({"XDG_CACHE_HOME": "/c"}) == Path("/c/ascendfactory/dataclass-code") / tag


PROBE = """
import json, sys
from ascendfactory.cli.app import main
from ascendfactory.cli import _dataclass_code
rc = main(["train", "cfgs/quickstart.yaml", "--dry-run", "--format", "json"])
cache = _dataclass_code._installed
print(json.dumps({"rc": rc, "compiled": cache.compiled if cache else None,
                  "used": cache.used if cache else None}), file=sys.stderr)
"""


def _dry_run(env_dir: str) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AF_CODE_CACHE_DIR": env_dir}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(proc.stderr.strip().splitlines()[-1]), proc.stdout


def test_a_second_dry_run_compiles_no_dataclass_and_plans_the_same(tmp_path: Path) -> None:
    """The CLI installs the cache before its modules define dataclasses: the second run compiles none."""
    first, plan1 = _dry_run(str(tmp_path))
    second, plan2 = _dry_run(str(tmp_path))
    off, plan3 = _dry_run("off")
    assert first["rc"] == second["rc"] == 0 and first["compiled"] == first["used"] > 50
    assert second["compiled"] == 0 and second["used"] == first["used"]
    assert off["compiled"] is None and not list(Path(tmp_path).glob("*.tmp*"))
    assert json.loads(plan1) == json.loads(plan2) == json.loads(plan3)
