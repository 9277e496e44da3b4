"""The faces' overhead figures as a Markdown table, a log-log plot and report files.

`plot_face_overhead` draws mean overhead per turn against history size on log-log axes: a flat
line is constant work per turn; a slope of 1 is work proportional to the history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from langchain_histcompress.workbench.face_drivers import FACES
from langchain_histcompress.workbench.faces import FaceOverhead
from langchain_histcompress.workbench.plot_style import strategy_styles
from langchain_histcompress.workbench.strategies import DEFAULT_STRATEGIES

__all__ = [
    "face_overhead_table",
    "plot_face_overhead",
    "write_face_reports",
]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _kib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def face_overhead_table(figures: Sequence[FaceOverhead]) -> str:
    """A Markdown table: per face, time and memory per turn at each size, folding turns apart.

    Time is the mean / folding / non-folding ms per turn of the lowest pass (the last column
    lists every pass's mean); memory the mean / folding / non-folding KiB a traced turn
    allocated.

    Example:
        >>> figure = FaceOverhead("x", 1000, 4, 1, 0.5, 1.1, 0.3, pass_means_ms=(0.61, 0.5),
        ...                       alloc_kib=12.4, plain_alloc_kib=12.4)
        >>> print(face_overhead_table([figure]))  # doctest: +NORMALIZE_WHITESPACE
        | face | messages | turns | folds | mean ms | folding ms | non-folding ms
        | pass means ms | mean KiB | folding KiB | non-folding KiB |
        |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
        | x | 1,000 | 4 | 1 | 0.500 | 1.100 | 0.300 | 0.610 / 0.500 | 12 | - | 12 |
    """
    lines = [
        "| face | messages | turns | folds | mean ms | folding ms | non-folding ms "
        "| pass means ms | mean KiB | folding KiB | non-folding KiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in sorted(figures, key=lambda f: (f.face, f.messages)):
        cells = [
            f.face,
            f"{f.messages:,}",
            str(f.turns),
            str(f.folds),
            _ms(f.mean_ms) if f.error is None else f"failed: {f.error}",
            _ms(f.fold_ms),
            _ms(f.plain_ms),
            " / ".join(map(_ms, f.pass_means_ms)) or "-",
            _kib(f.alloc_kib),
            _kib(f.fold_alloc_kib),
            _kib(f.plain_alloc_kib),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _series(figures: Sequence[FaceOverhead]) -> Mapping[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for f in figures:
        if f.mean_ms is not None and f.mean_ms > 0:
            series.setdefault(f.face, []).append((f.messages, f.mean_ms))
    return {name: sorted(points) for name, points in series.items()}


def plot_face_overhead(figures: Sequence[FaceOverhead], path: Path) -> Path:
    """Draw mean overhead per turn against history size, log-log, one line per face (PNG).

    Raises:
        ImportError: matplotlib is not installed (the ``bench`` extra).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    figure = Figure(figsize=(8, 5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    series = _series(figures)
    styles = strategy_styles(list(series), order=(*DEFAULT_STRATEGIES, *FACES))
    for name, points in series.items():
        style = styles[name]
        axes.plot([p[0] for p in points], [p[1] for p in points], label=name, color=style.colour,
                  linestyle=style.linestyle, **style.marker_kwargs(6))  # fmt: skip
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("history size (messages)")
    axes.set_ylabel("library overhead per turn (ms, mean)")
    axes.set_title("Overhead per turn against history size (flat = constant work)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    return path


def write_face_reports(
    figures: Sequence[FaceOverhead], out_dir: Path, *, plots: bool = True
) -> dict[str, Path]:
    """Write the faces' figures: ``faces.json``, ``faces.md`` and the log-log plot.

    Returns:
        ``{"faces:json": ..., "faces:markdown": ..., "plot:face_overhead": ...}`` (nothing
        when ``figures`` is empty).
    """
    if not figures:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"faces:json": out_dir / "faces.json", "faces:markdown": out_dir / "faces.md"}
    written["faces:json"].write_text(
        json.dumps([asdict(f) for f in figures], indent=1) + "\n", encoding="utf-8"
    )
    text = [
        "# Library overhead per face",
        "",
        "Mean wall time of the package's own work per turn (internal model calls excluded), "
        "over a fixed number of turns at each history size; folding turns (an internal model "
        "call or a compression) and the others are averaged apart. Each figure is measured "
        "in several passes far apart in time (a fresh face and warm-up each) and the pass "
        "with the lowest mean is shown: other processes only add time. Beside the time, the "
        "memory a turn allocates (KiB, the tracemalloc peak above what was in use when the "
        "turn started; an internal model call's own memory left out, what it returns "
        "counted), over a few more turns run under tracemalloc after the timed ones.",
        "",
        face_overhead_table(figures),
        "",
    ]
    if plots:
        written["plot:face_overhead"] = plot_face_overhead(figures, out_dir / "face_overhead.png")
        text += ["![overhead per face](face_overhead.png)", ""]
    written["faces:markdown"].write_text("\n".join(text), encoding="utf-8")
    return written
