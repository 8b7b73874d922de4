"""ARC (FAST'03) exactly as libCacheSim's ``ARC.c`` runs it, sizes in the cache's unit.

libCacheSim's ARC differs from the paper's page-count pseudo-code in ways that change miss
ratios, so they are kept:

* All four lists (T1, T2 data; B1, B2 ghosts) are measured in the cache's unit (bytes in
  bytes mode), ``p`` is a float, and a ghost hit moves ``p`` by
  ``max(|B2|/|B1|, 1)`` (B1 hit, capped at the capacity) or ``max(|B1|/|B2|, 1)`` (B2 hit,
  floored at 0), with the sizes taken *before* the ghost entry is dropped.
* The ghost hit is learned in ``find`` (our :meth:`ARC.on_miss`), before libCacheSim checks
  that the object fits at all; the insert that follows the same request goes to T2.
* Eviction for a ghost-hit request is REPLACE. Otherwise (paper's case IV): if
  ``|T1| + |B1| + incoming size > c``, drop B1's LRU and REPLACE when B1 is non-empty, else
  evict T1's LRU without a ghost; otherwise drop B2's LRU when the four lists total
  ``>= 2c`` (and B2 is non-empty), then REPLACE.
* REPLACE takes T1's LRU into B1 when ``|T1| > 0`` and (``|T1| > p`` or ``|T1| == p`` on a
  B2 hit), or when T2 is empty; else T2's LRU into B2.

The rules are :class:`aicache.policies.slotcore.ARCCore` (the four lists over slot ids,
sizes in arrays); this class maps keys to its slots.
"""

from __future__ import annotations

from aicache.native import mypyc_attr
from aicache.policies import slotcore
from aicache.policies.slotted import Core, SlotPolicy


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class ARC(SlotPolicy):
    name = "arc"
    sees_misses = True
    has_ghosts = True
    __slots__ = ()

    def _make_core(self) -> Core:
        return slotcore.ARCCore(self.capacity)

    @property
    def p(self) -> float:
        """The target size of T1, in the cache's unit."""
        core = self.core
        assert isinstance(core, slotcore.ARCCore)
        return float(core.target)
