"""Differential validation: our `train` checks against each framework's own validator.

cases.py      seeded experiments: every shipped template and quickstart, mutated key by key
ours.py       our verdict, in-process, and the payload our plan hands the framework
backends.py   per backend: the bases, the keys to vary, and how a payload carries a mutation
judge.py      the framework's verdict (batched workers in its own environment), the four cells
workers/      the programs run by each framework's python (they import nothing from ascendfactory)
walk.py       every raise/assert/exit a framework's validation code reaches, read with ast
pins.py       the frameworks' validation code per pin: sources, entry points, what a walk follows
coverage.py   the coverage maps (maps/<pin>.yaml): each statement mapped by hand, its targeted cases run
"""
