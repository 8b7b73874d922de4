"""CLOCK (second chance / FIFO-reinsertion), as libCacheSim's ``Clock.c``.

libCacheSim's semantics, kept exactly: a new object enters at the head with counter
``init_freq`` (0); a hit increments the counter up to ``2**n_bit_counter - 1`` (1 by
default); eviction looks at the tail, and while the tail's counter is non-zero it
decrements it and moves the object to the head.

The rules are :class:`aicache.policies.slotcore.ClockCore` (a list over slot ids, oldest
first, and a counter per slot); this class maps keys to its slots.
"""

from __future__ import annotations

import random

from aicache.errors import BadInput
from aicache.native import mypyc_attr
from aicache.policies import slotcore
from aicache.policies.slotted import Core, SlotPolicy


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Clock(SlotPolicy):
    name = "clock"
    __slots__ = ("_max_freq", "_init_freq")

    def __init__(self, capacity: int, *, n_bit_counter: int = 1, init_freq: int = 0,
                 rng: random.Random | None = None) -> None:
        if n_bit_counter < 1:
            raise BadInput(f"clock: n_bit_counter={n_bit_counter} must be at least 1 "
                           "(1 = classic second chance)")
        self._max_freq = (1 << n_bit_counter) - 1
        self._init_freq = init_freq
        super().__init__(capacity, rng=rng)

    def _make_core(self) -> Core:
        return slotcore.ClockCore(self._max_freq, self._init_freq)
