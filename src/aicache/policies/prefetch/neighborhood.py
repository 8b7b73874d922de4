"""Neighborhood prefetching (Li et al. 2004): on a miss, fetch the blocks around it; and
``neighborhood+readahead``, the same with sequential readahead while reads are in order.

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
from aicache.policies.prefetch.stride import ReadaheadPrefetcher

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


class NeighborhoodReadaheadPrefetcher(NeighborhoodPrefetcher):
    """Neighbourhood prefetch on a miss, plus JuiceFS-style readahead (step +1, adaptive
    depth) while the stream reads in order.

    A skewed stream's draws are independent, so consecutive +1 steps are rare and the
    readahead stays idle; but a unit under the skewed executor that starts reading in
    order (a scan that has begun before a review names it) gets a read-ahead window
    instead of two blocks per miss. The used/wasted feedback drives the readahead's depth;
    the neighbourhood has none."""

    name = "neighborhood+readahead"

    def __init__(self, *, after: int = 2, before: int = 1) -> None:
        super().__init__(after=after, before=before)
        self.readahead = ReadaheadPrefetcher()

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        ahead = self.readahead.on_access(unit, block, hit, now)
        near = super().on_access(unit, block, hit, now)
        if not ahead:
            return near
        return [*near, *ahead] if near else ahead

    def on_prefetch_used(self, block: int, now: float) -> None:
        self.readahead.on_prefetch_used(block, now)

    def on_prefetch_wasted(self, block: int, now: float) -> None:
        self.readahead.on_prefetch_wasted(block, now)

    def reset(self) -> None:
        self.readahead.reset()
