"""No eviction: once full, refuse new objects (the "no-evict" baseline of the seeds).

``admit`` answers whether the object fits in the free space; the cache never has to make
room, so it never calls :meth:`RejectWhenFull.victim`. ``victim`` still names the oldest
key (FIFO) so a driver that must shrink the cache (e.g. a capacity change) can, and so the
policy honours the same contract as every other one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from aicache.policies.base import EvictionPolicy, Key


class RejectWhenFull(EvictionPolicy):
    name = "reject-when-full"
    may_reject = True
    __slots__ = ("_order",)

    def __init__(self, capacity: int, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        self._order: OrderedDict[Key, None] = OrderedDict()

    def admit(self, key: Key, size: int, used: int, now: float) -> bool:
        return used + size <= self.capacity

    def on_hit(self, key: Key, size: int, now: float) -> None:
        pass

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
