"""Trace-driven cache simulation: ``aicache sim cache``.

One pass replays every request through :meth:`aicache.sim.cache.Cache.request` — the same
object and code path the real engines use — so a miss ratio here is the policy's miss ratio
there. Accounting follows libCacheSim (see :mod:`aicache.sim.cache`).

A *pre-pass* over the trace comes first (traces are re-iterable sources, read in constant
memory each time). It finds the working set — distinct objects, and the sum of their
first-seen sizes — which a ``"10%"`` cache size needs and against which every size is
checked (0 is a :class:`BadInput`; a size beyond the working set is allowed and measures
the compulsory misses). Memory: one set entry per distinct object (the cache itself
can hold that many). For a policy that ``needs_future`` (Belady) the pre-pass also computes
every request's next access (0-based index of the next request to the same object, -1 if
none) with a vectorised stable argsort: 8 bytes per request are kept for the run and 24 per
request are needed while computing. The trace's own ``next_access_vtime`` column is not
trusted for this (its base differs between tools and skipped records would shift it).

The pre-pass keeps the parsed batches while they take at most :data:`RETAIN_BYTES`, so
a text trace of a few million requests is parsed once; beyond that the replay streams the
file again (memory stays bounded whatever the trace length).

The hot loop hands the ``tolist()`` columns of each numpy batch to
:meth:`aicache.sim.cache.Cache.request_batch`, which loops in compiled code where the
install compiled it (:mod:`aicache.native`) — no per-request allocation beyond the ints
themselves.

For the slot-array policies (:class:`aicache.policies.slotted.SlotPolicy`: LRU, FIFO,
CLOCK, SIEVE, S3-FIFO, ARC) without prefetching, the simulator drives the policy's core
directly (:func:`_simulate_slots`): the pre-pass turns the trace's ids into dense slot ids
(:class:`aicache.policies.slotcore.SlotMap`, whose count and first-seen bytes are the
working set) and :func:`aicache.policies.slotcore.replay` (``replay_bytes`` in bytes mode)
runs ``Cache.request``'s steps over them — the same core, the same counts, no Python
object per request.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from array import array
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

from aicache.errors import BadInput
from aicache.policies import EVICTION, PREFETCH, PrefetchPolicy, make_eviction
from aicache.policies import slotcore
from aicache.policies.base import EvictionPolicy, NoPrefetch
from aicache.policies.slotted import SlotPolicy
from aicache.sim.cache import Cache
from aicache.traces.base import RequestBatch
from aicache.traces.formats._common import DEFAULT_BATCH, Column, TraceSource
from aicache.units import parse_size

if TYPE_CHECKING:
    import numpy as np

SIZE_MODES = ("objects", "bytes")
#: keys of the ``--json`` object, in order (a stable contract: scripts parse them)
JSON_KEYS = ("trace", "policy", "prefetch", "size_mode", "cache_size", "requests", "hits",
             "miss_ratio", "byte_miss_ratio", "wall_seconds", "requests_per_second")
#: show a progress bar (when stderr is a terminal) from this many requests on
PROGRESS_MIN_REQUESTS = 200_000
#: the pre-pass keeps the parsed batches for the replay while they take at most this much
#: memory (~2.5 M requests), so a text trace is parsed once; larger traces are re-streamed
RETAIN_BYTES = 64 << 20


@dataclass(slots=True)
class WorkingSet:
    """What the pre-pass learns about a trace."""

    requests: int
    objects: int
    bytes: int
    next_access: np.ndarray | None = None
    #: the parsed trace, when it fit in :data:`RETAIN_BYTES` (else None: read it again)
    batches: list[RequestBatch] | None = None

    def size(self, size_mode: str) -> int:
        return self.objects if size_mode == "objects" else self.bytes


@dataclass(slots=True)
class CacheSimResult:
    """One simulation's numbers. The first eleven fields are :data:`JSON_KEYS`, in order."""

    trace: str
    policy: str
    prefetch: str
    size_mode: str
    cache_size: int
    requests: int
    hits: int
    miss_ratio: float
    byte_miss_ratio: float
    wall_seconds: float
    requests_per_second: float
    format: str = ""
    working_set: int = 0
    evictions: int = 0
    prefetched: int = 0
    prefetch_hits: int = 0
    bad_records: int = 0
    #: requests of size 0 the trace's reader skipped (oracle-general, as libCacheSim does)
    zero_size_skipped: int = 0
    scan_seconds: float = 0.0
    seed: int = 0

    def to_dict(self) -> dict[str, object]:
        """:data:`JSON_KEYS` first, in order, then every other field (the table's rows:
        ``--json`` carries everything the table shows)."""
        d = asdict(self)
        out = {k: d[k] for k in JSON_KEYS}
        out.update((k, v) for k, v in d.items() if k not in out)
        return out

    def to_full_dict(self) -> dict[str, object]:
        return asdict(self)


