"""Options shared by several commands, defined once as annotated types."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer


class PlanFormat(str, Enum):
    text = "text"
    json = "json"
    shell = "shell"


ConfigArgs = Annotated[
    list[str],
    typer.Argument(
        help="CONFIG_YAML [MODEL_NAME EXP_NAME] [--dotted.key=value ...]. New style: one experiment file. "
        "Old style: a file with base/model/experiment blocks plus the model and experiment names. "
        "Overrides (--a.b=c or --a.b c) come after them.",
        show_default=False,
    ),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Resolve, validate and print the plan; run nothing.")
]
FormatOpt = Annotated[
    PlanFormat, typer.Option("--format", help="Plan output with --dry-run: text, json, shell.")
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Show the steps' own output lines on the console too (always in logs/)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
