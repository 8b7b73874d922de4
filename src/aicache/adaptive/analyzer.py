"""Chiron's statistical analyzer: the structured statistics of an access window
(docs/design/chiron.md, "Statistical analyzer").

The advisor (an LLM or :class:`~aicache.adaptive.advisor.statistical.StatisticalAdvisor`)
should not have to derive strides and reuse from raw IDs, so the harness precomputes them
for the whole window ``W`` and for its recent tail ``T`` (the last
``t = min(N, 200, max(10, floor(N/2)))`` accesses), which exposes a phase change that the
older prefix of the window would dilute.

Every field is exactly the seed's definition; the rounding (ratios, entropy and gini to 3
decimals, mean reuse distance to 1) is applied last, to the exact value. The computation is
vectorised with numpy (sort-based, O(n log n) with tiny constants; ~100 µs for 1,000 IDs) and
runs once per diagnosis, never per access.

:func:`analyze` returns plain dicts with the seed's field names, in the seed's order, so
``json.dumps`` of them *is* the "Structured statistics" part of the runtime prompt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Number of (delta, count) pairs reported under "dominant steps".
DOMINANT_STEPS = 5
#: Number of most frequent IDs summed by "top 5 access".
TOP_K = 5
#: A reuse gap d < SHORT_REUSE counts as a short reuse.
SHORT_REUSE = 10
#: |delta| <= SMALL_JUMP (and != 0) is a small jump; |delta| > LARGE_JUMP is a large jump.
SMALL_JUMP = 5
LARGE_JUMP = 100
#: Tail length bounds: t = min(N, TAIL_MAX, max(TAIL_MIN, N // 2)).
TAIL_MAX = 200
TAIL_MIN = 10

WINDOW_KEY = "window"
TAIL_KEY = "recent tail"


def tail_length(n: int) -> int:
    """The seed's recent-tail length ``t = min(N, 200, max(10, floor(N/2)))``.

    For N < 10 the tail is the whole window; from N = 20 it is half of it, capped at 200.
    """
    if n < 0:
        raise ValueError("window length must be >= 0")
    return min(n, TAIL_MAX, max(TAIL_MIN, n // 2))


@dataclass(frozen=True, slots=True)
class StepStats:
    """The "adjacent steps" object: distribution of ``x[i+1] - x[i]``."""

    zero_ratio: float = 0.0
    pm1_ratio: float = 0.0
    small_jump_ratio: float = 0.0
    large_jump_ratio: float = 0.0
    #: Up to five (delta, count) pairs, by decreasing count, ties by first appearance.
    dominant_steps: tuple[tuple[int, int], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "zero ratio": self.zero_ratio,
            "pm1 ratio": self.pm1_ratio,
            "small jump ratio": self.small_jump_ratio,
            "large jump ratio": self.large_jump_ratio,
            "dominant steps": [{"delta": d, "count": c} for d, c in self.dominant_steps],
        }


@dataclass(frozen=True, slots=True)
class StatsTable:
    """Statistics of one analysed sequence (docs/design/chiron.md), already rounded."""

    length: int
    unique_ratio: float
    access_entropy: float
    gini: float
    top5_access: float
    reuse_ratio: float
    short_reuse_ratio: float
    mean_reuse_distance: float
    adjacent_steps: StepStats

    def as_dict(self) -> dict[str, Any]:
        """The seed's JSON object, with its field names and order."""
        return {
            "length": self.length,
            "unique ratio": self.unique_ratio,
            "access entropy": self.access_entropy,
            "gini": self.gini,
            "top 5 access": self.top5_access,
            "reuse ratio": self.reuse_ratio,
            "short reuse ratio": self.short_reuse_ratio,
            "mean reuse distance": self.mean_reuse_distance,
            "adjacent steps": self.adjacent_steps.as_dict(),
        }


def _r3(x: float) -> float:
    return round(float(x), 3)


def _steps(x: np.ndarray) -> StepStats:
    n = x.size
    if n < 2:
        return StepStats()
    d = np.diff(x)
    k = n - 1
    ad = np.abs(d)
    zero = int(np.count_nonzero(d == 0))
    pm1 = int(np.count_nonzero(ad == 1))
    small = int(np.count_nonzero((ad > 0) & (ad <= SMALL_JUMP)))
    large = int(np.count_nonzero(ad > LARGE_JUMP))
    values, first, counts = np.unique(d, return_index=True, return_counts=True)
    # decreasing count, ties by first appearance: lexsort's last key is the primary one
    order = np.lexsort((first, -counts))[:DOMINANT_STEPS]
    dominant = tuple((int(values[i]), int(counts[i])) for i in order)
    return StepStats(_r3(zero / k), _r3(pm1 / k), _r3(small / k), _r3(large / k), dominant)


def stats_table(seq: Sequence[int] | np.ndarray) -> StatsTable:
    """docs/design/chiron.md's statistics for one sequence. Zero denominators give 0,
    except the mean reuse distance, whose fallback (no reuse) is the sequence length."""
    x = np.asarray(seq, dtype=np.int64).ravel()
    n = int(x.size)
    if n == 0:
        return StatsTable(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, StepStats())
    order = np.argsort(x, kind="stable")
    xs = x[order]
    same = xs[1:] == xs[:-1]
    # positions (ascending within each ID, by stability) → gaps to the previous occurrence
    gaps = (order[1:] - order[:-1])[same]
    r = int(gaps.size)
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    counts = np.diff(np.append(starts, n))
    m = int(counts.size)
    counts.sort()
    if m > 1:
        p = counts / n
        entropy = float(-(p * np.log2(p)).sum() / math.log2(m))
    else:
        entropy = 0.0
    j = np.arange(1, m + 1, dtype=np.int64)
    gini = float(((2 * j - m - 1) * counts).sum()) / (m * n)
    top5 = float(counts[-TOP_K:].sum()) / n
    if r:
        short = float(np.count_nonzero(gaps < SHORT_REUSE)) / r
        mrd = float(gaps.sum()) / r
    else:
        short, mrd = 0.0, float(n)
    return StatsTable(
        length=n,
        unique_ratio=_r3(m / n),
        access_entropy=_r3(entropy),
        gini=_r3(gini),
        top5_access=_r3(top5),
        reuse_ratio=_r3(r / n),
        short_reuse_ratio=_r3(short),
        mean_reuse_distance=round(mrd, 1),
        adjacent_steps=_steps(x),
    )


def analyze_tables(window: Sequence[int] | np.ndarray) -> tuple[StatsTable, StatsTable]:
    """(window, recent tail) statistics as dataclasses."""
    x = np.asarray(window, dtype=np.int64).ravel()
    t = tail_length(int(x.size))
    return stats_table(x), stats_table(x[x.size - t :])


def analyze(window: Sequence[int] | np.ndarray) -> dict[str, dict[str, Any]]:
    """``{"window": {...}, "recent tail": {...}}`` with the seed's field names and order —
    the value a :class:`~aicache.adaptive.advisor.base.DiagnosisRequest` carries as ``stats``."""
    w, t = analyze_tables(window)
    return {WINDOW_KEY: w.as_dict(), TAIL_KEY: t.as_dict()}


def format_stats(stats: Mapping[str, Any]) -> str:
    """The statistics as the runtime prompt shows them: one JSON object on one line, keys in
    the seed's order (``json.dumps`` keeps insertion order)."""
    return json.dumps(stats, separators=(", ", ": "))


def format_sequence(window: Sequence[int]) -> str:
    """The access sequence as a compact JSON list (``[0,2,4]``): IDs only, no paths."""
    return "[" + ",".join(str(int(b)) for b in window) + "]"
