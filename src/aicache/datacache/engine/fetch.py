"""Single-flight fetches and the bounded prefetch pool of the engine."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from aicache.datacache.engine.blockmap import FileBlocks
from aicache.datacache.engine.params import EngineParams
from aicache.datacache.engine.remote import RemoteReadError
from aicache.datacache.keys import BlockKey, FileMeta
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.policy.driver import PolicyPort
from aicache.datacache.store import BlockStore

log = logging.getLogger("aicache.datacache")


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


class Fetcher:
    """:class:`~aicache.datacache.engine.CacheEngine`'s fetch and prefetch methods (a mixin:
    the in-flight table and the prefetch counters live on the engine, under its ``_lock``)."""

    params: EngineParams
    policy: PolicyPort
    store: BlockStore
    metrics: EngineMetrics
    block_size: int
    _closed: bool
    _lock: threading.Lock
    _inflight: dict[BlockKey, _Flight]
    _meta: dict[str, tuple[FileMeta, float]]
    _prefetch_bytes: int
    _prefetch_count: int
    _write_count: int
    _sync: list[tuple[FileMeta, int, int, BlockKey, _Flight]] | None
    _pool: cf.ThreadPoolExecutor
    _fetch: Callable[[FileMeta, int], bytes]
    _insert: Callable[[str, int, BlockKey, bytes, bool, _Flight], bool]
    _file_blocks: Callable[[FileMeta], FileBlocks]
    unit_of: Callable[[str], str]

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
        deferred = False
        try:
            deferred = self._insert(unit, bid, key, data, prefetched, flight)
        finally:
            flight.future.set_result(data)  # waiting readers get the bytes now
            if not deferred:
                self._end_flight(key, flight)
        return data

    def _end_flight(self, key: BlockKey, flight: _Flight) -> None:
        """``flight`` is over (its block stored, refused or failed): later readers go to the
        store (or fetch anew)."""
        with self._lock:
            if self._inflight.get(key) is flight:
                del self._inflight[key]

    def _schedule(self, blocks: Sequence[int]) -> None:
        """Queue prefetches of ``blocks`` (the non-resident blocks the policy named)."""
        p = self.params
        B = self.block_size
        for bid in blocks:
            loc = self.policy.locate(bid)
            if loc is None:
                continue
            path, idx = loc
            m = self._meta.get(path)
            if m is None or idx * B >= max(1, m[0].size):
                continue
            meta = m[0]
            key = self._file_blocks(meta).key(idx)  # the key its demand reads will use
            if self.store.contains(key):
                continue  # stored by another process (or an earlier run): nothing to fetch
            with self._lock:
                if key in self._inflight:
                    continue
                nbytes = min(B, meta.size - idx * B)
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
        deferred = False
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
                deferred = self._insert(self.unit_of(meta.path), bid, key, data, True, flight)
            finally:
                flight.future.set_result(data)
        finally:
            with self._lock:
                if not deferred and self._inflight.get(key) is flight:
                    del self._inflight[key]
                self._prefetch_count -= 1
                self._prefetch_bytes -= flight.nbytes

    def wait_prefetches(self, timeout: float = 30.0) -> None:
        """Block until no prefetch is in flight and every fetched block is written to the
        store (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._prefetch_count == 0 and self._write_count == 0:
                    return
            time.sleep(0.005)

