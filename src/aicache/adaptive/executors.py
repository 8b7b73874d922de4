"""Chiron's executors: one prefetch + admission + eviction bundle per access pattern.

| pattern    | prefetch                       | admission         | eviction                         |
| ---------- | ------------------------------ | ----------------- | -------------------------------- |
| sequential | stride, adaptive depth         | always            | eager (read blocks go first)     |
| random     | none across samples (rest of a | reject when full  | none while rejecting             |
|            | multi-block sample only)       |                   |                                  |
| skewed     | neighborhood                   | always            | segmented LRU (reuse protects)   |
| default    | sequential readahead (JuiceFS) | always            | 2-random (JuiceFS)               |

Two executor sets, chosen by name (``ChironParams.executors``; ``--executors``):

* ``ours`` (the default) departs from the seed's Table 1 in three places, each from what
  the pattern means: a sequential pass does not come back to what it just read, so among
  read blocks eager eviction takes the *most recently* read first (MRU: a loop larger than
  the cache keeps its older part, which the next pass reads first; see
  :class:`EagerEviction`); a skewed stream's hot blocks are the re-read ones, so the skewed
  executor's LRU is *segmented* (one-off blocks and unread prefetched neighbours are
  evicted before re-read ones, see :class:`SegmentedLRU`); a shuffled epoch is random
  *between* samples but reads each sample whole, so once a multi-block sample's first
  block is read the random executor fetches the rest (``sample-rest``; a no-op for
  single-block samples).
* ``seed`` is Table 1 as written: eager eviction that removes a block once read
  (:class:`SeedEagerEviction`), plain LRU for skewed, no prefetch for random.

An executor owns the eviction order of *its cache unit's* resident blocks only; the
controller (:mod:`aicache.adaptive.controller`) arbitrates between units that share one
byte budget. Executors are pure (told ``now``, injected rng) and are created fresh on a
switch; the unit's resident blocks are handed over with :meth:`Executor.adopt` in the old
executor's eviction order (oldest candidate first), so LRU-ish order survives a switch.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from aicache.policies import EVICTION, PREFETCH
from aicache.policies.base import EvictionPolicy, Key, PrefetchPolicy
from aicache.registry import Registry


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

    __slots__ = ("capacity", "prefetcher", "eviction", "rejects")

    def __init__(self, capacity: int, rng: random.Random,
                 prefetch_params: dict[str, Any] | None = None, *,
                 prefetch: str | None = None, eviction: str | None = None) -> None:
        self.capacity = capacity
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

    def admit(self, size: int, used: int) -> bool:
        return not self.rejects or used + size <= self.capacity

    def on_access(self, stream: Hashable, block: int, size: int, hit: bool, now: float) -> Sequence[int]:
        ev = self.eviction
        if hit:
            ev.on_hit(block, size, now)
        elif ev.sees_misses:  # ghost-list policies (ARC, LeCaR) learn from misses
            ev.on_miss(block, size, now)
        return self.prefetcher.on_access(stream, block, hit, now)

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
        else:
            ev.adopt_many(blocks, sizes, now)

    def eager_candidate(self) -> bool:
        """True when this unit holds a block to evict ahead of every other unit's (a block
        already read under eager eviction)."""
        ev = self.eviction
        return isinstance(ev, EagerEviction) and ev.has_read()


class SequentialExecutor(Executor):
    pattern = "sequential"
    prefetch_name = "stride"
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
    pattern = "skewed"
    prefetch_name = "neighborhood"
    eviction_name = "lru"

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return SegmentedLRU(capacity, rng=rng)


class DefaultExecutor(Executor):
    """The framework's default before any accepted diagnosis: JuiceFS's policy."""

    pattern = "default"
    prefetch_name = "readahead"
    eviction_name = "2-random"


class SeedSequentialExecutor(SequentialExecutor):
    """Stride prefetch + the seed's eager eviction (a block goes once read)."""

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return SeedEagerEviction(capacity, rng=rng)


class SeedRandomExecutor(RandomExecutor):
    """No prefetch at all; reject new blocks when full."""

    prefetch_name = "none"


class SeedSkewedExecutor(SkewedExecutor):
    """Neighborhood prefetch + plain LRU."""

    def _make_eviction(self, capacity: int, rng: random.Random) -> EvictionPolicy:
        return EVICTION.get("lru")(capacity, rng=rng)


EXECUTORS: Registry[type[Executor]] = Registry("executor")
EXECUTORS.register("sequential", SequentialExecutor, "stride prefetch + always + eager eviction")
EXECUTORS.register("random", RandomExecutor, "sample-rest prefetch + reject when full + no eviction")
EXECUTORS.register("skewed", SkewedExecutor, "neighborhood prefetch + always + segmented LRU")
EXECUTORS.register("default", DefaultExecutor, "readahead + always + 2-random (JuiceFS)")

#: executor set -> pattern -> executor class (see the module docstring)
EXECUTOR_SETS: Registry[Mapping[str, type[Executor]]] = Registry("executor set")
EXECUTOR_SETS.register("ours", {n: EXECUTORS.get(n) for n in EXECUTORS.names()},
                       "MRU-style eager, sample-rest for random, segmented LRU for skewed (default)")
EXECUTOR_SETS.register("seed", {"sequential": SeedSequentialExecutor, "random": SeedRandomExecutor,
                                "skewed": SeedSkewedExecutor, "default": DefaultExecutor},
                       "the seed's Table 1: eager removes a block once read, no prefetch for random, LRU for skewed")


def make_executor(pattern: str, capacity: int, rng: random.Random,
                  prefetch_params: dict[str, Any] | None = None, *,
                  prefetch: str | None = None, eviction: str | None = None,
                  executors: str = "ours") -> Executor:
    """A fresh executor for ``pattern`` (``sequential``, ``random``, ``skewed``, ``default``)
    from executor set ``executors`` (``ours``, ``seed``), optionally with its prefetcher or
    eviction policy overridden by registry name."""
    EXECUTORS.get(pattern)  # an unknown pattern: the registry's error names the valid ones
    cls = EXECUTOR_SETS.get(executors)[pattern]
    return cls(capacity, rng, prefetch_params, prefetch=prefetch, eviction=eviction)
