"""2Q (Johnson & Shasha, VLDB'94, the "full version") as libCacheSim's ``TwoQ.c`` runs it.

Three queues sized in the cache's unit (bytes in bytes mode): **A1in**, a FIFO of objects
seen once (``int(c * ain_size_ratio)``, default 0.25); **A1out**, a FIFO *ghost* of ids
evicted from A1in (``int(c * aout_size_ratio)``, default 0.5, each id holding its size);
**Am**, an LRU of objects re-referenced after leaving A1in (the rest, ``c - A1in``).

* A miss whose id is in A1out (our :meth:`TwoQ.on_miss`) drops it from the ghost and the
  object goes to Am; any other miss goes to A1in. A hit in A1in changes nothing (its
  correlated references are ignored, the paper's point); a hit in Am moves it to the MRU end.
* Eviction: from A1in while it holds more than its size (the evicted id enters A1out,
  whose oldest ids make room), else Am's LRU object.
* ``can_insert``: an object larger than A1in is not cached at all (``on_miss`` returns
  False), as in libCacheSim; so the cache needs a capacity of at least 4 objects.

One departure, bytes mode only: libCacheSim inserts into Am through a nested LRU cache of
``c - A1in`` that may evict from Am on its own when A1in holds less than its size, after
the outer loop has already made room; the cache template here evicts only as much as the
incoming object needs, so in that case Am keeps objects libCacheSim would drop. In objects
mode A1in never drops below its size once it has filled, so the two agree on every request
(``tests/policies/test_policies_vs_libcachesim.py`` checks both modes).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable
from itertools import chain

from aicache.errors import BadInput
from aicache.policies.base import EvictionPolicy, Key


class TwoQ(EvictionPolicy):
    name = "2q"
    sees_misses = True
    __slots__ = ("_ain", "_aout", "_am", "_ain_used", "_aout_used", "ain_cap", "aout_cap",
                 "_ghost_hit")

    def __init__(self, capacity: int, *, ain_size_ratio: float = 0.25,
                 aout_size_ratio: float = 0.5, rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        if not 0.0 < ain_size_ratio < 1.0 or aout_size_ratio < 0.0:
            raise BadInput(f"2q: ain_size_ratio={ain_size_ratio} must be in (0, 1) and "
                           f"aout_size_ratio={aout_size_ratio} non-negative (libCacheSim: 0.25, 0.5)")
        self.ain_cap = int(capacity * ain_size_ratio)
        if self.ain_cap <= 0:
            raise BadInput(f"2q: capacity {capacity} leaves an empty A1in queue "
                           f"(ain_size_ratio={ain_size_ratio}); use a capacity of at least "
                           f"{int(1 / ain_size_ratio + 0.999999)}")
        self.aout_cap = int(capacity * aout_size_ratio)
        self._ain: OrderedDict[Key, int] = OrderedDict()   # oldest first
        self._aout: OrderedDict[Key, int] = OrderedDict()  # ghost ids, oldest first
        self._am: OrderedDict[Key, int] = OrderedDict()    # LRU first
        self._ain_used = 0
        self._aout_used = 0
        self._ghost_hit: Key | None = None  # the missed id that was found in A1out

    def on_miss(self, key: Key, size: int, now: float) -> bool | None:
        ghost = self._aout.pop(key, None)
        if ghost is not None:
            self._aout_used -= ghost
            self._ghost_hit = key
        else:
            self._ghost_hit = None
        return size <= self.ain_cap

    def on_hit(self, key: Key, size: int, now: float) -> None:
        if key in self._am:
            self._am.move_to_end(key)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        if self._ghost_hit is not None and self._ghost_hit == key:
            self._ghost_hit = None
            self._am[key] = size
            return
        self._ain[key] = size
        self._ain_used += size

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> None:
        self._ain[key] = size  # not an access: never promoted by a stale ghost hit
        self._ain_used += size

    def victim(self, now: float) -> Key:
        if self._ain and (self._ain_used > self.ain_cap or not self._am):
            key, size = self._ain.popitem(last=False)
            self._ain_used -= size
            self._remember(key, size)
            return key
        return self._am.popitem(last=False)[0]

    def _remember(self, key: Key, size: int) -> None:
        """A1out's ``get``: a FIFO ghost in the cache's unit; an id larger than it is not kept."""
        if size > self.aout_cap:
            return
        aout = self._aout
        while self._aout_used + size > self.aout_cap:
            self._aout_used -= aout.popitem(last=False)[1]
        aout[key] = size
        self._aout_used += size

    def on_remove(self, key: Key) -> None:
        size = self._ain.pop(key, None)
        if size is not None:
            self._ain_used -= size
        else:
            del self._am[key]

    def __contains__(self, key: object) -> bool:
        return key in self._ain or key in self._am

    def __len__(self) -> int:
        return len(self._ain) + len(self._am)

    def keys(self) -> Iterable[Key]:
        return chain(self._ain.keys(), self._am.keys())
