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
