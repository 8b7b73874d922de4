"""The engine's remote client: bounded retries with backoff, an optional per-request
timeout, and fetches pinned to a file's version — from the shared tier when it holds the
block (:mod:`aicache.datacache.shared`), else from the origin."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from typing import Any

from aicache.datacache.engine.blockmap import FileBlocks
from aicache.datacache.engine.meta import FileMeta
from aicache.datacache.engine.params import EngineParams
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.shared import SharedTier
from aicache.datacache.version import VersionGone, VersionScheme

#: ranges fetched ahead, one request each, for the read running in this thread
#: (:meth:`~aicache.datacache.engine.sparse.PageReader.pieces_fetched_together`): a tuple
#: of (engine, meta, start, bytes); a fetch of that read's pieces inside one is sliced from it
FETCHED_AHEAD = threading.local()


class RemoteReadError(OSError):
    """A remote read failed after every retry (nothing was cached)."""



class RemoteClient:
    """:class:`~aicache.datacache.engine.CacheEngine`'s remote calls (a mixin: the state
    lives on the engine)."""

    params: EngineParams
    target: Any
    versions: VersionScheme
    metrics: EngineMetrics
    block_size: int
    _io_pool: cf.ThreadPoolExecutor | None
    _lock: threading.Lock
    _meta: dict[str, tuple[FileMeta, float]]
    shared: SharedTier | None
    _file_blocks: Callable[[FileMeta], FileBlocks]

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

    def _fetch_range(self, meta: FileMeta, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``meta``'s version from the origin (a block, or the
        pages of a sparse read), through the retries; a version gone drops ``meta`` so that
        the next open asks the remote for the current one. A range this thread's read
        fetched ahead (:data:`FETCHED_AHEAD`) is sliced, not asked for again."""
        spans: tuple[tuple[object, FileMeta, int, bytes], ...] = getattr(FETCHED_AHEAD, "spans", ())
        for owner, m, s0, blob in spans:
            if owner is self and m == meta and s0 <= start and end <= s0 + len(blob):
                return blob[start - s0:end - s0]

        def get(_what: str) -> bytes:
            data = self.versions.read(self.target, meta.path, meta.version, meta.pin, start, end)
            if len(data) != end - start:
                raise OSError(f"short read: {len(data)} of {end - start} bytes")
            return data

        get.__name__ = "cat_file"
        try:
            data: bytes = self._remote(get, f"{meta.path}[{start}:{end}]")
        except VersionGone:
            self.metrics.versions_gone.inc()
            with self._lock:
                if self._meta.get(meta.path, (None,))[0] == meta:
                    del self._meta[meta.path]
            raise
        self.metrics.remote_bytes.inc(len(data))
        return data

    def _fetch(self, meta: FileMeta, idx: int) -> bytes:
        """Block ``idx`` of ``meta`` from below the local store: the shared tier when it
        holds an intact copy, else the origin (and the block is then offered to the shared
        tier's writer, off this reader's path)."""
        shared = self.shared
        if shared is None:
            return self._fetch_origin(meta, idx)
        key = self._file_blocks(meta).key(idx)
        data = shared.get(key, min(self.block_size, meta.size - idx * self.block_size))
        if data is not None:
            return data
        data = self._fetch_origin(meta, idx)
        shared.offer(key, data)
        return data

    def _fetch_origin(self, meta: FileMeta, idx: int) -> bytes:
        start = idx * self.block_size
        return self._fetch_range(meta, start, min(meta.size, start + self.block_size))
