"""Segmented LRU: reuse earns protection (Chiron's skewed executor)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aicache.policies.base import EvictionPolicy, Key


class SegmentedLRU(EvictionPolicy):
    """Segmented LRU (Karedla et al. 1994) for skewed access: reuse earns protection.

    A skewed stream re-reads a hot subset; every other block it brings in — a one-off draw
    from the cold tail, a prefetched neighbour — has shown no reuse yet. New blocks (demand
    or prefetched) enter a *probation* segment; a block read again while resident moves to
    the *protected* segment. Victims come from probation first (oldest first), so one-off
    blocks and speculative neighbours cannot push proven hot blocks out, as they do under
    plain LRU. Protected is LRU and holds at most ``protected_share`` of the resident
    blocks (SLRU's customary 80%); its least recent blocks are demoted to probation's
    recent end, so a hot set that cools down still ages out. With no re-reads it is FIFO;
    with ``protected_share=0`` promotion is immediately undone.
    A prefetched block's first read is its first access: it moves to probation's recent
    end; a second read promotes it.
    """

    name = "slru"
    __slots__ = ("_prob", "_prot", "_unread", "protected_share")

    def __init__(self, capacity: int, *, protected_share: float = 0.8, **kw: Any) -> None:
        super().__init__(capacity, **kw)
        if not 0.0 <= protected_share <= 1.0:
            raise ValueError("protected_share must be in [0, 1]")
        self.protected_share = protected_share
        self._prob: OrderedDict[Key, None] = OrderedDict()  # not re-read while resident
        self._prot: OrderedDict[Key, None] = OrderedDict()  # re-read while resident
        self._unread: set[Key] = set()  # prefetched, not read yet (in probation)

    def on_hit(self, key: Key, size: int, now: float) -> None:
        prot = self._prot
        if key in prot:
            prot.move_to_end(key)
            return
        if key in self._unread:
            self._unread.discard(key)
            self._prob.move_to_end(key)
            return
        del self._prob[key]
        prot[key] = None
        limit = self.protected_share * len(self)
        while len(prot) > limit:
            self._prob[prot.popitem(last=False)[0]] = None

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._prob[key] = None

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> None:
        self._prob[key] = None
        self._unread.add(key)

    def adopt_many(self, keys: Sequence[Key], sizes: Mapping[Key, int], now: float) -> None:
        self._prob.update(dict.fromkeys(keys))  # = on_insert in order

    def victim(self, now: float) -> Key:
        if self._prob:
            key = self._prob.popitem(last=False)[0]
            self._unread.discard(key)
            return key
        return self._prot.popitem(last=False)[0]

    def on_remove(self, key: Key) -> None:
        if self._prob.pop(key, 0) is None:
            self._unread.discard(key)
        else:
            del self._prot[key]

    def __contains__(self, key: object) -> bool:
        return key in self._prob or key in self._prot

    def __len__(self) -> int:
        return len(self._prob) + len(self._prot)

    def keys(self) -> Iterable[Key]:
        # oldest candidate first
        yield from self._prob
        yield from self._prot
