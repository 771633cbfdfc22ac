"""Malformed experiments for the fuzz test and `benchmarks/fuzz_configs.py`: generation and one verdict.

A case starts from a file `config` writes (every backend and experiment) or a shipped one, then applies
one to three mutations (a value replaced by something odd, a key deleted, an unknown or integer key added,
a section made a scalar), optionally corrupts the YAML text byte-wise, and adds command-line overrides.
`train <file> --dry-run` then runs in-process; the verdict says whether it ended the way a user should see
it: exit 0, or exit 2 with a `ConfigError` whose problems name a key the case touched; never an escaped
exception, an "internal error", another exit code, or more than `HANG_S` seconds.
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from hypothesis import strategies as st

from ascendfactory.backends.registry import all_backends
from ascendfactory.cli import _errors as cli_errors
from ascendfactory.cli._errors import format_error
from ascendfactory.cli.app import main
from ascendfactory.config.oldstyle import FLAT_KEY_MAP
from ascendfactory.config.yamlio import loads
from ascendfactory.errors import ConfigError, Problem, printable
from ascendfactory.features.templates import offered_models, render_experiment

REPO = Path(__file__).resolve().parents[3]
HANG_S = 5.0

ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "a\nb",
        "x; rm -rf /tmp/af-fuzz-canary",
        "$(touch /tmp/af-fuzz-canary)",
        "`id`",
        "'\"",
        "${env:AF_FUZZ_UNSET}",
        "${nowhere.at.all}",
        "${backend_config}",
        "~",
        "/",
        "..",
        "-1",
        "1e400",
        "NaN",
        "日本語",
        "\u202e",
        "a" * 300,
    ]
) | st.text(max_size=12)
ODD_SCALAR = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, -1, 1, 2, 3, 7, 999_999_937, 2**31, float("inf"), float("-inf"), float("nan")]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    ODD_TEXT,
)
ODD_VALUE = st.recursive(
    ODD_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
# A new key: any text but YAML's own line breaks (NEL, LS, PS), which YAML folds when it reads the key back,
# so the key the message names could not be the key the case wrote.
KEY_TEXT = st.text(st.characters(blacklist_characters="\x85\u2028\u2029\r\n"), min_size=1, max_size=8)
OVERRIDE_TEXT = ODD_TEXT | st.sampled_from(
    [
        "true",
        "false",
        "null",
        ".inf",
        "[1, 2",
        "{a: b}",
        "[a, {b: c}]",
        "1e-5",
        "0x10",
        "&a [*a]",
        "!!python/name:os.system",
    ]
)


@dataclass
class Case:
    base: str
    text: str  # the experiment file's content (possibly not valid YAML / UTF-8 once corrupted)
    raw: bytes | None = None  # set when the text was corrupted byte-wise
    overrides: list[str] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)  # dotted keys the case changed
    args: list[str] = field(default_factory=list)  # positionals after the file (old-style model / exp)


@dataclass
class Verdict:
    kind: str  # ok | rejected | traceback | hang | unexpected_exit | unnamed
    code: int | None
    seconds: float
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in ("traceback", "hang", "unexpected_exit", "unnamed")


def bases() -> list[tuple[str, str, list[str]]]:
    """(name, yaml text, extra positionals): each backend's experiments for one offered model, and the
    shipped configs."""
    out = []
    for backend in all_backends():
        model = (
            "tiny-demo" if "tiny-demo" in offered_models(backend.name) else offered_models(backend.name)[0]
        )
        for exp in backend.experiments():
            text = render_experiment(
                backend=backend.name, model_name=model, exp_name=exp, output_file="x.yaml"
            )
            out.append((f"{backend.name}/{exp}", text, []))
    for path in sorted((REPO / "cfgs").glob("quickstart*.yaml")):
        out.append((path.name, path.read_text(), []))
    out.append(
        (
            "multi_model_cfgs.yaml",
            (REPO / "cfgs" / "multi_model_cfgs.yaml").read_text(),
            ["qwen2.5-7b", "full-4k"],
        )
    )
    return out


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    for k, v in items:
        found.append((*prefix, k))
        found += _paths(v, (*prefix, k))
    return found


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(map(str, path))


def _parent(tree: Any, path: tuple[Any, ...]) -> Any:
    node = tree
    for part in path[:-1]:
        node = node[part]
    return node


@st.composite
def cases(draw: st.DrawFn, base_list: list[tuple[str, str, list[str]]]) -> Case:
    name, text, args = base_list[draw(st.integers(0, len(base_list) - 1))]
    tree = loads(text)
    touched: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(tree)
        if not paths:
            break
        where = draw(st.sampled_from(paths))
        parent, key, path = _parent(tree, where), where[-1], _dotted(where)
        action = draw(st.sampled_from(["set", "set", "set", "delete", "add", "intkey", "scalar"]))
        if action == "set" or (action == "scalar" and not isinstance(parent[key], dict)):
            parent[key] = draw(ODD_VALUE)
        elif action == "scalar":
            parent[key] = draw(ODD_SCALAR)
        elif action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            new = draw(KEY_TEXT.filter(lambda k: k not in parent))
            parent[new] = draw(ODD_VALUE)
            path = _dotted((*where[:-1], new))
        elif action == "intkey" and isinstance(parent, dict):
            number = draw(st.integers(-5, 5))
            parent[number] = 1
            path = _dotted((*where[:-1], number))
        touched.append(path)
    dumped = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)
    case = Case(base=name, text=dumped, touched=touched, args=args)
    if draw(st.integers(0, 9)) == 0:  # byte-level corruption
        data = bytearray(dumped.encode("utf-8"))
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, max(len(data) - 1, 0)))
            data[pos : pos + draw(st.integers(0, 2))] = draw(
                st.sampled_from([b"\x00", b"\xff", b"\t", b":", b"- ", b"&a *a", b"\n  ", b"{", b"'"])
            )
        case.raw = bytes(data)
    paths = [_dotted(p) for p in _paths(tree)] or ["exp_name"]
    for _ in range(draw(st.integers(0, 2))):
        key = draw(
            st.sampled_from(paths)
            | st.sampled_from(
                ["env.NPUS_PER_NODE", "env.MASTER_PORT", "backend_config.training.x", "a..b", ""]
            )
        )
        value = draw(OVERRIDE_TEXT)
        case.overrides.append(f"--{key}={value}")
        case.touched.append(key)
    return case


class _Hang(Exception):
    pass


def run_case(case: Case, workdir: Path) -> Verdict:
    """Write the case, run `train --dry-run` in-process with a timer, and judge what the user saw: the exit
    code and output, and the keys of the `ConfigError` the CLI rendered (recorded at its error boundary)."""
    path = workdir / "exp.yaml"
    if case.raw is not None:
        path.write_bytes(case.raw)
    else:
        path.write_text(case.text, encoding="utf-8")
    argv = ["train", str(path), *case.args, *case.overrides, "--dry-run"]
    out, err = io.StringIO(), io.StringIO()
    rendered: list[BaseException] = []

    def record(e: BaseException) -> str:
        rendered.append(e)
        return format_error(e)

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    t0 = time.perf_counter()
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            mock.patch.object(cli_errors, "format_error", record),
        ):
            code: int | None = main(argv)
    except _Hang:
        return Verdict("hang", None, time.perf_counter() - t0, err.getvalue()[-500:])
    except BaseException as e:  # noqa: BLE001 - anything escaping main is the defect we look for
        return Verdict("traceback", None, time.perf_counter() - t0, f"{type(e).__name__}: {e}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - t0
    text = err.getvalue()
    if "internal error" in text or "Traceback" in text + out.getvalue():
        return Verdict("traceback", code, seconds, text[-800:])
    if code == 0:
        return Verdict("ok", code, seconds)
    if code != 2:
        return Verdict("unexpected_exit", code, seconds, text[-800:])
    problems = [p for e in rendered if isinstance(e, ConfigError) for p in e.problems]
    if _named(case, problems):
        return Verdict("rejected", code, seconds)
    return Verdict("unnamed", code, seconds, text[-800:])


_YAML_POSITION = re.compile(r"line \d+, column \d+")  # the key of a YAML syntax error


def _named(case: Case, problems: list[Problem]) -> bool:
    """The refusal names what the case changed: its position in a file the case corrupted (or in text the YAML
    dumper wrote and its loader refuses, such as a lone surrogate in a key), any key of an old-style file
    whose whole base changed, else a key the case touched."""
    if not problems:
        return False  # exit 2 without a ConfigError: nothing named
    if case.raw is not None or "base" in case.touched:
        return True
    if any(_YAML_POSITION.fullmatch(p.key) and p.message.startswith("not valid YAML") for p in problems):
        return True
    return names_a_touched_key(problems, _merged_names(case))


def _merged_names(case: Case) -> list[str]:
    """An old-style file merges base, the model block and the experiment into one experiment, whose keys
    the messages name: `base.af_output_dir` is `af_output_dir`, `qwen2.5-7b.full-4k.SEQ_LEN` is `SEQ_LEN`,
    and a flat key the loader moves (config/oldstyle.py FLAT_KEY_MAP) is also where it goes."""
    if case.base != "multi_model_cfgs.yaml":
        return case.touched
    names = list(case.touched)
    for key in case.touched:
        parts = key.split(".")
        names += [".".join(parts[i:]) for i in range(1, len(parts)) if not parts[i].isdigit()]
        names += FLAT_KEY_MAP.get(parts[-1], ())  # `base.NPUS_PER_NODE` is `env.NPUS_PER_NODE`
    return names


def names_a_touched_key(problems: list[Problem], touched: list[str]) -> bool:
    """Some problem names a key the case changed: by its key (or the key as the file wrote it, `old (key)`),
    or a key inside it (a changed `backend`: any key of backend_config); by a parent it goes into whole (a
    list item by its list, a value inside a mapping the framework reads whole, any part of a command-line
    override); or, where another key's problem is about it, in its message: as it is, in the framework's
    own spelling (`--flag`, a key under backend_config) or, for a deleted entry, by its parts where it is
    used (`model 'qwen2.5-7b' has no experiment 'full-4k'`)."""
    return any(_names(p, printable(key)) for key in touched for p in problems)


def _names(p: Problem, key: str) -> bool:
    if not key.strip("."):
        return p.source == "command line"  # an empty override key: named by where it came from
    if key == "backend" and p.key.startswith("backend_config."):
        return True  # another backend: the keys it reads (or misses) in backend_config
    plain = ".".join(part.lstrip("+") for part in key.split("."))  # Hydra's `+key`
    for named in _keys_of(p):
        if named in (key, plain) or named.startswith(key + "."):
            return True
        if plain.startswith(named + ".") and (
            p.source == "command line" or named.count(".") >= 2 or _only_items(plain[len(named) + 1 :])
        ):
            return True
    return _in_message(printable(p.message) + " " + printable(p.fix), key)


def _keys_of(p: Problem) -> list[str]:
    """The key a problem names, and the key as an old-style file wrote it (`base.x-y (x_y)`)."""
    written = re.fullmatch(r"(.+) \((.+)\)", p.key)
    return [printable(k) for k in (written.groups() if written else (p.key,))]


def _only_items(rest: str) -> bool:
    return all(part.isdigit() for part in rest.split("."))


def _in_message(message: str, key: str) -> bool:
    if re.search(rf"(?<![\w.-]){re.escape(key)}(?![\w-])", message):
        return True
    flag = key.removeprefix("backend_config.training.")  # a Megatron flag, as its program spells it
    if flag != key and "." not in flag and re.search(rf"--{re.escape(flag)}(?![\w-])", message):
        return True
    inner = key.removeprefix("backend_config.")  # the framework's own spelling, or a key in it
    if inner != key and re.search(rf"(?<![\w.-]){re.escape(inner)}(?![\w-])", message):
        return True
    quoted = re.findall(r"'([^'\n]*)'", message)  # a deleted entry, named where it is used
    return any(key == f"{a}.{b}" for a, b in zip(quoted, quoted[1:]))
