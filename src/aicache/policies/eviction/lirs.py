"""LIRS (SIGMETRICS'02) as libCacheSim's ``LIRS.c`` runs it, sizes in the cache's unit.

Three LRU lists, as libCacheSim keeps them (each ``OrderedDict``, oldest first):

* **S**, the recency stack: LIR blocks, resident HIR blocks and non-resident HIR blocks
  (ghosts), each with its size. Its bottom is always an LIR block: *pruning* drops HIR
  entries from the bottom until an LIR one is there (it never drops the top).
* **Q**, the resident HIR blocks (``hirs_limit = max(1, int(0.01 * c))`` units), FIFO at the
  bottom: its bottom is the next block to leave the cache.
* **NH**, the non-resident blocks of S in the order they left the cache, so that S is capped
  at ``2 c`` units by dropping the oldest ghost (libCacheSim's ``limitStack``, run after
  every request).

The LIR set holds ``c - hirs_limit`` units. libCacheSim details kept because they change
miss ratios:

* A new block is LIR while the LIR set has room, else a resident HIR (into S and Q);
  a block larger than either limit is not cached at all.
* A hit on an HIR block that is in S makes it LIR, demoting S's bottom LIR blocks into Q
  (and evicting Q's bottom) until the LIR set has room, then prunes. A hit on an HIR block
  that is only in Q *also* demotes LIR blocks until the LIR set could take it (although it
  stays HIR), then puts it on top of S. A miss on a ghost in S makes it LIR the same way.
  So hits evict: the policy is ``self_evicting``.
* A demoted LIR block larger than Q leaves the cache instead.

One departure, where libCacheSim holds more than its capacity: when the demotions for a
hit on a Q-only block evict that very block from Q, libCacheSim still marks it resident
in S but no longer counts its bytes, so its cache can hold one block more than its size.
Here the block stays resident and counted, and the next time room is needed (``victim``)
it is the block evicted, becoming a ghost as any block leaving Q does. Requests between
those two points are the same in both; a later request for that block can differ.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable

from aicache.native import mypyc_attr
from aicache.policies.base import Key, SelfEvicting

#: states of an S entry
_HIR = 0  # resident HIR (also in Q, unless it is the over-capacity block)
_LIR = 1
_GHOST = 2  # non-resident HIR


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LIRS(SelfEvicting):
    name = "lirs"
    sees_misses = True
    may_decline = True
    __slots__ = ("_s", "_s_size", "_q", "_nh", "hirs_limit", "lirs_limit", "_lirs_count",
                 "_hirs_count", "_s_bytes", "_extra", "_ghost_hit", "departures",
                 "_admitted")

    def __init__(self, capacity: int, *, hirs_ratio: float = 0.01,
                 rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        self.hirs_limit = max(1, int(hirs_ratio * capacity))
        self.lirs_limit = capacity - self.hirs_limit
        self._s: OrderedDict[Key, int] = OrderedDict()  # key -> state
        self._s_size: dict[Key, int] = {}
        self._q: OrderedDict[Key, int] = OrderedDict()  # key -> size
        self._nh: OrderedDict[Key, int] = OrderedDict()  # key -> size
        self._lirs_count = self._hirs_count = self._s_bytes = 0
        #: resident blocks in neither the LIR set nor Q (see the module docstring)
        self._extra: OrderedDict[Key, int] = OrderedDict()
        self._ghost_hit = False
        #: times a block was kept where libCacheSim exceeds its capacity (module docstring)
        self.departures = 0
        #: the key the last on_miss made room for (its on_insert follows)
        self._admitted: Key | None = None

    # -- libCacheSim's internal moves --------------------------------------------------
    def _s_drop(self, key: Key) -> None:
        del self._s[key]
        self._s_bytes -= self._s_size.pop(key)

    def _s_push(self, key: Key, state: int, size: int) -> None:
        self._s[key] = state
        self._s_size[key] = size
        self._s_bytes += size

    def _prune(self) -> None:
        s = self._s
        while len(s) > 1:
            key = next(iter(s))
            state = s[key]
            if state == _LIR:
                return
            if state == _GHOST:
                self._nh.pop(key, None)
            elif self._extra.pop(key, None) is not None:
                self._evicted.append(key)  # libCacheSim forgets it here
            self._s_drop(key)

    def _evict_hir(self) -> None:
        key, size = self._q.popitem(last=False)
        self._hirs_count -= size
        if key in self._s:
            self._s[key] = _GHOST
            self._nh[key] = self._s_size[key]
        self._evicted.append(key)

    def _evict_lir(self) -> None:
        key = next(iter(self._s))
        size = self._s_size[key]
        self._lirs_count -= size
        self._s_drop(key)
        if size <= self.hirs_limit:
            while self._hirs_count + size > self.hirs_limit:
                self._evict_hir()
            self._q[key] = size
            self._hirs_count += size
        else:
            self._evicted.append(key)
        self._prune()

    def _limit_stack(self) -> None:
        limit = 2 * self.capacity
        while self._s_bytes > limit and self._nh:
            key, _ = self._nh.popitem(last=False)
            self._s_drop(key)

    # -- events -----------------------------------------------------------------------
    def on_hit(self, key: Key, size: int, now: float) -> None:
        if key in self._evicted:  # a driver that does not drain still holds it
            self._evicted.remove(key)
            if key in self._s:
                self._s[key] = _GHOST
            if self.on_miss(key, size, now):
                self.on_insert(key, size, now)
            else:
                self._evicted.append(key)
            return
        s = self._s
        state = s.get(key)
        in_q = key in self._q
        if state is not None:
            s.move_to_end(key)
        if in_q:
            self._q.move_to_end(key)
        if state == _LIR:
            self._prune()
        elif state == _HIR:
            self._extra.pop(key, None)
            if in_q:
                self._hirs_count -= self._q.pop(key)
            ssize = self._s_size[key]
            while self._lirs_count + ssize > self.lirs_limit:
                self._evict_lir()
            s[key] = _LIR
            self._lirs_count += ssize
        else:  # resident HIR only in Q
            qsize = self._q[key]
            while self._lirs_count + qsize > self.lirs_limit:
                self._evict_lir()
            if key in self._evicted:  # evicted from Q by those demotions: libCacheSim
                self._evicted.remove(key)  # keeps it resident (module docstring)
                self._extra[key] = qsize
                self.departures += 1
            self._s_push(key, _HIR, qsize)
        self._limit_stack()

    def on_miss(self, key: Key, size: int, now: float) -> bool:
        """libCacheSim's ``find`` for a non-resident key, then its ``can_insert``."""
        self._ghost_hit = False
        self._admitted = None
        s = self._s
        state = s.get(key)
        if state is not None:
            s.move_to_end(key)  # a ghost: libCacheSim's find promotes it
        if size > self.capacity:
            self._limit_stack()
            return False
        if state is not None:
            self._ghost_hit = True
            ssize = self._s_size[key]
            while self._lirs_count + ssize > self.lirs_limit:
                self._evict_lir()
            self._nh.pop(key, None)
            self._admitted = key
            return True
        if size > self.lirs_limit or size > self.hirs_limit:
            self._limit_stack()
            return False
        if (self._lirs_count + size > self.lirs_limit
                and self._hirs_count + size > self.hirs_limit):
            while self._hirs_count + size > self.hirs_limit:
                self._evict_hir()
        self._admitted = key
        return True

    def on_insert(self, key: Key, size: int, now: float) -> bool:
        """Store ``key``; a driver that did not call :meth:`on_miss` for it first gets
        that call now, and the block is declined where ``on_miss`` would refuse it."""
        if self._admitted != key and not self.on_miss(key, size, now):
            return False
        self._admitted = None
        if self._ghost_hit:
            self._ghost_hit = False
            self._s[key] = _LIR
            self._lirs_count += self._s_size[key]
        elif self._lirs_count + size <= self.lirs_limit:
            self._s_push(key, _LIR, size)
            self._lirs_count += size
        else:
            self._s_push(key, _HIR, size)
            self._q[key] = size
            self._hirs_count += size
        self._limit_stack()
        return True

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> bool:
        """A prefetch runs the miss path first (it may make room or refuse the block)."""
        self._admitted = None
        return self.on_insert(key, size, now)

    def victim(self, now: float) -> Key:
        """A key that is not already on its way out: first a pending one, then the
        over-capacity block, then Q's bottom (after demoting an LIR block if Q is empty)."""
        if self._evicted:
            return self._evicted.pop(0)
        if self._extra:
            key, _ = self._extra.popitem(last=False)
            if key in self._s:
                self._s[key] = _GHOST
                self._nh[key] = self._s_size[key]
            return key
        while not self._q and not self._evicted:
            self._evict_lir()
        if not self._evicted:
            self._evict_hir()
        return self._evicted.pop(0)

    def on_remove(self, key: Key) -> None:
        """libCacheSim's ``LIRS_remove``: a removed LIR block leaves S (then S is pruned);
        a resident HIR block leaves S and Q."""
        if key in self._evicted:
            self._evicted.remove(key)
            return
        state = self._s.get(key)
        if self._extra.pop(key, None) is not None:
            if state is not None:
                self._s_drop(key)
            return
        if state == _LIR:
            self._lirs_count -= self._s_size[key]
            self._s_drop(key)
            self._prune()
            return
        if state is not None:
            self._s_drop(key)
        self._hirs_count -= self._q.pop(key)

    # -- inspection ---------------------------------------------------------------------
    def _resident(self) -> list[Key]:
        lir = [k for k, st in self._s.items() if st == _LIR]
        return lir + list(self._q) + list(self._extra) + self._evicted

    def __contains__(self, key: object) -> bool:
        return (self._s.get(key) == _LIR or key in self._q
                or key in self._extra or key in self._evicted)

    def __len__(self) -> int:
        return len(self._resident())

    def keys(self) -> Iterable[Key]:
        return self._resident()
