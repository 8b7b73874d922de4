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
  over) instead of fetching twice.
* Prefetches run on a bounded pool (``max_prefetch`` concurrent fetches,
  ``max_prefetch_bytes`` in flight; more are dropped and counted), are never reported as
  accesses, and go through the same admission + budget as demand blocks, so they never push
  the cache over its budget.
* Remote errors/timeouts: ``retries`` retries with exponential backoff, then
  :class:`RemoteReadError` (an ``OSError``, EIO) to the caller; a short or failed fetch is
  never cached.
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
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from aicache.datacache.budget import DEFAULT_FREE_SPACE_RATIO
from aicache.datacache.counters import PERSISTED, CounterFile
from aicache.datacache.daemon import DaemonPolicy
from aicache.datacache.mapped import DEFAULT_MMAP_BYTES
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
from aicache.datacache.policy.system import DataCacheSystem
from aicache.datacache.store import (
    DEFAULT_CACHE_MODE,
    HEADER_SIZE,
    BlockKey,
    Put,
    StoreFull,
    UncachedStore,
    open_store,
)
from aicache.datacache.version import VersionGone, VersionScheme, scheme_for
from aicache.errors import BadInput

log = logging.getLogger("aicache.datacache")

DEFAULT_BLOCK_SIZE = 4 * 1024 * 1024


class RemoteReadError(OSError):
    """A remote read failed after every retry (nothing was cached)."""


@dataclass(frozen=True, slots=True)
class FileMeta:
    """What the engine knows of one remote file: its size and version (the block key's
    version, see :mod:`aicache.datacache.version`); ``pin`` is what a range read asks the
    remote for to get exactly that version, when it is not the version itself."""

    path: str
    size: int
    version: str
    pin: str = ""


@dataclass(slots=True)
class EngineParams:
    """Knobs of the engine (policy knobs live in the system)."""

    block_size: int = DEFAULT_BLOCK_SIZE
    max_prefetch: int = 8
    max_prefetch_bytes: int = 256 * 1024 * 1024
    retries: int = 3
    backoff_s: float = 0.05
    request_timeout_s: float | None = None
    metadata_ttl_s: float = 60.0
    seed: int = 0
    #: when hits re-check the block checksum: "full" (every read), "stat" (once per
    #: content version of the block file), "none" — see :mod:`aicache.datacache.store`
    verify: str = "stat"
    #: bytes of verified block files kept memory-mapped for faster hits (0: off) — see
    #: :mod:`aicache.datacache.mapped`
    mmap_bytes: int = DEFAULT_MMAP_BYTES
    #: mode of the cache's files (directories get ``x`` where it has ``r``): owner-only by
    #: default; e.g. 0o640 for a cache shared with a group — see :mod:`aicache.datacache.store`
    cache_mode: int = DEFAULT_CACHE_MODE
    #: list the whole dataset root once (``find``) on first access, so block ids follow
    #: the sorted path order across folders and readahead crosses folder boundaries; off,
    #: each folder is listed on its first read (ids then follow the order folders are met)
    list_root: bool = True
    #: longest wait for one answer of the policy daemon (``daemon=True``); past it the
    #: process decides locally and reconnects later — see :mod:`aicache.datacache.daemon`
    daemon_timeout_s: float = 1.0
    #: how often this engine's counters are written under the cache dir (and at close) for
    #: ``aicache cache stats``; 0: only at close — see :mod:`aicache.datacache.counters`
    stats_interval_s: float = 1.0
    #: share of the cache's disk kept free: a larger budget is capped at open, with a
    #: warning — see :mod:`aicache.datacache.budget`
    free_space_ratio: float = DEFAULT_FREE_SPACE_RATIO
    #: deterministic mode (replays, tests; one reading thread): a read fetches and stores
    #: the prefetches it asked for before it returns, in the order the system named them,
    #: after its own block — with an injected clock the engine then makes exactly the
    #: simulator's decisions (``tests/test_engine_vs_sim.py``)
    sync_prefetch: bool = False


