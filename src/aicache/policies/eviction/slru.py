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
        self._promoted(key)
        prot[key] = None
        self._trim()

    def _promoted(self, key: Key) -> None:
        """Hook: ``key`` moves from probation to protected (by a re-read)."""

    def _demoted_key(self, key: Key) -> None:
        """Hook: ``key`` moved from protected back to probation (protected over its share)."""

    def _trim(self) -> None:
        prot, limit = self._prot, self.protected_share * len(self)
        while len(prot) > limit:
            k = prot.popitem(last=False)[0]
            self._prob[k] = None
            self._demoted_key(k)

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


class AdaptiveSLRU(SegmentedLRU):
    """Segmented LRU whose protected share adapts online from ghost hits (ARC's rule,
    Megiddo & Modha 2003, applied to probation / protected).

    Two ghost lists remember recently evicted keys: ``ghost_prob`` those evicted without
    having been re-read while resident (a block evicted from probation that was never
    promoted), ``ghost_prot`` those evicted after a re-read (from protected, or demoted
    from it and then evicted from probation). A demand miss on a key of ``ghost_prob``
    says probation was too short to catch the key's second read: the protected share
    falls by ``max(1, |ghost_prot| / |ghost_prob|) / n`` (``n`` resident keys); a miss
    on a key of ``ghost_prot`` says protected was too small to keep a re-read key: the
    share rises by ``max(1, |ghost_prob| / |ghost_prot|) / n``. The share stays in
    [0, 1]; each ghost list holds at most ``n`` keys (oldest forgotten first), as ARC's
    directory holds at most ``c`` of each. ``promote_ghosts``: a ghost hit is a re-read,
    so the key enters protected (ARC inserts a ghost hit into its frequent list).
    Unread prefetched keys leave no ghost (they never had a demand read), and a prefetched
    key stops being one.
    """

    name = "aslru"
    sees_misses = True
    __slots__ = ("_gprob", "_gprot", "_demoted", "_promote_next", "promote_ghosts")

    def __init__(self, capacity: int, *, protected_share: float = 0.8, promote_ghosts: bool = True,
                 **kw: Any) -> None:
        super().__init__(capacity, protected_share=protected_share, **kw)
        self.promote_ghosts = promote_ghosts
        self._gprob: OrderedDict[Key, None] = OrderedDict()
        self._gprot: OrderedDict[Key, None] = OrderedDict()
        self._demoted: set[Key] = set()  # in probation after a re-read (demoted from protected)
        self._promote_next: Key | None = None  # the ghost-hit key the next on_insert stores

    def on_miss(self, key: Key, size: int, now: float) -> bool:
        n = max(len(self), 1)
        b1, b2 = len(self._gprob), len(self._gprot)
        if self._gprob.pop(key, 0) is None:
            self.protected_share = max(0.0, self.protected_share - max(1.0, b2 / b1) / n)
            self._promote_next = key
        elif self._gprot.pop(key, 0) is None:
            self.protected_share = min(1.0, self.protected_share + max(1.0, b1 / b2) / n)
            self._promote_next = key
        return True

    def _promoted(self, key: Key) -> None:
        self._demoted.discard(key)

    def _demoted_key(self, key: Key) -> None:
        self._demoted.add(key)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        if self.promote_ghosts and self._promote_next == key:
            self._prot[key] = None
            self._trim()
        else:
            self._prob[key] = None
        self._promote_next = None

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> None:
        # a resident key is no ghost; a prefetch is no demand read, so it adapts nothing
        self._gprob.pop(key, None)
        self._gprot.pop(key, None)
        super().on_prefetch_insert(key, size, now)

    def _ghost(self, ghosts: OrderedDict[Key, None], key: Key) -> None:
        ghosts[key] = None
        bound = max(len(self), 1)
        while len(ghosts) > bound:
            ghosts.popitem(last=False)

    def victim(self, now: float) -> Key:
        if self._prob:
            key = self._prob.popitem(last=False)[0]
            if key in self._unread:
                self._unread.discard(key)
            elif key in self._demoted:
                self._demoted.discard(key)
                self._ghost(self._gprot, key)
            else:
                self._ghost(self._gprob, key)
            return key
        key = self._prot.popitem(last=False)[0]
        self._ghost(self._gprot, key)
        return key

    def on_remove(self, key: Key) -> None:
        self._demoted.discard(key)
        super().on_remove(key)
