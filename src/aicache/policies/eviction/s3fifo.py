"""S3-FIFO (SOSP'23) exactly as libCacheSim's ``S3FIFO.c`` runs it.

Three FIFO queues sized in the cache's unit (bytes in bytes mode): *small*
(``int(c * small_size_ratio)``), *main* (the rest) and a *ghost* of evicted ids
(``int(c * ghost_size_ratio)``, holding each id's size). libCacheSim details kept because
they change miss ratios:

* A miss first looks in the ghost (our :meth:`S3FIFO.on_miss`) and drops the id from it;
  the insert that follows goes to main. Otherwise the object goes to small, except that
  before the first eviction ever, objects arriving while small is full go to main.
* A capacity whose small queue rounds to 0 is refused (``BadInput``), as libCacheSim
  refuses it; note that with a small queue of 1 unit (objects mode, 10–19 objects) every
  object is as large as small and none is ever cached — libCacheSim's behaviour, kept.
* ``can_insert``: an object larger than small is not cached at all (``on_miss`` returns
  False), and one exactly as large as small is *declined after eviction* when it did not
  hit the ghost (``on_insert`` returns False): libCacheSim makes room, then refuses it.
* Hits count up without bound. Evicting from small moves objects with count >=
  ``move_to_main_threshold`` (libCacheSim's default, 2) to main (count reset to 0) and
  stops at the first object it really evicts, which goes to the ghost (a FIFO sized in
  the cache's unit; an id larger than it is not recorded). Evicting from main reinserts
  objects with count >= 1 at the head with ``min(count, 3) - 1`` (a 2-bit clock) and
  evicts the first with count 0.
* Main is evicted from when it is over its size or small is empty, else small.

Queues are ``OrderedDict`` key -> size (oldest first); counts live in one dict, so a hit
is a single dict update.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Iterable
from itertools import chain

from aicache.errors import BadInput
from aicache.native import mypyc_attr
from aicache.policies.base import EvictionPolicy, Key


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class S3FIFO(EvictionPolicy):
    name = "s3fifo"
    owns_residency = True
    sees_misses = True
    may_decline = True
    __slots__ = ("_small", "_main", "_ghost", "_freq", "_small_used", "_main_used",
                 "_ghost_used", "small_cap", "main_cap", "ghost_cap", "_threshold",
                 "_ghost_hit", "_has_evicted")

    def __init__(self, capacity: int, *, small_size_ratio: float = 0.1,
                 ghost_size_ratio: float = 0.9, move_to_main_threshold: int = 2,
                 rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        if not 0.0 < small_size_ratio < 1.0:
            raise BadInput(f"s3fifo: small_size_ratio={small_size_ratio} must be between 0 "
                           f"and 1 (exclusive); libCacheSim's default is 0.1")
        self.small_cap = int(capacity * small_size_ratio)
        if self.small_cap <= 0:
            # libCacheSim refuses this configuration too: nothing could ever be admitted.
            need = math.ceil(1 / small_size_ratio)
            raise BadInput(
                f"s3fifo: capacity {capacity} leaves an empty small queue "
                f"(small_size_ratio={small_size_ratio}); use a capacity of at least {need}"
            )
        self.main_cap = capacity - self.small_cap
        self.ghost_cap = int(capacity * ghost_size_ratio)
        self._threshold = move_to_main_threshold
        # queues: key -> size, oldest first; access counts of resident keys in _freq
        self._small: OrderedDict[Key, int] = OrderedDict()
        self._main: OrderedDict[Key, int] = OrderedDict()
        self._ghost: OrderedDict[Key, int] = OrderedDict()
        self._freq: dict[Key, int] = {}
        self._small_used = self._main_used = self._ghost_used = 0
        self._ghost_hit = False
        self._has_evicted = False

    # -- events -----------------------------------------------------------------------
    def on_miss(self, key: Key, size: int, now: float) -> bool:
        """Learn a ghost hit; refuse (libCacheSim's ``can_insert``) what exceeds small."""
        s = self._ghost.pop(key, None)
        if s is None:
            self._ghost_hit = False
        else:
            self._ghost_used -= s
            self._ghost_hit = True
        return size <= self.small_cap

    def on_hit(self, key: Key, size: int, now: float) -> None:
        # (no need to clear _ghost_hit: only an insert reads it, and every demand insert
        # follows its own on_miss, every prefetch insert clears it)
        self._freq[key] += 1

    def access(self, key: Key, now: float) -> bool:
        freq = self._freq
        f = freq.get(key)
        if f is None:
            return False
        freq[key] = f + 1
        return True

    def on_insert(self, key: Key, size: int, now: float) -> bool:
        if self._ghost_hit:
            self._ghost_hit = False
            self._main[key] = size
            self._main_used += size
        elif size >= self.small_cap:
            return False
        elif not self._has_evicted and self._small_used >= self.small_cap:
            self._main[key] = size
            self._main_used += size
        else:
            self._small[key] = size
            self._small_used += size
        self._freq[key] = 0
        return True

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> bool:
        """A prefetch is no ghost hit. (A prefetched object larger than small is declined
        here, after the cache made room: prefetch has no ``on_miss`` to refuse it early.)"""
        self._ghost_hit = False
        if size > self.small_cap:
            return False
        return self.on_insert(key, size, now)

    def victim(self, now: float) -> Key:
        """Evict one resident key; moves between queues on the way are not evictions.

        libCacheSim's ``S3FIFO_evict`` may only move objects from small to main; its caller
        then calls it again. Looping here is the same thing, so every call returns a key.
        Both queue scans are inlined: this is the simulator's hot path.
        """
        self._has_evicted = True
        small, main, freq = self._small, self._main, self._freq
        while True:
            if self._main_used > self.main_cap or not small:
                while main:  # 2-bit clock over main
                    key, s = main.popitem(last=False)
                    f = freq[key]
                    if f:
                        main[key] = s
                        freq[key] = (f if f < 3 else 3) - 1
                        continue
                    del freq[key]
                    self._main_used -= s
                    return key
                continue
            threshold = self._threshold
            while small:  # promote accessed objects until one is evicted
                key, s = small.popitem(last=False)
                self._small_used -= s
                if freq[key] >= threshold:
                    main[key] = s
                    freq[key] = 0
                    self._main_used += s
                    continue
                del freq[key]
                if s <= self.ghost_cap:
                    ghost = self._ghost
                    used = self._ghost_used + s
                    while used > self.ghost_cap and ghost:
                        used -= ghost.popitem(last=False)[1]
                    ghost[key] = s
                    self._ghost_used = used
                return key

    def on_remove(self, key: Key) -> None:
        del self._freq[key]
        s = self._small.pop(key, None)
        if s is not None:
            self._small_used -= s
        else:
            self._main_used -= self._main.pop(key)

    # -- inspection ---------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._freq

    def __len__(self) -> int:
        return len(self._freq)

    def keys(self) -> Iterable[Key]:
        return chain(self._small.keys(), self._main.keys())
