"""Event-driven data-cache simulator: a block trace, a system, a cost model, a virtual clock.

Cost model (every system gets exactly the same one):

* **Loader concurrency** — ``workers`` loader workers take the trace's reads in order; a
  read starts when a worker is free (the earliest-free worker takes the next read, so
  start times never decrease). A worker is busy for the read's I/O latency plus the read's
  compute (``compute per sample / reads per sample``). Phases are separate jobs: all
  workers finish a phase before the next starts (a barrier). JCT = the last finish time.
* **Hit** — ``hit_ms``.
* **Miss** — ``miss_ms + size / remote_bw`` (request latency plus transfer); the block is
  stored (if the system admits it) when it *arrives*, not when it is requested; fetches
  that arrive before the job ends (its last read finishes) are stored too.
* **Prefetch** — runs on at most ``prefetch_slots`` concurrent remote fetches, each costing
  what a miss costs; a prefetch starts when a slot frees up. At most ``prefetch_inflight``
  prefetched blocks may be queued or in flight; further requests are dropped (counted).
  This *fetch budget* is identical for every system, the clairvoyant bound included.
* **Shared tier** (optional, :class:`SharedTierCost`; the engine's ``shared_cache``) — a
  local miss first asks the tier: a block it holds costs ``shared.ms + size / shared.bw``
  and no origin request (``shared_hits``, ``shared_bytes``); one it lacks costs the tier's
  round trip *plus* the origin's (``shared.ms + miss_ms + size / remote_bw``), and is in
  the tier from then on (its write is modelled as instant; the tier is unbounded within a
  job, as a lifecycle-bounded store is). ``warm``: the tier holds every block from the start
  (a warmup, or other nodes' earlier epochs). Prefetches pay the same costs. A shared hit is
  a local miss: it is no hit in the CHR, as in the engine.
* **A read of a block in flight** waits only for the rest of that fetch, then costs a hit.
  A prefetch still *queued* (not started) does not make a read wait: the read fetches on
  demand and the queued prefetch is wasted (its slot time is still spent).

Counting (the seed's block-level CHR): a read is a *hit* when its block is resident, or
when it is in flight because of a *started* prefetch (the demand did not cause a remote read; the
wait is charged to JCT and counted in ``late_prefetch_reads``). A read that joins another
read's in-flight *demand* fetch is a miss. A prefetched block is *used* when read before
it is evicted; ``prefetch_accuracy`` = used / prefetched blocks fetched.

Determinism: no wall clock, no unseeded randomness — the same inputs give the same result.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from aicache.datacache.policy.driver import Admission, SystemDriver
from aicache.datacache.policy.registry import make_system
from aicache.policies.system import DataCacheSystem
from aicache.errors import BadInput
from aicache.sim.grading import ChironGrader
from aicache.traces.base import Phase
from aicache.units import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec
    from aicache.traces.workflows import WorkflowStream, WorkflowTrace

MiB = 1 << 20
_CHUNK = 1 << 18  #: reads converted to Python lists at a time
#: :func:`load_workload` streams traces longer than this (the per-read columns of a
#: materialised trace cost ~33 bytes per read: 4 M reads ~ 140 MB).
STREAM_ABOVE = 1 << 22


@dataclass(frozen=True, slots=True)
class SharedTierCost:
    """The shared tier under the local cache: its round trip, its bandwidth per fetch, and
    whether it holds every block from the start."""

    ms: float = 5.0
    bw: float = 1000.0 * MiB
    warm: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.ms, (int, float)) and math.isfinite(self.ms) and self.ms >= 0):
            raise BadInput(f"--shared-ms {self.ms!r} must be a non-negative number of milliseconds")
        if not (self.bw > 0):
            raise BadInput(f"shared tier bandwidth {self.bw!r} must be positive bytes/s")


@dataclass(frozen=True, slots=True)
class CostModel:
    """Latencies and the fetch budget. Defaults: the seed's 2 ms hit / 250 ms S3 miss."""

    hit_ms: float = 2.0
    miss_ms: float = 250.0
    remote_bw: float = 200.0 * MiB  # bytes/s per remote fetch
    prefetch_slots: int = 16
    prefetch_inflight: int = 64
    #: the shared tier under the local cache (None: none, every local miss is an origin fetch)
    shared: SharedTierCost | None = None

    def __post_init__(self) -> None:
        for k in ("hit_ms", "miss_ms"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise BadInput(f"--{k.replace('_', '-')} {v!r} must be a non-negative number of milliseconds")
        if not (self.remote_bw > 0):
            raise BadInput(f"remote bandwidth {self.remote_bw!r} must be positive bytes/s")
        if self.prefetch_slots < 1 or self.prefetch_inflight < 0:
            raise BadInput("prefetch_slots must be >= 1 and prefetch_inflight >= 0")


@dataclass(slots=True)
class PhaseSegment:
    """A run of reads with one label: [start, end), compute per read, workers."""

    name: str
    pattern: str
    start: int
    end: int
    compute_s: np.ndarray | float


@dataclass(slots=True)
class BlockWorkload:
    """What the simulator replays: per-read columns plus the block table.

    ``block_size_of`` / ``block_unit_of`` cover every block a prefetcher may name (the
    whole dataset for generated workloads, the blocks seen for a trace file).
    """

    name: str
    obj_id: np.ndarray | None  # None for a streamed workload (see ``source``)
    obj_size: np.ndarray | None
    unit: np.ndarray | None  # int codes into ``units``
    units: list[str]
    phase: np.ndarray | None  # int8 Phase values
    segments: list[PhaseSegment]
    block_size_of: dict[int, int] | list[int]
    block_unit_of: dict[int, int] | list[int]
    workers: int
    default_cache_bytes: int | None = None
    dataset_bytes: int = 0
    #: Streamed workloads: ``source(i)`` yields segment ``i``'s block ids in int64 chunks;
    #: sizes and unit codes come from ``block_arrays`` (sizes, unit codes per block).
    source: Callable[[int], Iterator[np.ndarray]] | None = None
    block_arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        if self.obj_id is None:
            return self.segments[-1].end if self.segments else 0
        return int(self.obj_id.shape[0])

    def segment_chunks(self, i: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(block ids, sizes, unit codes) of segment ``i`` in order, a chunk at a time."""
        seg = self.segments[i]
        if self.source is None:
            assert self.obj_id is not None and self.obj_size is not None and self.unit is not None
            for c0 in range(seg.start, seg.end, _CHUNK):
                c1 = min(seg.end, c0 + _CHUNK)
                yield self.obj_id[c0:c1], self.obj_size[c0:c1], self.unit[c0:c1]
            return
        assert self.block_arrays is not None
        sizes, unit_codes = self.block_arrays
        for ids in self.source(i):
            yield ids, sizes[ids], unit_codes[ids]

    def file_extents(self) -> dict[str, tuple[int, int]]:
        """Each file's (first, last) block id: the block table as a stat of every file gives
        it (a trace file's table holds only the blocks it reads)."""
        codes = np.asarray(list(self.block_unit_of) if isinstance(self.block_unit_of, list)
                           else list(self.block_unit_of.values()), dtype=np.int64)
        blocks = (np.arange(codes.size, dtype=np.int64) if isinstance(self.block_unit_of, list)
                  else np.asarray(list(self.block_unit_of.keys()), dtype=np.int64))
        out: dict[str, tuple[int, int]] = {}
        if not codes.size:
            return out
        order = np.lexsort((blocks, codes))
        c, b = codes[order], blocks[order]
        starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
        ends = np.r_[starts[1:], c.size] - 1
        for s0, e0 in zip(starts.tolist(), ends.tolist()):
            out[self.units[int(c[s0])]] = (int(b[s0]), int(b[e0]))
        return out

    def all_ids(self) -> np.ndarray:
        """Every read's block id (materialised: only for consumers that need the whole
        future, such as the clairvoyant bound)."""
        if self.obj_id is not None:
            return self.obj_id
        parts = [c[0] for i in range(len(self.segments)) for c in self.segment_chunks(i)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@dataclass(slots=True)
class PhaseResult:
    name: str
    pattern: str
    requests: int
    chr: float
    seconds: float


@dataclass(slots=True)
class DataCacheResult:
    """``sim datacache``'s result; :meth:`to_dict` gives the ``--json`` keys (then extras)."""

    system: str
    workload: str
    cache_size_bytes: int
    requests: int
    chr: float
    jct_seconds: float
    prefetch_accuracy: float | None
    prefetched_blocks: int
    remote_bytes: int
    advisor_calls: int
    advisor_tokens: int
    diagnosis_accuracy: float | None
    switches: int
    phases: list[PhaseResult] = field(default_factory=list)
    hits: int = 0
    late_prefetch_reads: int = 0
    prefetch_dropped: int = 0
    evictions: int = 0
    rejected: int = 0
    io_wait_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "system": self.system, "workload": self.workload,
            "cache_size_bytes": self.cache_size_bytes, "requests": self.requests,
            "chr": self.chr, "jct_seconds": self.jct_seconds,
            "prefetch_accuracy": self.prefetch_accuracy, "prefetched_blocks": self.prefetched_blocks,
            "remote_bytes": self.remote_bytes, "advisor_calls": self.advisor_calls,
            "advisor_tokens": self.advisor_tokens, "diagnosis_accuracy": self.diagnosis_accuracy,
            "switches": self.switches,
            "phases": [{"name": p.name, "pattern": p.pattern, "requests": p.requests,
                        "chr": p.chr, "seconds": p.seconds} for p in self.phases],
            "hits": self.hits, "late_prefetch_reads": self.late_prefetch_reads,
            "prefetch_dropped": self.prefetch_dropped, "evictions": self.evictions,
            "rejected": self.rejected, "io_wait_seconds": self.io_wait_seconds,
        }
        d.update(self.extra)
        return d


# -- inputs ------------------------------------------------------------------------------------
def workload_from_workflow(trace: WorkflowTrace) -> BlockWorkload:
    """A generated :class:`~aicache.traces.workflows.WorkflowTrace` as simulator input."""
    ds = trace.dataset
    segs = [PhaseSegment(p.name, p.pattern, p.start, p.end, p.compute_s) for p in trace.phases]
    return BlockWorkload(
        name=trace.workload, obj_id=trace.obj_id, obj_size=trace.obj_size, unit=trace.file,
        units=ds.paths, phase=trace.phase, segments=segs,
        block_size_of=ds.block_sizes().tolist(), block_unit_of=ds.block_files().tolist(),
        workers=trace.workers, default_cache_bytes=trace.cache_bytes, dataset_bytes=ds.total_bytes,
    )


def workload_from_stream(stream: WorkflowStream) -> BlockWorkload:
    """A :class:`~aicache.traces.workflows.WorkflowStream` as simulator input: the same
    replay as :func:`workload_from_workflow` of the materialised trace, in O(dataset) memory."""
    ds = stream.dataset
    segs = [PhaseSegment(p.name, p.pattern, p.start, p.end, p.compute_s) for p in stream.phases]
    sizes, files = ds.block_sizes(), ds.block_files()
    return BlockWorkload(
        name=stream.workload, obj_id=None, obj_size=None, unit=None, units=ds.paths, phase=None,
        segments=segs, block_size_of=sizes.tolist(), block_unit_of=files.tolist(),
        workers=stream.workers, default_cache_bytes=stream.cache_bytes, dataset_bytes=ds.total_bytes,
        source=lambda i: stream.chunks(i, _CHUNK), block_arrays=(sizes, files),
    )


def workload_from_trace(path: str, *, workers: int = 8, fmt: str = "auto") -> BlockWorkload:
    """A block trace file. Phases = runs of one label; per-read compute = the gap to the next
    read's timestamp × ``workers`` (the generators write the zero-I/O schedule, so this
    recovers their compute exactly; for a recorded trace it is an estimate)."""
    from aicache.traces.io import open_trace

    src = open_trace(path, fmt)
    batches = list(src.batches())
    if not batches:
        raise BadInput(f"trace {path!r} has no requests; give a non-empty trace")
    cat = np.concatenate
    ids = cat([b.obj_id for b in batches]).astype(np.int64)
    sizes = cat([b.obj_size for b in batches]).astype(np.int64)
    ts = cat([b.timestamp for b in batches]).astype(np.float64)
    n = ids.size
    unit = cat([b.unit if b.unit is not None else np.zeros(len(b), np.int32) for b in batches])
    phase = cat([b.phase if b.phase is not None else np.full(len(b), -1, np.int8) for b in batches])
    units = list(src.units) or [""]
    segs: list[PhaseSegment] = []
    bounds = np.flatnonzero(np.diff(phase)) + 1
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), n]
    count: dict[str, int] = {}
    for s, e in zip(starts, ends):
        label = Phase(int(phase[s])).label or "unknown"
        count[label] = count.get(label, 0) + 1
        gaps = np.diff(ts[s:e]) * workers
        gaps = np.maximum(gaps, 0.0)
        last = float(gaps.mean()) if gaps.size else 0.0
        segs.append(PhaseSegment(f"{label}#{count[label]}", label, s, e, np.append(gaps, last)))
    uniq, first = np.unique(ids, return_index=True)
    return BlockWorkload(
        name=str(path), obj_id=ids, obj_size=sizes, unit=unit.astype(np.int64), units=units,
        phase=phase.astype(np.int8), segments=segs,
        block_size_of=dict(zip(uniq.tolist(), sizes[first].tolist())),
        block_unit_of=dict(zip(uniq.tolist(), unit[first].tolist())),
        workers=workers, dataset_bytes=int(sizes[first].sum()),
    )


def load_workload(name: str, *, scale: float = 1.0, seed: int = 0,
                  variant: str | None = None, stream: bool | None = None) -> BlockWorkload:
    """Workload ``name`` (W1..W3, T1..T6, optionally a generator variant).

    ``stream``: True = replay from a :class:`~aicache.traces.workflows.WorkflowStream`
    (per-read columns one chunk at a time), False = materialise the trace, None = stream
    when the trace has more than :data:`STREAM_ABOVE` reads. Both give identical results.
    """
    from aicache.traces.gen import WORKFLOWS

    if not isinstance(name, str) or name.upper() not in WORKFLOWS:
        raise BadInput(f"unknown workload {name!r}; valid: {', '.join(WORKFLOWS.names())}")
    if stream is None or stream:
        from aicache.traces.workflows import plan_workflow

        plan = plan_workflow(name, scale, seed, variant=variant)
        if stream or len(plan) > STREAM_ABOVE:
            return workload_from_stream(plan)
    if variant is not None:
        from aicache.traces.workflows import generate_workflow

        return workload_from_workflow(generate_workflow(name, scale, seed, variant=variant))
    return workload_from_workflow(WORKFLOWS.get(name.upper())(scale, seed))


# -- the simulation ------------------------------------------------------------------------------
def simulate_datacache(
    workload: BlockWorkload | str,
    system: str | DataCacheSystem,
    cache_size: int | str | None = None,
    *,
    cost: CostModel | None = None,
    hit_ms: float | None = None,
    miss_ms: float | None = None,
    remote_bw: float | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    advisor: AdvisorSpec = "statistical",
    seed: int = 0,
    scale: float = 1.0,
    system_params: dict[str, Any] | None = None,
    grader: ChironGrader | None = None,
    block_overhead: int = 0,
    block_align: int = 1,
    block_extra: int = 0,
    shared: SharedTierCost | None = None,
) -> DataCacheResult:
    """Replay ``workload`` through ``system`` with a cache of ``cache_size`` bytes.

    ``workload``: a :class:`BlockWorkload`, a block-trace path (8 loader workers), or a
    workload name (generated at ``scale``).
    ``system``: a name for :func:`~aicache.datacache.policy.registry.make_system` or an instance.
    ``shared``: a shared tier under the cache (overrides ``cost``'s; see the module doc).
    ``block_overhead``: bytes each stored block costs beyond its payload in the budget
    (0; a real store's header size models the engine's store exactly, with
    ``block_align`` its allocation unit: each block's cost is rounded up to it, and
    ``block_extra`` its index row).
    ``cache_size``: bytes, a size string (``1GiB``, ``25%`` of the dataset) or None for the
    workload's seed budget.
    ``grader``: the observer that grades a Chiron run against the phase labels (a fresh
    one when None; its grades are in the result either way, see :mod:`aicache.sim.grading`).
    """
    from aicache.units import parse_size

    if isinstance(workload, str):
        import os

        wl = (workload_from_trace(workload) if os.path.isfile(workload)
              else load_workload(workload, scale=scale, seed=seed))
    else:
        wl = workload
    if cache_size is None:
        if wl.default_cache_bytes is None:
            raise BadInput("--cache-size is required for a trace file (e.g. 1GiB or 25%)")
        capacity = wl.default_cache_bytes
    else:
        capacity = parse_size(cache_size, total=wl.dataset_bytes, what="cache size")
    cm = cost or CostModel()
    if hit_ms is not None or miss_ms is not None or remote_bw is not None:
        cm = CostModel(hit_ms if hit_ms is not None else cm.hit_ms,
                       miss_ms if miss_ms is not None else cm.miss_ms,
                       remote_bw if remote_bw is not None else cm.remote_bw,
                       cm.prefetch_slots, cm.prefetch_inflight, cm.shared)
    if shared is not None:
        cm = CostModel(cm.hit_ms, cm.miss_ms, cm.remote_bw, cm.prefetch_slots,
                       cm.prefetch_inflight, shared)
    if isinstance(system, str):
        params = dict(system_params or {})
        if system == "clairvoyant":
            params.setdefault("trace", wl.all_ids())
        sysobj = make_system(system, capacity, block_size, advisor=advisor, seed=seed, **params)
        sysname = system
    else:
        sysobj, sysname = system, getattr(system, "name", type(system).__name__)
    grader = grader or ChironGrader()
    table = wl.block_unit_of

    def file_of(block: int) -> str | None:
        if isinstance(table, list):
            code = table[block] if 0 <= block < len(table) else None
        else:
            code = table.get(block)
        return None if code is None else wl.units[int(code)]

    sysobj.use_metadata(wl.file_extents().get, file_of)
    try:
        return _run(wl, SystemDriver(sysobj, block_size, capacity=capacity, overhead=block_overhead,
                                  align=block_align, extra=block_extra),
                    sysname, capacity, cm, grader if grader.attach(sysobj) else None)
    finally:
        sysobj.close()


def _run(wl: BlockWorkload, driver: SystemDriver[int], sysname: str, capacity: int,
         cm: CostModel, grader: ChironGrader | None = None) -> DataCacheResult:
    """The replay loop. Hot path (one iteration per read): every lookup is a bound local,
    the trace is converted to Python lists one chunk at a time (no per-read objects besides
    the floats the clock needs), the worker pool is a heap updated in place with
    ``heapreplace``, arrivals are drained inline, and ``tick`` is skipped for systems that
    do not override it. Same event order as the straightforward loop, so results are
    identical to the byte. ``driver`` owns the resident set, the budget and the unread
    prefetches; the loop owns time, flights and the fetch budget."""
    hit_s = cm.hit_ms / 1000.0
    miss_s = cm.miss_ms / 1000.0
    bw = float(cm.remote_bw)
    # the shared tier: the blocks it holds (None: no tier), its round trip and bandwidth
    tier: set[int] | None = None
    sh_s = sh_bw = 0.0
    if cm.shared is not None:
        sh_s, sh_bw = cm.shared.ms / 1000.0, float(cm.shared.bw)
        tier = (set() if not cm.shared.warm
                else set(range(len(wl.block_size_of))) if isinstance(wl.block_size_of, list)
                else set(wl.block_size_of))
    shared_hits = shared_bytes = 0
    pf_cap = cm.prefetch_inflight
    units = wl.units
    bsize_of = wl.block_size_of
    bunit_of = wl.block_unit_of
    dense = isinstance(bsize_of, list)
    nblocks = len(bsize_of)
    # one of the two is used, by ``dense``: a list of sizes indexed by block id, else a dict's get
    size_list: list[int] = bsize_of if isinstance(bsize_of, list) else []
    size_get: Callable[[int], int | None] = (bsize_of.get if isinstance(bsize_of, dict)
                                             else size_list.__getitem__)
    system = driver.system

    store = driver.resident  # resident block -> bytes it costs
    inflight: dict[int, tuple[float, bool, float]] = {}  # block -> (arrival, is_prefetch, start)
    arrivals: list[tuple[float, int, int]] = []  # (arrival, seq, block)
    seq = 0
    pslots = [0.0] * cm.prefetch_slots
    pf_pending = 0

    hits = late = prefetched = dropped = rejected = 0
    remote = 0
    io_wait = 0.0
    on_access = driver.access
    place = driver.place
    REJECTED = Admission.REJECTED
    tick: Callable[[float], None] | None = system.tick
    if getattr(tick, "__func__", None) is DataCacheSystem.tick:
        tick = None  # the base class's no-op: skip a call per read
    observe = grader.observe_label if grader is not None else None
    heappop, heappush, heapreplace = heapq.heappop, heapq.heappush, heapq.heapreplace
    inflight_get = inflight.get

    def arrive(block: int, t: float, is_pf: bool) -> None:
        nonlocal rejected, pf_pending
        del inflight[block]
        if is_pf:
            pf_pending -= 1
        if block in store:
            return
        if place(units[bunit_of[block]], block, block, bsize_of[block], driver.used, t,
                 is_pf) is REJECTED:
            rejected += 1

    phases: list[PhaseResult] = []
    clock = 0.0
    W = max(1, wl.workers)
    for si, seg in enumerate(wl.segments):
        workers = [clock] * W
        comp = seg.compute_s
        comp_list = comp.tolist() if isinstance(comp, np.ndarray) else None
        comp_const = float(comp) if comp_list is None else 0.0
        seg_hits = 0
        label = seg.pattern
        if observe is not None:
            observe(label if label in ("sequential", "random", "skewed") else None, clock)
        c0 = seg.start
        for id_arr, size_arr, unit_arr in wl.segment_chunks(si):
            # per-chunk Python lists: fast indexing without a list per column of the trace
            c1 = c0 + id_arr.shape[0]
            ids = id_arr.tolist()
            sizes = size_arr.tolist()
            unames = [units[u] for u in unit_arr.tolist()]
            comps = (comp_list[c0 - seg.start:c1 - seg.start] if comp_list
                     else [comp_const] * (c1 - c0))
            c0 = c1
            for b, size, uname, cpt in zip(ids, sizes, unames, comps):
                now = workers[0]  # the earliest-free worker takes this read
                while arrivals and arrivals[0][0] <= now:
                    at, _, ab = heappop(arrivals)
                    fl = inflight_get(ab)
                    if fl is not None and fl[0] == at:  # else superseded or already stored
                        arrive(ab, at, fl[1])
                if tick is not None:
                    tick(now)
                if b in store:
                    resident = True
                    lat = hit_s
                    hits += 1
                    seg_hits += 1
                else:
                    fl = inflight_get(b)
                    if fl is not None and (not fl[1] or fl[2] <= now):
                        # a fetch already on the wire: wait for the rest, then it is stored
                        at, is_pf, _ = fl
                        lat = at - now + hit_s
                        arrive(b, now, is_pf)
                        resident = b in store
                        if is_pf:
                            late += 1
                            hits += 1
                            seg_hits += 1
                    else:
                        if fl is not None:
                            # a prefetch still queued behind others: the read does not wait
                            # for the queue; it fetches on demand (the queued fetch is wasted)
                            del inflight[b]
                            pf_pending -= 1
                        resident = False
                        if tier is None:
                            lat = miss_s + size / bw
                            remote += size
                        elif b in tier:
                            lat = sh_s + size / sh_bw
                            shared_hits += 1
                            shared_bytes += size
                        else:  # the tier's round trip, then the origin; the tier has it after
                            lat = sh_s + miss_s + size / bw
                            remote += size
                            tier.add(b)
                        inflight[b] = (now + lat, False, now)
                        seq += 1
                        heappush(arrivals, (now + lat, seq, b))
                # the system sees residency (a read joining a demand fetch uses the stored block)
                pf = on_access(uname, b, size, resident, now)
                if pf:
                    for p in pf:
                        if p in store or p in inflight:
                            continue
                        if dense:
                            if not 0 <= p < nblocks:
                                continue
                            psize = size_list[p]
                        else:
                            known = size_get(p)
                            if known is None:
                                continue
                            psize = known
                        if pf_pending >= pf_cap:
                            dropped += 1
                            continue
                        start = pslots[0]
                        if start < now:
                            start = now
                        if tier is None:
                            done = start + miss_s + psize / bw
                            remote += psize
                        elif p in tier:
                            done = start + sh_s + psize / sh_bw
                            shared_hits += 1
                            shared_bytes += psize
                        else:
                            done = start + sh_s + miss_s + psize / bw
                            remote += psize
                            tier.add(p)
                        heapreplace(pslots, done)
                        inflight[p] = (done, True, start)
                        seq += 1
                        heappush(arrivals, (done, seq, p))
                        pf_pending += 1
                        prefetched += 1
                io_wait += lat
                heapreplace(workers, now + lat + cpt)
        end = max(workers) if workers else clock
        n = seg.end - seg.start
        phases.append(PhaseResult(seg.name, seg.pattern, n, seg_hits / n if n else 0.0, end - clock))
        clock = end
    # fetches that complete before the job ends are stored, as the engine stores them
    while arrivals and arrivals[0][0] <= clock:
        at, _, ab = heappop(arrivals)
        fl = inflight_get(ab)
        if fl is not None and fl[0] == at:
            arrive(ab, at, fl[1])
    st = system.stats()
    if grader is not None:
        st.update(grader.stats())
    n = len(wl)
    pf_used = driver.prefetch_used
    evictions = driver.evictions
    calls = int(st.get("advisor_calls", 0))
    extra = {k: v for k, v in st.items() if k not in
             ("advisor_calls", "advisor_tokens", "diagnosis_accuracy", "switches")}
    if tier is not None:
        extra.update(shared_hits=shared_hits, shared_bytes=shared_bytes)
    return DataCacheResult(
        system=sysname, workload=wl.name, cache_size_bytes=capacity, requests=n,
        chr=hits / n if n else 0.0, jct_seconds=clock,
        prefetch_accuracy=(pf_used / prefetched) if prefetched else None,
        prefetched_blocks=prefetched, remote_bytes=remote, advisor_calls=calls,
        advisor_tokens=int(st.get("advisor_tokens", 0)),
        diagnosis_accuracy=st.get("diagnosis_accuracy"), switches=int(st.get("switches", 0)),
        phases=phases, hits=hits, late_prefetch_reads=late, prefetch_dropped=dropped,
        evictions=evictions, rejected=rejected, io_wait_seconds=io_wait, extra=extra,
    )

