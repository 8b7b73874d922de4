"""No eviction: once full, refuse new objects (the random executor's admission in
``docs/design/chiron.md``, and a "no-evict" baseline).

``admit`` answers whether the object fits in the free space; the cache never has to make
room, so it never calls :meth:`RejectWhenFull.victim`. ``victim`` still names the oldest
key (FIFO) so a driver that must shrink the cache (e.g. a capacity change) can, and so the
policy honours the same contract as every other one.
"""

from __future__ import annotations

from aicache.native import mypyc_attr
from aicache.policies.base import Key
from aicache.policies.eviction.fifo import FIFO


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class RejectWhenFull(FIFO):
    name = "reject-when-full"
    may_reject = True
    __slots__ = ()

    def admit(self, key: Key, size: int, used: int, now: float) -> bool:
        return used + size <= self.capacity
