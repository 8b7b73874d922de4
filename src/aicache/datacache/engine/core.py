"""CacheEngine: reads of remote files through the block store, driven by a DataCacheSystem.

The engine drives a system through the same :class:`~aicache.datacache.policy.driver.SystemDriver`
the simulator uses (or the daemon's, through the same
:class:`~aicache.datacache.policy.driver.PolicyPort`). It owns the clock (injected;
``time.monotonic()`` since the engine started by default), the bytes and the threads; the
system owns every decision. The engine asks once per event — a demand read
(→ :class:`~aicache.datacache.policy.driver.AccessResult`), a fetched block
(→ :class:`~aicache.datacache.policy.driver.Placement`: admission and victims) — and applies the
answer to the store, which evicts what it is told and never calls back up.

Block ids (stable file → block mapping): the first time a file of directory ``D`` is read,
``D`` is listed once on the remote; its files, sorted by path, get consecutive block-id
ranges (``ceil(size / block_size)`` ids each, at least one), allocated after every range
handed out before. So a sorted traversal of a dataset folder is a stride-1 sequence, and
the ids never change while the engine lives. A file that is not in its directory's listing
(or that grew) gets a fresh range at the end. The cache *unit* of a block is its directory
(a dataset folder is managed together, as Chiron's units are).

Threads and guarantees:

* Demand reads run in the caller's thread. A hit is a lock-free file read, checksummed
  per ``EngineParams.verify`` (default ``stat``: hashed once per content version of the
  block file, see :mod:`aicache.datacache.store`).
* Misses and prefetches are *single-flight*: one fetch per block; a demand read of a block
  being prefetched waits for that fetch (or, if the prefetch has not started yet, takes it
  over) instead of fetching twice. A flight always resolves (whatever fails between its
  registration and its fetch fails it), and a wait on one is bounded
  (:meth:`EngineParams.flight_wait_bound`): past it the reader fetches the block itself.
* Write-behind (a policy of this process's own; a daemon-shared cache stores before it
  answers): a fetched block goes to its reader (and every reader waiting on its
  fetch) first; one writer thread then stores it, and until it is stored its flight
  stays in the in-flight table, so a reader of it meanwhile gets the bytes from there
  instead of fetching them again. At most ``max_write_behind_bytes`` wait for the writer;
  past that a reader stores its block itself (the old path), so memory stays bounded.
* Prefetches run on a bounded pool (``max_prefetch`` concurrent fetches,
  ``max_prefetch_bytes`` in flight; more are dropped and counted), are never reported as
  accesses, and go through the same admission + budget as demand blocks, so they never push
  the cache over its budget.
* Sparse reads: a reader that jumps into a block the store does not hold fetches only
  the pages (``page_size``) covering its read, stored as small blocks of their own key
  space under the same policy and budget, single-flight like blocks, and is not read
  ahead for (:mod:`aicache.datacache.engine.sparse`).
* Remote errors/timeouts: ``retries`` retries with exponential backoff, then
  :class:`RemoteReadError` (an ``OSError``, EIO) to the caller; a short or failed fetch is
  never cached.
* Shared tier (``shared=``, :mod:`aicache.datacache.shared`): a block the store does not
  hold is read from the shared tier when it has an intact copy, else from the remote (the
  origin), and an origin block is then queued for the tier's writer. A shared hit is still
  a local miss to the system (it decides local admission as for any fetch) and in
  ``misses``; ``remote_bytes`` counts origin bytes only. The tier's calls are bounded in
  time and back off after failures, so it never fails or stalls a read.
* Local disk full (ENOSPC): the read returns the fetched bytes uncached; ``aicache_enospc``
  counts it and one warning is logged.
* Consistency: a file's version is its target's strongest identity (ETag, generation,
  inode + size + mtime_ns + ctime_ns: :mod:`aicache.datacache.version`) and keys its
  blocks. Metadata is reused for ``metadata_ttl_s`` at most (remote stats and listings
  bypass the target's own listing cache), so overwrites, deletes and new files are seen
  after it; within it a hit asks the remote nothing. Fetches of a :class:`FileMeta` are
  pinned to its version: once the remote no longer holds it they raise
  :class:`~aicache.datacache.version.VersionGone` (ESTALE) and cache nothing.
* The system's advisor runs in its own background thread (ChironSystem); the engine only
  calls ``tick``; a slow or broken advisor cannot slow reads.

Parts: the engine is the composition root of parts that own their state and lock, each
given its collaborators when it is built — :class:`~.remote.RemoteClient` (every request
to the target), :class:`~.blockmap.BlockLayout` (block ids, units), :class:`~.meta.MetadataCache`
(stats, ``info``/``ls``/``find`` for every front end; files found go to the layout),
:class:`~.fetch.Flights` (single-flight table, prefetch pool), :class:`~.sparse.PageReader`
(sparse pages) and :class:`~.reader.BlockReader` (what the fsspec files and the FUSE
handles read through). The engine itself keeps the demand read path, admission and
write-behind (under its own lock), metrics and the lifecycle.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

from aicache.datacache.counters import PERSISTED, CounterFile
from aicache.datacache.daemon import DaemonPolicy
from aicache.datacache.engine.blockmap import BlockLayout, FileBlocks
from aicache.datacache.engine.fetch import Flight, Flights, Offer
from aicache.datacache.engine.meta import MetadataCache
from aicache.datacache.engine.params import DaemonMode, EngineParams
from aicache.datacache.engine.reader import BlockReader
from aicache.datacache.engine.remote import RemoteClient, RemoteReadError
from aicache.datacache.engine.sparse import (
    PageReader,
    ReadStream,
    check_page_size,
    streaming,
)
from aicache.datacache.keys import BlockKey, FileMeta
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.policy.driver import (
    AccessResult,
    Admission,
    Placement,
    PolicyPort,
    Source,
    SystemDriver,
    make_engine_system,
)
from aicache.policies.system import DataCacheSystem
from aicache.datacache.shared import SharedTier, SharedTierSpec
from aicache.datacache.store import (
    ALLOC_UNIT,
    HEADER_SIZE,
    INDEX_ROW,
    Put,
    StoreFull,
    UncachedStore,
    open_store,
)
from aicache.datacache.version import VersionGone, scheme_for
from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec

log = logging.getLogger("aicache.datacache")


class CacheEngine:
    """Block-cached reads of ``target`` (any fsspec filesystem) into ``cache_dir``.

    ``policy``: a system name (``chiron``, ``juicefs``, ``alluxio``, ``lru+stride``, a bare
    eviction name like ``lru``) or a DataCacheSystem instance. ``daemon`` (a
    :class:`DaemonMode`, or what :meth:`DaemonMode.of` reads): False = this
    process owns the policy; True/"auto" = share the cache directory's policy daemon
    (started if missing); "connect" = it must be running. ``record(now, unit, block,
    size)`` is told every demand access (``aicache record``). ``root``: paths are reported
    to the system relative to it.
    """

    def __init__(self, target: Any, cache_dir: str, cache_size: int, *,
                 policy: str | DataCacheSystem = "chiron", advisor: AdvisorSpec | None = None,
                 params: EngineParams | None = None,
                 record: Callable[[float, str, int, int], None] | None = None,
                 root: str = "", daemon: DaemonMode | bool | str = False,
                 shared: SharedTierSpec | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.params = p = params or EngineParams()
        self._clock = clock
        #: how this target names versions and reads one version's ranges
        self.versions = scheme_for(target)
        if p.s3_client in ("auto", "obstore"):
            from aicache.datacache.native_s3 import auto_scheme, obstore_scheme

            pick = obstore_scheme if p.s3_client == "obstore" else auto_scheme
            self.versions = pick(target, self.versions)
        elif p.s3_client != "s3fs":
            raise BadInput(f"s3_client {p.s3_client!r}: use 'auto', 's3fs' or 'obstore'")
        self._root = root.rstrip("/")
        self.target = target
        #: an UncachedStore when the directory cannot be used (reads then go to the remote)
        self.store = open_store(cache_dir, cache_size, p.block_size, verify=p.verify,
                                mmap_bytes=p.mmap_bytes, cache_mode=p.cache_mode,
                                free_space_ratio=p.free_space_ratio)
        self.block_size = p.block_size
        self._page_size = check_page_size(p.page_size, p.block_size)
        #: the run of each path's reads that name no stream (``cat_file`` ranges)
        self._path_streams: dict[str, ReadStream] = {}
        self.policy: PolicyPort
        mode = DaemonMode.of(daemon)
        if mode is not DaemonMode.LOCAL:
            self.policy = DaemonPolicy.connect(
                cache_dir, cache_size, p.block_size, policy if isinstance(policy, str) else "chiron",
                advisor, p.seed, spawn=mode is DaemonMode.SHARED, call_timeout_s=p.daemon_timeout_s,
                reconnect_s=p.daemon_timeout_s)
        else:
            self.policy = SystemDriver[BlockKey](
                make_engine_system(policy, cache_size, p.block_size, advisor, p.seed),
                p.block_size, capacity=self.store.block_capacity,
                overhead=HEADER_SIZE, align=ALLOC_UNIT, extra=INDEX_ROW)
        self.metrics = EngineMetrics(self._snapshot)
        #: block ids and units of files (the policy's block map)
        self.layout = BlockLayout(self.policy, p.block_size, self._root)
        if isinstance(self.policy, SystemDriver):
            # file extents from the block map, as the simulator gives its block table
            self.policy.system.use_metadata(self.layout.extent_of_unit, self.layout.unit_of_block)
        #: every request to the target: retries, timeouts, version-pinned ranges
        self.remote = RemoteClient(target, self.versions, self.metrics, retries=p.retries,
                                   backoff_s=p.backoff_s, request_timeout_s=p.request_timeout_s,
                                   io_workers=max(4, 2 * p.max_prefetch))
        #: fetches in flight and the prefetch pool (``sync_prefetch``: prefetches queued by
        #: the current read, run before it returns)
        self.flights = Flights(max_prefetch=p.max_prefetch,
                               max_prefetch_bytes=p.max_prefetch_bytes, sync=p.sync_prefetch)
        #: the cache level under the local store, shared by the cluster's nodes (None: none)
        self.shared: SharedTier | None = (
            None if shared is None else SharedTier(shared, p.block_size, self.metrics))
        self.pages = PageReader(self.store, self.flights, self.layout, self, self.metrics, p,
                                page_size=self._page_size, join_pieces=self.shared is None)
        #: stats, ``info``/``ls``/``find`` of the target, reused for ``metadata_ttl_s``
        self.metadata = MetadataCache(self.remote, self.versions, self.layout,
                                      ttl_s=p.metadata_ttl_s, block_size=p.block_size,
                                      clock=clock, root=self._root, list_root=p.list_root,
                                      first_pages=self.pages, page_size=self._page_size)
        #: what the front ends (fsspec files, FUSE handles) read through
        self.reader = BlockReader(self, self.store, self.layout, self.metrics, p,
                                  page_size=self._page_size)
        self.store.on_corrupt = lambda key: self.metrics.corrupt_blocks.inc()
        self.store.on_misplaced = lambda key: self.metrics.misplaced_blocks.inc()
        self.store.on_evict = lambda: self.metrics.evictions.inc()
        self._record = record
        self._t0 = clock()
        self._lock = threading.Lock()  # write-behind state
        #: blocks being written to the store -> whether the policy evicted them meanwhile
        self._writing: dict[BlockKey, bool] = {}
        #: write-behind: fetched blocks are written to the store here, off the reader's path
        #: (a block write with its index commit took ~2-7 ms, a quarter to a half of a
        #: 10 ms remote fetch); None in ``sync_prefetch`` mode, which must store in order,
        #: and under the cache dir's policy daemon: a reader in another process would find
        #: a block admitted but not written yet, and the shared policy would take it as lost
        self._writer: cf.ThreadPoolExecutor | None = None
        if p.write_behind and not p.sync_prefetch and mode is DaemonMode.LOCAL:
            self._writer = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="aicache-store")
        self._write_bytes = 0  # bytes handed to the writer and not yet written
        self._write_count = 0
        self._enospc_warned = False
        self._policy_warned = False
        self._closed = False
        #: this engine's counters, persisted under the cache dir for ``aicache cache stats``
        self.counters: CounterFile | None = None
        if not isinstance(self.store, UncachedStore):
            try:
                self.counters = CounterFile(self.store.cache_dir, self._counter_values,
                                            interval_s=p.stats_interval_s, mode=self.store.file_mode)
            except OSError as exc:
                log.warning("aicache: statistics of %s not persisted (%s)", cache_dir, exc)

    def _counter_values(self) -> dict[str, float]:
        return {k: self.metrics.value(k) for k in PERSISTED}

    @property
    def system(self) -> DataCacheSystem | None:
        """The policy object (in this process; a daemon client has none)."""
        return self.policy.system if isinstance(self.policy, SystemDriver) else None

    @property
    def page_size(self) -> int:
        """The granule of sparse reads (0: off; see :mod:`aicache.datacache.engine.sparse`)."""
        return self._page_size

    @page_size.setter
    def page_size(self, page: int) -> None:
        self._page_size = self.pages.page_size = self.reader.page_size = page
        self.metadata.page_size = page

    @property
    def policy_name(self) -> str:
        return self.policy.name

    # -- time / snapshot ---------------------------------------------------------------------
    def _now(self) -> float:
        return self._clock() - self._t0

    # -- the parts' public calls, as callers know them -----------------------------------------
    def stat(self, path: str, first_page: bool = False) -> FileMeta:
        """:meth:`MetadataCache.stat <.meta.MetadataCache.stat>`: size and version of ``path``
        (``first_page``: an open, which may ask with a GET of the file's first page)."""
        return self.metadata.stat(path, first_page)

    def forget(self, path: str) -> None:
        self.metadata.forget(path)

    def opened(self, meta: FileMeta) -> None:
        """A reader opened ``meta``'s file (a mount's open): told to the policy, whose
        accesses miss the re-reads the kernel's page cache serves. Never raises: a policy
        error is counted, as on a read."""
        fb = self.layout.file_blocks(meta)
        try:
            self.policy.opened(fb.unit, fb.base, self._now())
        except Exception as exc:  # noqa: BLE001 - a policy bug must not fail an open
            self._policy_error(exc)

    def prepare_root(self) -> None:
        """List the dataset root's folder and build the block reads' client now (a mount
        does at INIT, before the kernel sends any request), so that a job's first lookup
        and first block read wait on neither. Best effort, as every folder listing: where it
        fails, lookups ask the remote about each path, as they would without it."""
        if not self._root:
            return
        self.metadata.ensure_listed(self._root + "/")
        self.remote.connect(self._root)

    def stat_is_cached(self, path: str) -> bool:
        return self.metadata.stat_is_cached(path)

    def info(self, path: str) -> dict[str, Any] | None:
        return self.metadata.info(path)

    def ls(self, path: str) -> list[dict[str, Any]]:
        return self.metadata.ls(path)

    def find(self, path: str, maxdepth: int | None = None,
             withdirs: bool = False) -> dict[str, dict[str, Any]]:
        return self.metadata.find(path, maxdepth, withdirs)

    def target_cache_since(self, path: str, subtree: bool = False) -> float:
        return self.metadata.target_cache_since(path, subtree)

    def forget_listings(self, path: str) -> None:
        self.metadata.forget_listings(path)

    def forget_info(self, path: str) -> None:
        self.metadata.forget_info(path)

    def info_is_cached(self, path: str) -> bool:
        return self.metadata.info_is_cached(path)

    def cached_info(self, path: str) -> dict[str, Any] | None:
        return self.metadata.cached_info(path)

    def block_id(self, path: str, index: int) -> int:
        """The stable global id of block ``index`` of ``path`` (after :meth:`stat`)."""
        return self.layout.block_id(path, index)

    def unit_of(self, path: str) -> str:
        return self.layout.unit_of(path)

    def read_sparse(self, meta: FileMeta, start: int, end: int,
                    stream: ReadStream | None) -> bytes | None:
        """:meth:`PageReader.read_sparse <.sparse.PageReader.read_sparse>`."""
        return self.pages.read_sparse(meta, start, end, stream)

    # -- what the page reader hands back (:class:`~.sparse.PageSink`) ----------------------
    def now(self) -> float:
        """The engine's time (seconds since it started, by its clock)."""
        return self._clock() - self._t0

    def access(self, unit: str, bid: int, key: BlockKey, size: int, source: Source,
               now: float) -> None:
        """A demand read told to the system (and recorded); its prefetch answer is not
        followed. A policy failure is counted, never raised."""
        try:
            self.policy.read(unit, bid, key, size, source, now)
        except Exception as exc:  # noqa: BLE001 - a policy bug must not fail a read
            self._policy_error(exc)
        if self._record is not None:
            self._record(now, unit, bid, size)

    def keep(self, unit: str, bid: int, key: BlockKey, data: bytes, flight: Flight,
             prefetched: bool = False) -> bool:
        """A fetched page through admission and the store (:meth:`_insert`)."""
        return self._insert(unit, bid, key, data, prefetched, flight)

    def fetched_ahead(self, meta: FileMeta,
                      spans: tuple[tuple[int, bytes], ...]) -> AbstractContextManager[None]:
        """:meth:`RemoteClient.fetched_ahead <.remote.RemoteClient.fetched_ahead>`."""
        return self.remote.fetched_ahead(meta, spans)

    # -- fetches ------------------------------------------------------------------------------
    def fetch_range(self, meta: FileMeta, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``meta``'s version from the origin; a version gone
        drops ``meta`` from the metadata cache, so that the next open asks for the current."""
        try:
            return self.remote.fetch_range(meta, start, end)
        except VersionGone:
            self.metadata.forget_version(meta)
            raise

    def _fetch(self, meta: FileMeta, idx: int) -> bytes:
        """Block ``idx`` of ``meta`` from below the local store: the shared tier when it
        holds an intact copy, else the origin (and the block is then offered to the shared
        tier's writer, off this reader's path)."""
        start = idx * self.block_size
        end = min(meta.size, start + self.block_size)
        shared = self.shared
        if shared is None:
            return self.fetch_range(meta, start, end)
        key = self.layout.file_blocks(meta).key(idx)
        data = shared.get(key, end - start)
        if data is not None:
            return data
        data = self.fetch_range(meta, start, end)
        shared.offer(key, data)
        return data

    def _snapshot(self) -> dict[str, Any]:
        s: dict[str, Any] = {}
        try:
            s.update(self.policy.stats())
        except Exception:  # noqa: BLE001 - metrics must not break on a system's bug
            pass
        s["used_bytes"] = self.store.used
        s["capacity_bytes"] = self.store.capacity
        s["blocks"] = s.get("resident_blocks", 0)
        s["inflight_fetches"] = self.flights.pending()
        m = self.store.mapped
        s["mapped_bytes"], s["mapped_blocks"] = m.mapped_bytes, len(m)
        s["mapped_stale_dropped"] = m.dropped_stale
        if self.shared is not None:
            s["shared_write_queue"] = self.shared.queue_depth
        return s

    # -- reads --------------------------------------------------------------------------------
    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes ``[offset, offset+length)`` of ``path`` (clipped at EOF), via blocks."""
        return self.read_meta(self.stat(path), offset, length)

    def read_meta(self, meta: FileMeta, offset: int = 0, length: int | None = None,
                  stream: ReadStream | None = None) -> bytes:
        """:meth:`read` of a file already :meth:`stat`-ed (callers that hold the metadata —
        ``cat_file``, open files, FUSE handles — skip a second lookup). A whole single
        block is returned as is: no slice, no copy. ``stream``: the reader's run, this
        read noted in it already (None: the run of this path's reads that name none); a
        sparse piece of a block not held is read by pages (:meth:`read_sparse`)."""
        size = meta.size
        end = size if length is None else offset + length
        if end > size:
            end = size
        if offset < 0:
            raise ValueError(f"negative offset {offset} reading {meta.path}")
        if end <= offset:
            return b""
        B = self.block_size
        first, last = offset // B, (end - 1) // B
        paged = self._page_size > 0
        if paged and stream is None:  # cat_file / read: the run of this path's such reads
            stream = self._path_streams.get(meta.path)
            if stream is None:
                if len(self._path_streams) >= 1 << 14:  # bounded: a dropped run starts anew
                    self._path_streams.clear()
                stream = self._path_streams[meta.path] = ReadStream()
            stream.note(offset, end, self._page_size, size)
        # a reader that jumps is not read ahead for: its blocks are still told to the
        # policy, but the prefetches it names are not made
        ahead = not paged or (stream is not None and streaming(stream, self.params.sparse_run))
        if first == last:
            s, e = offset - first * B, end - first * B
            if paged and (s > 0 or e < min(B, size - first * B)):
                got = self.read_sparse(meta, offset, end, stream)
                if got is not None:
                    return got
            blk = self.read_block_hit(meta, first, e - s, ahead)[0]
            return blk if (s == 0 and e == len(blk)) else blk[s:e]
        parts: list[bytes | memoryview] = []
        together: AbstractContextManager[None] = (
            self.pages.pieces_fetched_together(meta, offset, end, stream) if paged and not ahead
            else nullcontext())
        with together:  # a reader that jumps: one GET for its adjacent missing pieces
            for i in range(first, last + 1):
                s = max(offset, i * B) - i * B
                e = min(end, (i + 1) * B) - i * B
                if paged and (s > 0 or e < min(B, size - i * B)):
                    got = self.read_sparse(meta, i * B + s, i * B + e, stream)
                    if got is not None:
                        parts.append(got)
                        continue
                blk = self.read_block_hit(meta, i, e - s, ahead)[0]
                parts.append(blk if (s == 0 and e == len(blk)) else memoryview(blk)[s:e])
        return b"".join(parts)

    def read_block(self, meta: FileMeta, idx: int, served: int | None = None) -> bytes:
        """One block of ``meta`` (a demand access: told to the system, may prefetch), as
        :meth:`read_block_hit`."""
        return self.read_block_hit(meta, idx, served)[0]

    def read_block_hit(self, meta: FileMeta, idx: int, served: int | None = None,
                       ahead: bool = True) -> tuple[bytes, bool]:
        """One block of ``meta`` (a demand access: told to the system, may prefetch) and
        whether it was a hit, timed into ``metrics.reads`` by the engine's ``clock``.
        ``served``: how many of its bytes the caller hands to its reader (the whole block
        when None) — what a hit adds to ``hit_bytes``. ``ahead``: make the prefetches the
        system names (False for a reader that jumps, :func:`~.sparse.streaming`). With ``sync_prefetch`` the
        prefetches it asked for are fetched and stored before it returns, in the order the
        system named them.

        A hit is one lookup of the file's record, one store read, one policy call and one
        metrics update, and allocates nothing but the bytes it returns and the pair (and
        what the system allocates)."""
        clock = self._clock
        t0 = clock()
        fb = self.layout.file_blocks(meta)
        key = fb.keys.get(idx)
        if key is None:
            key = fb.key(idx)
        data = self.store.get(key)
        if data is not None:  # the hot path: a local hit
            n = len(data)
            self._local_hit(key, fb.base + idx, fb.unit, n, t0 - self._t0, ahead)
            self.metrics.reads.hit(n if served is None else served, clock() - t0)
            hit = True
        else:
            try:
                data, hit = self._read_missing(meta, idx, fb, key, served, ahead)
            finally:
                self.metrics.reads.observe(clock() - t0)
        if self.flights.sync:
            self.flights.run_queued()
        return data, hit

    def _read_missing(self, meta: FileMeta, idx: int, fb: FileBlocks, key: BlockKey,
                      served: int | None, ahead: bool = True) -> tuple[bytes, bool]:
        """A demand read of a block the store does not hold: wait on its fetch in flight
        or fetch it (single-flight), then tell the system; returns the block and whether
        it counts as a hit.

        Invariants: a flight this read registered is always resolved (whatever raises
        before its fetch, the flight is failed and removed, so no later reader waits on
        it), and a wait on another reader's flight is bounded
        (:meth:`EngineParams.flight_wait_bound`): past it this reader fetches the block
        itself, uncached (the flight's owner still stores it)."""
        bid = fb.base + idx
        unit = fb.unit
        # leader: this read registered the flight, or took over a queued prefetch not started
        flight, leader, fresh = self.flights.join(key)
        if fresh and self._writer is not None:
            # write-behind: the writer may have stored the block (and ended its flight)
            # between the caller's store lookup and this flight: read it, do not refetch
            stored = self.store.get(key)
            if stored is not None:
                flight.future.set_result(stored)
                self.flights.end(key, flight)
                self._local_hit(key, bid, unit, len(stored), self._now(), ahead)
                self.metrics.reads.count_hit(len(stored) if served is None else served)
                return stored, True
        try:
            data: bytes | None = None
            stuck = False
            if not leader:
                try:
                    data = flight.future.result(timeout=self.params.flight_wait_bound())
                except cf.TimeoutError:
                    stuck = True
                except Exception:  # noqa: BLE001 - the prefetch failed; fetch on demand
                    data = None
            now = self._now()
            size = (len(data) if data is not None
                    else min(self.block_size, meta.size - idx * self.block_size))
            source = Source.FLIGHT if data is not None else Source.REMOTE
            try:
                acc = self.policy.read(unit, bid, key, size, source, now)
            except Exception as exc:  # noqa: BLE001 - a policy bug must not fail a read
                self._policy_error(exc)
                acc = AccessResult(data is not None, (), False)
            if acc.prefetch_used:
                self.metrics.prefetch_used.inc()
            if self._record is not None:
                self._record(now, unit, bid, size)
            if acc.prefetch and ahead:  # before our own fetch: both go to the remote together
                self._prefetch(acc.prefetch)
        except BaseException as exc:
            if leader:  # fail it: its waiters fetch themselves
                self.flights.fail(key, flight, RemoteReadError(5, f"read of {key.path} failed: {exc}"))
            raise
        if data is not None:
            if acc.hit:
                self.metrics.reads.count_hit(len(data) if served is None else served)
            else:
                self.metrics.misses.inc()
            return data, acc.hit
        self.metrics.misses.inc()
        if stuck:  # the flight's owner is stuck (a hung disk or remote): do not wait on it
            log.debug("fetch of %s in flight past its bound; reading it uncached", key)
            return self._fetch(meta, idx), False
        if not leader:  # the prefetch we waited on failed: fetch it ourselves
            flight = self.flights.restart(key)
        return self.flights.lead(key, flight, partial(self._fetch, meta, idx),
                                 partial(self._keep, unit, bid, key, False)), False

    def _prefetch(self, blocks: Sequence[int]) -> None:
        """Schedule the prefetches the system asked for; a failure (a bad block id from the
        policy, say) is the policy's: counted, never raised into the read that asked."""
        try:
            self._schedule(blocks)
        except Exception as exc:  # noqa: BLE001 - a prefetch is advice
            self._policy_error(exc)

    def _schedule(self, blocks: Sequence[int]) -> None:
        """Offer prefetches of ``blocks`` (the non-resident blocks the policy named) to the
        pool: blocks of files this engine has metadata of, not stored already."""
        B = self.block_size
        for bid in blocks:
            loc = self.policy.locate(bid)
            if loc is None:
                continue
            path, idx = loc
            meta = self.metadata.known(path)
            if meta is None or idx * B >= max(1, meta.size):
                continue
            fb = self.layout.file_blocks(meta)
            key = fb.key(idx)  # the key its demand reads will use
            if self.store.contains(key):
                continue  # stored by another process (or an earlier run): nothing to fetch
            got = self.flights.prefetch(key, min(B, meta.size - idx * B),
                                        partial(self._fetch, meta, idx),
                                        partial(self._keep, fb.unit, bid, key, True))
            if got is Offer.ISSUED:
                self.metrics.prefetch_issued.inc()
            elif got is Offer.DROPPED:
                self.metrics.prefetch_dropped.inc()  # each one, as the simulator counts
            elif got is Offer.CLOSED:
                return

    def wait_prefetches(self, timeout: float = 30.0) -> None:
        """Block until no prefetch is in flight and every fetched block is written to the
        store (tests, benchmarks)."""
        self.flights.wait_idle(timeout, lambda: self._write_count == 0)

    def claim_local(self, meta: FileMeta, idx: int, served: int | None = None) -> None:
        """Account a demand read of block ``idx``, which the caller found local (a verified
        block the store serves by range, :meth:`BlockReader.local`), *before* reading its
        pieces by range."""
        fb = self.layout.file_blocks(meta)
        size = min(self.block_size, meta.size - idx * self.block_size)
        self._local_hit(fb.key(idx), fb.base + idx, fb.unit, size, self._now())
        self.metrics.reads.count_hit(size if served is None else served)
        if self.flights.sync:
            self.flights.run_queued()

    def _local_hit(self, key: BlockKey, bid: int, unit: str, size: int, now: float,
                   ahead: bool = True) -> None:
        """Tell the system about a demand read served from the store at ``now`` (and act
        on its prefetch answer). A policy failure is counted, never raised."""
        try:
            acc = self.policy.read(unit, bid, key, size, Source.STORE, now)
        except Exception as exc:  # noqa: BLE001 - a policy bug must not fail a read
            self._policy_error(exc)
            return
        if acc.prefetch_used:
            self.metrics.prefetch_used.inc()
        if self._record is not None:
            self._record(now, unit, bid, size)
        if acc.prefetch and ahead:
            self._prefetch(acc.prefetch)

    def _keep(self, unit: str, bid: int, key: BlockKey, prefetched: bool, data: bytes,
              flight: Flight) -> bool:
        """A fetched block (or page) of ``flight`` through :meth:`_insert`."""
        return self._insert(unit, bid, key, data, prefetched, flight)

    def _insert(self, unit: str, bid: int, key: BlockKey, data: bytes, prefetched: bool,
                flight: Flight | None = None) -> bool:
        """A fetched block: ask the policy once, then apply its answer to the store. True
        when the store write was handed to the writer (write-behind): it then ends
        ``flight`` once the block is written, so that until then readers of the block get
        its bytes from the flight instead of fetching them again."""
        try:
            plan = self.policy.insert(unit, bid, key, len(data), self.store.used, self._now(),
                                      prefetched)
        except Exception as exc:  # noqa: BLE001 - the store's own order keeps the budget
            self._policy_error(exc)
            plan = Placement(Admission.STORED)
        evict = [v.key for v in plan.victims]
        adm = plan.admission
        with self._lock:
            for v in plan.victims:
                if v.wasted:
                    self.metrics.prefetch_wasted.inc()
                if v.key in self._writing:  # named while its bytes are still being written
                    self._writing[v.key] = True
            if adm is Admission.STORED:
                self._writing[key] = False
        if adm is not Admission.STORED:
            if evict:  # DECLINED: the room was made
                self.store.evict(evict)
            if adm is Admission.REJECTED:
                self.metrics.rejected.inc()
            return False
        w = self._writer
        if w is not None and flight is not None:
            n = len(data)
            with self._lock:
                room = self._write_bytes + n <= self.params.max_write_behind_bytes
                if room:
                    self._write_bytes += n
                    self._write_count += 1
            if room:
                try:
                    w.submit(self._write_behind, bid, key, data, evict, flight)
                    return True
                except RuntimeError:  # closing: write it here
                    with self._lock:
                        self._write_bytes -= n
                        self._write_count -= 1
        self._store_block(bid, key, data, evict)
        return False

    def _write_behind(self, bid: int, key: BlockKey, data: bytes, evict: list[BlockKey],
                      flight: Flight) -> None:
        """The writer's job: store a block a reader already has, then end its flight."""
        try:
            self._store_block(bid, key, data, evict)
        except Exception as exc:  # noqa: BLE001 - a failed write is a block not cached
            log.warning("aicache: could not store a block of %s: %s", key.path, exc)
            self._lost(bid, key)
        finally:
            with self._lock:
                self._write_bytes -= len(data)
                self._write_count -= 1
            self.flights.end(key, flight)

    def _store_block(self, bid: int, key: BlockKey, data: bytes, evict: list[BlockKey]) -> None:
        """Write a block the policy admitted, dropping ``evict`` first (see :meth:`_put`)."""
        try:
            put = self._put(key, data, evict)
        except StoreFull as exc:
            self.metrics.enospc.inc()
            if not self._enospc_warned:
                self._enospc_warned = True
                log.warning("aicache: cache disk full (%s); serving reads uncached", exc)
            self._lost(bid, key)
            return
        except OSError as exc:
            log.warning("aicache: could not store a block of %s: %s", key.path, exc)
            self._lost(bid, key)
            return
        for k in put.dropped:  # the store's own oldest-first order, past the policy's victims
            b = self.layout.id_of(k)
            if b is not None:
                self._lost(b, k)
        if not put.stored:
            self.metrics.rejected.inc()
            self._lost(bid, key)

    def _put(self, key: BlockKey, data: bytes, evict: Sequence[BlockKey]) -> Put:
        """Store a block the policy holds now. The policy may name it as a victim of
        another insert before its bytes land (prefetch threads insert concurrently); it is
        then evicted as soon as it is written, so the store ends with the policy's set."""
        try:
            put = self.store.put_evicting(key, data, evict)
        finally:
            with self._lock:
                late = self._writing.pop(key, False)
        if late:
            self.store.evict([key])
        return put

    def _lost(self, bid: int, key: BlockKey) -> None:
        """Tell the policy that ``key`` is not (or no longer) in the store."""
        try:
            self.policy.forget(bid, key)
        except Exception as exc:  # noqa: BLE001
            self._policy_error(exc)

    def _policy_error(self, exc: Exception) -> None:
        self.metrics.policy_errors.inc()
        if not self._policy_warned:
            self._policy_warned = True
            log.warning("aicache: the cache policy failed (%s: %s); reads go on", type(exc).__name__, exc)

    # -- lifecycle ----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        st = self.store.stats()
        out: dict[str, Any] = {k: self.metrics.value(k) for k in (
            "hits", "misses", "hit_bytes", "remote_bytes", "prefetch_issued", "prefetch_used",
            "prefetch_wasted", "prefetch_dropped", "evictions", "rejected", "corrupt_blocks",
            "misplaced_blocks", "enospc", "remote_retries", "remote_errors", "versions_gone",
            "shared_hits", "shared_hit_bytes", "shared_misses", "shared_rejects",
            "shared_errors", "shared_skipped", "shared_writes", "shared_write_drops")}
        if self.shared is not None:
            out["shared_write_queue"] = self.shared.queue_depth
        out.update(blocks=st.blocks, used_bytes=st.used_bytes, capacity_bytes=st.capacity_bytes,
                   block_size=st.block_size, policy=self.policy_name)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.flights.close()
        if self._writer is not None:  # every block a reader got is written before the store closes
            self._writer.shutdown(wait=True)
        self.remote.close()
        if self.shared is not None:  # after the readers: what they fetched is queued by now
            self.shared.close()
        if self.counters is not None:
            self.counters.close()
        try:
            self.policy.close()
        finally:
            self.store.close()

    def __enter__(self) -> CacheEngine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

