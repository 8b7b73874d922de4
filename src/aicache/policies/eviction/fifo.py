"""FIFO: evict the key inserted longest ago; hits change nothing (libCacheSim ``FIFO.c``)."""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from aicache.native import mypyc_attr
from aicache.policies.base import EvictionPolicy, Key


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class FIFO(EvictionPolicy):
    """First in, first out.

    ``OrderedDict`` rather than ``dict``: popping the oldest key of a plain dict gets slower
    as deleted slots pile up at its front, while ``popitem(last=False)`` stays O(1).
    """

    name = "fifo"
    owns_residency = True
    __slots__ = ("_order",)

    def __init__(self, capacity: int, *, rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        self._order: OrderedDict[Key, None] = OrderedDict()

    def on_hit(self, key: Key, size: int, now: float) -> None:
        pass

    def access(self, key: Key, now: float) -> bool:
        return key in self._order

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._order[key] = None

    def adopt_many(self, keys: Sequence[Key], sizes: Mapping[Key, int], now: float) -> None:
        self._order.update(dict.fromkeys(keys))  # = on_insert in order (LRU too: no hit)

    def victim(self, now: float) -> Key:
        return self._order.popitem(last=False)[0]

    def on_remove(self, key: Key) -> None:
        del self._order[key]

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def __len__(self) -> int:
        return len(self._order)

    def keys(self) -> Iterable[Key]:
        return self._order.keys()
