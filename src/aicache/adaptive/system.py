"""The data-cache *system* interface: prefetch + admission + eviction as one pure object.

A system (``nocache``, ``juicefs``, ``alluxio``, ``juicefs-adaptive``, ``chiron``,
``clairvoyant``, or an ``EVICTION+PREFETCH`` pair) is driven identically by the simulator
(``aicache.sim.datacache``, virtual clock) and by the real engine
(``aicache.datacache.engine``, wall clock, real bytes). It never does I/O and never reads
a clock: the driver tells it ``now``.

Blocks are global integer ids from a stable file→block mapping (files sorted by path get
consecutive ranges, so a sorted traversal is a stride). ``unit`` names the cache unit (a
file or a dataset directory) the block belongs to.

Driver protocol, per demand read of a block:
1. ``hit = block in store``; ``prefetch = system.on_access(unit, block, size, hit, now)``.
2. On a miss, fetch; then if ``system.admit(unit, block, size, used, now)``: while it does
   not fit, ``v = system.victim(now)`` and drop ``v``; store; ``system.on_insert(..., False)``.
3. For each block in ``prefetch`` not resident and not in flight: fetch in the background
   (within the driver's fetch budget); on arrival, admit/evict/store as in 2 and call
   ``on_insert(..., prefetched=True)``. Prefetch arrivals are never accesses.
4. ``system.tick(now)`` regularly (every access is fine): async advisor results, reviews.
The driver calls ``on_remove`` for blocks it drops itself (corrupt, invalidated).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar


class DataCacheSystem(ABC):
    name: ClassVar[str] = ""

    @abstractmethod
    def on_access(self, unit: str, block: int, size: int, hit: bool, now: float) -> Sequence[int]:
        """A demand read. Returns block ids to prefetch (may include resident ones)."""

    @abstractmethod
    def admit(self, unit: str, block: int, size: int, used: int, now: float) -> bool:
        """Store this fetched block? ``used`` = bytes currently stored."""

    @abstractmethod
    def on_insert(self, unit: str, block: int, size: int, now: float, prefetched: bool) -> None:
        """The driver stored ``block``."""

    @abstractmethod
    def victim(self, now: float) -> int:
        """Choose a stored block to drop, forget it, return it."""

    @abstractmethod
    def on_remove(self, block: int) -> None:
        """The driver dropped ``block`` itself; forget it."""

    def tick(self, now: float) -> None:
        """Background work due at ``now`` (advisor results, routine reviews)."""

    def stats(self) -> dict[str, Any]:
        """Counters for metrics: advisor calls/tokens, switches, active pattern per unit."""
        return {}

    def close(self) -> None:
        """Stop background workers (advisor threads)."""
