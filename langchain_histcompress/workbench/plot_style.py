"""How the benchmark's plots tell strategies apart: one colour and marker per name, everywhere.

A name keeps its style in every plot and every run: styles follow the name's position in a
fixed order (the strategy registry, then the faces), not its position in the plot.
Names outside that order take the styles after it.

Example:
    >>> styles = strategy_styles(["full", "no_history"], order=("full", "no_history"))
    >>> styles["full"].marker != styles["no_history"].marker
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Style", "label_column", "strategy_styles"]

_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#000000", "#b8860b", "#000080", "#008080", "#800000", "#f032e6",
    "#556b2f", "#4363d8", "#9a6324", "#469990", "#aaffc3", "#808000",
)  # fmt: skip
# (marker, filled): filled shapes first, then hollow ones, so no two of the 22 look alike.
_MARKERS = (
    ("o", True), ("s", True), ("^", True), ("D", True), ("v", True), ("P", True), ("X", True),
    ("*", True), ("<", True), (">", True), ("h", True), ("p", True), ("d", True), ("8", True),
    ("o", False), ("s", False), ("^", False), ("D", False), ("v", False), ("h", False),
    ("p", False), ("8", False),
)  # fmt: skip


@dataclass(frozen=True)
class Style:
    """How one strategy (or face) is drawn."""

    colour: str
    """Line, marker and label colour."""
    marker: str
    """matplotlib marker symbol."""
    filled: bool
    """Whether the marker is filled (hollow markers double the distinct shapes)."""
    linestyle: str
    """Line style: solid for the first ten names of the order, dashed after."""

    def marker_kwargs(self, size: float) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot`` drawing this marker."""
        return {
            "marker": self.marker,
            "markersize": size,
            "markerfacecolor": self.colour if self.filled else "none",
            "markeredgecolor": "black" if self.filled else self.colour,
            "markeredgewidth": 0.5 if self.filled else 1.2,
        }


def strategy_styles(names: Sequence[str], order: Sequence[str]) -> dict[str, Style]:
    """One distinct style per name of ``names``.

    The first 22 names of ``order`` always get the same style; the other names take the
    styles no name of this plot holds. No two names of a plot share a colour or a marker
    up to 22 names; beyond that, styles repeat with dotted and dash-dotted lines.
    """
    size = len(_COLOURS)
    fixed = {name: i for i, name in enumerate(dict.fromkeys(order)) if i < size}
    present = list(dict.fromkeys(names))
    taken = {fixed[n] for n in present if n in fixed}
    free = iter([i for i in range(size) if i not in taken] + list(range(size, 10 * size + 1)))
    slots = {n: fixed[n] if n in fixed else next(free) for n in present}
    styles = {}
    for name, slot in slots.items():
        turn, index = divmod(slot, size)
        marker, filled = _MARKERS[(index + 7 * turn) % len(_MARKERS)]
        linestyle = ("-" if index < 10 else "--") if turn == 0 else (":", "-.")[turn % 2]
        styles[name] = Style(_COLOURS[index], marker, filled, linestyle)
    return styles


def label_column(
    figure: Any, axes: Any, points: Sequence[tuple[str, float, float]], styles: dict[str, Style]
) -> None:
    """Name each point in a column right of the axes, joined to it by a thin leader line.

    Labels keep their points' vertical order and are spread just enough not to overlap, so
    points that coincide or sit close together stay readable. Each label repeats its point's
    marker, which also names points hidden under another.
    """
    renderer = figure.canvas.get_renderer()
    height_pt = axes.get_window_extent(renderer).height * 72 / figure.dpi
    gap = 12.5 / height_pt  # one line of small text, in axes fractions
    to_axes = axes.transAxes.inverted()
    placed = sorted(
        (to_axes.transform(axes.transData.transform((x, y)))[1], name, x, y)
        for name, x, y in points
    )
    spots = [p[0] for p in placed]
    for i in range(1, len(spots)):  # push up what sits too close to the label below
        spots[i] = max(spots[i], spots[i - 1] + gap)
    if spots and spots[-1] > 1.0:  # then down from the top, the bottom may go past 0
        spots[-1] = 1.0
        for i in range(len(spots) - 2, -1, -1):
            spots[i] = min(spots[i], spots[i + 1] - gap)
    for spot, (_, name, x, y) in zip(spots, placed, strict=True):
        style = styles[name]
        axes.annotate(
            "", xy=(x, y), xycoords="data", xytext=(1.02, spot), textcoords="axes fraction",
            annotation_clip=False, zorder=1, arrowprops={"arrowstyle": "-",
            "color": style.colour, "lw": 0.6, "alpha": 0.6, "shrinkA": 0, "shrinkB": 4},
        )  # fmt: skip
        axes.plot([1.035], [spot], transform=axes.transAxes, clip_on=False, linestyle="none",
                  **style.marker_kwargs(6))  # fmt: skip
        axes.text(1.055, spot, name, transform=axes.transAxes, va="center", fontsize="small")
