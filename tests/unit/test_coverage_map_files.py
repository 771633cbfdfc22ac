"""The coverage maps (tests/diffval/maps/): every statement of every pin mapped by hand to a rule of ours with
a targeted case, a "stricter or equal" row or a device reason, with rule ids that resolve; and the walk and
merge that generate them (scripts/gen_validation_map.py), on a small package written here. Runs without the
frameworks: their own judges run the cases in tests/integration/test_coverage_maps.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.diffval.backends import ADAPTERS
from tests.diffval.cases import Case
from tests.diffval.coverage import (
    KINDS,
    Coverage,
    Run,
    dump_map,
    entry_problems,
    load_map,
    merge,
    mutations,
    resolve_rule,
)
from tests.diffval.ours import Ours
from tests.diffval.pins import DRAFTS, MAPS, PINS, map_path
from tests.diffval.propose import KeyKind, candidates, finder
from tests.diffval.walk import Walker

MAP_FILES = sorted(MAPS.glob("*.yaml"))
DRAFT_FILES = sorted((MAPS / "drafts").glob("*.yaml"))


def test_every_pin_has_a_checked_in_map() -> None:
    assert {p.stem for p in MAP_FILES} == set(PINS)
    assert {p.stem for p in DRAFT_FILES} == set(DRAFTS) and not set(PINS) & set(DRAFTS)
    assert map_path("verl-0.9.1") == MAPS / "verl-0.9.1.yaml"
    assert map_path("mindspeed-llm-2.1.0") == MAPS / "mindspeed-llm-2.1.0.yaml"
    assert map_path("mindspeed-mm-2.1.0") == MAPS / "mindspeed-mm-2.1.0.yaml"


@pytest.mark.parametrize("path", DRAFT_FILES, ids=[p.stem for p in DRAFT_FILES])
def test_a_draft_map_holds_its_mapped_rows_to_the_same_checks(path: Path) -> None:
    """A draft pin's statements are generated and checked in; the rows mapped so far are complete."""
    doc = load_map(path)
    assert doc["pin"] == path.stem and doc["statements"]
    assert dump_map(doc) == path.read_text(encoding="utf-8")
    ids = [st["id"] for st in doc["statements"]]
    assert len(ids) == len(set(ids))
    problems = [
        f"{st['id']} ({st['file']}:{st['line']}): {p}"
        for st in doc["statements"]
        if st.get("map")
        for p in entry_problems(st)
    ]
    assert not problems, "\n".join(problems)


def test_the_proposer_tries_the_keys_a_condition_reads_with_its_constants() -> None:
    table = {"seq-length": KeyKind("seq-length", "int"), "use-flash-attn": KeyKind("use-flash-attn", "flag")}

    def find(owner: str, chain: list[str]) -> KeyKind | None:
        return table.get(chain[-1].replace("_", "-")) if owner == "args" else None

    got = candidates("args.seq_length > 4096 and (not args.use_flash_attn) and other.seq_length", find)
    singles = [c for c in got if len(c) == 1]
    assert {"seq-length": 4096} in singles and {"seq-length": 4097} in singles
    assert {"use-flash-attn": True} in singles and {"use-flash-attn": "<deleted>"} in singles
    assert {"seq-length": 4097, "use-flash-attn": "<deleted>"} in got  # pairs of the keys it reads
    assert all(set(c) <= {"seq-length", "use-flash-attn"} for c in got)
    assert candidates("self.hidden_size > 0", find) == []  # no key of ours: nothing to try


def test_the_proposer_reads_each_mindspeed_llm_version_s_own_flags() -> None:
    """The key finder of a versioned judge (mindspeed-llm@26.1.0) reads that version's flag list: a flag
    26.1.0 added is found there and not in 2.1.0's."""
    from tests.diffval.propose import finder

    at_26 = finder("mindspeed-llm@26.1.0")("args", ["moe_permute_fusion"])
    assert at_26 is not None and at_26.key == "moe-permute-fusion" and at_26.kind == "flag"
    assert finder("mindspeed-llm")("args", ["moe_permute_fusion"]) is None
    assert finder("mindspeed-llm")("args", ["seq_length"]).kind == "int"  # type: ignore[union-attr]


def test_the_mindspeed_mm_finder_reads_flags_and_the_merged_json_configs() -> None:
    """MindSpeed-MM's conditions read pretrain_vlm.py's flags and `args.mm.model.*` (model.json, merged by
    merge_mm_args): the proposer turns them into backend_config.training / .model keys."""
    find = finder("mindspeed-mm")
    assert find("args", ["use_fused_swiglu"]) == KeyKind("training.use-fused-swiglu", "flag")
    algo = find("args", ["context_parallel_algo"])
    assert algo is not None and algo.key == "training.context-parallel-algo"
    assert "ulysses_cp_algo" in algo.choices
    assert find("args", ["mm", "model", "text_decoder", "num_layers"]) == KeyKind(
        "model.text_decoder.num_layers", "int"
    )
    assert find("args", ["mm", "model", "predictor", "mm_double_blocks_depth"]).kind == "int"  # type: ignore[union-attr]
    assert find("args", ["no_such_flag"]) is None and find("other", ["seq_length"]) is None
    assert find("args", ["mm_data"]) is None  # the plan's own flag (--mm-data): never a case key
    got = candidates("args.mm.model.text_decoder.num_layers > 3 and args.tp_2d", find)
    assert {"model.text_decoder.num_layers": 4} in got and {"training.tp-2d": True} in got


