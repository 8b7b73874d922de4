"""SIEVE (NSDI'24), as libCacheSim's ``Sieve.c``.

New objects enter at the head with the visited bit clear; a hit sets it. The hand walks from
the tail towards the head: a visited object has its bit cleared and stays where it is, an
unvisited one is evicted and the hand stops just head-wards of it. Past the head the hand
wraps to the tail (libCacheSim: a NULL pointer means "start at the tail").

The rules are :class:`aicache.policies.slotcore.SieveCore` (a list over slot ids, oldest
first, a visited bit per slot and the hand as a slot id); this class maps keys to its
slots.
"""

from __future__ import annotations

from aicache.native import mypyc_attr
from aicache.policies import slotcore
from aicache.policies.slotted import Core, SlotPolicy


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Sieve(SlotPolicy):
    name = "sieve"
    __slots__ = ()

    def _make_core(self) -> Core:
        return slotcore.SieveCore()
