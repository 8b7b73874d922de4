"""GDSF, Greedy-Dual-Size-Frequency (Cherkasova, HP Labs 1998), as the ``libcachesim``
package runs it.

Each object's priority is ``L + freq * 1e6 / size`` (``freq`` its requests while resident,
``size`` its stored size: 1 in objects mode, where GDSF is LFU with aging), and the victim
is the lowest priority; ``L`` (the inflation value) becomes the victim's priority, so
objects that were popular long ago age out. Ties go to the object whose priority was set
longest ago (libCacheSim orders equal priorities FIFO by request time). The arithmetic is
libCacheSim's, in the same order (``freq * 1e6`` first), so equal doubles stay equal.

Two orders of a miss exist, and this is the one place where they differ:

* ``evict_first=False`` (the default, what the ``libcachesim`` package does, checked
  request by request in ``tests/policies/test_policies_new_vs_libcachesim.py``): the missed object
  is inserted with the *current* ``L`` and then the lowest priorities are evicted until the
  cache fits — the new object among them, so a large or cold object can be bypassed (its
  priority then becomes ``L``). :meth:`GDSF.on_miss` decides this before the cache evicts
  anything: the object is stored iff the residents ranked below it free enough room. When
  they exist but do not free enough (bytes mode only), libCacheSim evicts them and then the
  new object; the cache template here evicts only for an object it stores, so those
  residents stay — the one departure, rare and tested for size.
* ``evict_first=True`` (the paper's pseudo-code, and libCacheSim's C source ``GDSF.cpp``
  over ``cache_get_base``): evict until the object fits, then insert it with the raised
  ``L``; never bypasses. Checked against a brute-force implementation of the paper.

A binary heap with lazy deletion holds ``(priority, stamp, key)``; an entry is live while
it matches the key's current ``(priority, stamp)``. The heap is rebuilt from the live
entries when stale ones outnumber them, so it stays O(resident objects).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable

from aicache.policies.base import EvictionPolicy, Key


class GDSF(EvictionPolicy):
    name = "gdsf"
    sees_misses = True
    __slots__ = ("_heap", "_entry", "_freq", "_size", "_inflation", "_clock", "_used",
                 "evict_first", "_pending")

    def __init__(self, capacity: int, *, evict_first: bool = False,
                 rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        self.evict_first = bool(evict_first)
        self._heap: list[tuple[float, int, Key]] = []
        self._entry: dict[Key, tuple[float, int]] = {}  # key -> its live (priority, stamp)
        self._freq: dict[Key, int] = {}
        self._size: dict[Key, int] = {}
        self._inflation = 0.0
        self._clock = 0
        self._used = 0  # the residents' sizes (the cache's, mirrored for on_miss)
        self._pending: tuple[Key, float] | None = None  # a stored miss's priority, fixed on_miss

    def _push(self, key: Key, priority: float) -> None:
        self._clock += 1
        self._entry[key] = (priority, self._clock)
        heapq.heappush(self._heap, (priority, self._clock, key))
        if len(self._heap) > 2 * len(self._entry) + 64:
            self._heap = [(p, t, k) for k, (p, t) in self._entry.items()]
            heapq.heapify(self._heap)

    def on_miss(self, key: Key, size: int, now: float) -> bool | None:
        self._pending = None
        if self.evict_first or size > self.capacity:
            return None
        pri = self._inflation + 1.0e6 / size
        need = self._used + size - self.capacity
        if need > 0 and self._ranked_below(pri) < need:
            self._inflation = pri  # libCacheSim evicts the new object itself: L rises to it
            return False
        self._pending = (key, pri)
        return None

    def _ranked_below(self, pri: float) -> int:
        """Bytes of the residents that rank below a new object of priority ``pri`` (the
        new one is the newest, so it loses ties), counted in eviction order and only as
        far as the cache could need (its capacity)."""
        heap, entry = self._heap, self._entry
        popped: list[tuple[float, int, Key]] = []
        freed = 0
        while heap and freed < self.capacity:
            item = heapq.heappop(heap)
            p, t, k = item
            if entry.get(k) != (p, t):
                continue  # stale: dropped for good
            popped.append(item)
            if p > pri:
                break
            freed += self._size[k]
        for item in popped:
            heapq.heappush(heap, item)
        return freed

    def on_hit(self, key: Key, size: int, now: float) -> None:
        f = self._freq[key] + 1
        self._freq[key] = f
        self._push(key, self._inflation + f * 1.0e6 / self._size[key])

    def on_insert(self, key: Key, size: int, now: float) -> None:
        pending = self._pending
        self._pending = None
        self._freq[key] = 1
        self._size[key] = size
        self._used += size
        if pending is not None and pending[0] == key:
            self._push(key, pending[1])
        else:
            self._push(key, self._inflation + 1.0e6 / size)

    def victim(self, now: float) -> Key:
        heap, entry = self._heap, self._entry
        while True:
            p, t, key = heapq.heappop(heap)
            if entry.get(key) == (p, t):
                break
        self._inflation = p
        self._forget(key)
        return key

    def _forget(self, key: Key) -> None:
        self._used -= self._size.pop(key)
        del self._entry[key], self._freq[key]

    def on_remove(self, key: Key) -> None:
        self._forget(key)  # its heap entry is now stale; L is unchanged, as in libCacheSim

    def __contains__(self, key: object) -> bool:
        return key in self._entry

    def __len__(self) -> int:
        return len(self._entry)

    def keys(self) -> Iterable[Key]:
        return self._entry.keys()
