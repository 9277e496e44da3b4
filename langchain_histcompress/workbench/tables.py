"""The benchmark's tables as aligned plain text (at most 100 columns) and as Markdown.

The first column names the row and is left-aligned; every other column is right-aligned.
A plain-text table wider than the limit continues in further tables that repeat the first
column, so no figure is cut.

Example:
    >>> print(text_table(["strategy", "savings"], [["full", "0.0%"]], title="Savings"))
    Savings
    strategy  savings
    --------  -------
    full         0.0%
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

__all__ = ["TABLE_WIDTH", "columns", "markdown_table", "percent", "text_table", "wrap"]

TABLE_WIDTH = 100
"""Widest line of the console tables and of the README's Markdown."""

_GAP = "  "


def percent(value: float | None, digits: int = 1) -> str:
    """A share as a table cell: ``"-"`` when unknown.

    Example:
        >>> percent(0.8249), percent(None), percent(0.5, digits=0)
        ('82.5%', '-', '50%')
    """
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def wrap(text: str, width: int = TABLE_WIDTH) -> str:
    """``text`` broken into lines of at most ``width`` characters."""
    return textwrap.fill(text, width=width, break_on_hyphens=False)


def columns(
    header: Sequence[str], rows: Sequence[Sequence[str]], names: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """The first column and the columns called ``names`` (in that order), absent ones skipped.

    Example:
        >>> columns(["s", "a", "b"], [["x", "1", "2"]], ["b"])
        (['s', 'b'], [['x', '2']])
    """
    picked = [0] + [header.index(n) for n in names if n in header]
    return [header[i] for i in picked], [[row[i] for i in picked] for row in rows]


def _chunks(widths: Sequence[int], width: int) -> list[list[int]]:
    """Column indices per table: the first column, then as many as fit in ``width``."""
    chunks: list[list[int]] = []
    used = width + 1
    for index in range(1, len(widths)):
        if used + len(_GAP) + widths[index] > width and (not chunks or len(chunks[-1]) > 1):
            chunks.append([0])
            used = widths[0]
        chunks[-1].append(index)
        used += len(_GAP) + widths[index]
    return chunks or [[0]]


def text_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str = "",
    width: int = TABLE_WIDTH,
) -> str:
    """An aligned plain-text table, the title wrapped above it, every line within ``width``."""
    table = [list(header), *map(list, rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = [wrap(title, width)] if title else []
    for number, chunk in enumerate(_chunks(widths, width)):
        if number:
            out.append("")

        def line(cells: Sequence[str], chunk: Sequence[int] = chunk) -> str:
            return _GAP.join(
                f"{cells[i]:<{widths[i]}}" if i == 0 else f"{cells[i]:>{widths[i]}}" for i in chunk
            ).rstrip()

        out += [line(table[0]), line(["-" * w for w in widths])]
        out += [line(r) for r in table[1:]]
    return "\n".join(out)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    r"""A Markdown table: first column left-aligned, the others right-aligned.

    Example:
        >>> print(markdown_table(["strategy", "savings"], [["a|b", "1.0%"]]))
        | strategy | savings |
        | :--- | ---: |
        | a\|b | 1.0% |
    """
    marks = [":---", *["---:" for _ in header[1:]]]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)
