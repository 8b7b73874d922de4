"""LRU: evict the key accessed longest ago.

The rules are :class:`aicache.policies.slotcore.LRUCore` (FIFO's list over slot ids with
every hit moved to the back); this class maps keys to its slots.
"""

from __future__ import annotations

from aicache.native import mypyc_attr
from aicache.policies import slotcore
from aicache.policies.slotted import Core, SlotPolicy


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LRU(SlotPolicy):
    """Least recently used."""

    name = "lru"
    __slots__ = ()

    def _make_core(self) -> Core:
        return slotcore.LRUCore()