def _nbytes(b: RequestBatch) -> int:
    return sum(a.nbytes for a in (b.timestamp, b.obj_id, b.obj_size, b.next_access_vtime,
                                  b.unit, b.phase, b.op) if a is not None)


def scan(source: TraceSource, *, need_bytes: bool = True, need_future: bool = False,
         batch_size: int = DEFAULT_BATCH, retain_bytes: int = 0) -> WorkingSet:
    """The pre-pass: request count, distinct objects, (if ``need_bytes``) the sum of their
    first-seen sizes, and (if ``need_future``) every request's next-access index.
    Without ``need_bytes`` the byte total is reported as 0. The batches are kept in the
    result while they take at most ``retain_bytes``."""
    import numpy as np

    from aicache.traces.formats.oracle_general import next_access_times

    seen = FirstSeen()
    requests = 0
    id_chunks: list[np.ndarray] = []
    kept: list[RequestBatch] | None = [] if retain_bytes > 0 else None
    kept_bytes = 0
    for b in source.batches(batch_size):
        n = len(b)
        if not n:
            continue
        requests += n
        if kept is not None:
            kept_bytes += _nbytes(b)
            if kept_bytes <= retain_bytes:
                kept.append(b)
            else:
                kept = None
        if need_future:
            id_chunks.append(b.obj_id)
        seen.add(b.obj_id, b.obj_size if need_bytes else None)
    nxt = None
    if need_future:
        ids = np.concatenate(id_chunks) if id_chunks else np.zeros(0, np.uint64)
        del id_chunks
        nxt = next_access_times(ids)
    objects, total_bytes = seen.totals()
    return WorkingSet(requests=requests, objects=objects, bytes=total_bytes, next_access=nxt,
                      batches=kept)


class FirstSeen:
    """Distinct ids and the sum of their first-seen sizes, vectorised.

    Each batch contributes its sorted unique ids (with the size at each one's first
    occurrence); the pieces are merged by a stable ``np.unique`` whenever they hold twice
    as many entries as the last merge left (at least 2**20), so memory stays within a few
    times 16 bytes per distinct object and every id is sorted a logarithmic number of
    times. A stable sort keeps, for an id seen in several pieces, the earliest piece's size.
    """

    __slots__ = ("_ids", "_sizes", "_n", "_merged", "merge_min")

    def __init__(self, merge_min: int = 1 << 20) -> None:
        self.merge_min = merge_min
        self._ids: list[np.ndarray] = []
        self._sizes: list[np.ndarray] = []
        self._n = 0
        self._merged = 0

    def add(self, ids: np.ndarray, sizes: np.ndarray | None) -> None:
        import numpy as np

        if sizes is None:
            u = np.unique(ids)
            self._sizes.append(np.zeros(len(u), dtype=np.int64))
        else:
            u, first = np.unique(ids, return_index=True)
            self._sizes.append(sizes[first].astype(np.int64))
        self._ids.append(u)
        self._n += len(u)
        if self._n > 2 * max(self._merged, self.merge_min):
            self._merge()

    def _merge(self) -> None:
        import numpy as np

        if len(self._ids) <= 1:
            return
        u, first = np.unique(np.concatenate(self._ids), return_index=True)
        self._sizes = [np.concatenate(self._sizes)[first]]
        self._ids = [u]
        self._n = self._merged = len(u)

    def totals(self) -> tuple[int, int]:
        """(distinct ids, sum of their first-seen sizes)."""
        self._merge()
        if not self._ids:
            return 0, 0
        return len(self._ids[0]), int(self._sizes[0].sum())


