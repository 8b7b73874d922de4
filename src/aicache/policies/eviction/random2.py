"""2-random (JuiceFS's cache eviction): sample two resident keys, evict the one used longer ago.

JuiceFS samples a couple of entries of its cache map and drops the one with the older access
time; it needs no ordered structure and approximates LRU well. Here the two samples are
*distinct* keys drawn with the injected rng (``randrange(n)``, then ``randrange(n - 1)``
shifted past the first), so a run is reproducible from its seed. Recency is a logical
counter bumped on every insert and hit — told ``now`` may repeat, a counter never ties.

O(1) per event: keys live in an array with a key -> index map, and removal swaps the last
key into the hole (swap-remove), so sampling is one index draw.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aicache.policies.base import EvictionPolicy, Key


class TwoRandom(EvictionPolicy):
    name = "2-random"
    __slots__ = ("_keys", "_index", "_last", "_tick")

    def __init__(self, capacity: int, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        self._keys: list[Key] = []
        self._index: dict[Key, int] = {}
        self._last: list[int] = []  # parallel to _keys: logical time of last use
        self._tick = 0

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._tick += 1
        self._last[self._index[key]] = self._tick

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._tick += 1
        self._index[key] = len(self._keys)
        self._keys.append(key)
        self._last.append(self._tick)

    def _sample_slots(self) -> tuple[int, int]:
        """Two distinct slot indices (the same one twice only if a single key is resident)."""
        n = len(self._keys)
        if n == 1:
            return 0, 0
        randrange = self.rng.randrange
        i = randrange(n)
        j = randrange(n - 1)
        if j >= i:
            j += 1
        return i, j

    def sample(self) -> tuple[Key, Key]:
        """The two keys the next :meth:`victim` would compare, for the same rng state."""
        i, j = self._sample_slots()
        return self._keys[i], self._keys[j]

    def last_use(self, key: Key) -> int:
        """Logical time of ``key``'s last insert or hit (larger = more recent)."""
        return self._last[self._index[key]]

    def victim(self, now: float) -> Key:
        i, j = self._sample_slots()
        last = self._last
        slot = i if last[i] <= last[j] else j
        key = self._keys[slot]
        self._drop(slot)
        return key

    def _drop(self, slot: int) -> None:
        keys, last, index = self._keys, self._last, self._index
        key = keys[slot]
        tail_key = keys.pop()
        tail_last = last.pop()
        if slot < len(keys):
            keys[slot] = tail_key
            last[slot] = tail_last
            index[tail_key] = slot
        del index[key]

    def on_remove(self, key: Key) -> None:
        self._drop(self._index[key])

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> Iterable[Key]:
        return self._index.keys()


class TwoRandomUnreadLast(EvictionPolicy):
    """2-random over the blocks that have been read; prefetched blocks not read yet are
    taken only when no read block is left or when they hold more than half the capacity.

    Why: a prefetch the credit granted is a block its stream is about to read. Under plain
    2-random several streams reading ahead at once (the fill of free space of three
    shards, each stream's readahead) evict each other's unread blocks, which are then
    fetched a second time: more remote bytes than a cache that never prefetched. Read
    blocks go first. The half bounds what unread prefetches may hold, so that
    readahead that is never read (a skewed stream's neighbours before a diagnosis) cannot
    crowd out the read blocks: past it the oldest-sampled unread prefetch goes (and the
    credit charges that stream). Both pools are :class:`TwoRandom` (one rng, O(1))."""

    name = "2-random-unread-last"
    __slots__ = ("_read", "_unread", "_unread_sizes", "_unread_bytes")

    def __init__(self, capacity: int, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        self._read = TwoRandom(capacity, rng=self.rng)
        self._unread = TwoRandom(capacity, rng=self.rng)
        self._unread_sizes: dict[Key, int] = {}
        self._unread_bytes = 0

    def on_hit(self, key: Key, size: int, now: float) -> None:
        s = self._unread_sizes.pop(key, None)
        if s is None:
            self._read.on_hit(key, size, now)
            return
        self._unread_bytes -= s
        self._unread.on_remove(key)
        self._read.on_insert(key, size, now)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._read.on_insert(key, size, now)

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> None:
        self._unread.on_insert(key, size, now)
        self._unread_sizes[key] = size
        self._unread_bytes += size

    def victim(self, now: float) -> Key:
        if len(self._read) and 2 * self._unread_bytes <= self.capacity:
            return self._read.victim(now)
        if not len(self._unread):
            return self._read.victim(now)
        key = self._unread.victim(now)
        self._unread_bytes -= self._unread_sizes.pop(key)
        return key

    def on_remove(self, key: Key) -> None:
        s = self._unread_sizes.pop(key, None)
        if s is None:
            self._read.on_remove(key)
        else:
            self._unread_bytes -= s
            self._unread.on_remove(key)

    def __contains__(self, key: object) -> bool:
        return key in self._read or key in self._unread

    def __len__(self) -> int:
        return len(self._read) + len(self._unread)

    def keys(self) -> Iterable[Key]:
        return [*self._unread.keys(), *self._read.keys()]
