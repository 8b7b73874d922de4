"""LeCaR (HotStorage'18): regret-minimising choice between an LRU and an LFU expert.

Follows libCacheSim's ``LeCaR.c``: learning rate 0.45, discount ``0.005 ** (1 / c)`` (``c``
the capacity in the cache's unit), both weights start at 0.5. On eviction the LRU candidate
(least recent) and the LFU candidate (lowest count, oldest in its count — see
:class:`~aicache.policies.eviction.lfu.FreqBuckets`) are compared; if they are the same
object it is evicted without a history entry, otherwise the LRU one is taken with
probability ``w_lru`` (drawn from the injected rng in hundredths, as libCacheSim draws
``rand() % 100``) and recorded in that expert's ghost history. Each history holds at most
``c // 2`` units (oldest dropped first). A miss that finds its id in a history (our
:meth:`LeCaR.on_miss`) penalises the expert that evicted it:
``w *= exp(-lr * dr ** t)`` with ``t`` the requests since that eviction, then both weights
are renormalised (with libCacheSim's 1e-10 guards).

Only the random stream differs from libCacheSim (its own generator vs. our injected
``random.Random``), so miss ratios agree statistically, not request by request.

``discount="entries"`` takes ``c`` as the cache's capacity in *entries*, as the LeCaR paper
defines it, where libCacheSim's ``c`` is the capacity in the cache's unit (bytes when sizes
count): over a byte budget that unit makes the discount ``0.005 ** (1 / bytes)``, about 1,
so a regret from long ago weighs as much as a fresh one. With entries, ``c`` is the number
of resident entries when the first eviction is due (the cache is full then; with equal
sizes it is ``capacity // size``), so with unit sizes both forms are the same policy.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from aicache.policies.base import EvictionPolicy, Key
from aicache.policies.eviction.lfu import FreqBuckets

_LRU, _LFU = 1, 2


class LeCaR(EvictionPolicy):
    name = "lecar"
    sees_misses = True
    __slots__ = ("_lru", "_lfu", "_hist_lru", "_hist_lfu", "_hist_lru_used", "_hist_lfu_used",
                 "_size", "w_lru", "w_lfu", "lr", "dr", "_vtime", "_hist_cap", "_dr_base",
                 "_dr_pending")

    def __init__(self, capacity: int, *, learning_rate: float = 0.45,
                 discount_base: float = 0.005, discount: str = "capacity", **kw: Any) -> None:
        super().__init__(capacity, **kw)
        if discount not in ("capacity", "entries"):
            raise ValueError(f"discount={discount!r}: 'capacity' (libCacheSim's) or 'entries' (the paper's)")
        self._lru: OrderedDict[Key, None] = OrderedDict()
        self._lfu = FreqBuckets()
        # history: key -> (size, eviction vtime), most recent last
        self._hist_lru: OrderedDict[Key, tuple[int, int]] = OrderedDict()
        self._hist_lfu: OrderedDict[Key, tuple[int, int]] = OrderedDict()
        self._hist_lru_used = self._hist_lfu_used = 0
        self._hist_cap = capacity // 2
        self._size: dict[Key, int] = {}
        self.w_lru = self.w_lfu = 0.5
        self.lr = learning_rate
        self.dr = discount_base ** (1.0 / capacity) if capacity > 0 else 0.0
        self._dr_base = discount_base
        #: entries: ``dr`` is set at the first eviction, from the entries resident then
        self._dr_pending = discount == "entries"
        self._vtime = 0

    def _penalise(self, evicted_at: int, lru_erred: bool) -> None:
        r = self.dr ** (self._vtime - evicted_at)
        if lru_erred:
            w_up, w_other = self.w_lru, self.w_lfu
        else:
            w_up, w_other = self.w_lfu, self.w_lru
        w_up = w_up * math.exp(-self.lr * r) + 1e-10
        s = w_up + w_other + 2e-10
        w_up /= s
        w_other = (w_other + 1e-10) / s
        if lru_erred:
            self.w_lru, self.w_lfu = w_up, w_other
        else:
            self.w_lfu, self.w_lru = w_up, w_other

    # -- events -----------------------------------------------------------------------
    def on_miss(self, key: Key, size: int, now: float) -> None:
        self._vtime += 1
        entry = self._hist_lru.pop(key, None)
        if entry is not None:
            self._hist_lru_used -= entry[0]
            self._penalise(entry[1], lru_erred=True)
            return
        entry = self._hist_lfu.pop(key, None)
        if entry is not None:
            self._hist_lfu_used -= entry[0]
            self._penalise(entry[1], lru_erred=False)

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._vtime += 1
        self._lru.move_to_end(key)
        self._lfu.bump(key)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._lru[key] = None
        self._lfu.add(key)
        self._size[key] = size

    def victim(self, now: float) -> Key:
        if self._dr_pending:
            self._dr_pending = False
            self.dr = self._dr_base ** (1.0 / len(self._size))
        lru_key = next(iter(self._lru))
        lfu_key = self._lfu.peek_min()
        if lru_key == lfu_key:
            expert = 0
            key = lru_key
        elif self.rng.randrange(100) / 100.0 < self.w_lru:
            expert, key = _LRU, lru_key
        else:
            expert, key = _LFU, lfu_key
        del self._lru[key]
        self._lfu.remove(key)
        s = self._size.pop(key)
        if expert == _LRU:
            self._record(self._hist_lru, key, s, lru=True)
        elif expert == _LFU:
            self._record(self._hist_lfu, key, s, lru=False)
        return key

    def _record(self, hist: OrderedDict[Key, tuple[int, int]], key: Key, s: int,
                lru: bool) -> None:
        hist[key] = (s, self._vtime)
        used = (self._hist_lru_used if lru else self._hist_lfu_used) + s
        while used > self._hist_cap and hist:
            used -= hist.popitem(last=False)[1][0]
        if lru:
            self._hist_lru_used = used
        else:
            self._hist_lfu_used = used

    def on_remove(self, key: Key) -> None:
        del self._lru[key]
        self._lfu.remove(key)
        del self._size[key]

    # -- inspection ---------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._size

    def __len__(self) -> int:
        return len(self._size)

    def keys(self) -> Iterable[Key]:
        return self._lru.keys()