def test_the_mindspeed_mm_carry_puts_json_keys_where_the_merge_puts_them() -> None:
    """A case's backend_config.model key reaches the judge in model.json over the example's values; deleted,
    the example's value is back (what the plan's deep merge writes)."""
    adapter = ADAPTERS["mindspeed-mm"]
    payload = {
        "argv": ["pretrain_vlm.py", "--seq-length", "1024"],
        "nproc_per_node": 8,
        "nnodes": 1,
        "world_size": 8,
        "env": {},
        "json": {"mm-model": {"text_decoder": {"num_layers": 3, "hidden_size": 64}}, "mm-data": {}},
    }
    out = adapter.carry(
        payload,
        mutations(
            "mindspeed-mm",
            {
                "model.text_decoder.num_layers": "<deleted>",
                "model.predictor.mm_double_blocks_depth": 0,
                "training.seq-length": 2048,
            },
        ),
    )
    model = out["json"]["mm-model"]
    assert model["text_decoder"] == {"num_layers": 28, "hidden_size": 64}  # Qwen2.5-VL-7B's example: 28
    assert model["predictor"] == {"mm_double_blocks_depth": 0}
    assert out["argv"][out["argv"].index("--seq-length") + 1] == "2048"
    assert payload["json"]["mm-model"]["text_decoder"]["num_layers"] == 3  # the base payload is untouched


@pytest.mark.parametrize("path", MAP_FILES, ids=[p.stem for p in MAP_FILES])
def test_every_statement_is_mapped(path: Path) -> None:
    doc = load_map(path)
    assert doc["pin"] == path.stem and doc["statements"]
    ids = [st["id"] for st in doc["statements"]]
    assert len(ids) == len(set(ids))
    problems = [
        f"{st['id']} ({st['file']}:{st['line']}): {p}" for st in doc["statements"] for p in entry_problems(st)
    ]
    assert not problems, "\n".join(problems)
    assert {st["map"]["kind"] for st in doc["statements"]} <= set(KINDS)


@pytest.mark.parametrize("path", MAP_FILES, ids=[p.stem for p in MAP_FILES])
def test_a_map_file_is_what_the_generator_writes(path: Path) -> None:
    """The checked-in text is the generator's own dump (so a regeneration changes only what changed)."""
    assert dump_map(load_map(path)) == path.read_text(encoding="utf-8")


def test_an_unmapped_or_broken_row_is_named() -> None:
    row = {"id": "f:1", "map": None}
    assert entry_problems(row) == ["no map"]
    assert entry_problems({"map": {"kind": "rule", "rule": "llamafactory.combos:COMBOS[no_such_key]"}}) == [
        "map.case is missing",
        "map.fix is missing",
        "llamafactory.combos:COMBOS[no_such_key]: no entry 'no_such_key' in COMBOS",
    ]
    assert entry_problems({"map": {"kind": "device", "why": "x"}}) == ["map.stops is missing"]
    assert entry_problems({"map": {"kind": "equal", "why": "x", "cases": {}}}) == [
        "map.cases is not a field of a map"
    ]
    assert resolve_rule("verl.rules:RULES[batch_divisible]").name == "batch_divisible"
    with pytest.raises(LookupError):
        resolve_rule("verl.rules:check_nothing")


def test_a_case_key_is_below_the_backend_section_or_from_the_root() -> None:
    case = {"data.train_batch_size": 3, "/env.NPUS_PER_NODE": 2, "trainer.nnodes": "<deleted>"}
    got = mutations("verl", case)
    assert [m.path for m in got] == [
        ("backend_config", "data", "train_batch_size"),
        ("env", "NPUS_PER_NODE"),
        ("backend_config", "trainer", "nnodes"),
    ]
    assert got[2].value == "<deleted>"
    assert mutations("llamafactory", {"dataset": "${DEMO_DATA}"})[0].value.endswith("demo_sft.jsonl")


SOURCE = {
    "fw/__init__.py": "",
    "fw/checks.py": """
        from fw.helpers import must, other
        from elsewhere import ignored


        class Base:
            def __post_init__(self):
                if self.size < 0:
                    raise ValueError("size is negative")


        class Config(Base):
            def __post_init__(self):
                super().__post_init__()
                assert self.mode in ("a", "b"), "unknown mode"
                self._more()

            def _more(self):
                for item in self.items:
                    if not item:
                        raise ValueError(f"empty item {item}")


        def validate(args):
            if args.x and not args.y:
                raise ValueError("x needs y")
            elif args.z:
                must(args.z, "z is set")
            else:
                other(args)
            ignored(args)
            Config()

            def inner():
                assert args.w, "w"

            inner()
            if args.bye:
                sys.exit(1)
    """,
    "fw/helpers.py": """
        def must(value, message):
            if not value:
                raise ValueError(message)


        def other(args):
            assert args.q > 0
    """,
}


