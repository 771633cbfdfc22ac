"""Compose Hydra overrides against a framework's own config directory, without importing the framework.

    <env>/bin/python hydra_compose.py --package=P --config-dir=D < request.json            one request
    <env>/bin/python hydra_compose.py --package=P --config-dir=D --serve < requests.jsonl  one a line
    ... --serve --whole                                                each by hydra.compose whole (tests)
    ... --serve --warm=NAME                      compose NAME (no override) before the first request

`--package`: the framework's package (`verl`); `--config-dir`: its config directory relative to the package
(`trainer/config` for verl). Request (JSON): `{"overrides": ["data.train_batch_size=32", "+a.b=1", ...],
"config_name": "ppo_trainer", "environ": {...}}`, the overrides exactly as the train step passes them to the
framework's Hydra entry point (`python -m verl.trainer.main_ppo`; `environ`, optional: the environment
`${oc.env:...}` reads, as the train step would see it). The config directory is found with
`importlib.util.find_spec(package)` (which does not run the package's `__init__`), then Hydra's
`initialize_config_dir` + `compose` build the config the entry point would get (about 0.5 s for verl's
`ppo_trainer`, against 6-20 s to import verl); interpolations are resolved, key by key where the whole
config does not resolve.

`--serve` (a bulk dry run keeps one such process for all its files) composes each request as
`hydra.compose` does, split where Hydra itself splits it (`ConfigLoaderImpl._load_configuration_impl`,
hydra 1.3): the defaults list and the merged config files depend only on the config-group overrides, so
`hydra.compose(config_name, <the group overrides>)` is run once per distinct set of them and kept; each
request's value overrides are then applied to a copy of it by the function Hydra applies them with
(`ConfigLoaderImpl._apply_overrides_to_config`, in struct mode, an OmegaConf error wrapped as
`load_configuration` wraps it), and the `hydra` node is dropped as `hydra.compose` drops it. A request
with a `hydra.*` or sweep override, or one whose split Hydra refuses, is composed by `hydra.compose`
whole. tests/integration/test_verl_compose_cache.py holds the two equal on every verl template and on
generated variations.

Every problem is reported, not only the first Hydra raises: an override Hydra refuses (`Could not
override 'k'`, `Could not append to config. An item is already at 'k'`, a syntax error) is set aside and
the rest composed again; every key whose `${...}` cannot be resolved is named.

Prints one JSON line on stdout per request: `{"ok", "problems": [{"key", "override", "kind", "message"}],
"config", "compose_s", "framework_imported", "split"}` (`config`: the composed config, resolved where it
could be; `framework_imported`: whether the package got imported, which it must not; `split`: whether the
last composition was the split one).
Exit 0 when it composed cleanly, 1 with problems, 2 when the package or Hydra is missing (`--serve`: 0 at
the end of its input, 2 as the only answer when the package or Hydra is missing). Imports nothing from
ascendfactory (it runs in the framework's environment).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time

_KEY_IN_MESSAGE = (
    re.compile(r"Could not override '([^']+)'"),
    re.compile(r"Could not append to config\. An item is already at '([^']+)'"),
    re.compile(r"Could not delete from config\. '([^']+)'"),
    re.compile(r"full_key: (\S+)"),
)


def first_lines(text: str, n: int = 4) -> str:
    return "\n".join(line for line in text.strip().splitlines()[:n])


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def failing_override(message: str, overrides: list[str]) -> str | None:
    for pattern in _KEY_IN_MESSAGE:
        m = pattern.search(message)
        if m:
            key = m.group(1)
            for o in overrides:
                if override_key(o) == key:
                    return o
            for o in overrides:  # a key under an override's dict value
                if key.startswith(override_key(o) + "."):
                    return o
    for o in overrides:  # a syntax error quotes the override itself
        if o in message:
            return o
    return None


def kind_of(message: str) -> str:
    if "Could not append" in message:
        return "append_exists"
    if "Could not override" in message or "not in struct" in message:
        return "unknown_key"
    if "Error parsing override" in message or "mismatched input" in message or "no viable" in message:
        return "syntax"
    return "other"


def leaves(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, node


class Composer:
    """`hydra.compose`, or (`cached`) the same split where Hydra splits it: see the module's docstring."""

    def __init__(self, cached: bool) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.cached = cached
        self.parser = OverridesParser.create()
        self.parsed: dict = {}  # override text -> Hydra's parse of it (a pure function of the text)
        self.bases: dict = {}  # (config name, group overrides) -> hydra.compose of those alone, pickled
        self.repos: dict = {}  # config name -> the config repository Hydra composes it from
        self.split = False  # whether the last call was composed split (else by hydra.compose whole)
        if cached:
            remember_interpolation_parses()

    def parse(self, override: str):  # noqa: ANN201 - Hydra's Override
        """Hydra's parse of one override (`OverridesParser.parse_overrides` parses each on its own)."""
        if override not in self.parsed:
            self.parsed[override] = self.parser.parse_overrides([override])[0]
        return self.parsed[override]

    def __call__(self, config_name: str, overrides: list):  # noqa: ANN204 - an OmegaConf DictConfig
        import pickle

        from hydra import compose
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.errors import ConfigCompositionException
        from omegaconf import open_dict
        from omegaconf.errors import OmegaConfBaseException

        split = self._split(config_name, overrides) if self.cached else None
        self.split = split is not None
        if split is None:
            return compose(config_name, overrides=overrides)
        base, values = split
        cfg = pickle.loads(base)  # a copy (OmegaConf configs pickle with their flags), faster than deepcopy
        try:
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        except OmegaConfBaseException as e:  # as ConfigLoaderImpl.load_configuration wraps it
            raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from e
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg

    def _split(self, config_name: str, overrides: list):  # noqa: ANN202
        """(the composed config of the group overrides, hydra node kept, pickled; the value overrides), or
        None where `hydra.compose` must compose the whole request itself."""
        import pickle

        from hydra import compose
        from hydra.core.global_hydra import GlobalHydra

        try:
            parsed = [self.parse(o) for o in overrides]
            if any(
                o.is_sweep_override() or o.is_hydra_override() or o.key_or_group == "hydra" for o in parsed
            ):
                return None
            if config_name not in self.repos:  # the repository with the primary config's search path
                loader = GlobalHydra.instance().config_loader()
                self.repos[config_name] = loader._parse_overrides_and_create_caching_repo(config_name, [])[1]
            repo = self.repos[config_name]
            groups: list = []
            values: list = []
            for o in parsed:  # the test of hydra._internal.defaults_list.Overrides.__init__
                is_value = isinstance(o.value(), dict) or not repo.group_exists(o.key_or_group)
                (values if is_value else groups).append(o)
            key = (config_name, tuple(o.input_line for o in groups))
            if key not in self.bases:
                base = compose(config_name, overrides=list(key[1]), return_hydra_config=True)
                self.bases[key] = pickle.dumps(base)
            return self.bases[key], values
        except Exception:  # noqa: BLE001 - hydra.compose of the whole request raises it as Hydra would
            return None


