"""S3-FIFO (SOSP'23) exactly as libCacheSim's ``S3FIFO.c`` runs it.

Three FIFO queues sized in the cache's unit (bytes in bytes mode): *small*
(``int(c * small_size_ratio)``), *main* (the rest) and a *ghost* of evicted ids
(``int(c * ghost_size_ratio)``, holding each id's size). libCacheSim details kept because
they change miss ratios:

* A miss first looks in the ghost (our :meth:`S3FIFO.on_miss`) and drops the id from it;
  the insert that follows goes to main. Otherwise the object goes to small, except that
  before the first eviction ever, objects arriving while small is full go to main.
* A capacity whose small queue rounds to 0 is refused (``BadInput``), as libCacheSim
  refuses it; note that with a small queue of 1 unit (objects mode, 10–19 objects) every
  object is as large as small and none is ever cached — libCacheSim's behaviour, kept.
* ``can_insert``: an object larger than small is not cached at all (``on_miss`` returns
  False), and one exactly as large as small is *declined after eviction* when it did not
  hit the ghost (``on_insert`` returns False): libCacheSim makes room, then refuses it.
* Hits count up without bound. Evicting from small moves objects with count >=
  ``move_to_main_threshold`` (libCacheSim's default, 2) to main (count reset to 0) and
  stops at the first object it really evicts, which goes to the ghost (a FIFO sized in
  the cache's unit; an id larger than it is not recorded). Evicting from main reinserts
  objects with count >= 1 at the head with ``min(count, 3) - 1`` (a 2-bit clock) and
  evicts the first with count 0.
* Main is evicted from when it is over its size or small is empty, else small.

The rules are :class:`aicache.policies.slotcore.S3FIFOCore` (the three queues as lists over
slot ids, sizes and counts in arrays); this class maps keys to its slots and checks the
parameters.
"""

from __future__ import annotations

import math
import random

from aicache.errors import BadInput
from aicache.native import mypyc_attr
from aicache.policies import slotcore
from aicache.policies.slotted import Core, SlotPolicy


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class S3FIFO(SlotPolicy):
    name = "s3fifo"
    sees_misses = True
    may_decline = True
    has_ghosts = True
    __slots__ = ("small_cap", "main_cap", "ghost_cap", "_threshold")

    def __init__(self, capacity: int, *, small_size_ratio: float = 0.1,
                 ghost_size_ratio: float = 0.9, move_to_main_threshold: int = 2,
                 rng: random.Random | None = None) -> None:
        if not 0.0 < small_size_ratio < 1.0:
            raise BadInput(f"s3fifo: small_size_ratio={small_size_ratio} must be between 0 "
                           f"and 1 (exclusive); libCacheSim's default is 0.1")
        self.small_cap = int(capacity * small_size_ratio)
        if self.small_cap <= 0:
            # libCacheSim refuses this configuration too: nothing could ever be admitted.
            need = math.ceil(1 / small_size_ratio)
            raise BadInput(
                f"s3fifo: capacity {capacity} leaves an empty small queue "
                f"(small_size_ratio={small_size_ratio}); use a capacity of at least {need}"
            )
        self.main_cap = capacity - self.small_cap
        self.ghost_cap = int(capacity * ghost_size_ratio)
        self._threshold = move_to_main_threshold
        super().__init__(capacity, rng=rng)

    def _make_core(self) -> Core:
        return slotcore.S3FIFOCore(self.small_cap, self.main_cap, self.ghost_cap,
                                   self._threshold)
