"""Plain console output (stdout no terminal) prints exactly what rich would, without importing it."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape as rich_escape

from ascendfactory.cli._output import escape, plain

TEXT = st.text(alphabet=st.sampled_from(list("ab [ ]/\\@#:=1")), max_size=30)


def rich_prints(markup: str) -> str:
    buf = io.StringIO()
    Console(file=buf, highlight=False, soft_wrap=True, emoji=False).print(markup)
    return buf.getvalue()[:-1]


@given(TEXT)
def test_escape_is_richs(text):
    assert escape(text) == rich_escape(text)


@given(
    TEXT, st.sampled_from(["{}", "[bold]{}[/bold] tail", "[yellow]warning:[/yellow] {}", "[dim]({})[/dim]"])
)
def test_plain_prints_what_rich_prints(text, frame):
    markup = frame.format(escape(text))
    assert plain(markup) == rich_prints(markup)


@given(TEXT)
def test_plain_agrees_with_rich_on_raw_markup_rich_accepts(text):
    try:
        expected = rich_prints(text)
    except MarkupError:
        return
    assert plain(text) == expected


def test_table_cells_are_literal_text():
    """A cell such as `pip install 'verl[verl-core]==0.9.1'` keeps its brackets (no markup tag eaten)."""
    from ascendfactory.cli._output import Output

    out = Output()
    buf = io.StringIO()
    out._console = Console(file=buf, width=200, highlight=False)
    out.table([{"what": "install verl[verl-core]==0.9.1", "note": "[bold]x[/bold]"}])
    text = buf.getvalue()
    assert "verl[verl-core]==0.9.1" in text and "[bold]x[/bold]" in text