class DaemonMode(Enum):
    """Who owns the policy of an engine."""

    #: this process (one reader, or readers that need not share decisions)
    LOCAL = "local"
    #: the cache directory's policy daemon, started if missing
    SHARED = "auto"
    #: the cache directory's policy daemon, which must be running
    CONNECT = "connect"

    @classmethod
    def of(cls, value: DaemonMode | bool | str) -> DaemonMode:
        """The mode a user's ``daemon=`` value names (a bool or a string from a URL or
        a config: ``True``/``"auto"``/``"true"``, ``False``/``"false"``, ``"connect"``)."""
        if isinstance(value, DaemonMode):
            return value
        if isinstance(value, bool):
            return cls.SHARED if value else cls.LOCAL
        v = str(value).strip().lower()
        if v in ("auto", "true", "1", "yes", "shared"):
            return cls.SHARED
        if v in ("", "false", "0", "no", "local"):
            return cls.LOCAL
        if v == "connect":
            return cls.CONNECT
        raise BadInput(f"daemon={value!r} is not a daemon mode; give true, false or connect")


def file_meta(scheme: VersionScheme, path: str, info: dict[str, Any]) -> FileMeta:
    """``path``'s metadata as ``scheme`` identifies the target's ``info`` record."""
    ident = scheme.identify(info)
    return FileMeta(path, ident.size, ident.version, ident.pin)


