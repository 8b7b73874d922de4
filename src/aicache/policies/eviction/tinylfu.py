"""W-TinyLFU (TOS'17) as libCacheSim's ``WTinyLFU.c`` runs it, sizes in the cache's unit.

A small LRU *window* (``int(c * window_size)``, 1% by default) takes every new object; a
segmented LRU *main* cache holds the rest (libCacheSim's ``SLRU`` with ``seg-size=1:4``:
a probation segment of ``int(m / 5)`` and a protected one of ``int(4 m / 5)``). An object
leaving the window enters main while main has room; when main is full it enters only if
a counting Bloom filter (the TinyLFU sketch) estimates it more popular than main's next
victim, which it then replaces. libCacheSim details kept because they change miss ratios:

* One eviction (libCacheSim's ``WTinyLFU_evict``) moves window objects into main until
  one of them loses the comparison and is evicted; each replacement evicts main's victim
  on the way, so one call can evict several objects (the policy is ``self_evicting``).
* The sketch counts an id when it enters the window, on each hit in main (not in the
  window), and each time it is the window's victim in that loop. After ``32 m`` hits in
  main every counter is halved. The sketch is libCacheSim's ``minimalIncrementCBF``:
  ``ceil(m * 14.38)`` 32-bit counters for a 0.1% error, 10 positions
  ``(a + i b) mod n`` from the low 32 bits of ``XXH64`` of the 8-byte id with libCacheSim's
  two seeds; every position is incremented (libCacheSim's "minimal increment" test is
  only a debug print), an estimate is the minimum.
* SLRU: a hit in probation promotes to protected; an overflowing protected segment cools
  its oldest object into probation, and an overflowing probation segment *evicts* — so a
  hit can evict. An insert goes to the first segment with room (probation, else
  protected), else to probation after evicting.
* An object larger than the window, than main or than the probation segment is not cached;
  below 100 units the window is 0 and nothing is cached, as in libCacheSim.

Keys that are not ints are hashed with :func:`hash` into the sketch (libCacheSim has only
integer ids).
"""

from __future__ import annotations

import math
import random
from array import array
from collections import OrderedDict
from collections.abc import Iterable

import xxhash

from aicache.errors import BadInput
from aicache.native import mypyc_attr
from aicache.policies.base import Key, SelfEvicting

_M64 = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
#: libCacheSim's HASH_SEED0 and HASH_SEED1
SEED0 = 0x12345678
SEED1 = 0x12344321


def xxh64_u64(value: int, seed: int) -> int:
    """XXH64 of the 8 little-endian bytes of ``value`` (mod 2**64), the only input the
    sketch hashes, written out so the sketch's hash is stated here; the sketch calls the
    ``xxhash`` package's C version, and the tests check the two agree."""
    h = (seed + _P5 + 8) & _M64
    k = ((value & _M64) * _P2) & _M64
    k = (((k << 31) | (k >> 33)) & _M64) * _P1 & _M64
    h ^= k
    h = ((((h << 27) | (h >> 37)) & _M64) * _P1 + _P4) & _M64
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