def resolve_cache_size(cache_size: str | int, ws: WorkingSet, size_mode: str, trace: str) -> int:
    """Absolute size from ``"10%"``, ``"4GiB"`` or an int; it must be positive. A size at or
    above the working set (``"100%"``, ``"150%"``) is allowed, as in libCacheSim: such a
    cache never evicts, so its misses are the compulsory ones (a curve's end point)."""
    unit = "objects" if size_mode == "objects" else "bytes"
    total = ws.size(size_mode)
    cap = parse_size(cache_size, total=total, what="cache size")
    if cap <= 0:
        raise BadInput(f"cache size {cache_size!r} is {cap} {unit}; give a positive size "
                       f"(the working set of {trace!r} is {total} {unit})")
    return cap


def _open(source_or_path: TraceSource | str | os.PathLike[str], fmt: str, skip_bad: bool) -> TraceSource:
    if isinstance(source_or_path, TraceSource):
        return source_or_path
    from aicache.traces.io import open_trace

    return open_trace(source_or_path, fmt, skip_bad=skip_bad)


def _require_requests(src: TraceSource, requests: int) -> None:
    """A trace that yielded no request is bad input, named with its likely cause."""
    if requests == 0 and src.zero_size_records:
        raise BadInput(f"trace {src.path!r} has no requests: all {src.zero_size_records} records "
                       "have obj_size 0, which libCacheSim's reader skips and so does this one; "
                       "write the trace with the objects' sizes")
    if requests == 0:
        raise BadInput(f"trace {src.path!r} has no requests; check the file and --format")


