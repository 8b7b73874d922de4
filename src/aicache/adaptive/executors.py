"""Chiron's executors: one prefetch + admission + eviction bundle per access pattern.

| pattern    | prefetch                       | admission         | eviction                         |
| ---------- | ------------------------------ | ----------------- | -------------------------------- |
| sequential | stride, adaptive depth         | always            | eager (read blocks go first)     |
| random     | none across samples (rest of a | reject when full  | none while rejecting             |
|            | multi-block sample; scan fill) | (but see below)   | (LRU when it admits)             |
| skewed     | neighborhood (+ readahead)     | always            | segmented LRU (reuse protects)   |
| default    | sequential readahead (JuiceFS) | always            | 2-random (JuiceFS)               |

Two executor sets, chosen by name (``ChironParams.executors``; ``--executors``):

* ``ours`` (the default) departs from the seed's executor table (docs/design/chiron.md),
  each time from what the pattern means: a sequential pass does not come back to
  what it just read, so among read blocks eager eviction takes the *most recently* read
  first (MRU: a loop larger than the cache keeps its older part, which the next pass reads
  first; see :class:`EagerEviction`); a skewed stream's hot blocks are the re-read ones,
  so the skewed executor's LRU is *segmented* (one-off blocks and unread prefetched
  neighbours are evicted before re-read ones) and its protected share adapts online by
  ARC's ghost rule (:class:`~aicache.policies.eviction.slru.AdaptiveSLRU`: no fixed 80% to
  fit one workload's hot-set size), and its
  neighbourhood prefetch adds readahead while the unit reads in order (idle on
  independent draws; a scan that starts before a review names it is read ahead, not
  two blocks per miss); a shuffled epoch
  is random *between* samples but reads each sample whole, so once a multi-block sample's
  first block is read the random executor fetches the rest (``sample-rest``; a no-op for
  single-block samples); and once the unit's reads pass the epoch-scan test
  (:mod:`aicache.adaptive.scan`) the controller fetches files the scan has not read yet into
  free space (*scan fill*). Two rules hold for every executor of the set: while the cache
  has free space a miss also fetches the rest of its file (*fill*, file extents from
  metadata: a block fetched into free space evicts nothing), and the random executor's
  refusal yields to *consumed* data — when another unit holds read blocks under eager
  eviction, which the controller evicts first, a new block is admitted in their place
  (the stable subset the refusal protects is the unit's own, not another unit's finished
  pass). The random executor's refusal also yields to *re-reads a shuffled epoch cannot
  make* (``admits_frequent``, see :meth:`Executor.admit`): until a review names a new
  pattern the executor of the old one stays, and a refusal that holds while the stream has
  turned skewed keeps the hot blocks it missed out for good.
* ``seed`` is that table as written: eager eviction that removes a block once read
  (:class:`SeedEagerEviction`), plain LRU and neighbourhood prefetch for skewed, no
  prefetch for random, strict refusal when full, no fill.

An executor owns the eviction order of *its cache unit's* resident blocks only; the
controller (:mod:`aicache.adaptive.controller`) arbitrates between units that share one
byte budget. Executors are pure (told ``now``, injected rng) and are created fresh on a
switch; the unit's resident blocks are handed over with :meth:`Executor.adopt` in the old
executor's eviction order (oldest candidate first), so LRU-ish order survives a switch.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import Any, ClassVar, cast

from aicache.policies import EVICTION, PREFETCH
from aicache.policies.base import EvictionPolicy, PrefetchPolicy
from aicache.policies.eviction.eager import EagerEviction, SeedEagerEviction
from aicache.policies.eviction.slru import AdaptiveSLRU
from aicache.policies.prefetch.stride import StridePrefetcher
from aicache.registry import Registry

#: the most two items' read counts can differ over a run of reads made of shuffled epochs
#: or sequential passes (every item once per epoch; see :meth:`Executor.admit`)
EPOCH_COUNT_SPREAD = 2


class Executor:
    """Prefetch + admission + eviction for one cache unit under one pattern.

    ``prefetch`` / ``eviction`` override the pattern's choices (the seed's micro-benchmarks
    hold one side fixed: "prefetching disabled" = ``prefetch="none"``, "LRU eviction in all
    arms" = ``eviction="lru"``, which also admits always).
    """

    pattern: ClassVar[str] = ""
    prefetch_name: ClassVar[str] = "none"
    eviction_name: ClassVar[str] = "lru"
    #: True when new blocks are refused once the cache is full (then nothing is evicted)
    rejects_when_full: ClassVar[bool] = False
    #: True: while the cache has free space, a miss also fetches the rest of its file
    #: (see :meth:`on_access`)
    fills_free_space: ClassVar[bool] = True
    #: the share of the capacity that prefetches not read yet (stored or in flight, all
    #: units together) may take when this executor's unit asks for more: what its
    #: eviction takes last. Past it a prefetch would displace another unread one, and a
    #: block evicted unread is fetched twice. Eager eviction takes read blocks first
    #: (1.0); the default's ``2-random-unread-last`` protects unread ones up to half.
    unread_share: ClassVar[float] = 1.0
    #: with ``rejects_when_full``: another unit's consumed sequential blocks (eager
    #: candidates, which the controller evicts first), and the blocks of a unit not read
    #: since this executor took over, count as room, so a new block is admitted in their
    #: place (the controller asks, see ``ChironSystem.admit``)
    consumed_is_room: ClassVar[bool] = True
    #: with ``rejects_when_full``: a block read at least :data:`EPOCH_COUNT_SPREAD` + 1
    #: more times within the unit's window than the block it would replace is admitted
    #: (see :meth:`admit`)
    admits_frequent: ClassVar[bool] = True

    __slots__ = ("capacity", "prefetcher", "eviction", "rejects", "extent_of")

    def __init__(self, capacity: int, rng: random.Random,
                 prefetch_params: dict[str, Any] | None = None, *,
                 prefetch: str | None = None, eviction: str | None = None,
                 extent_of: Callable[[str], tuple[int, int] | None] | None = None) -> None:
        self.capacity = capacity
        #: file -> (first, last) block id from metadata; None = no fill (see :meth:`on_access`);
        #: a fixed prefetcher (the micro-benchmarks' ``prefetch=``) fills nothing either
        self.extent_of = extent_of if self.fills_free_space and prefetch is None else None
        pname = prefetch or self.prefetch_name
        self.prefetcher: PrefetchPolicy = PREFETCH.get(pname)(
            **(prefetch_params if pname == self.prefetch_name and prefetch_params else {}))
        if eviction is None:
            self.eviction: EvictionPolicy = self._make_eviction(capacity, rng)
            self.rejects = self.rejects_when_full
        else:
            self.eviction = EVICTION.get(eviction)(capacity, rng=rng)
            self.rejects = False

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return EVICTION.get(self.eviction_name)(capacity, rng=rng)

    def admit(self, size: int, used: int, block: int | None = None,
              window_count: Mapping[int, int] | None = None) -> bool:
        """Whether ``block`` (``size`` bytes, ``used`` bytes in the cache) may enter.

        An executor that refuses when full (random) keeps a stable subset across shuffled
        epochs. In a shuffled epoch every item is read exactly once, so over any run of
        consecutive reads two items' read counts differ by at most
        :data:`EPOCH_COUNT_SPREAD` (the run holds the same whole epochs for both, plus at
        most a partial epoch at each end); a sequential pass obeys the same bound. With
        ``admits_frequent``, a block whose count in the unit's window (``window_count``,
        ID -> reads in the window) exceeds that of the block it would replace (this unit's
        least recently used) by more than the bound is re-read faster than any epoch can
        re-read it — the stream has turned skewed before a review says so — and is
        admitted. On a stream of shuffled epochs or passes this never happens, so the
        refusal there is exactly the seed's."""
        if not self.rejects or used + size <= self.capacity:
            return True
        if not self.admits_frequent or block is None or window_count is None:
            return False
        # the policy's keys are block ids, typed Hashable by the policy interface
        victim = cast("int | None", self.eviction.first_key())
        if victim is None:
            return False
        return window_count.get(block, 0) > window_count.get(victim, 0) + EPOCH_COUNT_SPREAD

    def on_access(self, stream: Hashable, block: int, size: int, hit: bool, now: float,
                  file: str = "", free: int = 0) -> Sequence[int]:
        """The blocks to prefetch after a read of ``block`` (of ``file``) in ``stream``;
        ``free``: bytes of the cache not in use.

        Fill: while the cache has free space, a block fetched now evicts nothing, so a miss
        also asks for the rest of its file (up to the free space; the extent comes from
        metadata, as a stat gives it), no further than a stride prefetcher's window. What
        fits costs no hit and may save a miss; the executor's own prefetch decides again
        once the cache is full."""
        ev = self.eviction
        if hit:
            ev.on_hit(block, size, now)
        elif ev.sees_misses:  # ghost-list policies (ARC, LeCaR) learn from misses
            ev.on_miss(block, size, now)
        out = self.prefetcher.on_access(stream, block, hit, now)
        if hit or free <= 0 or self.extent_of is None:
            return out
        ext = self.extent_of(file)
        if ext is None or ext[1] <= block:
            return out
        n = min(ext[1] - block, free // max(size, 1))
        pf = self.prefetcher
        if isinstance(pf, StridePrefetcher):
            # no further ahead than the readahead window: free space costs no eviction, but
            # the fetches share the remote with every other reader's, and one file's whole
            # rest at once would hold the others' next blocks behind it
            n = min(n, pf.depth)
        return [*out, *range(block + 1, block + 1 + n)] if n > 0 else out

    def withheld(self, stream: Hashable, blocks: Sequence[int]) -> None:
        """``blocks`` of the last :meth:`on_access` answer in ``stream`` were not granted:
        a stride prefetcher asks for them again on the stream's next read."""
        pf = self.prefetcher
        if isinstance(pf, StridePrefetcher):
            for b in blocks:
                pf.withheld(stream, b)

    def on_insert(self, block: int, size: int, now: float, prefetched: bool) -> bool:
        """False: the eviction policy declined the block (S3-FIFO)."""
        if prefetched:
            return self.eviction.on_prefetch_insert(block, size, now) is not False
        return self.eviction.on_insert(block, size, now) is not False

    def adopt(self, block: int, size: int, now: float, read: bool) -> None:
        """Take over a resident block from the previous executor (not an access)."""
        ev = self.eviction
        if isinstance(ev, EagerEviction) and not read:
            ev.adopt_unread(block)
        else:
            ev.on_insert(block, size, now)

    def adopt_many(self, blocks: Sequence[int], sizes: Mapping[int, int], now: float,
                   unread: Collection[int]) -> None:
        """:meth:`adopt` of ``blocks`` in order (``unread``: those not read yet), in bulk."""
        ev = self.eviction
        if isinstance(ev, EagerEviction):
            ev.adopt_split([b for b in blocks if b not in unread], [b for b in blocks if b in unread])
        else:  # Mapping is invariant in its key; the policy only reads sizes[b] of these blocks
            ev.adopt_many(blocks, cast("Mapping[Hashable, int]", sizes), now)

    def eager_candidate(self) -> bool:
        """True when this unit holds a block to evict ahead of every other unit's (a block
        already read under eager eviction)."""
        ev = self.eviction
        return isinstance(ev, EagerEviction) and ev.has_read()


class SequentialExecutor(Executor):
    pattern = "sequential"
    #: per interleaved stream of the unit (parallel shard readers of one folder)
    prefetch_name = "stride-streams"
    eviction_name = "eager"

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return EagerEviction(capacity, rng=rng)


class RandomExecutor(Executor):
    """No prefetch across samples; keep the cached subset stable across epochs by refusing
    new blocks once full. ``lru`` only orders blocks for the rare case the controller must
    take space from this unit for another one. Within a sample made of several consecutive
    blocks (a big file, an image and its caption sidecar) the rest is certain once its
    first block is read: ``sample-rest`` fetches it (and nothing for single-block samples)."""

    pattern = "random"
    prefetch_name = "sample-rest"
    eviction_name = "lru"
    rejects_when_full = True


class SkewedExecutor(Executor):
    """Neighbourhood prefetch on a miss plus readahead while reads are in order; segmented
    LRU (re-read blocks are protected) whose protected share adapts from ghost hits."""

    pattern = "skewed"
    prefetch_name = "neighborhood+readahead"
    eviction_name = "lru"

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return AdaptiveSLRU(capacity, rng=rng)


class DefaultExecutor(Executor):
    """The framework's default before any accepted diagnosis: JuiceFS's policy."""

    pattern = "default"
    #: per interleaved stream of the unit, as JuiceFS reads ahead per open file
    prefetch_name = "readahead-streams"
    eviction_name = "2-random-unread-last"
    unread_share = 0.5


class SeedSequentialExecutor(SequentialExecutor):
    """Stride prefetch + the seed's eager eviction (a block goes once read)."""

    prefetch_name = "stride"
    fills_free_space = False

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return SeedEagerEviction(capacity, rng=rng)


class SeedRandomExecutor(RandomExecutor):
    """No prefetch at all; reject new blocks when full, whatever other units hold or
    however often a refused block is read."""

    prefetch_name = "none"
    fills_free_space = False
    consumed_is_room = False
    admits_frequent = False


class SeedSkewedExecutor(SkewedExecutor):
    """Neighborhood prefetch (no readahead) + plain LRU."""

    prefetch_name = "neighborhood"
    fills_free_space = False

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return EVICTION.get("lru")(capacity, rng=rng)


class SeedDefaultExecutor(DefaultExecutor):
    """JuiceFS's policy as the seed's default: readahead + 2-random, no fill."""

    prefetch_name = "readahead"
    fills_free_space = False
    eviction_name = "2-random"


EXECUTORS: Registry[type[Executor]] = Registry("executor")
EXECUTORS.register("sequential", SequentialExecutor, "stride prefetch + always + eager eviction")
EXECUTORS.register("random", RandomExecutor, "sample-rest prefetch + reject when full (unless re-read faster "
                   "than an epoch allows) + no eviction")
EXECUTORS.register("skewed", SkewedExecutor, "neighborhood prefetch (+ readahead in order) + always + adaptive segmented LRU")
EXECUTORS.register("default", DefaultExecutor, "readahead + always + 2-random (JuiceFS)")

#: executor set -> pattern -> executor class (see the module docstring)
EXECUTOR_SETS: Registry[Mapping[str, type[Executor]]] = Registry("executor set")
EXECUTOR_SETS.register("ours", {n: EXECUTORS.get(n) for n in EXECUTORS.names()},
                       "MRU-style eager, sample-rest for random, segmented LRU + readahead for skewed, "
                       "fill of free space, consumed data and faster-than-epoch re-reads as room (default)")
EXECUTOR_SETS.register("seed", {"sequential": SeedSequentialExecutor, "random": SeedRandomExecutor,
                                "skewed": SeedSkewedExecutor, "default": SeedDefaultExecutor},
                       "the seed's executor table: eager removes a block once read, no prefetch for random, "
                       "LRU for skewed")


def make_executor(pattern: str, capacity: int, rng: random.Random,
                  prefetch_params: dict[str, Any] | None = None, *,
                  prefetch: str | None = None, eviction: str | None = None,
                  executors: str = "ours",
                  extent_of: Callable[[str], tuple[int, int] | None] | None = None) -> Executor:
    """A fresh executor for ``pattern`` (``sequential``, ``random``, ``skewed``, ``default``)
    from executor set ``executors`` (``ours``, ``seed``), optionally with its prefetcher or
    eviction policy overridden by registry name."""
    EXECUTORS.get(pattern)  # an unknown pattern: the registry's error names the valid ones
    cls = EXECUTOR_SETS.get(executors)[pattern]
    return cls(capacity, rng, prefetch_params, prefetch=prefetch, eviction=eviction, extent_of=extent_of)
