"""LRU: evict the key accessed longest ago."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from aicache.policies.base import EvictionPolicy, Key


class LRU(EvictionPolicy):
    """Least recently used.

    The order is an ``OrderedDict`` (a C doubly linked list + hash: O(1) move-to-end and
    removal from the middle, no Python-level node objects), which is what makes the
    simulator's hot path fast enough to stand beside libCacheSim's C loop.
    """

    name = "lru"
    __slots__ = ("_order",)

    def __init__(self, capacity: int, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        self._order: OrderedDict[Key, None] = OrderedDict()

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._order.move_to_end(key)

    def fast_hit(self) -> Callable[[Key], object] | None:
        # Exact only while on_hit is ours (a subclass may add bookkeeping).
        return self._order.move_to_end if type(self).on_hit is LRU.on_hit else None

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._order[key] = None

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
