"""CLOCK (second chance / FIFO-reinsertion), as libCacheSim's ``Clock.c``.

libCacheSim's semantics, kept exactly: a new object enters at the head with counter
``init_freq`` (0); a hit increments the counter up to ``2**n_bit_counter - 1`` (1 by
default); eviction looks at the tail, and while the tail's counter is non-zero it
decrements it and moves the object to the head.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable

from aicache.errors import BadInput
from aicache.native import mypyc_attr
from aicache.policies.base import EvictionPolicy, Key


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Clock(EvictionPolicy):
    """The queue is an ``OrderedDict`` key -> counter, oldest first.

    "Move to the head" is re-adding at the end, so the hand never has to be a pointer.
    """

    name = "clock"
    owns_residency = True
    __slots__ = ("_queue", "_max_freq", "_init_freq")

    def __init__(self, capacity: int, *, n_bit_counter: int = 1, init_freq: int = 0,
                 rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        if n_bit_counter < 1:
            raise BadInput(f"clock: n_bit_counter={n_bit_counter} must be at least 1 "
                           "(1 = classic second chance)")
        self._queue: OrderedDict[Key, int] = OrderedDict()
        self._max_freq = (1 << n_bit_counter) - 1
        self._init_freq = init_freq

    def on_hit(self, key: Key, size: int, now: float) -> None:
        q = self._queue
        f = q[key]
        if f < self._max_freq:
            q[key] = f + 1

    def access(self, key: Key, now: float) -> bool:
        q = self._queue
        f = q.get(key, -1)
        if f < 0:
            return False
        if f < self._max_freq:
            q[key] = f + 1
        return True

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._queue[key] = self._init_freq

    def victim(self, now: float) -> Key:
        q = self._queue
        while True:
            key, f = q.popitem(last=False)
            if f < 1:
                return key
            q[key] = f - 1

    def on_remove(self, key: Key) -> None:
        del self._queue[key]

    def __contains__(self, key: object) -> bool:
        return key in self._queue

    def __len__(self) -> int:
        return len(self._queue)

    def keys(self) -> Iterable[Key]:
        return self._queue.keys()
