"""The benchmark's plots: one distinct style per strategy, labels that never overlap."""

from __future__ import annotations

import pytest

from langchain_histcompress.workbench.face_drivers import FACES
from langchain_histcompress.workbench.plot_style import label_column, strategy_styles
from langchain_histcompress.workbench.strategies import DEFAULT_STRATEGIES

pytest.importorskip("matplotlib")


def _distinct(names: list[str], order: tuple[str, ...]) -> None:
    styles = strategy_styles(names, order=order)
    assert len({s.colour for s in styles.values()}) == len(names)
    assert len({(s.marker, s.filled) for s in styles.values()}) == len(names)


def test_every_strategy_and_every_face_gets_its_own_colour_and_marker() -> None:
    _distinct(list(DEFAULT_STRATEGIES), DEFAULT_STRATEGIES)
    _distinct(list(FACES), (*DEFAULT_STRATEGIES, *FACES))
    _distinct(["full", "someone_elses", "another"], DEFAULT_STRATEGIES)


def test_a_strategy_keeps_its_style_whatever_else_is_plotted() -> None:
    alone = strategy_styles(["facts"], order=DEFAULT_STRATEGIES)["facts"]
    crowded = strategy_styles(list(reversed(DEFAULT_STRATEGIES)), order=DEFAULT_STRATEGIES)
    assert crowded["facts"] == alone


def _figure() -> tuple[object, object]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 6), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def test_labels_of_coinciding_points_do_not_overlap() -> None:
    figure, axes = _figure()
    names = list(DEFAULT_STRATEGIES[:16])
    points = [(name, 1400.0 + i, 24.0 + (i % 3) * 0.1) for i, name in enumerate(names)]
    axes.set_xscale("log")  # type: ignore[attr-defined]
    axes.set_xlim(30, 10_000)  # type: ignore[attr-defined]
    axes.set_ylim(-5, 105)  # type: ignore[attr-defined]
    label_column(figure, axes, points, strategy_styles(names, order=DEFAULT_STRATEGIES))
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    labels = [t for t in axes.texts if t.get_text()]  # type: ignore[attr-defined]
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert sorted(t.get_text() for t in labels) == sorted(names)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def test_count_axes_tick_whole_numbers_only() -> None:
    from langchain_histcompress.workbench.report import _count_axis

    figure, axes = _figure()
    axes.plot([1, 2, 3], [5, 7, 6])  # type: ignore[attr-defined]
    _count_axis(axes.xaxis)  # type: ignore[attr-defined]
    figure.canvas.draw()  # type: ignore[attr-defined]
    ticks = [t for t in axes.get_xticks() if 1 <= t <= 3]  # type: ignore[attr-defined]
    assert ticks and all(float(t).is_integer() for t in ticks)
