"""ARC (FAST'03) exactly as libCacheSim's ``ARC.c`` runs it, sizes in the cache's unit.

libCacheSim's ARC differs from the paper's page-count pseudo-code in ways that change miss
ratios, so they are kept:

* All four lists (T1, T2 data; B1, B2 ghosts) are measured in the cache's unit (bytes in
  bytes mode), ``p`` is a float, and a ghost hit moves ``p`` by
  ``max(|B2|/|B1|, 1)`` (B1 hit, capped at the capacity) or ``max(|B1|/|B2|, 1)`` (B2 hit,
  floored at 0), with the sizes taken *before* the ghost entry is dropped.
* The ghost hit is learned in ``find`` (our :meth:`ARC.on_miss`), before libCacheSim checks
  that the object fits at all; the insert that follows the same request goes to T2.
* Eviction for a ghost-hit request is REPLACE. Otherwise (paper's case IV): if
  ``|T1| + |B1| + incoming size > c``, drop B1's LRU and REPLACE when B1 is non-empty, else
  evict T1's LRU without a ghost; otherwise drop B2's LRU when the four lists total
  ``>= 2c`` (and B2 is non-empty), then REPLACE.
* REPLACE takes T1's LRU into B1 when ``|T1| > 0`` and (``|T1| > p`` or ``|T1| == p`` on a
  B2 hit), or when T2 is empty; else T2's LRU into B2.

Each list is an ``OrderedDict`` key -> size, LRU first.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable
from itertools import chain

from aicache.native import mypyc_attr
from aicache.policies.base import EvictionPolicy, Key


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class ARC(EvictionPolicy):
    name = "arc"
    owns_residency = True
    sees_misses = True
    __slots__ = ("_t1", "_t2", "_b1", "_b2", "_t1_size", "_t2_size", "_b1_size", "_b2_size",
                 "p", "_ghost_hit", "_incoming")

    def __init__(self, capacity: int, *, rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        self._t1: OrderedDict[Key, int] = OrderedDict()
        self._t2: OrderedDict[Key, int] = OrderedDict()
        self._b1: OrderedDict[Key, int] = OrderedDict()
        self._b2: OrderedDict[Key, int] = OrderedDict()
        self._t1_size = self._t2_size = self._b1_size = self._b2_size = 0
        #: target size of T1, in the cache's unit
        self.p = 0.0
        #: 0: the current miss was not in a ghost list; 1: it was in B1; 2: in B2
        self._ghost_hit = 0
        self._incoming = 0

    # -- events -----------------------------------------------------------------------
    def on_miss(self, key: Key, size: int, now: float) -> None:
        self._incoming = size
        s = self._b1.pop(key, None)
        if s is not None:
            self._ghost_hit = 1
            delta = max(self._b2_size / self._b1_size, 1.0)
            self.p = min(self.p + delta, float(self.capacity))
            self._b1_size -= s
            return
        s = self._b2.pop(key, None)
        if s is not None:
            self._ghost_hit = 2
            delta = max(self._b1_size / self._b2_size, 1.0)
            self.p = max(self.p - delta, 0.0)
            self._b2_size -= s
            return
        self._ghost_hit = 0

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._ghost_hit = 0
        s = self._t1.pop(key, None)
        if s is None:
            self._t2.move_to_end(key)
        else:
            self._t2[key] = s
            self._t1_size -= s
            self._t2_size += s

    def access(self, key: Key, now: float) -> bool:
        s = self._t1.pop(key, None)
        if s is not None:
            self._ghost_hit = 0
            self._t2[key] = s
            self._t1_size -= s
            self._t2_size += s
            return True
        t2 = self._t2
        if key in t2:
            self._ghost_hit = 0
            t2.move_to_end(key)
            return True
        return False

    def on_insert(self, key: Key, size: int, now: float) -> None:
        if self._ghost_hit:
            self._t2[key] = size
            self._t2_size += size
        else:
            self._t1[key] = size
            self._t1_size += size
        self._ghost_hit = 0

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> None:
        self._ghost_hit = 0  # a prefetch is no ghost hit
        self.on_insert(key, size, now)

    def victim(self, now: float) -> Key:
        if self._ghost_hit:
            return self._replace()
        c = self.capacity
        if self._t1_size + self._b1_size + self._incoming > c:
            if self._b1_size > 0:
                self._b1_size -= self._b1.popitem(last=False)[1]
                return self._replace()
            if self._t1:
                key, s = self._t1.popitem(last=False)  # evicted without a ghost
                self._t1_size -= s
                return key
            return self._replace()
        if (self._t1_size + self._b1_size + self._t2_size + self._b2_size >= 2 * c
                and self._b2_size > 0):
            self._b2_size -= self._b2.popitem(last=False)[1]
        return self._replace()

    def _replace(self) -> Key:
        t1 = self._t1_size
        if (t1 > 0 and (t1 > self.p or (t1 == self.p and self._ghost_hit == 2))) or not self._t2:
            key, s = self._t1.popitem(last=False)
            self._t1_size -= s
            self._b1[key] = s
            self._b1_size += s
        else:
            key, s = self._t2.popitem(last=False)
            self._t2_size -= s
            self._b2[key] = s
            self._b2_size += s
        return key

    def on_remove(self, key: Key) -> None:
        s = self._t1.pop(key, None)
        if s is not None:
            self._t1_size -= s
        else:
            self._t2_size -= self._t2.pop(key)

    # -- inspection ---------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._t1 or key in self._t2

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def keys(self) -> Iterable[Key]:
        return chain(self._t1.keys(), self._t2.keys())