class _Flight:
    """One in-flight fetch of a block. Whoever ``claim``s it fetches; others wait."""

    __slots__ = ("future", "_claimed", "_mutex", "nbytes")

    def __init__(self, nbytes: int, claimed: bool) -> None:
        self.future: cf.Future[bytes] = cf.Future()
        self._claimed = claimed
        self._mutex = threading.Lock()
        self.nbytes = nbytes

    def claim(self) -> bool:
        with self._mutex:
            if self._claimed:
                return False
            self._claimed = True
            return True


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
                 policy: str | DataCacheSystem = "chiron", advisor: Any = None,
                 params: EngineParams | None = None,
                 record: Callable[[float, str, int, int], None] | None = None,
                 root: str = "", daemon: DaemonMode | bool | str = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.params = p = params or EngineParams()
        self._clock = clock
        #: how this target names versions and reads one version's ranges
        self.versions = scheme_for(target)
        self._root = root.rstrip("/")
        self.target = target
        #: an UncachedStore when the directory cannot be used (reads then go to the remote)
        self.store = open_store(cache_dir, cache_size, p.block_size, verify=p.verify,
                                mmap_bytes=p.mmap_bytes, cache_mode=p.cache_mode,
                                free_space_ratio=p.free_space_ratio)
        self.block_size = p.block_size
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
                p.block_size, capacity=self.store.capacity, overhead=HEADER_SIZE)
            # file extents from the block map, as the simulator gives its block table
            self.policy.system.use_metadata(self._extent_of_unit)
        self.metrics = EngineMetrics(self._snapshot)
        self.store.on_corrupt = lambda key: self.metrics.corrupt_blocks.inc()
        self.store.on_misplaced = lambda key: self.metrics.misplaced_blocks.inc()
        self.store.on_evict = lambda: self.metrics.evictions.inc()
        self._record = record
        self._t0 = clock()
        self._lock = threading.Lock()  # inflight table, metadata
        self._inflight: dict[BlockKey, _Flight] = {}
        #: blocks being written to the store -> whether the policy evicted them meanwhile
        self._writing: dict[BlockKey, bool] = {}
        self._prefetch_bytes = 0
        self._prefetch_count = 0
        self._meta: dict[str, tuple[FileMeta, float]] = {}
        #: the target's ``info`` answers (None: no such path) and when they were asked
        self._info: dict[str, tuple[dict[str, Any] | None, float]] = {}
        self._listed: set[str] = set()
        self._target_since: dict[str, float] = {}
        self._bases: dict[str, int] = {}
        self._nblocks: dict[str, int] = {}
        #: ``sync_prefetch``: prefetches queued by the current read, run before it returns
        self._sync: list[tuple[FileMeta, int, int, BlockKey, _Flight]] | None = (
            [] if p.sync_prefetch else None)
        self._pool = cf.ThreadPoolExecutor(max_workers=max(1, p.max_prefetch),
                                           thread_name_prefix="aicache-prefetch")
        self._io_pool: cf.ThreadPoolExecutor | None = None
        if p.request_timeout_s:
            self._io_pool = cf.ThreadPoolExecutor(max_workers=max(4, 2 * p.max_prefetch),
                                                  thread_name_prefix="aicache-io")
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
    def policy_name(self) -> str:
        return self.policy.name

    # -- time / snapshot ---------------------------------------------------------------------
    def _now(self) -> float:
        return self._clock() - self._t0

    def _snapshot(self) -> dict[str, Any]:
        s: dict[str, Any] = {}
        try:
            s.update(self.policy.stats())
        except Exception:  # noqa: BLE001 - metrics must not break on a system's bug
            pass
        s["used_bytes"] = self.store.used
        s["capacity_bytes"] = self.store.capacity
        s["blocks"] = s.get("resident_blocks", 0)
        s["inflight_fetches"] = len(self._inflight)
        m = self.store.mapped
        s["mapped_bytes"], s["mapped_blocks"] = m.mapped_bytes, len(m)
        s["mapped_stale_dropped"] = m.dropped_stale
        return s

    # -- metadata and the block map -------------------------------------------------------
    def stat(self, path: str) -> FileMeta:
        """Size and version of ``path`` (cached for ``metadata_ttl_s``: an answer is never
        older than that, since a remote stat bypasses the target's own listing cache)."""
        now = self._clock()
        meta = self._cached_meta(path, now)
        if meta is not None:
            return meta
        path = self.target._strip_protocol(path)
        meta = self._cached_meta(path, now)
        if meta is not None:
            return meta
        self.target.invalidate_cache(path)  # s3fs would answer from a listing of any age
        try:
            info = self._remote(self.target.info, path)
            if info.get("type", "file") == "directory":
                raise IsADirectoryError(path)
            meta = file_meta(self.versions, path, info)
        except (FileNotFoundError, IsADirectoryError):
            self.forget(path)
            raise
        self._ensure_mapped(meta)
        with self._lock:
            self._meta[path] = (meta, now)
        return meta

    def forget(self, path: str) -> None:
        """Drop ``path``'s cached metadata: the next :meth:`stat` asks the remote."""
        with self._lock:
            self._meta.pop(path, None)

    def target_cache_since(self, path: str, subtree: bool = False) -> float:
        """Before asking the target about ``path`` (a listing, an ``info``): drop what the
        target's own metadata cache (s3fs's dircache, which never expires) holds about it
        once that may be ``metadata_ttl_s`` old. Returns the time since which anything the
        target answers about ``path`` was fetched (a lower bound on its age).

        Sound because an invalidation of ``path`` drops its entry and its parents' (the
        listing an ``info`` of a file is answered from), so whatever the target answers
        from later was fetched after it. ``subtree``: about everything under ``path`` too
        (a ``find``, which may answer sub-folders from their own cached listings): the
        target's whole cache is dropped when it may be stale."""
        now = self._clock()
        key = path + "/**" if subtree else path
        t = self._target_since.get(key)
        if t is None or now - t >= self.params.metadata_ttl_s:
            self.target.invalidate_cache(None if subtree else path)
            if len(self._target_since) >= 1 << 16:
                self._target_since.clear()
            self._target_since[key] = t = now
        return t

    def info(self, path: str) -> dict[str, Any] | None:
        """The target's ``info`` of ``path`` (None: no such path), from the metadata cache
        while younger than ``metadata_ttl_s``, else asked through the remote's retries and
        timeout (bypassing the target's own listing cache, as :meth:`stat` does). A path
        that does not exist is remembered as such for the TTL too."""
        now = self._clock()
        hit = self._info.get(path)  # a dict read is atomic: no lock
        if hit is not None and now - hit[1] < self.params.metadata_ttl_s:
            return hit[0]
        self.target.invalidate_cache(path)
        try:
            info: dict[str, Any] | None = self._remote(self.target.info, path)
        except FileNotFoundError:
            info = None
        self._remember_info(path, info, now)
        return info

    def ls(self, path: str) -> list[dict[str, Any]]:
        """The target's detailed listing of directory ``path``, no older than
        ``metadata_ttl_s``, through the remote's retries and timeout; each entry's ``info``
        is cached under ``path/NAME`` as old as the listing may be."""
        since = self.target_cache_since(path)
        entries: list[dict[str, Any]] = self._remote(self.target.ls, path, detail=True)
        base = path.rstrip("/")
        for e in entries:
            name = str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            if name:
                self._remember_info(f"{base}/{name}", e, since)
        return entries

    def forget_info(self, path: str) -> None:
        """Drop ``path``'s cached ``info`` (its attributes predate the version opened)."""
        with self._lock:
            self._info.pop(path, None)

    def info_is_cached(self, path: str) -> bool:
        """Whether :meth:`info` of ``path`` would answer without asking the remote."""
        hit = self._info.get(path)
        return hit is not None and self._clock() - hit[1] < self.params.metadata_ttl_s

    def cached_info(self, path: str) -> dict[str, Any] | None:
        """``path``'s cached ``info``, however old (None: none, or no such path)."""
        hit = self._info.get(path)
        return hit[0] if hit is not None else None

    def _remember_info(self, path: str, info: dict[str, Any] | None, asked: float) -> None:
        with self._lock:
            if len(self._info) >= 1 << 18:  # bounded: a cleared entry is asked again
                self._info.clear()
            self._info[path] = (info, asked)

    def stat_is_cached(self, path: str) -> bool:
        """Whether :meth:`stat` of ``path`` would answer without asking the remote (a FUSE
        session answers such requests inline and sends the others to a worker)."""
        return self._cached_meta(path, self._clock()) is not None

    def _cached_meta(self, path: str, now: float) -> FileMeta | None:
        hit = self._meta.get(path)  # a dict read is atomic: no lock
        return hit[0] if hit is not None and now - hit[1] < self.params.metadata_ttl_s else None

    def _ensure_mapped(self, meta: FileMeta) -> None:
        parent = meta.path.rsplit("/", 1)[0] if "/" in meta.path else ""
        if self._root and self.params.list_root and self._root not in self._listed \
                and meta.path.startswith(self._root + "/"):
            self._map_root()
        if parent not in self._listed:
            asked = self._clock()  # the entries are no older than this
            try:
                self.target.invalidate_cache(parent or "/")
                entries = self._remote(self.target.ls, parent or "/", detail=True)
            except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
                entries = []
            files = []
            with self._lock:
                if parent not in self._listed:
                    self._listed.add(parent)
                    for e in entries:
                        if e.get("type") != "file":
                            continue
                        name = self.target._strip_protocol(e["name"])
                        try:
                            m = file_meta(self.versions, name, e)
                        except FileNotFoundError:  # gone since it was listed
                            continue
                        self._meta.setdefault(name, (m, asked))
                        files.append((name, m.size))
            if files:
                for path, (base, n) in self.policy.register(files).items():
                    self._bases[path] = base
                    self._nblocks[path] = n
        n = max(1, math.ceil(meta.size / self.block_size))
        if self._bases.get(meta.path) is None or self._nblocks.get(meta.path, 0) < n:
            base, have = self.policy.register([(meta.path, meta.size)])[meta.path]
            self._bases[meta.path] = base
            self._nblocks[meta.path] = have

    def _map_root(self) -> None:
        """Register every file under the dataset root at once, sorted by path: a sorted
        traversal of the dataset is then one stride, across folder boundaries too."""
        asked = self._clock()  # the entries are no older than this
        try:
            self.target.invalidate_cache()  # a find may answer from any sub-folder's listing
            found = self._remote(self.target.find, self._root, detail=True)
        except Exception:  # noqa: BLE001 - a listing is an optimisation, not a need
            found = {}
        files = []
        with self._lock:
            if self._root in self._listed:
                return
            self._listed.add(self._root)
            for name, e in found.items():
                if e.get("type") != "file":
                    continue
                name = self.target._strip_protocol(name)
                try:
                    m = file_meta(self.versions, name, e)
                except FileNotFoundError:  # gone since it was listed
                    continue
                self._meta.setdefault(name, (m, asked))
                files.append((name, m.size))
                self._listed.add(name.rsplit("/", 1)[0] if "/" in name else "")
        if files:
            for path, (base, n) in self.policy.register(files).items():
                self._bases[path] = base
                self._nblocks[path] = n

    def block_id(self, path: str, index: int) -> int:
        """The stable global id of block ``index`` of ``path`` (after :meth:`stat`)."""
        return self._bases[path] + index

    def unit_of(self, path: str) -> str:
        """The ``unit`` told to the system: the file's path relative to ``root`` (the mount's
        remote root, if any). Systems group files into dataset units themselves (the first
        path component(s)), and file-aware prefetchers (SFP) need the file."""
        r = self._root
        if r and path.startswith(r):
            rel = path[len(r):].lstrip("/")
            if not rel:
                return path
            # a file directly under the root belongs to the root's unit ("."), like the
            # files of a folder to that folder's: bare "name" would read as a unit of its
            # own, i.e. one unit (with its own statistics and reviews) per top-level file
            return rel if "/" in rel else "./" + rel
        return path

    def _extent_of_unit(self, unit: str) -> tuple[int, int] | None:
        """The block range of the file :meth:`unit_of` named ``unit`` (its inverse), from the
        local block map; None while the file is not registered."""
        assert isinstance(self.policy, SystemDriver)
        bmap = self.policy.map
        r = self._root
        if r and not unit.startswith(r):
            ext = bmap.extent(f"{r}/{unit[2:] if unit.startswith('./') else unit}")
            if ext is not None:
                return ext
        return bmap.extent(unit)

    # -- reads --------------------------------------------------------------------------------
    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes ``[offset, offset+length)`` of ``path`` (clipped at EOF), via blocks."""
        return self.read_meta(self.stat(path), offset, length)

    def read_meta(self, meta: FileMeta, offset: int = 0, length: int | None = None) -> bytes:
        """:meth:`read` of a file already :meth:`stat`-ed (callers that hold the metadata —
        ``cat_file``, open files, FUSE handles — skip a second lookup). A whole single
        block is returned as is: no slice, no copy."""
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
        if first == last:
            blk = self.read_block(meta, first)
            s, e = offset - first * B, end - first * B
            return blk if (s == 0 and e == len(blk)) else blk[s:e]
        parts: list[bytes | memoryview] = []
        for i in range(first, last + 1):
            blk = self.read_block(meta, i)
            s = max(offset, i * B) - i * B
            e = min(end, (i + 1) * B) - i * B
            parts.append(blk if (s == 0 and e == len(blk)) else memoryview(blk)[s:e])
        return b"".join(parts)

    def read_block(self, meta: FileMeta, idx: int) -> bytes:
        """One block of ``meta`` (a demand access: told to the system, may prefetch),
        timed into ``metrics.read_latency`` by the engine's ``clock``. With
        ``sync_prefetch`` the prefetches it asked for are fetched and stored before it
        returns, in the order the system named them."""
        clock = self._clock
        t0 = clock()
        try:
            data = self._read_block(meta, idx)
        finally:
            self.metrics.read_latency.observe(clock() - t0)
        if self._sync is not None:
            self._run_sync_prefetches()
        return data

    def _read_block(self, meta: FileMeta, idx: int) -> bytes:
        key = BlockKey(meta.path, meta.version, idx)
        base = self._bases.get(meta.path)
        if base is None:
            self._ensure_mapped(meta)
            base = self._bases[meta.path]
        bid = base + idx
        unit = self.unit_of(meta.path)
        data = self.store.get(key)
        if data is not None:  # the hot path: a local hit
            self._local_hit(key, bid, unit, len(data))
            return data
        with self._lock:
            flight = self._inflight.get(key)
            if flight is None:
                flight = _Flight(0, claimed=True)
                self._inflight[key] = flight
                leader = True
            else:
                leader = flight.claim()  # a queued prefetch not started yet: take it over
        if not leader:
            try:
                data = flight.future.result()
            except Exception:  # noqa: BLE001 - the prefetch failed; fetch on demand
                data = None
        now = self._now()
        size = len(data) if data is not None else min(self.block_size, meta.size - idx * self.block_size)
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
        if acc.prefetch:  # before our own fetch, so that both go to the remote together
            self._schedule(acc.prefetch)
        if data is not None:
            if acc.hit:
                self.metrics.hits.inc()
                self.metrics.hit_bytes.inc(len(data))
            else:
                self.metrics.misses.inc()
            return data
        self.metrics.misses.inc()
        if not leader:  # the prefetch we waited on failed: fetch it ourselves
            with self._lock:
                flight = _Flight(0, claimed=True)
                self._inflight[key] = flight
        return self._fetch_and_store(meta, idx, bid, unit, key, flight, prefetched=False)

    def claim_range_hit(self, meta: FileMeta, idx: int) -> BlockKey | None:
        """Account a demand read of block ``idx`` *before* reading it, when the store
        can serve its ranges (a verified local block): returns its key, and the caller
        then reads pieces with ``store.get_range`` (or ``get_range_into``, ``range_fd``);
        None (nothing accounted) when the block must be read whole with :meth:`read_block`
        (fetched, or verified)."""
        key = BlockKey(meta.path, meta.version, idx)
        if not self.store.serves_ranges(key):
            return None
        self._range_hit(meta, idx, key)
        return key

    def _range_hit(self, meta: FileMeta, idx: int, key: BlockKey) -> None:
        """Account a demand read of block ``idx`` that the store served as a range."""
        base = self._bases.get(meta.path)
        if base is None:
            self._ensure_mapped(meta)
            base = self._bases[meta.path]
        self._local_hit(key, base + idx, self.unit_of(meta.path),
                        min(self.block_size, meta.size - idx * self.block_size))
        if self._sync is not None:
            self._run_sync_prefetches()

    def _local_hit(self, key: BlockKey, bid: int, unit: str, size: int) -> None:
        """Tell the system about a demand read served from the store (and act on its
        prefetch answer). A policy failure is counted, never raised."""
        now = self._now()
        try:
            acc = self.policy.read(unit, bid, key, size, Source.STORE, now)
        except Exception as exc:  # noqa: BLE001 - a policy bug must not fail a read
            self._policy_error(exc)
            acc = AccessResult(True, (), False)
        if acc.prefetch_used:
            self.metrics.prefetch_used.inc()
        if self._record is not None:
            self._record(now, unit, bid, size)
        if acc.prefetch:
            self._schedule(acc.prefetch)
        self.metrics.hits.inc()
        self.metrics.hit_bytes.inc(size)

    def _fetch_and_store(self, meta: FileMeta, idx: int, bid: int, unit: str, key: BlockKey,
                         flight: _Flight, prefetched: bool) -> bytes:
        try:
            data = self._fetch(meta, idx)
        except BaseException as exc:
            flight.future.set_exception(exc)
            with self._lock:
                if self._inflight.get(key) is flight:
                    del self._inflight[key]
            raise
        try:
            self._insert(unit, bid, key, data, prefetched)
        finally:
            flight.future.set_result(data)
            with self._lock:
                if self._inflight.get(key) is flight:
                    del self._inflight[key]
        return data

    def _insert(self, unit: str, bid: int, key: BlockKey, data: bytes, prefetched: bool) -> None:
        """A fetched block: ask the policy once, then apply its answer to the store."""
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
            return
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
            b = self._bases.get(k.path)
            if b is not None:
                self._lost(b + k.index, k)
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

    # -- remote -------------------------------------------------------------------------------
    def _remote(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the remote with bounded retries + exponential backoff (+ optional timeout)."""
        p = self.params
        last: BaseException | None = None
        for attempt in range(p.retries + 1):
            try:
                if self._io_pool is not None:
                    fut = self._io_pool.submit(fn, *args, **kwargs)
                    try:
                        return fut.result(timeout=p.request_timeout_s)
                    except cf.TimeoutError:
                        fut.cancel()
                        raise TimeoutError(f"no answer within {p.request_timeout_s}s") from None
                return fn(*args, **kwargs)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
                    VersionGone):
                raise
            except Exception as exc:  # noqa: BLE001 - remote clients raise anything
                last = exc
                if attempt < p.retries:
                    self.metrics.remote_retries.inc()
                    time.sleep(p.backoff_s * (2 ** attempt))
        self.metrics.remote_errors.inc()
        what = args[0] if args else ""
        raise RemoteReadError(5, f"remote {getattr(fn, '__name__', 'call')}({what!s}) failed after "
                                 f"{p.retries + 1} attempts: {type(last).__name__}: {last}")

    def _fetch(self, meta: FileMeta, idx: int) -> bytes:
        start = idx * self.block_size
        end = min(meta.size, start + self.block_size)

        def get(_what: str) -> bytes:
            data = self.versions.read(self.target, meta.path, meta.version, meta.pin, start, end)
            if len(data) != end - start:
                raise OSError(f"short read: {len(data)} of {end - start} bytes")
            return data

        get.__name__ = "cat_file"
        try:
            data: bytes = self._remote(get, f"{meta.path}[{start}:{end}]")
        except VersionGone:
            # this version is gone: the next open asks the remote for the current one
            self.metrics.versions_gone.inc()
            with self._lock:
                if self._meta.get(meta.path, (None,))[0] == meta:
                    del self._meta[meta.path]
            raise
        self.metrics.remote_bytes.inc(len(data))
        return data

    # -- prefetch -----------------------------------------------------------------------------
    def _schedule(self, blocks: Sequence[int]) -> None:
        p = self.params
        for bid in blocks:
            if self.policy.is_resident(bid):
                continue
            loc = self.policy.locate(bid)
            if loc is None:
                continue
            m = self._meta.get(loc[0])
            if m is not None and self.store.contains(BlockKey(loc[0], m[0].version, loc[1])):
                continue  # stored by another process (or an earlier run): nothing to fetch
            with self._lock:
                path, idx = loc
                m = self._meta.get(path)
                if m is None or idx * self.block_size >= max(1, m[0].size):
                    continue
                meta = m[0]
                key = BlockKey(path, meta.version, idx)
                if key in self._inflight:
                    continue
                nbytes = min(self.block_size, meta.size - idx * self.block_size)
                if (self._prefetch_count >= 2 * p.max_prefetch
                        or self._prefetch_bytes + nbytes > p.max_prefetch_bytes):
                    self.metrics.prefetch_dropped.inc()  # each one, as the simulator counts
                    continue
                flight = _Flight(nbytes, claimed=False)
                self._inflight[key] = flight
                self._prefetch_count += 1
                self._prefetch_bytes += nbytes
            self.metrics.prefetch_issued.inc()
            if self._sync is not None:
                self._sync.append((meta, idx, bid, key, flight))
                continue
            try:
                self._pool.submit(self._prefetch_one, meta, idx, bid, key, flight)
            except RuntimeError:  # pool shut down
                self._release_prefetch(key, flight)
                return

    def _run_sync_prefetches(self) -> None:
        """``sync_prefetch``: fetch and store the queued prefetches now, in order."""
        q = self._sync
        assert q is not None
        while q:
            self._prefetch_one(*q.pop(0))

    def _release_prefetch(self, key: BlockKey, flight: _Flight) -> None:
        """Give up a scheduled prefetch that will not run (pool shut down)."""
        mine = flight.claim()  # False: a demand read took it over and will finish it
        with self._lock:
            if mine and self._inflight.get(key) is flight:
                del self._inflight[key]
            self._prefetch_count -= 1
            self._prefetch_bytes -= flight.nbytes
        if mine:
            flight.future.set_exception(RemoteReadError(5, "prefetch cancelled"))

    def _prefetch_one(self, meta: FileMeta, idx: int, bid: int, key: BlockKey, flight: _Flight) -> None:
        if self._closed or not flight.claim():  # a demand read took it over (or closing)
            with self._lock:
                self._prefetch_count -= 1
                self._prefetch_bytes -= flight.nbytes
            return
        try:
            try:
                data = self._fetch(meta, idx)
            except Exception as exc:  # noqa: BLE001 - prefetch failures are counted, not raised
                log.debug("prefetch of %s failed: %s", key, exc)
                flight.future.set_exception(exc)
                return
            try:
                self._insert(self.unit_of(meta.path), bid, key, data, True)
            finally:
                flight.future.set_result(data)
        finally:
            with self._lock:
                if self._inflight.get(key) is flight:
                    del self._inflight[key]
                self._prefetch_count -= 1
                self._prefetch_bytes -= flight.nbytes

    def wait_prefetches(self, timeout: float = 30.0) -> None:
        """Block until no prefetch is in flight (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._prefetch_count == 0:
                    return
            time.sleep(0.005)

    # -- lifecycle ----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        st = self.store.stats()
        out = {k: self.metrics.value(k) for k in (
            "hits", "misses", "hit_bytes", "remote_bytes", "prefetch_issued", "prefetch_used",
            "prefetch_wasted", "prefetch_dropped", "evictions", "rejected", "corrupt_blocks",
            "misplaced_blocks", "enospc", "remote_retries", "remote_errors", "versions_gone")}
        out.update(blocks=st.blocks, used_bytes=st.used_bytes, capacity_bytes=st.capacity_bytes,
                   block_size=st.block_size, policy=self.policy_name)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._io_pool is not None:
            self._io_pool.shutdown(wait=False, cancel_futures=True)
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


def default_cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "aicache")