def simulate(
    source_or_path: TraceSource | str | os.PathLike[str],
    policy: str,
    cache_size: str | int,
    size_mode: str = "objects",
    prefetch: str = "none",
    seed: int = 0,
    fmt: str = "auto",
    skip_bad: bool = False,
    progress: bool | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> CacheSimResult:
    """Replay a trace through ``Cache(policy)`` and count hits.

    ``progress=None`` shows a bar on a terminal for long traces; ``True``/``False`` force
    it. Deterministic: the policy's only randomness is ``random.Random(seed)``.
    """
    if size_mode not in SIZE_MODES:
        raise BadInput(f"size mode {size_mode!r} is not one of {', '.join(SIZE_MODES)}")
    policy_cls = EVICTION.get(policy)  # unknown names fail before any reading
    pf_cls = PREFETCH.get(prefetch)
    if not str(cache_size).strip().endswith("%"):
        parse_size(cache_size, what="cache size")  # a typo fails before the pre-pass
    t0 = time.perf_counter()
    src = _open(source_or_path, fmt, skip_bad)
    if issubclass(pf_cls, NoPrefetch) and replayable(policy_cls):
        return _simulate_slots(src, policy, cache_size, size_mode, seed, progress, batch_size, t0)
    ws = scan(src, need_bytes=size_mode == "bytes",
              need_future=bool(getattr(policy_cls, "needs_future", False)), batch_size=batch_size,
              retain_bytes=RETAIN_BYTES)
    bad_records = src.bad_records
    _require_requests(src, ws.requests)
    cap = resolve_cache_size(cache_size, ws, size_mode, src.path)
    t_scan = time.perf_counter() - t0
    cache = Cache(cap, make_eviction(policy, cap, rng=random.Random(seed)), size_mode)
    prefetched = prefetch_hits = 0

    if progress is None:
        from aicache.progress import progress_enabled

        progress = progress_enabled() and ws.requests >= PROGRESS_MIN_REQUESTS
    from aicache.progress import progress as progress_bar

    with progress_bar(ws.requests, f"{policy} on {os.path.basename(src.path)}", enabled=progress) as bar:
        batches: Iterator[RequestBatch] = (iter(ws.batches) if ws.batches is not None
                                           else src.batches(batch_size))
        if issubclass(pf_cls, NoPrefetch):
            _replay(cache, batches, ws.next_access, bar)
        else:
            prefetched, prefetch_hits = _replay_prefetch(cache, batches, pf_cls(), ws.next_access, bar)
    wall = time.perf_counter() - t0
    st = cache.stats
    return CacheSimResult(
        trace=src.path, policy=policy, prefetch=prefetch, size_mode=size_mode, cache_size=cap,
        requests=st.requests, hits=st.hits, miss_ratio=st.miss_ratio,
        byte_miss_ratio=st.byte_miss_ratio, wall_seconds=wall,
        requests_per_second=st.requests / wall if wall > 0 else 0.0,
        format=src.format, working_set=ws.size(size_mode), evictions=st.evictions,
        prefetched=prefetched, prefetch_hits=prefetch_hits, bad_records=bad_records,
        zero_size_skipped=src.zero_size_records, scan_seconds=t_scan, seed=seed,
    )


def replayable(cls: type[EvictionPolicy]) -> bool:
    """Whether :func:`aicache.policies.slotcore.replay` may stand for ``Cache`` over
    ``cls``: a :class:`SlotPolicy` whose events are the core's (a subclass that admits,
    or changes an event, goes through ``Cache``)."""
    if not issubclass(cls, SlotPolicy) or cls.may_reject or cls.self_evicting:
        return False
    return all(getattr(cls, m) is getattr(SlotPolicy, m)
               for m in ("access", "on_hit", "on_miss", "on_insert", "victim", "admit"))


@dataclass(slots=True)
class _SlotTrace:
    """The pre-pass of :func:`_simulate_slots`: the trace as slot ids, sizes and the sizes'
    sum per chunk (kept while they take at most :data:`RETAIN_BYTES`; else None and the
    replay maps again)."""

    requests: int
    slots: slotcore.SlotMap
    kept: list[tuple[memoryview, Column, int]] | None


def _slot_batches(source: TraceSource, slots: slotcore.SlotMap, batch_size: int,
                  sized: bool = False) -> Iterator[tuple[memoryview, Column, int]]:
    """Each chunk as (slot ids, sizes, the sizes' sum), mapping new ids to new slots
    (``sized``: and adding their first-seen sizes to ``slots.first_bytes``). The columns
    are typed arrays from the reader (:meth:`TraceSource.id_sizes`): numpy is not needed
    where the reader has a compiled parser."""
    for ids, sizes, total in source.id_sizes(batch_size):
        dense = memoryview(array("i", bytes(4 * len(ids))))
        if sized:
            slots.map_sized(ids, sizes, dense)
        else:
            slots.map(ids, dense)
        yield dense, sizes, total


def scan_slots(source: TraceSource, batch_size: int = DEFAULT_BATCH,
               retain_bytes: int = RETAIN_BYTES, sized: bool = False) -> _SlotTrace:
    """The pre-pass of :func:`_simulate_slots` (``sized``: the first-seen bytes too)."""
    slots = slotcore.SlotMap()
    kept: list[tuple[memoryview, Column, int]] | None = []
    requests = kept_bytes = 0
    for dense, sizes, total in _slot_batches(source, slots, batch_size, sized):
        requests += len(dense)
        if kept is not None:
            kept_bytes += dense.nbytes + sizes.nbytes
            if kept_bytes <= retain_bytes:
                kept.append((dense, sizes, total))
            else:
                kept = None
    return _SlotTrace(requests, slots, kept)


def _simulate_slots(src: TraceSource, policy: str, cache_size: str | int, size_mode: str,
                    seed: int, progress: bool | None, batch_size: int,
                    t0: float) -> CacheSimResult:
    """:func:`simulate` over a :func:`replayable` policy, without prefetching: the same
    requests, checks and counts, through the policy's core."""
    objects_mode = size_mode == "objects"
    st = scan_slots(src, batch_size, sized=not objects_mode)
    bad_records, zero_size = src.bad_records, src.zero_size_records
    _require_requests(src, st.requests)
    objects = int(st.slots.n)
    ws = WorkingSet(requests=st.requests, objects=objects, bytes=int(st.slots.first_bytes))
    cap = resolve_cache_size(cache_size, ws, size_mode, src.path)
    t_scan = time.perf_counter() - t0
    pol = make_eviction(policy, cap, rng=random.Random(seed))
    assert isinstance(pol, SlotPolicy)
    core = pol.core
    assert isinstance(core, slotcore.Core)  # replay drives the concrete core, not the protocol
    core.reserve(objects)
    stored = memoryview(array("q", bytes(0 if objects_mode else 8 * objects)))  # bytes: the cache's table
    if progress is None:
        from aicache.progress import progress_enabled

        progress = progress_enabled() and st.requests >= PROGRESS_MIN_REQUESTS
    from aicache.progress import progress as progress_bar

    hits = bytes_hit = bytes_total = evictions = used = 0
    with progress_bar(st.requests, f"{policy} on {os.path.basename(src.path)}", enabled=progress) as bar:
        batches = (iter(st.kept) if st.kept is not None
                   else _slot_batches(src, st.slots, batch_size))
        for dense, sizes, total in batches:
            if objects_mode:
                h, bh, ev, _, used = slotcore.replay(core, dense, sizes, cap, used)
            else:
                h, bh, ev, _, used = slotcore.replay_bytes(core, dense, sizes, cap, used, stored)
            hits += h
            bytes_hit += bh
            evictions += ev
            bytes_total += total
            bar.advance(len(dense))
    wall = time.perf_counter() - t0
    n = st.requests
    return CacheSimResult(
        trace=src.path, policy=policy, prefetch="none", size_mode=size_mode, cache_size=cap,
        requests=n, hits=hits, miss_ratio=1.0 - hits / n,
        byte_miss_ratio=1.0 - bytes_hit / bytes_total if bytes_total else 0.0,
        wall_seconds=wall, requests_per_second=n / wall if wall > 0 else 0.0,
        format=src.format, working_set=ws.size(size_mode), evictions=evictions,
        bad_records=bad_records, zero_size_skipped=zero_size, scan_seconds=t_scan, seed=seed,
    )


class _Bar(Protocol):
    def advance(self, n: float = 1) -> None: ...


def _replay(cache: Cache, batches: Iterator[RequestBatch], nxt: np.ndarray | None, bar: _Bar) -> None:
    """The hot loop (no prefetching): one :meth:`Cache.request_batch` per batch."""
    batch = cache.request_batch
    advance = bar.advance
    pos = 0
    for b in batches:
        n = len(b)
        fut = nxt[pos:pos + n].tolist() if nxt is not None else None
        batch(b.obj_id.tolist(), b.obj_size.tolist(), b.timestamp.tolist(), fut)
        pos += n
        advance(n)


def _replay_prefetch(cache: Cache, batches: Iterator[RequestBatch], pf: PrefetchPolicy,
                     nxt: np.ndarray | None, bar: _Bar) -> tuple[int, int]:
    """Replay with a prefetcher: after each demand access the prefetcher names blocks
    (object ids; neighbours are consecutive ids within a unit); absent ones are inserted
    with the size of the block that triggered them. A prefetched block read while resident
    is reported used; one found evicted when next requested is reported wasted."""
    req = cache.request
    insert = cache.insert
    resident = cache.__contains__
    on_access = pf.on_access
    used = pf.on_prefetch_used
    wasted = pf.on_prefetch_wasted
    tell = cache.policy.set_next_access if nxt is not None else None
    advance = bar.advance
    pending: set[int] = set()
    prefetched = prefetch_hits = 0
    pos = 0
    top = 1 << 64
    for b in batches:
        n = len(b)
        units = b.unit.tolist() if b.unit is not None else [0] * n
        fut = nxt[pos:pos + n].tolist() if nxt is not None else [-1] * n
        for k, s, t, u, v in zip(b.obj_id.tolist(), b.obj_size.tolist(), b.timestamp.tolist(), units, fut):
            if tell is not None:
                tell(v)
            hit = req(k, s, t)
            if k in pending:
                pending.discard(k)
                if hit:
                    prefetch_hits += 1
                    used(k, t)
                else:
                    wasted(k, t)
            for blk in on_access(u, k, hit, t):
                if 0 <= blk < top and not resident(blk) and insert(blk, s, t):
                    pending.add(blk)
                    prefetched += 1
        pos += n
        advance(n)
    return prefetched, prefetch_hits
