"""What a trace looks like before a cache sees it (``aicache trace summary``), after the
common tasks of libCacheSim's ``traceAnalyzer`` (``--stat``, ``--size``, ``--reuse``,
``--popularity``).

* **popularity**: request counts per object sorted descending; ``zipf_alpha`` is minus the
  least-squares slope of log(count) against log(rank) over every object (traceAnalyzer's
  popularity fit), ``top_1pct_share``/``top_10pct_share`` the share of requests that go to
  the most popular 1% / 10% of objects.
* **one-hit wonders**: objects requested exactly once, as a share of the objects.
* **reuse**: for every request after the first to its object, the *reuse time* (requests
  since the previous request to it) and the *reuse distance* (distinct other objects
  requested in between: its LRU stack distance minus one, so an LRU cache of ``d + 1``
  objects hits it), with ``reuse_seconds`` in the trace's time unit; each as mean and
  percentiles.

Memory: the trace's id, size and time columns (24 bytes per request) plus the stack
distance tree (8 per request); the trace is read once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from aicache.errors import BadInput
from aicache.traces.stackdist import stack_distances
from aicache.traces.formats._common import TraceSource

PERCENTILES = (50, 90, 99)


@dataclass(slots=True)
class Distribution:
    """Mean and percentiles of a non-empty sample (all 0 when empty)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, x: np.ndarray) -> Distribution:
        if not len(x):
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        p = np.percentile(x, PERCENTILES)
        return cls(int(len(x)), float(x.mean()), float(p[0]), float(p[1]), float(p[2]), float(x.max()))


@dataclass(slots=True)
class TraceSummary:
    trace: str
    format: str
    requests: int
    objects: int
    bytes_requested: int
    working_set_bytes: int
    time_span: float
    object_size: Distribution
    zipf_alpha: float
    top_1pct_share: float
    top_10pct_share: float
    one_hit_wonders: int
    one_hit_wonder_ratio: float
    reuse_requests: int
    reuse_time: Distribution
    reuse_distance: Distribution
    reuse_seconds: Distribution

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def zipf_alpha(counts: np.ndarray) -> float:
    """Minus the least-squares slope of log(count) on log(rank), counts sorted descending
    (0.0 for fewer than two objects)."""
    if len(counts) < 2:
        return 0.0
    c = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    rank = np.log(np.arange(1, len(c) + 1, dtype=np.float64))
    slope = np.polyfit(rank, np.log(c), 1)[0]
    return float(-slope)


def previous_access(ids: np.ndarray) -> np.ndarray:
    """For each request, the index of the previous request to the same object (-1: none)."""
    n = len(ids)
    prev = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return prev
    order = np.argsort(ids, kind="stable")
    same = ids[order[1:]] == ids[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def summarize(source: TraceSource) -> TraceSummary:
    """One read of ``source``; :class:`BadInput` if it has no requests."""
    batches = list(source.batches())
    if not batches or not sum(len(b) for b in batches):
        raise BadInput(f"trace {source.path!r} has no requests; check the file and --format")
    ids = np.concatenate([b.obj_id for b in batches])
    sizes = np.concatenate([b.obj_size for b in batches])
    ts = np.concatenate([b.timestamp for b in batches])
    del batches
    uniq, first, counts = np.unique(ids, return_index=True, return_counts=True)
    obj_sizes = sizes[first]
    n_obj = len(uniq)
    desc = np.sort(counts)[::-1]
    top = np.cumsum(desc)
    n = len(ids)

    def share(frac: float) -> float:
        return float(top[max(1, int(np.ceil(n_obj * frac))) - 1] / n)

    prev = previous_access(ids)
    again = prev >= 0
    idx = np.arange(n, dtype=np.int64)
    dist = np.asarray(stack_distances(prev.tolist(), [1] * n), dtype=np.int64)
    ohw = int((counts == 1).sum())
    return TraceSummary(
        trace=source.path, format=source.format, requests=int(n), objects=int(n_obj),
        bytes_requested=int(sizes.sum()), working_set_bytes=int(obj_sizes.sum()),
        time_span=float(ts.max() - ts.min()), object_size=Distribution.of(obj_sizes.astype(np.float64)),
        zipf_alpha=zipf_alpha(counts), top_1pct_share=share(0.01), top_10pct_share=share(0.10),
        one_hit_wonders=ohw, one_hit_wonder_ratio=ohw / n_obj,
        reuse_requests=int(again.sum()),
        reuse_time=Distribution.of((idx - prev)[again].astype(np.float64)),
        reuse_distance=Distribution.of((dist[again] - 1).astype(np.float64)),
        reuse_seconds=Distribution.of((ts - ts[np.maximum(prev, 0)])[again]),
    )
