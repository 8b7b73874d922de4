"""The data-cache *system* interface: prefetch + admission + eviction as one pure object.

It sits with the policies, below both the adaptive controller (:mod:`aicache.adaptive`,
which implements it as Chiron) and the data cache (:mod:`aicache.datacache`, whose driver
calls it), so neither of the two imports the other for it.

A system (``nocache``, ``juicefs``, ``alluxio``, ``juicefs-adaptive``, ``chiron``,
``clairvoyant``, an ``EVICTION+PREFETCH`` pair or a bare eviction name) is driven by one
driver, :class:`aicache.datacache.policy.driver.SystemDriver`, in the simulator
(``aicache.sim.datacache``, virtual clock) and in the real engine
(``aicache.datacache.engine``, wall clock, real bytes). It never does I/O and never reads
a clock: the driver tells it ``now``.

Blocks are global integer ids from a stable file→block mapping (files sorted by path get
consecutive ranges, so a sorted traversal is a stride). ``unit`` names the cache unit (a
file or a dataset directory) the block belongs to.

Driver protocol, per demand read of a block:
1. ``tick(now)`` (async advisor results, reviews), then ``prefetch = on_access(unit,
   block, size, hit, now)``; ``hit`` = the system holds the block. A read of an unread
   prefetch is told first with ``on_prefetch_used``.
2. On a miss, fetch; on arrival, if ``admit(unit, block, size, used, now)``: while it does
   not fit, ``v = victim(now)`` (``on_prefetch_wasted(v)`` if ``v`` was an unread
   prefetch) and drop ``v``; then ``on_insert(..., prefetched=False)``; a ``False`` answer
   declines the block (the room made stays made) and the driver does not store it.
3. For each block in ``prefetch`` not resident and not in flight: fetch (within the
   driver's fetch budget); on arrival, as in 2 with ``prefetched=True``. Prefetch arrivals
   are never accesses.
The driver calls ``on_remove`` for blocks it drops itself (corrupt, lost, invalidated).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Any, ClassVar


class DataCacheSystem(ABC):
    name: ClassVar[str] = ""

    @abstractmethod
    def on_access(self, unit: str, block: int, size: int, hit: bool, now: float) -> Sequence[int]:
        """A demand read. Returns block ids to prefetch (may include resident ones)."""

    def on_open(self, unit: str, block: int, now: float) -> None:
        """A reader opened file ``unit``, whose first block is ``block``. A front end whose
        re-reads the kernel's page cache may serve (a mount) tells this, so that a policy
        that follows files sees re-reads its accesses never show. Nothing by default."""

    @abstractmethod
    def admit(self, unit: str, block: int, size: int, used: int, now: float) -> bool:
        """Store this fetched block? ``used`` = bytes currently stored."""

    @abstractmethod
    def on_insert(self, unit: str, block: int, size: int, now: float, prefetched: bool) -> bool:
        """The driver made room for ``block``: hold it (True) or decline it (False)."""

    @abstractmethod
    def victim(self, now: float) -> int:
        """Choose a held block to drop, forget it, return it."""

    @abstractmethod
    def on_remove(self, block: int) -> None:
        """The driver dropped ``block`` itself; forget it."""

    def on_prefetch_used(self, block: int, now: float) -> None:
        """A prefetched block was read before it was evicted (told before ``on_access``)."""

    def on_prefetch_wasted(self, block: int, now: float) -> None:
        """A prefetched block was evicted unread (told right after ``victim`` named it)."""

    def held(self) -> Collection[int]:
        """The blocks the system holds (for the driver's invariant checks; may be slow).
        Every registered system implements it."""
        raise NotImplementedError(f"{type(self).__name__} does not list its blocks")

    def tick(self, now: float) -> None:
        """Background work due at ``now`` (advisor results, routine reviews)."""

    def use_metadata(self, extent_of: Callable[[str], tuple[int, int] | None],
                     file_of: Callable[[int], str | None] | None = None) -> None:
        """The driver's file metadata: ``extent_of(file)`` = (first, last) block id of a
        file (as a stat gives it), None when unknown; ``file_of(block)`` = the file (as
        ``on_access`` names it) a block id belongs to, None when unknown. Called once,
        before any access; a system that reads ahead by file uses them (the default
        ignores them)."""

    def stats(self) -> dict[str, Any]:
        """Counters for metrics: advisor calls/tokens, switches, active pattern per unit."""
        return {}

    def close(self) -> None:
        """Stop background workers (advisor threads)."""