class CountingBloomFilter:
    """libCacheSim's ``minimalIncrementCBF`` (see the module docstring)."""

    __slots__ = ("counters", "n", "hashes")

    def __init__(self, entries: int, error: float = 0.001) -> None:
        bpe = -math.log(error) / 0.480453013918201
        self.hashes = int(math.ceil(0.693147180559945 * bpe))
        n = int(min(math.ceil(bpe * entries), 2**31 - 1))
        self.n = n if n >= self.hashes else 2 * self.hashes
        self.counters = array("I", bytes(4 * self.n))

    def _positions(self, key: Key) -> list[int]:
        v = (key if isinstance(key, int) else hash(key)) & _M64
        raw = v.to_bytes(8, "little")  # the C hash; xxh64_u64 is the same function
        a = xxhash.xxh64_intdigest(raw, SEED0) & 0xFFFFFFFF
        b = xxhash.xxh64_intdigest(raw, SEED1) & 0xFFFFFFFF
        n = self.n
        return [((a + i * b) & 0xFFFFFFFF) % n for i in range(self.hashes)]

    def estimate(self, key: Key) -> int:
        c = self.counters
        return min(c[x] for x in self._positions(key))

    def add(self, key: Key) -> None:
        c = self.counters
        for x in self._positions(key):
            c[x] += 1

    def halve(self) -> None:
        c = self.counters
        for i in range(self.n):
            c[i] >>= 1


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class WTinyLFU(SelfEvicting):
    name = "wtinylfu"
    sees_misses = True
    __slots__ = ("window_cap", "main_cap", "seg_cap", "_window", "_window_used", "_segs",
                 "_seg_used", "_sketch", "_main_hits", "_decay_every")

    def __init__(self, capacity: int, *, window_size: float = 0.01,
                 rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        if not 0.0 <= window_size < 1.0:
            raise BadInput(f"wtinylfu: window_size={window_size} must be in [0, 1); "
                           "libCacheSim's default is 0.01")
        self.window_cap = int(capacity * window_size)
        self.main_cap = capacity - self.window_cap
        self.seg_cap = (int(1 / 5 * self.main_cap), int(4 / 5 * self.main_cap))
        self._window: OrderedDict[Key, int] = OrderedDict()  # LRU, oldest first
        self._window_used = 0
        # SLRU: probation, protected; each key -> size, oldest first
        self._segs: tuple[OrderedDict[Key, int], OrderedDict[Key, int]] = (OrderedDict(),
                                                                           OrderedDict())
        self._seg_used = [0, 0]
        self._sketch = CountingBloomFilter(self.main_cap)
        self._main_hits = 0
        self._decay_every = 32 * self.main_cap

    # -- the SLRU main cache --------------------------------------------------------------
    def _main_victim(self) -> Key:
        for seg in self._segs:
            if seg:
                return next(iter(seg))
        raise KeyError("main cache is empty")

    def _main_evict(self) -> None:
        for i, seg in enumerate(self._segs):
            if seg:
                key, s = seg.popitem(last=False)
                self._seg_used[i] -= s
                self._evicted.append(key)
                return

    def _main_insert(self, key: Key, size: int) -> None:
        used, cap = self._seg_used, self.seg_cap
        for i in (0, 1):
            if used[i] + size <= cap[i]:
                self._segs[i][key] = size
                used[i] += size
                return
        while used[0] + used[1] + size > self.main_cap:
            self._main_evict()
        self._segs[0][key] = size
        used[0] += size

    def _main_hit(self, key: Key) -> None:
        probation, protected = self._segs
        s = probation.pop(key, None)
        used, cap = self._seg_used, self.seg_cap
        if s is None:
            protected.move_to_end(key)
            return
        used[0] -= s
        protected[key] = s
        used[1] += s
        while used[1] > cap[1]:
            k, s2 = protected.popitem(last=False)
            used[1] -= s2
            probation[k] = s2
            used[0] += s2
            while used[0] > cap[0]:
                self._main_evict()

    # -- events -----------------------------------------------------------------------
    def on_miss(self, key: Key, size: int, now: float) -> bool:
        """libCacheSim's ``can_insert``: the object must fit the window, main and its
        probation segment."""
        return size <= self.window_cap and size <= self.main_cap and size <= self.seg_cap[0]

    def on_hit(self, key: Key, size: int, now: float) -> None:
        if key in self._evicted:  # a driver that does not drain still holds it: re-admit
            self._evicted.remove(key)
            self.on_insert(key, size, now)
            return
        if key in self._window:
            self._window.move_to_end(key)
            return
        self._main_hit(key)
        self._sketch.add(key)
        self._main_hits += 1
        if self._main_hits >= self._decay_every:
            self._main_hits = 0
            self._sketch.halve()

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._window[key] = size
        self._window_used += size
        self._sketch.add(key)

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> bool:
        if not self.on_miss(key, size, now):
            return False
        self.on_insert(key, size, now)
        return True

    def victim(self, now: float) -> Key:
        """One ``WTinyLFU_evict``: returns the first key it evicts, the rest are pending."""
        if self._evicted:
            return self._evicted.pop(0)
        window, sketch = self._window, self._sketch
        while not self._evicted:
            if not window:
                self._main_evict()
                break
            key = next(iter(window))
            size = window[key]
            if self._seg_used[0] + self._seg_used[1] + size <= self.main_cap:
                del window[key]
                self._window_used -= size
                self._main_insert(key, size)
            elif ((self._segs[0] or self._segs[1])  # (empty only for a driver that
                  # skipped on_miss and inserted an object larger than main)
                  and sketch.estimate(key) > sketch.estimate(self._main_victim())):
                self._main_evict()
                del window[key]
                self._window_used -= size
                self._main_insert(key, size)
            else:
                del window[key]
                self._window_used -= size
                self._evicted.append(key)
            sketch.add(key)
        return self._evicted.pop(0)

    def on_remove(self, key: Key) -> None:
        if key in self._evicted:
            self._evicted.remove(key)
            return
        s = self._window.pop(key, None)
        if s is not None:
            self._window_used -= s
            return
        for i, seg in enumerate(self._segs):
            s = seg.pop(key, None)
            if s is not None:
                self._seg_used[i] -= s
                return
        raise KeyError(key)

    # -- inspection ---------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return (key in self._window or key in self._segs[0] or key in self._segs[1]
                or key in self._evicted)

    def __len__(self) -> int:
        return (len(self._window) + len(self._segs[0]) + len(self._segs[1])
                + len(self._evicted))

    def keys(self) -> Iterable[Key]:
        return [*self._window, *self._segs[0], *self._segs[1], *self._evicted]
