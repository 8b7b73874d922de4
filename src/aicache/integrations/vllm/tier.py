"""``SariaSSDTier``: vLLM's secondary offloading tier on aicache's SSD store, with SARIA admission.

vLLM's ``TieringOffloadingManager`` cascades every chunk newly stored in its host-DRAM
tier to every secondary tier (write-through) and asks the secondary tiers only on a DRAM
miss. Its own ``fs`` tier writes every chunk and has no capacity bound. This tier persists a
chunk only when SARIA's admission rule admits it, from the evidence the manager's calls
carry:

* a store offered again for a key this tier has seen means the chunk left DRAM and was
  recomputed: ``E_b += 1`` (an eviction boundary);
* a lookup of a key the tier has seen offered means the chunk left DRAM and a request
  wants it: ``R_b += 1`` (once per request and key, however often the manager retries).
  A chunk never offered has no counters (the simulator's index has no node for it), so a
  request's lookup of a chunk it is about to compute does not make its first store count
  as an eviction (:class:`~aicache.integrations.chunk_tier.AdmissionGate`).

With prewrite (SARIA's default) a re-offered chunk is written when ``E_b + 1 ≥ θ_E`` or
``R_b ≥ θ_R`` — at its second entry into DRAM under ``E2``, the eviction it is about to
face being the second. Without prewrite it is written when ``admit(E_b, R_b)`` already
holds. ``admission="full-duplicate"`` writes every chunk (vLLM's ``fs`` behaviour, one
flag away); any other admission is chosen by name from
:data:`~aicache.kv.admissions.SSD_ADMISSIONS`. ``admission="hint"``
writes a chunk at its first offer when the offering request's client sent
``kv_transfer_params = {"aicache": {"continues": true}}`` (its conversation sends another
turn; the same object the host policy reads ``session`` and ``turn`` from), SARIA's rule
deciding the rest. A declined store still reports success: the manager only releases its
pins.

Bytes go to a :class:`~aicache.integrations.chunk_tier.SlabChunkStore` (the store the
SGLang backend uses too): slab files with per-block checksums, crash recovery by header
scan, an SSD LRU that keeps the files within ``ssd_bytes``. Its SSD LRU drops become
``removed`` events. Each chunk is one block under the namespace of its KV group (keys are
vLLM's chained block hashes, so a chunk needs no parent to be found again).

Threads. All methods run on vLLM's scheduler thread and never wait for I/O: lookups are
answered from :attr:`_state` (a key is ``HIT`` once its write finished, ``RETRY`` while it
is in flight). The store is owned by one worker thread that runs load jobs before store
jobs (a request waits for a load; nobody waits for a store), each kind in submission order; its slab I/O runs on the store's I/O pool. Results come back through a
queue that :meth:`get_finished_jobs` drains. A load reports each key's fate: a key whose
block failed its checksum (or was dropped since the lookup) is left out of
``successful_keys`` and is a miss from then on — never wrong bytes.

Identity. The store namespace is a digest of the model, dtype, chunk geometry and KV
group, so a directory shared by another model or layout never serves its payloads here.
vLLM derives block hashes from a fixed seed (or ``PYTHONHASHSEED``), so a restarted engine
finds the chunks a previous one wrote.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from vllm.v1.kv_offload.base import (
    LookupResult, Medium, OffloadingEvent, OffloadKey, ReqContext, RequestOffloadingContext,
    get_offload_block_hash, get_offload_group_idx, make_offload_key,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from aicache.errors import BadInput
from aicache.integrations.chunk_tier import (
    AdmissionGate, Evidence, Offer, SlabChunkStore, StoreKey, digest32, make_admission,
    tier_write_budget,
)

PARAMS_KEY = "aicache"  #: our object in a request's ``kv_transfer_params`` (the host policy's too)

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec
    from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector


class ChunkState(Enum):
    WRITING = 1  #: admitted, write in flight: lookups answer RETRY
    STORED = 2   #: on the SSD: lookups answer HIT


@dataclass(slots=True)
class _Seen:
    """Per-request scratch (``ReqContext`` state): keys whose reuse was counted."""

    keys: set[StoreKey] = field(default_factory=set)


@dataclass(slots=True)
class _Done:
    """A job's outcome, posted by the worker thread."""

    job_id: int
    promotion: bool
    ok: list[StoreKey]
    failed: list[StoreKey]
    dropped: list[StoreKey]
    nbytes: int
    seconds: float