def _package(root: Path, shift: int = 0) -> None:
    for rel, text in SOURCE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n" * shift + textwrap.dedent(text), encoding="utf-8")


def _walk(root: Path) -> dict[str, object]:
    walker = Walker([root], ("fw",), helpers=("must",))
    walker.entry("fw.checks:validate")
    return {f"{s.function}|{s.kind}|{s.condition}|{s.message}": s for s in walker.result()}


def test_the_walk_lists_each_check_with_its_condition(tmp_path: Path) -> None:
    _package(tmp_path)
    found = _walk(tmp_path)
    assert set(found) == {
        "validate|raise|args.x and (not args.y)|ValueError('x needs y')",
        "validate|call|not (args.x and (not args.y)) and args.z|must(args.z, 'z is set')",
        "validate|exit|args.bye|sys.exit(1)",
        "validate.inner|assert|not (args.w)|'w'",
        "other|assert|not (args.q > 0)|",
        "Config.__post_init__|assert|not (self.mode in ('a', 'b'))|'unknown mode'",
        "Base.__post_init__|raise|self.size < 0|ValueError('size is negative')",
        "Config._more|raise|[for item in self.items] and not item|ValueError(f'empty item {item}')",
    }
    other = next(s for s in found.values() if s.function == "other")
    assert other.file == "fw/helpers.py" and other.via == ["fw.checks:validate"]
    base = next(s for s in found.values() if s.function == "Base.__post_init__")
    assert base.via == ["fw.checks:Config.__post_init__"]


def test_an_id_survives_moved_lines_and_changes_with_the_condition(tmp_path: Path) -> None:
    _package(tmp_path / "a")
    _package(tmp_path / "b", shift=5)
    a, b = _walk(tmp_path / "a"), _walk(tmp_path / "b")
    assert {k: s.id for k, s in a.items()} == {k: s.id for k, s in b.items()}
    assert all(a[k].line + 5 == b[k].line for k in a)
    SOURCE_CHANGED = dict(SOURCE)
    SOURCE_CHANGED["fw/helpers.py"] = SOURCE["fw/helpers.py"].replace("args.q > 0", "args.q >= 0")
    _write(tmp_path / "c", SOURCE_CHANGED)
    c = _walk(tmp_path / "c")
    old = next(s.id for s in a.values() if s.function == "other")
    new = next(s.id for s in c.values() if s.function == "other")
    assert old != new and old.startswith("other:") and new.startswith("other:")


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_a_regeneration_keeps_the_hand_kept_maps_and_drops_gone_statements(tmp_path: Path) -> None:
    _package(tmp_path)
    walker = Walker([tmp_path], ("fw",), helpers=("must",))
    walker.entry("fw.checks:validate")
    statements = walker.result()

    class Pin:
        name, backend, title = "fw-1", "verl", "fw 1"

        @staticmethod
        def versions(roots: list[Path]) -> dict[str, str]:
            return {"fw": "1"}

        @staticmethod
        def entries(roots: list[Path]) -> list[str]:
            return ["fw.checks:validate"]

    kept = {"kind": "equal", "why": "kept"}
    old = {"statements": [{"id": statements[0].id, "map": kept}, {"id": "gone:123456", "map": kept}]}
    doc, notes = merge(Pin, [tmp_path], statements, {}, old, None)
    assert doc["statements"][0]["id"] != "" and any(s.get("map") == kept for s in doc["statements"])
    assert sum(1 for s in doc["statements"] if s.get("map")) == 1
    assert notes == ["gone (its map dropped): gone:123456"]
    assert load_map_text(dump_map(doc), tmp_path) == doc


def load_map_text(text: str, tmp_path: Path) -> dict[str, object]:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    return load_map(path)


def _run(variant: str, ok: bool | None, ours: Ours, at: list[str]) -> Run:
    return Run("p", "f:1", variant, "b", Case("c", "b", {}, []), ours, None, ok, None if ok else "no", at)


def test_the_coverage_figures_count_what_the_issue_counts() -> None:
    st = {"id": "f:1", "file": "pkg/m.py", "line": 10, "end": 12, "map": {"kind": "rule", "fix": {"k": 1}}}
    refused = Ours(False, ["backend_config.k"], ["backend_config.k: bad"], ["set k"])
    cov = Coverage("p", "verl", [st])
    cov.runs = [
        _run("case", False, Ours(True), ["/x/pkg/m.py:11"]),  # we accept, the framework refuses (there)
        _run("case", False, refused, ["/x/pkg/m.py:40"]),  # refused elsewhere: the case misses
        _run("fix", False, refused, []),
    ]
    assert len(cov.we_accept_they_refuse) == 1 and len(cov.missed) == 1 and len(cov.fixes_refused) == 1
    assert len(cov.fixes_we_refuse) == 1 and cov.failed()
    cov.runs = [_run("case", None, refused, [])]
    assert cov.undemonstrated == ["f:1"]
