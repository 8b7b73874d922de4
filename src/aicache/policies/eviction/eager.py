"""Eager eviction for sequential passes: blocks already read are the first victims.

Chiron's sequential executor uses :class:`EagerEviction` (most recently read first);
:class:`SeedEagerEviction` is the published variant (least recently read first: "removed
once read", the space given back when next needed).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from aicache.policies.base import EvictionPolicy, Key


class EagerEviction(EvictionPolicy):
    """Eager eviction (Li et al. 2008) for sequential passes.

    A block that has been read is the first candidate; among read blocks the most recently
    read goes first — a sequential pass does not come back to what it just read before it
    has read everything else, so keeping the *older* part of the pass (still ahead of the
    next pass) is the MRU choice that suits loops larger than the cache. Blocks not read yet
    (prefetched, or adopted from another executor without a read) go last, oldest first.
    """

    name = "eager"
    __slots__ = ("_read", "_unread")

    def __init__(self, capacity: int, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        self._read: OrderedDict[Key, None] = OrderedDict()
        self._unread: OrderedDict[Key, None] = OrderedDict()

    def on_hit(self, key: Key, size: int, now: float) -> None:
        if self._unread.pop(key, 0) is None:
            self._read[key] = None
        else:
            self._read.move_to_end(key)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._read[key] = None  # a demand miss: the block is being read right now

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> None:
        self._unread[key] = None

    def adopt_unread(self, key: Key) -> None:
        self._unread[key] = None

    def adopt_split(self, read: Sequence[Key], unread: Sequence[Key]) -> None:
        """Bulk adoption: ``read`` as if inserted by a miss, ``unread`` as
        :meth:`adopt_unread`, each in order."""
        self._read.update(dict.fromkeys(read))
        self._unread.update(dict.fromkeys(unread))

    def has_read(self) -> bool:
        return bool(self._read)

    def victim(self, now: float) -> Key:
        if self._read:
            return self._read.popitem(last=True)[0]
        return self._unread.popitem(last=False)[0]

    def on_remove(self, key: Key) -> None:
        if self._read.pop(key, 0) is not None:
            del self._unread[key]

    def __contains__(self, key: object) -> bool:
        return key in self._read or key in self._unread

    def __len__(self) -> int:
        return len(self._read) + len(self._unread)

    def keys(self) -> Iterable[Key]:
        # oldest candidate first: unread (FIFO), then read from least to most recent
        yield from self._unread
        yield from self._read


class SeedEagerEviction(EagerEviction):
    """The seed's eager eviction: a block is removed once it has been read.

    A system cannot drop a block behind its driver's back, so "removed once read" is kept
    as "read blocks are the first victims, in the order they were read (least recently read
    first), ahead of every block not read yet": the space a read block holds is given back
    the next time space is needed, not at the read. Every read is served exactly as under
    immediate removal except a re-read of a block whose space has not been needed yet (a
    hit here, a miss if it had been removed); a sequential pass does not re-read, which is
    the case the policy is for.
    """

    name = "eager-seed"
    __slots__ = ()

    def victim(self, now: float) -> Key:
        if self._read:
            return self._read.popitem(last=False)[0]
        return self._unread.popitem(last=False)[0]

    def keys(self) -> Iterable[Key]:
        # victim order: read (least recently read first), then unread (FIFO)
        yield from self._read
        yield from self._unread
