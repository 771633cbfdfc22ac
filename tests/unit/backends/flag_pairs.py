"""Argv compared as flags: what the golden tests of the Megatron-style backends hold against the frameworks'
own example scripts."""

from __future__ import annotations


def normalised(token: str) -> str:
    """A number in one spelling (1e-6 == 1e-06 == 0.000001); any other token as it is."""
    try:
        return repr(float(token))
    except ValueError:
        return token


def pairs(tokens: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """['--a', '1', '--b'] -> [('--a', ('1',)), ('--b', ())], values normalised, order kept. `--a=-1` reads
    as argparse reads it, `--a -1` (the plan attaches a value starting with `-`, `to_flags`)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for tok in tokens:
        if tok.startswith("--") and "=" in tok:
            flag, value = tok.split("=", 1)
            out.append((flag, (normalised(value),)))
        elif tok.startswith("--"):
            out.append((tok, ()))
        else:
            flag, values = out[-1]
            out[-1] = (flag, (*values, normalised(tok)))
    return out