@dataclass(slots=True)
class TierMetrics:
    """What the tier did since it opened (``metrics()``)."""

    stores_offered: int = 0
    chunks_offered: int = 0
    admissions: int = 0
    admissions_declined: int = 0
    already_held: int = 0
    chunks_written: int = 0
    write_failures: int = 0
    bytes_written: int = 0
    chunks_loaded: int = 0
    load_failures: int = 0
    bytes_read: int = 0
    lookups: int = 0
    lookup_hits: int = 0
    lookup_retries: int = 0
    chunks_dropped: int = 0
    recovered_chunks: int = 0


class SariaSSDTier(SecondaryTierManager):
    """An SSD tier under vLLM's host-DRAM tier with SARIA admission (module docstring).

    ``extra`` keys of the ``secondary_tiers`` entry: ``root_dir`` (required), ``ssd_bytes``
    (the byte budget of the slab files, required), ``admission`` (``E2`` default, ``R8``,
    ``E2∨R8``, ``full-duplicate``, or a name in ``SSD_ADMISSIONS``), ``admission_args``
    (a JSON object for that admission, e.g. ``oracle``'s ``keys_file``, ``hint``'s
    ``rule``), ``prewrite``
    (default true), ``io_threads``, ``metadata_entries`` (counters kept for chunks not
    held; default 8 × SSD slots), ``ssd_write_budget`` (``1DWPD`` of ``ssd_bytes`` or a
    rate such as ``200MB/s``: the admission spends it, ``budgeted``, or is capped by it) and
    ``ssd_write_window`` (the window it holds over, default 10 min).
    """

    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(self, offloading_spec: OffloadingSpec, primary_kv_view: memoryview,
                 tier_type: str, root_dir: str | None = None, ssd_bytes: int | None = None,
                 admission: str = "E2", prewrite: bool = True, io_threads: int = 4,
                 metadata_entries: int | None = None, slab_bytes: int = 32 << 20,
                 admission_args: Mapping[str, object] | None = None,
                 backpressure_detector: BackpressureDetector | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 ssd_write_budget: str | None = None,
                 ssd_write_window: str | float | None = None) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        if not root_dir:
            raise BadInput(f"secondary tier {tier_type!r}: set \"root_dir\" to the SSD "
                           f"directory for the slab files")
        if not ssd_bytes or int(ssd_bytes) <= 0:
            raise BadInput(f"secondary tier {tier_type!r}: set \"ssd_bytes\" to the SSD "
                           f"byte budget (e.g. 107374182400 for 100 GiB)")
        self.prewrite = bool(prewrite)
        row = self.block_size_bytes
        self.write_budget = tier_write_budget(ssd_write_budget, ssd_write_window, int(ssd_bytes))
        self.admission = make_admission(admission, self.prewrite, admission_args,
                                        size_of=lambda n: row, budget=self.write_budget)
        rows = np.asarray(primary_kv_view).view(np.uint8)
        self._rows = rows.reshape(rows.shape[0], -1)[:, :row]
        self._chunks = SlabChunkStore(root_dir, int(ssd_bytes), row, io_threads=int(io_threads),
                                      slab_bytes=int(slab_bytes))
        self._ns_base = _namespace_base(offloading_spec, row)
        self._state: dict[StoreKey, ChunkState] = {}
        self._gate = AdmissionGate(self.admission, int(metadata_entries) if metadata_entries
                                   else 8 * max(1, self._chunks.n_slots))
        self._done: queue.SimpleQueue[_Done] = queue.SimpleQueue()
        self._ready: list[JobResult] = []
        self._events: list[OffloadingEvent] = []
        self._jobs_in_flight = 0
        self._worker = _LoadFirstWorker()
        self.m = TierMetrics()
        self._clock = clock
        self._t0 = clock()
        self._recover()

    # ------------------------------------------------------------------ keys
    def _ns(self, group: int) -> str:
        return f"{self._ns_base}g{group}"

    def _skey(self, key: OffloadKey) -> StoreKey:
        return self._ns(get_offload_group_idx(key)), digest32(bytes(get_offload_block_hash(key)))

    def _okey(self, sk: StoreKey) -> OffloadKey:
        return make_offload_key(sk[1], int(sk[0][len(self._ns_base) + 1:]))

    def _recover(self) -> None:
        """Chunks a previous process left on the SSD under this layout's namespaces
        (another model's or layout's chunks are never served here)."""
        for sk, ev in self._chunks.recovered(self._ns_base):
            self._state[sk] = ChunkState.STORED
            self._gate.learn(sk, ev)
        self.m.recovered_chunks = len(self._state)

    # ------------------------------------------------------------------ scheduler side
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        sk = self._skey(key)
        self.m.lookups += 1
        seen = req_context.get_state(_Seen)
        if seen is None:
            seen = _Seen()
            req_context.set_state(seen)
        if sk not in seen.keys:  # a DRAM miss wanting the chunk: one reuse per request
            seen.keys.add(sk)
            self._gate.reference(sk, self._clock())
        st = self._state.get(sk)
        if st is ChunkState.STORED:
            self.m.lookup_hits += 1
            return LookupResult.HIT
        if st is ChunkState.WRITING:
            self.m.lookup_retries += 1
            return LookupResult.RETRY
        return LookupResult.MISS

    def admits(self, sk: StoreKey, info: Offer) -> bool:
        """The admission's decision for a chunk offered for storage (counts the eviction
        it implies)."""
        return self._gate.offer(sk, info)

    def submit_store(self, job_metadata: TransferJob) -> None:
        m = self.m
        m.stores_offered += 1
        todo: list[tuple[StoreKey, int, Evidence | None]] = []
        ctx = job_metadata.req_context
        req_id = ctx.req_id if ctx is not None else ""
        now = self._clock()
        ends = [-1 if p is None else int(p) for p in (
            ctx.get_offload_key_position(k) if ctx is not None else None
            for k in job_metadata.keys)]
        seen_tokens = max(ends, default=-1)  # the prompt so far: its last offered chunk's end
        continues = _continues_hint(ctx)
        for key, cid, end in zip(job_metadata.keys, job_metadata.chunk_ids, ends):
            sk = self._skey(key)
            m.chunks_offered += 1
            if sk in self._state:
                m.already_held += 1
                continue
            if self.admits(sk, Offer(req_id, end, now, seen_tokens, continues)):
                m.admissions += 1
                self._state[sk] = ChunkState.WRITING
                todo.append((sk, int(cid), self._gate.evidence(sk)))
            else:
                m.admissions_declined += 1
        if not todo:  # nothing to persist: the job is done (the manager releases its pins)
            self._ready.append(JobResult(job_metadata.job_id, True, transfer_bytes=0))
            return
        self._jobs_in_flight += 1
        self._worker.submit(False, lambda: self._run_store(job_metadata.job_id, todo))

    def submit_load(self, job_metadata: TransferJob) -> None:
        items = [(self._skey(k), int(c)) for k, c in zip(job_metadata.keys, job_metadata.chunk_ids)]
        self._jobs_in_flight += 1
        self._worker.submit(True, lambda: self._run_load(job_metadata.job_id, items))

    def get_finished_jobs(self) -> Iterable[JobResult]:
        out, self._ready = self._ready, []
        while True:
            try:
                d = self._done.get_nowait()
            except queue.Empty:
                break
            self._jobs_in_flight -= 1
            out.append(self._settle(d))
        return out

    def _settle(self, d: _Done) -> JobResult:
        m, state = self.m, self._state
        lost = [sk for sk in d.dropped if state.pop(sk, None) is not None]
        if d.promotion:
            m.chunks_loaded += len(d.ok)
            m.bytes_read += d.nbytes
            m.load_failures += len(d.failed)
            for sk in d.failed:  # corrupt or gone: a miss from now on
                if state.pop(sk, None) is not None:
                    lost.append(sk)
        else:
            for sk in d.ok:
                if state.get(sk) is ChunkState.WRITING:
                    state[sk] = ChunkState.STORED
            for sk in d.failed:
                if state.get(sk) is ChunkState.WRITING:
                    del state[sk]
            m.chunks_written += len(d.ok)
            m.bytes_written += d.nbytes
            m.write_failures += len(d.failed)
            if d.ok:
                self._events.append(OffloadingEvent(keys=[self._okey(s) for s in d.ok],
                                                    medium=Medium.STORAGE, removed=False))
        if lost:
            m.chunks_dropped += len(lost)
            self._events.append(OffloadingEvent(keys=[self._okey(s) for s in lost],
                                                medium=Medium.STORAGE, removed=True))
        success = not d.failed
        keys = None
        if d.promotion and not success:
            keys = tuple(self._okey(s) for s in d.ok) or None
        return JobResult(d.job_id, success, successful_keys=keys, transfer_time=d.seconds,
                         transfer_bytes=d.nbytes)

    def has_pending_work(self) -> bool:
        return self._jobs_in_flight > 0

    def take_events(self) -> Iterable[OffloadingEvent]:
        out, self._events = self._events, []
        return out

    def drain_jobs(self) -> None:
        """Wait for every submitted job (the worker runs them in order)."""
        self._worker.drain()

    def shutdown(self) -> None:
        self.drain_jobs()
        self._worker.close()
        self._chunks.close()
        # our view exports the DRAM region's buffer: it must go before vLLM closes the mmap
        self._rows = np.empty((0, 0), dtype=np.uint8)

    # ------------------------------------------------------------------ worker thread
    def _run_store(self, job_id: int,
                   todo: list[tuple[StoreKey, int, Evidence | None]]) -> None:
        t0 = time.perf_counter()
        rows = self._rows
        out = self._chunks.write([(sk, rows[cid]) for sk, cid, _ in todo], self._ns_base,
                                 {sk: ev for sk, _, ev in todo if ev is not None})
        self._done.put(_Done(job_id, False, out.ok, out.failed, out.dropped,
                             len(out.ok) * self.block_size_bytes, time.perf_counter() - t0))

    def _run_load(self, job_id: int, items: list[tuple[StoreKey, int]]) -> None:
        t0 = time.perf_counter()
        chunks, rows = self._chunks, self._rows
        ok: list[StoreKey] = []
        failed: list[StoreKey] = []
        for sk, cid in items:
            (ok if chunks.read(sk, rows[cid]) else failed).append(sk)
        self._done.put(_Done(job_id, True, ok, failed, [], len(ok) * self.block_size_bytes,
                             time.perf_counter() - t0))

    # ------------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, float | int | str | None]:
        """Counters as a JSON-able dict: bytes written, admissions declined, lifetime."""
        m = self.m
        out: dict[str, float | int | str | None] = {k: getattr(m, k) for k in m.__slots__}
        out["admission"] = self.admission.label
        out.update(self._chunks.ssd_metrics(self._clock() - self._t0))
        b = self.write_budget
        out["ssd_write_budget_bps"] = b.bytes_per_s if b is not None else None
        out["ssd_budget_refusals"] = b.refused if b is not None else None
        out["chunks_held"] = sum(1 for v in self._state.values() if v is ChunkState.STORED)
        return out

    def held_keys(self) -> Collection[OffloadKey]:
        """Keys a lookup answers HIT for (tests)."""
        return [self._okey(sk) for sk, v in self._state.items() if v is ChunkState.STORED]


