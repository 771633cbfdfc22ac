"""`ascendfactory-cli logs` (being written by the metrics engineer; this file is theirs to replace)."""

import typer

app = typer.Typer(help="Parse, summarise, compare, plot and export training logs.", no_args_is_help=True)
