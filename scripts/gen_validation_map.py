"""Write the coverage maps: every check a framework's validation code makes before any device, per framework
and pin, into tests/diffval/maps/<pin>.yaml.

    python scripts/gen_validation_map.py [PIN ...] [--check] [--seed-from PIN]
    python scripts/gen_validation_map.py PIN --propose [--only FILE] [--limit N] [--cap N]

PIN is a name of tests/diffval/pins.py (llamafactory-0.9.5, verl-0.9.1, mindspeed-llm-2.1.0,
mindspeed-rl-2.3.0, mindspeed-mm-2.1.0, ...; a draft pin's map is written under maps/drafts/); without one,
every pin whose sources are on this machine
(the framework environments of `install.sh llamafactory verl`; the Megatron-family checkouts named by
AF_MINDSPEED_LLM_DIR, AF_MINDSPEED_DIR, AF_MINDSPEED_RL_DIR, AF_MINDSPEED_MM_DIR,
AF_MINDSPEED_MM_MINDSPEED_DIR).

The walk (`tests/diffval/walk.py`) reads the sources with `ast` from the entry points the pin names and
lists each `raise`, `assert` and exit with its condition, message, file and line. Each statement's `map`
is kept by hand (tests/diffval/coverage.py says what it holds) and survives a regeneration: it is kept by
the statement's id, which changes only when the statement's condition or message does. A statement that is
new has no `map` (the coverage check fails until it is mapped); one that is gone is dropped and printed.
`--seed-from` copies the `map` of statements with the same id from another pin's file (a newer pin of the
same framework shares most of its checks). `--check` writes nothing and exits 1 when the file would change
(statements added, gone or moved).

`--propose` writes nothing: for each unmapped statement of PIN (of FILE, the first N) it searches values
that make the statement's condition true through the framework's own judge (tests/diffval/propose.py) and
prints what it found with our dry run's verdict on it, as YAML, for a person to read and turn into the
row's `map` (the rule that refuses it, or a new one where we accept; a near miss; a fix).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.diffval.coverage import dump_map, load_map, merge  # noqa: E402
from tests.diffval.pins import ALL, MAPS, map_path  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pins", nargs="*", choices=[[], *sorted(ALL)], metavar="PIN")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a map would change")
    ap.add_argument("--seed-from", metavar="PIN", help="copy the map of equal statements from this pin")
    ap.add_argument("--propose", action="store_true", help="print proposed cases for unmapped statements")
    ap.add_argument("--only", metavar="FILE", help="with --propose: the statements of this source file")
    ap.add_argument("--limit", type=int, default=0, help="with --propose: at most this many statements")
    ap.add_argument("--cap", type=int, default=80, help="with --propose: at most this many cases a statement")
    a = ap.parse_args()
    if a.propose:
        if len(a.pins) != 1:
            ap.error("--propose takes one PIN")
        return propose(a.pins[0], a.only, a.limit, a.cap)
    changed = False
    for name in a.pins or sorted(ALL):
        pin = ALL[name]
        roots = pin.roots()
        if isinstance(roots, str):
            print(f"{name}: not generated: {roots}")
            if a.pins:
                return 2
            continue
        statements, files = pin.walk(roots)
        path = map_path(name)
        old = load_map(path) if path.is_file() else None
        seed = load_map(map_path(a.seed_from)) if a.seed_from else None
        doc, notes = merge(pin, roots, statements, files, old, seed)
        text = dump_map(doc)
        before = path.read_text(encoding="utf-8") if path.is_file() else ""
        unmapped = sum(1 for s in doc["statements"] if not s.get("map"))
        print(f"{name}: {len(statements)} statements, {unmapped} unmapped")
        for note in notes:
            print(f"  {note}")
        if text != before:
            changed = True
            if not a.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                print(f"  wrote {path.relative_to(MAPS.parents[2])}")
            else:
                print(f"  {path.name} is out of date")
    return 1 if a.check and changed else 0


def propose(name: str, only: str | None, limit: int, cap: int) -> int:
    import tempfile

    import yaml

    from tests.diffval.propose import review

    path = map_path(name)
    if not path.is_file():
        print(f"{name}: no map yet (python scripts/gen_validation_map.py {name})")
        return 2
    doc = load_map(path)
    rows = [s for s in doc["statements"] if not s.get("map") and (only is None or s["file"] == only)]
    rows = rows[:limit] if limit else rows
    with tempfile.TemporaryDirectory(prefix=f"af-propose-{name}-") as work:
        found = review(doc, rows, Path(work), cap)
    print(yaml.safe_dump(found, sort_keys=False, allow_unicode=True, width=110))
    return 0


if __name__ == "__main__":
    sys.exit(main())
