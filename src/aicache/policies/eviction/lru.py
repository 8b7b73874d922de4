"""LRU: evict the key accessed longest ago."""

from __future__ import annotations

from collections.abc import Callable

from aicache.native import mypyc_attr
from aicache.policies.base import Key
from aicache.policies.eviction.fifo import FIFO


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LRU(FIFO):
    """Least recently used: FIFO's insertion order, with every hit moved to the back.

    The order is an ``OrderedDict`` (a C doubly linked list + hash: O(1) move-to-end and
    removal from the middle, no Python-level node objects), which is what makes the
    simulator's hot path fast enough to stand beside libCacheSim's C loop.
    """

    name = "lru"
    owns_residency = True
    __slots__ = ()

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._order.move_to_end(key)

    def access(self, key: Key, now: float) -> bool:
        order = self._order
        if key in order:
            order.move_to_end(key)
            return True
        return False

    def fast_hit(self) -> Callable[[Key], object] | None:
        # Exact only while on_hit is ours (a subclass may add bookkeeping).
        return self._order.move_to_end if type(self).on_hit is LRU.on_hit else None
