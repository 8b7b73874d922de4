"""Standard plots for experiment reports, so an experiment's ``report`` is a few lines.

Every chart takes the runner's rows (dicts) and the column names to plot; rows that share
``(hue, x)`` (e.g. several seeds) are averaged and drawn with a min–max error bar, so a
seed sweep needs no plotting code of its own. Order follows first appearance in ``rows``
(the experiment's cell order), except that an all-numeric ``x`` is sorted.

A hue value keeps one colour in every chart of a process (:func:`colour`, first come first
served over a fixed palette, this project's systems first), so ``chiron`` is the same colour in
neighbouring charts; this project's own systems (:data:`OURS`) are drawn with a black edge and
``(ours)`` in the legend. A bar chart whose bars span more than :data:`LOG_SPAN` switches to a
log axis and says so in its title, so one huge bar does not flatten the others.

Matplotlib is used through ``Figure`` + the Agg canvas directly, never ``pyplot``: no
global figure state, no GUI backend, safe in worker processes and threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Point:
    """One plotted value: the mean over the rows that share ``(hue, x)``, and their range."""

    x: Any
    mean: float
    lo: float
    hi: float
    n: int


def aggregate(
    rows: Sequence[Mapping[str, Any]], x: str, y: str, hue: str | None = None
) -> dict[Any, list[Point]]:
    """Group ``rows`` by ``hue`` then ``x``; mean/min/max of ``y``. Rows lacking ``y``
    (failed cells) or with a non-numeric ``y`` are ignored."""
    groups: dict[Any, dict[Any, list[float]]] = {}
    for r in rows:
        v = r.get(y)
        if not isinstance(v, Real) or isinstance(v, bool) or x not in r:
            continue
        h = r.get(hue) if hue is not None else None
        groups.setdefault(h, {}).setdefault(r[x], []).append(float(v))
    out: dict[Any, list[Point]] = {}
    for h, by_x in groups.items():
        xs = list(by_x)
        if all(isinstance(k, Real) for k in xs):
            xs.sort()
        out[h] = [
            Point(k, sum(by_x[k]) / len(by_x[k]), min(by_x[k]), max(by_x[k]), len(by_x[k]))
            for k in xs
        ]
    return out


#: tab10 then tab20's light shades: distinct colours, assigned in first-use order
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
#: this project's systems: fixed colours, a black edge, "(ours)" in legends
OURS = ("chiron", "saria", "saecache")
LOG_SPAN = 100.0
_colours: dict[str, str] = {name: PALETTE[i] for i, name in enumerate(OURS)}


def colour(label: object) -> str:
    """The colour of a hue value, the same in every chart of this process."""
    key = str(label)
    c = _colours.get(key)
    if c is None:
        c = PALETTE[len(_colours) % len(PALETTE)]
        _colours[key] = c
    return c


def is_ours(label: object) -> bool:
    return str(label).lower().split("+")[0].split("(")[0].strip() in OURS


def legend_label(label: object) -> str:
    return f"{label} (ours)" if is_ours(label) else str(label)


def needs_log(values: Sequence[float]) -> bool:
    """True when positive bars span more than :data:`LOG_SPAN` (a linear axis would
    flatten all but the largest)."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > LOG_SPAN


def _new_figure(width: float = 6.4, height: float = 4.0) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _null_locator() -> Any:
    from matplotlib.ticker import NullLocator

    return NullLocator()


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def line_chart(
    rows: Sequence[Mapping[str, Any]],
    x: str,
    y: str,
    hue: str | None,
    path: Path,
    title: str = "",
    ylabel: str | None = None,
    xlabel: str | None = None,
    *,
    logx: bool = False,
    logy: bool = False,
) -> Path:
    """One line per ``hue`` value of mean ``y`` against ``x`` (e.g. a miss-ratio curve)."""
    fig = _new_figure()
    ax = fig.add_subplot(1, 1, 1)
    data = aggregate(rows, x, y, hue)
    categorical = not all(isinstance(p.x, Real) for pts in data.values() for p in pts)
    ticks: list[Any] = []
    if categorical:
        for pts in data.values():
            for p in pts:
                if p.x not in ticks:
                    ticks.append(p.x)
    for h, pts in data.items():
        xs = [ticks.index(p.x) if categorical else p.x for p in pts]
        means = [p.mean for p in pts]
        label = None if hue is None else legend_label(h)
        style: dict[str, Any] = {} if hue is None else {"color": colour(h)}
        if hue is not None and is_ours(h):
            style["linewidth"] = 2.2
        if any(p.n > 1 for p in pts):
            err = [[p.mean - p.lo for p in pts], [p.hi - p.mean for p in pts]]
            ax.errorbar(xs, means, yerr=err, marker="o", markersize=3, capsize=2, label=label, **style)
        else:
            ax.plot(xs, means, marker="o", markersize=3, label=label, **style)
    if categorical:
        ax.set_xticks(range(len(ticks)))
        ax.set_xticklabels([str(t) for t in ticks])
    if logx:
        ax.set_xscale("log")
        if not categorical:
            # label the measured x values themselves, not powers of ten
            xs_all = sorted({p.x for pts in data.values() for p in pts})
            ax.set_xticks(xs_all)
            ax.set_xticklabels([f"{v:g}" for v in xs_all])
            ax.xaxis.set_minor_locator(_null_locator())
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if hue is not None and data:
        ax.legend(fontsize="small", ncol=2 if len(data) > 5 else 1)
    return _save(fig, path)


def bar_chart(
    rows: Sequence[Mapping[str, Any]],
    x: str,
    y: str,
    hue: str | None,
    path: Path,
    title: str = "",
    ylabel: str | None = None,
    xlabel: str | None = None,
    *,
    ours_x: Sequence[Any] = (),
) -> Path:
    """Grouped bars: one group per ``x`` value, one bar per ``hue`` value (mean ``y``).
    ``ours_x``: the ``x`` values that are this project's system (edged bars, ``*`` on the
    tick label), for charts whose systems are on the x axis."""
    fig = _new_figure()
    ax = fig.add_subplot(1, 1, 1)
    data = aggregate(rows, x, y, hue)
    xs: list[Any] = []
    for pts in data.values():
        for p in pts:
            if p.x not in xs:
                xs.append(p.x)
    n = max(1, len(data))
    width = 0.8 / n
    for i, (h, pts) in enumerate(data.items()):
        pos = [xs.index(p.x) - 0.4 + width * (i + 0.5) for p in pts]
        means = [p.mean for p in pts]
        err = None
        if any(p.n > 1 for p in pts):
            err = [[p.mean - p.lo for p in pts], [p.hi - p.mean for p in pts]]
        style: dict[str, Any] = {}
        if hue is not None:
            style["color"] = colour(h)
            if is_ours(h):
                style.update(edgecolor="black", linewidth=1.2)
        bars = ax.bar(pos, means, width=width, yerr=err, capsize=2,
                      label=None if hue is None else legend_label(h), **style)
        for bar, p in zip(bars, pts):
            if p.x in ours_x:
                bar.set_edgecolor("black")
                bar.set_linewidth(1.5)
    if needs_log([p.mean for pts in data.values() for p in pts]):
        ax.set_yscale("log")
        title = f"{title} (log scale)" if title else "(log scale)"
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([f"{v}*" if v in ours_x else str(v) for v in xs],
                       rotation=30 if len(xs) > 6 else 0)
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    if hue is not None and data:
        ax.legend(fontsize="small", ncol=2 if len(data) > 5 else 1)
    return _save(fig, path)


__all__ = ["OURS", "Point", "aggregate", "bar_chart", "colour", "line_chart", "needs_log"]
