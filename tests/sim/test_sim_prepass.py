"""The simulator's pre-pass (``aicache.sim.cache_sim.scan``) against plain references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.sim.cache_sim import FirstSeen


@settings(max_examples=60)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 1000)),
                                 min_size=1, max_size=40), min_size=1, max_size=12),
       merge_min=st.integers(1, 64))
def test_first_seen_equals_a_plain_dict(batches: list[list[tuple[int, int]]],
                                        merge_min: int) -> None:
    """The vectorised distinct count and first-seen byte total against a dict filled
    request by request, merging after as few as one entry."""
    fs = FirstSeen(merge_min=merge_min)
    seen: dict[int, int] = {}
    for batch in batches:
        fs.add(np.array([k for k, _ in batch], dtype=np.uint64),
               np.array([s for _, s in batch], dtype=np.uint32))
        for k, s in batch:
            seen.setdefault(k, s)
    assert fs.totals() == (len(seen), sum(seen.values()))


def test_first_seen_counts_without_sizes() -> None:
    fs = FirstSeen(merge_min=1)
    for chunk in ([3, 1, 3], [2, 1], [9]):
        fs.add(np.array(chunk, dtype=np.uint64), None)
    assert fs.totals() == (4, 0)
    assert FirstSeen().totals() == (0, 0)