class _LoadFirstWorker:
    """One thread owning the store: loads (requests wait on them) before stores."""

    def __init__(self) -> None:
        self._jobs: tuple[deque[Callable[[], None]], deque[Callable[[], None]]] = (deque(), deque())
        self._cv = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="aicache-vllm-tier", daemon=True)
        self._thread.start()

    def submit(self, load: bool, fn: Callable[[], None]) -> None:
        with self._cv:
            self._jobs[0 if load else 1].append(fn)
            self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (self._jobs[0] or self._jobs[1] or self._closed):
                    self._cv.wait()
                q = self._jobs[0] or self._jobs[1]
                if not q:
                    return  # closed and empty
                fn = q.popleft()
                self._busy = True
            try:
                fn()  # a job reports its own failures; it never raises out of here
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def drain(self) -> None:
        """Block until every submitted job has run."""
        with self._cv:
            while self._jobs[0] or self._jobs[1] or self._busy:
                self._cv.wait()

    def close(self) -> None:
        self.drain()
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()


def _continues_hint(ctx: ReqContext | None) -> bool | None:
    """``kv_transfer_params["aicache"]["continues"]`` when the client sent a boolean (its
    conversation sends another turn), else None."""
    params = ctx.kv_transfer_params if ctx is not None else None
    raw = params.get(PARAMS_KEY) if isinstance(params, Mapping) else None
    v = raw.get("continues") if isinstance(raw, Mapping) else None
    return v if isinstance(v, bool) else None


def _namespace_base(spec: OffloadingSpec, row_bytes: int) -> str:
    """A store namespace naming the KV layout: chunks of another model, dtype, chunk
    geometry, KV groups or parallel layout never match (≤ 64 bytes with the group suffix)."""
    cfg = spec.config
    par = cfg.parallel
    parts = [cfg.model.name, str(cfg.model.dtype), str(row_bytes), str(cfg.cache.blocks_per_chunk),
             str(cfg.cache.tokens_per_hash), str(cfg.kv_cache_layout), str(cfg.canonical_layout),
             ";".join(f"{g.group_id}:{g.tokens_per_block}:{','.join(g.layer_names)}"
                      for g in cfg.groups)]
    if not par.is_parallelism_agnostic:
        parts.append(f"tp{par.tp_size}pp{par.pp_size}r{par.rank}/{par.world_size}")
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()
    return f"vllm-{digest}-"
