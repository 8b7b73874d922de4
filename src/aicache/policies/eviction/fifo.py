"""FIFO: evict the key inserted longest ago; hits change nothing (libCacheSim ``FIFO.c``).

The rules are :class:`aicache.policies.slotcore.FIFOCore` (one list over slot ids, oldest
first); this class maps keys to its slots (:class:`aicache.policies.slotted.SlotPolicy`).
"""

from __future__ import annotations

from aicache.native import mypyc_attr
from aicache.policies import slotcore
from aicache.policies.slotted import Core, SlotPolicy


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class FIFO(SlotPolicy):
    """First in, first out."""

    name = "fifo"
    __slots__ = ()

    def _make_core(self) -> Core:
        return slotcore.FIFOCore()
