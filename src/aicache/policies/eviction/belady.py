"""Belady's MIN: evict the object whose next access is farthest in the future.

Offline (``needs_future = True``): the driver calls :meth:`Belady.set_next_access` before
each request with the request index of the next access to the same object (``-1`` =
never). Like libCacheSim's ``Belady.c`` there is no bypass: every missed object that fits
is inserted, even one that is never requested again, so the result is "optimal eviction"
(the libCacheSim number), not the optimal admission-aware bound.

Tie-breaking matches libCacheSim exactly. Next access times are unique except for objects
never requested again, which all share the top priority; in objects mode any of them is an
equally good victim, but in bytes mode *which* one goes changes the occupancy and so the
following evictions. libCacheSim picks whichever sits at the root of its binary max-heap
(Volkan Yazıcı's libpqueue: 1-based array, sift-up on a strict ``<``, the right child wins
only when strictly larger), so :class:`_PQueue` replays the same heap operations in the
same order: insert on a miss, change-priority on a hit, pop on eviction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aicache.policies.base import EvictionPolicy, Key

NEVER_PRIORITY = (1 << 63) - 1  #: libCacheSim's INT64_MAX for "no future access"


class _PQueue:
    """Indexed binary max-heap with libpqueue's exact move order (slot 0 unused)."""

    __slots__ = ("d", "pri", "pos")

    def __init__(self) -> None:
        self.d: list[Key] = [None]
        self.pri: dict[Key, int] = {}
        self.pos: dict[Key, int] = {}

    def _bubble_up(self, i: int) -> None:
        d, pri, pos = self.d, self.pri, self.pos
        node = d[i]
        p_node = pri[node]
        parent = i >> 1
        while i > 1 and pri[d[parent]] < p_node:
            d[i] = d[parent]
            pos[d[i]] = i
            i = parent
            parent = i >> 1
        d[i] = node
        pos[node] = i

    def _percolate_down(self, i: int) -> None:
        d, pri, pos = self.d, self.pri, self.pos
        size = len(d)
        node = d[i]
        p_node = pri[node]
        while True:
            child = i << 1
            if child >= size:
                break
            if child + 1 < size and pri[d[child]] < pri[d[child + 1]]:
                child += 1
            if not p_node < pri[d[child]]:
                break
            d[i] = d[child]
            pos[d[i]] = i
            i = child
        d[i] = node
        pos[node] = i

    def insert(self, key: Key, priority: int) -> None:
        self.pri[key] = priority
        self.d.append(key)
        self._bubble_up(len(self.d) - 1)

    def change_priority(self, key: Key, priority: int) -> None:
        old = self.pri[key]
        self.pri[key] = priority
        if old < priority:
            self._bubble_up(self.pos[key])
        else:
            self._percolate_down(self.pos[key])

    def pop(self) -> Key:
        d = self.d
        head = d[1]
        last = d.pop()
        if len(d) > 1:
            d[1] = last
            self._percolate_down(1)
        del self.pri[head], self.pos[head]
        return head

    def remove(self, key: Key) -> None:
        d = self.d
        i = self.pos.pop(key)
        p_removed = self.pri.pop(key)
        last = d.pop()
        if i < len(d):
            d[i] = last
            if p_removed < self.pri[last]:
                self._bubble_up(i)
            else:
                self._percolate_down(i)


class Belady(EvictionPolicy):
    name = "belady"
    needs_future = True
    __slots__ = ("_pq", "_next")

    def __init__(self, capacity: int, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        self._pq = _PQueue()
        self._next = NEVER_PRIORITY

    def set_next_access(self, next_vtime: int) -> None:
        self._next = NEVER_PRIORITY if next_vtime < 0 else next_vtime

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._pq.change_priority(key, self._next)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._pq.insert(key, self._next)

    def victim(self, now: float) -> Key:
        return self._pq.pop()

    def on_remove(self, key: Key) -> None:
        self._pq.remove(key)

    def __contains__(self, key: object) -> bool:
        return key in self._pq.pos

    def __len__(self) -> int:
        return len(self._pq.pos)

    def keys(self) -> Iterable[Key]:
        return self._pq.pos.keys()
