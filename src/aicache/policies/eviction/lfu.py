"""LFU with libCacheSim's tie-breaking (``LFU.c``).

libCacheSim keeps one FIFO list per frequency and evicts the *first* object of the lowest
non-empty frequency: among equally frequent objects, the one that reached that frequency
longest ago goes first. Frequencies start at 1 on insert and are forgotten on eviction (no
history), so a re-inserted object starts again at 1. Ties never depend on hashing or set
iteration order, unlike cachetools' LFU.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from aicache.policies.base import EvictionPolicy, Key


class FreqBuckets:
    """Objects grouped by access count: count -> ``OrderedDict`` in bucket-entry order.

    O(1) for add/bump/remove; finding the new minimum after the minimum bucket empties walks
    up the counts (as libCacheSim's ``update_min_freq`` does), amortised by the hits that
    created those counts. Shared by :class:`LFU` and LeCaR's LFU expert.
    """

    __slots__ = ("freq", "buckets", "min_freq", "max_freq")

    def __init__(self) -> None:
        self.freq: dict[Key, int] = {}
        self.buckets: dict[int, OrderedDict[Key, None]] = {1: OrderedDict()}
        self.min_freq = 1
        self.max_freq = 1

    def add(self, key: Key) -> None:
        self.freq[key] = 1
        self.buckets[1][key] = None
        self.min_freq = 1

    def bump(self, key: Key) -> None:
        f = self.freq[key]
        old = self.buckets[f]
        del old[key]
        f += 1
        self.freq[key] = f
        new = self.buckets.get(f)
        if new is None:
            new = self.buckets[f] = OrderedDict()
            if f > self.max_freq:
                self.max_freq = f
        new[key] = None
        if not old:
            if f - 1 != 1:
                del self.buckets[f - 1]
            if self.min_freq == f - 1:
                self.min_freq = f

    def _fix_min(self) -> None:
        buckets = self.buckets
        f = self.min_freq
        while f <= self.max_freq:
            b = buckets.get(f)
            if b:
                self.min_freq = f
                return
            f += 1

    def peek_min(self) -> Key:
        b = self.buckets.get(self.min_freq)
        if not b:
            self._fix_min()
            b = self.buckets[self.min_freq]
        return next(iter(b))

    def pop_min(self) -> Key:
        b = self.buckets.get(self.min_freq)
        if not b:
            self._fix_min()
            b = self.buckets[self.min_freq]
        key = b.popitem(last=False)[0]
        del self.freq[key]
        return key

    def remove(self, key: Key) -> None:
        f = self.freq.pop(key)
        b = self.buckets[f]
        del b[key]
        if not b and f != 1:
            del self.buckets[f]

    def __contains__(self, key: object) -> bool:
        return key in self.freq

    def __len__(self) -> int:
        return len(self.freq)


class LFU(EvictionPolicy):
    name = "lfu"
    __slots__ = ("_fb",)

    def __init__(self, capacity: int, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        self._fb = FreqBuckets()

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._fb.bump(key)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._fb.add(key)

    def victim(self, now: float) -> Key:
        return self._fb.pop_min()

    def on_remove(self, key: Key) -> None:
        self._fb.remove(key)

    def __contains__(self, key: object) -> bool:
        return key in self._fb.freq

    def __len__(self) -> int:
        return len(self._fb.freq)

    def keys(self) -> Iterable[Key]:
        return self._fb.freq.keys()
