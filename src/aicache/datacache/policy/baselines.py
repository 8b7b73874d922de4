"""The fixed data-cache systems: eviction + prefetch pairs (the JuiceFS / Alluxio
baselines and every ``EVICTION+PREFETCH`` pair), no cache, and the clairvoyant bound.

Prefetchers see the *stream* a read belongs to: the cache unit (dataset directory = the
first ``unit_depth`` components of the file path, whose files have consecutive block
ranges), except file-aware ones (SFP) that see the file. Baselines and Chiron get the same
streams, so readahead across small files is as available to JuiceFS as to Chiron's stride
executor.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Collection, Sequence
from typing import Any, cast

import numpy as np

from aicache.adaptive.unit import UnitMapper
from aicache.policies.system import DataCacheSystem
from aicache.errors import BadInput
from aicache.policies import EVICTION, PREFETCH
from aicache.policies.base import EvictionPolicy, NoPrefetch, PrefetchPolicy

_EMPTY: tuple[int, ...] = ()

#: Prefetchers that want the file, not the directory, as their stream.
FILE_LEVEL_PREFETCH = frozenset({"sfp", "sfp-128"})


class PolicySystem(DataCacheSystem):
    """A fixed eviction policy plus a fixed prefetcher (the baselines, ``E+P`` pairs and
    bare eviction names, which are ``E+none``).

    Prefetch feedback: the driver reports a prefetched block read before eviction as
    *used* and one evicted unread as *wasted*; both go to the prefetcher so adaptive
    depth/window can react. A policy that sees misses hears every demand miss (ARC's,
    S3-FIFO's, LeCaR's ghost hits) and may refuse the block there; a refused block is not
    admitted when it arrives.
    """

    def __init__(self, name: str, eviction: str, prefetch: str, capacity_bytes: int, *,
                 seed: int = 0, unit_depth: int = 1, prefetch_params: dict[str, Any] | None = None,
                 eviction_params: dict[str, Any] | None = None) -> None:
        self.name = name  # type: ignore[misc]  # ClassVar in the interface; per pair here
        self.capacity = capacity_bytes
        self.policy: EvictionPolicy = EVICTION.get(eviction)(
            capacity_bytes, rng=random.Random(seed), **(eviction_params or {}))
        if self.policy.needs_future:
            raise BadInput(f"eviction {eviction!r} needs the future; use the 'clairvoyant' system")
        self.prefetcher: PrefetchPolicy = PREFETCH.get(prefetch)(**(prefetch_params or {}))
        self.file_level = prefetch in FILE_LEVEL_PREFETCH
        self.units = UnitMapper(unit_depth)
        self._no_prefetch = type(self.prefetcher) is NoPrefetch
        self._sees_misses = bool(self.policy.sees_misses)
        self._may_reject = bool(self.policy.may_reject)
        #: blocks the policy refused at their miss (``on_miss`` returned False), until they
        #: arrive; at most one entry per outstanding demand fetch
        self._refused: set[int] = set()

    def on_access(self, unit: str, block: int, size: int, hit: bool, now: float) -> Sequence[int]:
        if hit:
            self.policy.on_hit(block, size, now)
        elif self._sees_misses and self.policy.on_miss(block, size, now) is False:
            self._refused.add(block)
        if self._no_prefetch:  # a bare eviction name / E+none: no stream to map
            return _EMPTY
        stream = unit if self.file_level else self.units(unit)
        return self.prefetcher.on_access(stream, block, hit, now)

    def on_prefetch_used(self, block: int, now: float) -> None:
        self.prefetcher.on_prefetch_used(block, now)

    def on_prefetch_wasted(self, block: int, now: float) -> None:
        self.prefetcher.on_prefetch_wasted(block, now)

    def use_metadata(self, extent_of: Callable[[str], tuple[int, int] | None],
                     file_of: Callable[[int], str | None] | None = None) -> None:
        use = getattr(self.prefetcher, "use_metadata", None)  # file-aware prefetchers (SFP)
        if use is not None and self.file_level:
            use(extent_of)

    def admit(self, unit: str, block: int, size: int, used: int, now: float) -> bool:
        if self._refused and block in self._refused:
            self._refused.discard(block)
            return False
        if self._may_reject:
            return self.policy.admit(block, size, used, now)
        return True

    def on_insert(self, unit: str, block: int, size: int, now: float, prefetched: bool) -> bool:
        if prefetched:
            return self.policy.on_prefetch_insert(block, size, now) is not False
        return self.policy.on_insert(block, size, now) is not False

    def victim(self, now: float) -> int:
        return cast(int, self.policy.victim(now))  # data-cache keys are block ids

    def on_remove(self, block: int) -> None:
        if block in self.policy:
            self.policy.on_remove(block)

    def held(self) -> Collection[int]:
        return set(self.policy.keys())  # type: ignore[arg-type]  # keys here are block ids


class NoCacheSystem(DataCacheSystem):
    """Fetch every demand read from remote; retain nothing."""

    name = "nocache"

    def on_access(self, unit: str, block: int, size: int, hit: bool, now: float) -> Sequence[int]:
        return _EMPTY

    def admit(self, unit: str, block: int, size: int, used: int, now: float) -> bool:
        return False

    def on_insert(self, unit: str, block: int, size: int, now: float, prefetched: bool) -> bool:
        raise AssertionError("nocache admits nothing")

    def victim(self, now: float) -> int:
        raise AssertionError("nocache holds nothing")

    def on_remove(self, block: int) -> None:
        pass

    def held(self) -> Collection[int]:
        return _EMPTY


class ClairvoyantSystem(DataCacheSystem):
    """Upper bound: Belady eviction with bypass + perfect prefetch of the next needed blocks.

    Needs the whole future (``trace`` = the block ids of every demand read, in order). The
    driver must call :meth:`on_access` once per demand read, in trace order; the system
    counts reads to know where it is. Prefetch asks for the blocks of the next
    ``lookahead`` reads — the driver's fetch budget (concurrent prefetches, in-flight cap)
    applies exactly as to every other system. Admission bypasses a block whose next use
    lies beyond every resident block's (Belady would evict it first anyway).
    """

    name = "clairvoyant"
    INF = 1 << 62

    def __init__(self, trace: np.ndarray | Sequence[int], capacity_bytes: int, *,
                 lookahead: int = 32) -> None:
        ids = np.asarray(trace, dtype=np.int64)
        n = ids.size
        nxt = np.full(n, self.INF, dtype=np.int64)
        # next occurrence of the same id: stable sort by id, neighbours within a group
        order = np.argsort(ids, kind="stable")
        same = ids[order[1:]] == ids[order[:-1]]
        nxt[order[:-1][same]] = order[1:][same]
        self.ids: list[int] = ids.tolist()
        self.next: list[int] = nxt.tolist()
        self.capacity = capacity_bytes
        self.lookahead = lookahead
        self.pos = -1  # index of the current demand read
        self.frontier = -1  # last trace index whose block was offered for prefetch
        self.next_use: dict[int, int] = {}  # resident block -> index of its next read
        self.heap: list[tuple[int, int]] = []  # (-next_use, block), lazily invalidated
        self.pending: dict[int, int] = {}  # offered block -> the read it was offered for

    def _farthest(self) -> int:
        h, nu = self.heap, self.next_use
        while h and nu.get(h[0][1]) != -h[0][0]:
            heapq.heappop(h)
        return -h[0][0] if h else -1

    def _set(self, block: int, use: int) -> None:
        self.next_use[block] = use
        heapq.heappush(self.heap, (-use, block))

    def on_access(self, unit: str, block: int, size: int, hit: bool, now: float) -> Sequence[int]:
        self.pos += 1
        i = self.pos
        if i >= len(self.ids) or self.ids[i] != block:
            raise BadInput("clairvoyant system was given a different trace than it is driven with")
        if block in self.next_use:
            self._set(block, self.next[i])
            self.pending.pop(block, None)
        else:  # a miss: it will be admitted (or not) on arrival, judged by its next use
            self.pending[block] = self.next[i]
        lo = max(self.frontier + 1, i + 1)
        hi = min(len(self.ids), i + 1 + self.lookahead)
        if lo >= hi:
            return _EMPTY
        self.frontier = hi - 1
        out = self.ids[lo:hi]
        for j, b in zip(range(lo, hi), out):
            self.pending.setdefault(b, j)
        return out

    def _use_of(self, block: int) -> int:
        return self.pending.get(block, self.INF)

    def admit(self, unit: str, block: int, size: int, used: int, now: float) -> bool:
        use = self._use_of(block)
        if use >= self.INF:
            return False
        if used + size <= self.capacity:
            return True
        return use < self._farthest()

    def on_insert(self, unit: str, block: int, size: int, now: float, prefetched: bool) -> bool:
        self._set(block, self.pending.pop(block, self.INF))
        return True

    def victim(self, now: float) -> int:
        self._farthest()
        _, b = heapq.heappop(self.heap)
        del self.next_use[b]
        return b

    def on_remove(self, block: int) -> None:
        self.next_use.pop(block, None)

    def held(self) -> Collection[int]:
        return self.next_use.keys()