def remember_interpolation_parses() -> None:
    """OmegaConf parses each `${...}` text again at each resolution (`omegaconf.base` calls
    `grammar_parser.parse`, a function of the text alone whose tree the resolver only reads): keep each
    parse, since every request resolves the same texts of verl's config."""
    import omegaconf.base
    from omegaconf import grammar_parser

    parse = grammar_parser.parse
    kept: dict = {}

    def remembered(value, parser_rule="configValue", lexer_mode="DEFAULT_MODE"):  # noqa: ANN001, ANN202
        key = (value, parser_rule, lexer_mode)
        if key not in kept:
            kept[key] = parse(value, parser_rule, lexer_mode)  # a text that fails to parse is not kept
        return kept[key]

    omegaconf.base.parse = remembered


def answer(request: dict, composer: Composer, package: str) -> tuple[dict, int]:
    """The answer to one request and the exit status it stands for."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    t0 = time.perf_counter()
    config_name = request.get("config_name")
    if not config_name:
        return {"ok": False, "error": "the request names no config_name"}, 2
    overrides = list(request.get("overrides") or [])
    problems = []
    remaining = []
    for o in overrides:  # Hydra parses all before composing and stops at the first bad one: one by one
        try:
            composer.parse(o)
            remaining.append(o)
        except HydraException as e:
            problems.append(
                {"key": override_key(o), "override": o, "kind": "syntax", "message": first_lines(str(e))}
            )
    cfg = None
    for _ in range(len(overrides) + 1):
        try:
            cfg = composer(config_name, remaining)
            break
        except (HydraException, OmegaConfBaseException, ValueError) as e:
            message = str(e) + ("\n" + str(e.__cause__) if e.__cause__ else "")
            bad = failing_override(message, remaining)
            problems.append(
                {
                    "key": override_key(bad) if bad else None,
                    "override": bad,
                    "kind": kind_of(message),
                    "message": first_lines(message),
                }
            )
            if bad is None:
                break
            remaining.remove(bad)
    if cfg is None:
        imported = package in sys.modules
        failed = {"ok": False, "problems": problems, "config": None, "framework_imported": imported}
        return {**failed, "split": composer.split}, 1
    try:  # every interpolation resolves: none to name
        config = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:  # name each that does not, keep its unresolved text
        raw = OmegaConf.to_container(cfg, resolve=False)
        for key, value in leaves(raw):
            if isinstance(value, str) and "${" in value and "[" not in key:
                try:
                    OmegaConf.select(cfg, key, throw_on_missing=False)
                except OmegaConfBaseException as e:
                    problems.append(
                        {
                            "key": key,
                            "override": None,
                            "kind": "interpolation",
                            "message": first_lines(str(e)),
                        }
                    )
        config = raw
        for key, value in leaves(raw):
            if isinstance(value, str) and "${" in value and "[" not in key:
                try:
                    resolved = OmegaConf.select(cfg, key)
                except OmegaConfBaseException:
                    continue
                node = config
                *parents, last = key.split(".")
                for p in parents:
                    node = node[p]
                node[last] = OmegaConf.to_container(resolved) if OmegaConf.is_config(resolved) else resolved
    result = {
        "ok": not problems,
        "problems": problems,
        "config": config,
        "compose_s": round(time.perf_counter() - t0, 3),
        "framework_imported": package in sys.modules,
        "split": composer.split,
    }
    return result, 0 if not problems else 1


def option(argv: list, name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), None)


def main(argv: list) -> int:
    serve = "--serve" in argv
    warm = option(argv, "warm")
    package = option(argv, "package")
    relative = option(argv, "config-dir")
    if not package or not relative:
        print(json.dumps({"ok": False, "error": "--package and --config-dir are required"}), flush=True)
        return 2
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        missing = f"{package} is not installed in this environment"
        print(json.dumps({"ok": False, "error": missing}), flush=True)
        return 2
    try:
        from hydra import initialize_config_dir
    except ImportError as e:
        print(json.dumps({"ok": False, "error": f"Hydra/OmegaConf missing: {e}"}), flush=True)
        return 2
    config_dir = os.path.join(spec.submodule_search_locations[0], *relative.split("/"))
    status = 0
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        composer = Composer(cached=serve and "--whole" not in argv)
        if serve and warm:  # compose (and resolve) the config tree before the first request comes
            try:
                answer({"config_name": warm, "overrides": []}, composer, package)
            except Exception:  # noqa: BLE001 - a request composing the same will say what fails
                pass
        requests = (
            (json.loads(line) for line in sys.stdin if line.strip()) if serve else [json.load(sys.stdin)]
        )
        for request in requests:
            if request.get("environ") is not None:  # what ${oc.env:...} reads
                os.environ.clear()
                os.environ.update(request["environ"])
            result, status = answer(request, composer, package)
            print(json.dumps(result, default=str), flush=True)
    return 0 if serve else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
