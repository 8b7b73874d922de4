"""Neighborhood prefetching (Li et al. 2004): on a miss, fetch the blocks around it.

Files sorted by path get consecutive block ranges, so the blocks next to a missed block are
the rest of its file and its sibling files in the same directory — the data-path locality a
skewed workload's hot set tends to have (popular shards, a hot directory, neighbouring
embedding rows). Only misses trigger it: a hit means the neighbourhood is probably already
resident, and prefetching on every hit of a hot item would only churn the fetch budget.

Order: nearest first, alternating after/before (``b+1, b-1, b+2, b-2, …``), ``after`` and
``before`` blocks on each side. Negative ids are never asked for.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from aicache.policies.base import PrefetchPolicy

_EMPTY: tuple[int, ...] = ()


class NeighborhoodPrefetcher(PrefetchPolicy):
    """On a miss of ``b``: ``b+1, b-1, b+2, b-2, …`` up to ``after``/``before`` blocks."""

    name = "neighborhood"

    def __init__(self, *, after: int = 2, before: int = 1) -> None:
        if after < 0 or before < 0:
            raise ValueError("after and before must be >= 0")
        self.after = after
        self.before = before

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        if hit:
            return _EMPTY
        out: list[int] = []
        for k in range(1, max(self.after, self.before) + 1):
            if k <= self.after:
                out.append(block + k)
            if k <= self.before and block - k >= 0:
                out.append(block - k)
        return out
