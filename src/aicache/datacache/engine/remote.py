"""The engine's remote client (:class:`RemoteClient`): every request to the target goes
through it, with bounded retries and backoff, an optional per-request timeout, and range
reads pinned to a file's version. It owns no cache state: a version gone is raised
(:class:`~aicache.datacache.version.VersionGone`) for the caller to act on."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from aicache.datacache.keys import FileMeta
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.version import VersionGone, VersionScheme

log = logging.getLogger("aicache.datacache")

P = ParamSpec("P")
T = TypeVar("T")

#: ranges fetched ahead, one request each, for the read running in this thread
#: (:meth:`RemoteClient.fetched_ahead`): a tuple of (client, meta, start, bytes); a fetch of
#: that read's pieces inside one is sliced from it
FETCHED_AHEAD = threading.local()

#: errors that are answers, not failures: raised at once, never retried
_ANSWERS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, VersionGone)


class RemoteReadError(OSError):
    """A remote read failed after every retry (nothing was cached)."""


class RemoteClient:
    """Requests to ``target`` (any fsspec filesystem) with ``retries`` retries after
    ``backoff_s * 2**attempt`` (``sleep`` injected), each bounded by ``request_timeout_s``
    when set (on a pool of its own, closed by :meth:`close`). A failure past the retries is
    a :class:`RemoteReadError` (EIO); answers (a missing path, a version gone) are raised
    as they are. ``metrics`` counts retries, errors, fetched bytes and versions gone."""

    def __init__(self, target: Any, versions: VersionScheme, metrics: EngineMetrics, *,
                 retries: int = 3, backoff_s: float = 0.05,
                 request_timeout_s: float | None = None, io_workers: int = 4,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.target = target
        self.versions = versions
        self.metrics = metrics
        self.retries = retries
        self.backoff_s = backoff_s
        self.request_timeout_s = request_timeout_s
        self._sleep = sleep
        self._io_pool: cf.ThreadPoolExecutor | None = None
        if request_timeout_s:
            self._io_pool = cf.ThreadPoolExecutor(max_workers=max(1, io_workers),
                                                  thread_name_prefix="aicache-io")

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` with the retries and timeout."""
        last: BaseException | None = None
        for attempt in range(self.retries + 1):
            try:
                if self._io_pool is not None:
                    fut = self._io_pool.submit(fn, *args, **kwargs)
                    try:
                        return fut.result(timeout=self.request_timeout_s)
                    except cf.TimeoutError:
                        fut.cancel()
                        raise TimeoutError(f"no answer within {self.request_timeout_s}s") from None
                return fn(*args, **kwargs)
            except _ANSWERS:
                raise
            except Exception as exc:  # noqa: BLE001 - remote clients raise anything
                last = exc
                if attempt < self.retries:
                    self.metrics.remote_retries.inc()
                    self._sleep(self.backoff_s * (2 ** attempt))
        self.metrics.remote_errors.inc()
        what = args[0] if args else ""
        raise RemoteReadError(5, f"remote {getattr(fn, '__name__', 'call')}({what!s}) failed after "
                                 f"{self.retries + 1} attempts: {type(last).__name__}: {last}")

    # -- metadata (what :class:`~.meta.MetadataCache` asks) ----------------------------------
    def strip(self, path: str) -> str:
        """``path`` as the target names it (no protocol)."""
        stripped: str = self.target._strip_protocol(path)
        return stripped

    def invalidate(self, path: str | None = None) -> None:
        """Drop what the target's own listing cache holds about ``path`` (None: all of it)."""
        self.target.invalidate_cache(path)

    def connect(self, path: str) -> None:
        """Build the block reads' client for ``path`` now (best effort: a failure is left
        to the first read, which retries and reports it)."""
        try:
            self.versions.connect(self.target, path)
        except Exception as exc:  # noqa: BLE001 - an optimisation, not a need
            log.debug("client for %s not built ahead: %s", path, exc)

    def info(self, path: str) -> dict[str, Any]:
        info: dict[str, Any] = self.call(self.target.info, path)
        return info

    def ls(self, path: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.call(self.target.ls, path, detail=True)
        return entries

    def find(self, path: str, maxdepth: int | None = None,
             withdirs: bool = False) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.call(
            self.target.find, path, maxdepth=maxdepth, withdirs=withdirs, detail=True)
        return found

    def read_first(self, path: str, page: int) -> tuple[dict[str, Any], bytes] | None:
        """``path``'s ``info`` and first ``page`` bytes from one request, where the target's
        version scheme can (:meth:`~aicache.datacache.version.VersionScheme.read_first`);
        None: it cannot (nothing was asked then), or the answer did not tell (ask ``info``)."""
        if not page or not self.versions.reads_carry_info:
            return None

        def get_first_page(_what: str) -> tuple[dict[str, Any], bytes] | None:
            return self.versions.read_first(self.target, path, page)

        got = self.call(get_first_page, path)
        if got is not None:
            self.metrics.remote_bytes.inc(len(got[1]))
        return got

    # -- bytes --------------------------------------------------------------------------------
    @contextmanager
    def fetched_ahead(self, meta: FileMeta, spans: tuple[tuple[int, bytes], ...]) -> Iterator[None]:
        """While inside: :meth:`fetch_range` of ``meta`` in this thread slices a range that
        lies in one of ``spans`` (start, bytes: fetched ahead) instead of asking for it."""
        FETCHED_AHEAD.spans = tuple((self, meta, s0, blob) for s0, blob in spans)
        try:
            yield
        finally:
            FETCHED_AHEAD.spans = ()

    def fetch_range(self, meta: FileMeta, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``meta``'s version (a block, or the pages of a sparse
        read), through the retries; a short answer is retried, a version gone raised. A
        range this thread's read fetched ahead (:meth:`fetched_ahead`) is sliced, not asked
        for again."""
        spans: tuple[tuple[object, FileMeta, int, bytes], ...] = getattr(FETCHED_AHEAD, "spans", ())
        for owner, m, s0, blob in spans:
            if owner is self and m == meta and s0 <= start and end <= s0 + len(blob):
                return blob[start - s0:end - s0]

        def get(_what: str) -> bytes:
            data: bytes = self.versions.read(self.target, meta.path, meta.version, meta.pin,
                                             start, end)
            if len(data) != end - start:
                raise OSError(f"short read: {len(data)} of {end - start} bytes")
            return data

        get.__name__ = "cat_file"
        try:
            data = self.call(get, f"{meta.path}[{start}:{end}]")
        except VersionGone:
            self.metrics.versions_gone.inc()
            raise
        self.metrics.remote_bytes.inc(len(data))
        return data

    def close(self) -> None:
        if self._io_pool is not None:
            self._io_pool.shutdown(wait=False, cancel_futures=True)
