"""The one object every command prints through: human (rich) or machine (json) output.

Everything it prints passes `secrets.mask_known`: a secret value of the loaded experiment never reaches
the terminal, whatever quotes it (an error about an unknown key, a warning, a table cell).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from ascendfactory.secrets import mask_known

# rich's console markup: `[style]...[/style]`; a backslash before `[` makes it literal.
_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


class Output:
    """`out.result(...)`, `out.table(...)`, `out.error(...)`; rich is imported only when first used."""

    def __init__(self) -> None:
        self.mode = "human"
        self._console = None
        self._err_console = None

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True)
        return self._console

    @property
    def err_console(self):
        if self._err_console is None:
            from rich.console import Console

            self._err_console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._err_console

    def text(self, message: str = "", *, style: str | None = None) -> None:
        if self.mode == "json":
            return
        self.console.print(mask_known(message), style=style, markup=False)

    def markup(self, message: str) -> None:
        if self.mode == "json":
            return
        message = mask_known(message)
        if self._console is None and self._plain():  # what rich would print, without importing it
            self.raw(plain(message))
        else:
            self.console.print(message)

    @staticmethod
    def _plain() -> bool:
        """stdout is no terminal and nothing forces colour: rich would print the text without styles."""
        return (
            not sys.stdout.isatty()
            and not os.environ.get("FORCE_COLOR")
            and not os.environ.get("TTY_COMPATIBLE")
        )

    def raw(self, text: str) -> None:
        """Write text as is (shell scripts, yaml), never wrapped or styled."""
        text = mask_known(text)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()

    def json(self, data: Any) -> None:
        sys.stdout.write(mask_known(json.dumps(data, indent=2, default=str)) + "\n")
        sys.stdout.flush()

    def table(
        self,
        rows: list[dict[str, Any]],
        *,
        title: str | None = None,
        columns: list[str] | None = None,
        whole: tuple[str, ...] = (),
    ) -> None:
        """Rows as a table (json: the rows); `whole`: columns never wrapped or cut (names), the others
        shrink to fit the terminal."""
        if self.mode == "json":
            self.json(rows)
            return
        from rich.table import Table
        from rich.text import Text

        columns = columns or (list(rows[0].keys()) if rows else [])
        table = Table(title=title, title_justify="left")
        for col in columns:
            if col in whole:
                width = max([len(col), *(len(str(r.get(col) or "")) for r in rows)])
                table.add_column(col, no_wrap=True, min_width=width)
            else:
                table.add_column(col)
        for row in rows:  # cells are literal text: `verl[verl-core]` is no markup tag
            table.add_row(*(Text("" if row.get(c) is None else mask_known(str(row.get(c)))) for c in columns))
        self.console.print(table)

    def warn(self, message: str) -> None:
        self.err_console.print(f"[yellow]warning:[/yellow] {escape(mask_known(message))}")

    def info(self, message: str) -> None:
        self.err_console.print(f"[dim]{escape(mask_known(message))}[/dim]")

    def error(self, message: str) -> None:
        self.err_console.print(f"[bold red]error:[/bold red] {escape(mask_known(message))}")


def escape(text: str) -> str:
    """Make `text` print literally through console markup (rich.markup.escape's rule)."""

    def literal(m: re.Match[str]) -> str:
        backslashes, tag = m.groups()
        return f"{backslashes}{backslashes}\\{tag}"

    text = _TAG.sub(literal, text)
    return text + "\\" if text.endswith("\\") and not text.endswith("\\\\") else text


def plain(message: str) -> str:
    """Console markup as plain text: tags dropped, escaped brackets kept (what rich prints uncoloured)."""
    if "[" not in message:
        return message
    out, position = [], 0
    for m in _TAG.finditer(message):
        backslashes, tag = m.groups()
        out.append(message[position : m.start()].replace("\\[", "["))
        out.append(backslashes[: len(backslashes) // 2] + (tag if len(backslashes) % 2 else ""))
        position = m.end()
    out.append(message[position:].replace("\\[", "["))
    return "".join(out)


out = Output()
