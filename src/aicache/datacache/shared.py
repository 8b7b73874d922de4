"""The shared tier: a second cache level under the local store, on a store every node reaches.

Read path of a block (:class:`~aicache.datacache.engine.CacheEngine`): the local store, then
this tier, then the origin. The tier is any fsspec store the nodes of a cluster share — an
S3-compatible bucket near them (S3 Express One Zone, MinIO, Ceph), a shared file system
(``file:///mnt/shared/aicache``), ``memory://`` in tests. No coordinator, no protocol of
our own: nodes only ``GET`` and ``PUT`` whole block files.

What it guarantees, and why:

* **Never wrong bytes.** A shared block is a block file in the local store's format
  (:func:`~aicache.datacache.store.encode_block`: a header naming the block's path, version,
  index and block size, and a checksum of its bytes), named by the same digest. Every read
  checks all of it (:func:`~aicache.datacache.store.decode_block`); a torn upload, garbage,
  another block's file or another version's is a *reject* (counted) and the origin is read.
  Freshness is the origin's, as for local blocks: a block key carries the file's version, so
  an object changed at the origin has new keys, and its old blocks are never asked for.
* **Never on the reader's path for writes.** A block fetched from the origin is handed to
  one writer thread through a bounded queue (``write_queue`` blocks); a full queue drops the
  block (counted) instead of holding the reader or growing memory.
* **Never failing or stalling a read.** Every call to the tier (a read, a write) runs on a
  small pool and is waited on for at most ``timeout_s``; past it, or on any error, the
  reader goes to the origin. A call that hangs (a stopped server) keeps its pool slot until
  the store's own client gives up; while every slot is held, calls are skipped, not queued.
  After ``failures`` consecutive failures the tier is left alone for ``backoff_s``
  (:class:`CircuitBreaker`, clock injected); then one call tries it again.

What a shared hit is to the local policy: a local miss whose bytes came cheaply. The
engine tells its policy of the access and offers the block for local admission exactly as
for an origin fetch, so each node's policy still decides what it keeps; the tier's own
counters (``aicache_shared_*``) say how many origin requests it saved.

Bounding: the tier does not count or evict; it is bounded by the store's lifecycle rules
(an expiration rule on the prefix), as Mountpoint's shared cache is — see
``docs/design/shared-tier.md`` for why.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import fsspec
from fsspec.spec import AbstractFileSystem

from aicache.datacache.keys import BlockKey
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.store import HEADER_SIZE, decode_block, encode_block
from aicache.errors import BadInput

log = logging.getLogger("aicache.datacache")

T = TypeVar("T")

#: the defaults of :class:`SharedTierSpec`
DEFAULT_TIMEOUT_S = 2.0
DEFAULT_WRITE_QUEUE = 32
DEFAULT_FAILURES = 3
DEFAULT_BACKOFF_S = 30.0
DEFAULT_CALL_SLOTS = 8


@dataclass(frozen=True, slots=True)
class SharedTierSpec:
    """What a shared tier is built from: the store's URL and options, and its bounds.

    ``block_on_full``: a full write queue makes the caller wait for room (``aicache warmup``,
    whose job is filling the tier) instead of dropping the block (readers)."""

    url: str
    options: Mapping[str, object] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    write_queue: int = DEFAULT_WRITE_QUEUE
    failures: int = DEFAULT_FAILURES
    backoff_s: float = DEFAULT_BACKOFF_S
    call_slots: int = DEFAULT_CALL_SLOTS
    block_on_full: bool = False

    def __post_init__(self) -> None:
        if not (self.timeout_s > 0):
            raise BadInput(f"shared cache timeout {self.timeout_s!r} must be positive seconds, e.g. 2")
        if self.write_queue < 1 or self.failures < 1 or self.call_slots < 1 or self.backoff_s < 0:
            raise BadInput("shared cache write queue, failures and call slots must be >= 1 and "
                           "its backoff >= 0 seconds")

    def filesystem(self) -> tuple[AbstractFileSystem, str]:
        """(filesystem, root path) of the store, a private instance (``BadInput`` for a URL
        fsspec cannot open). An S3 client's own timeouts are set near ``timeout_s`` unless
        given, so that a call abandoned past the bound frees its slot soon after."""
        opts = dict(self.options)
        protocol = fsspec.core.split_protocol(self.url)[0] or "file"
        if protocol in ("s3", "s3a"):
            cfg = dict(opts.get("config_kwargs") or {})  # type: ignore[call-overload]  # options are user data
            cfg.setdefault("connect_timeout", self.timeout_s)
            cfg.setdefault("read_timeout", max(self.timeout_s, 5.0))
            cfg.setdefault("retries", {"max_attempts": 1})
            opts["config_kwargs"] = cfg
        try:
            fs, root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True, **opts)
        except (ValueError, ImportError, TypeError) as exc:
            raise BadInput(f"--shared-cache/shared_cache= {self.url!r}: {exc}; give e.g. "
                           "s3://bucket/prefix or file:///mnt/shared/aicache") from None
        return fs, root.rstrip("/")


class CircuitBreaker:
    """Consecutive failures open the circuit for ``open_s``; then calls are let through
    again, and the first one that fails opens it anew (one failure suffices while the count
    is still at the threshold). ``clock``: monotonic seconds, injected.

    Invariant: :meth:`allow` is False exactly while ``clock() < open_until``."""

    __slots__ = ("threshold", "open_s", "_clock", "_failures", "_open_until", "_lock")

    def __init__(self, threshold: int, open_s: float, clock: Callable[[], float]) -> None:
        self.threshold = threshold
        self.open_s = open_s
        self._clock = clock
        self._failures = 0
        self._open_until = float("-inf")
        self._lock = threading.Lock()

    def allow(self) -> bool:
        return self._clock() >= self._open_until

    def success(self) -> None:
        with self._lock:
            self._failures = 0

    def failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._failures >= self.threshold:
                self._open_until = self._clock() + self.open_s

    @property
    def open(self) -> bool:
        return not self.allow()


class _Skipped(Exception):
    """A call not made: every call slot is held (by calls that hang)."""


class SharedTier:
    """Blocks of ``block_size`` in the store ``spec`` names (see the module docstring).

    ``fs``/``root``: the store, when the caller built it (tests); else from ``spec``.
    ``clock`` drives the circuit breaker only."""

    def __init__(self, spec: SharedTierSpec, block_size: int, metrics: EngineMetrics, *,
                 fs: AbstractFileSystem | None = None, root: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.block_size = block_size
        self.metrics = metrics
        if fs is None:
            fs, built_root = spec.filesystem()
            root = built_root if root is None else root
        self.fs = fs
        self.root = (root or "").rstrip("/")
        self.breaker = CircuitBreaker(spec.failures, spec.backoff_s, clock)
        self._busy = 0  # calls running (a hung one included)
        self._warned = False
        self._busy_lock = threading.Lock()
        self._queue: queue.Queue[tuple[BlockKey, bytes] | None] = queue.Queue(spec.write_queue)
        self._pending = 0  # blocks queued or being written (what flush waits for)
        self._pending_cv = threading.Condition()
        self._closed = False
        self._writer = threading.Thread(target=self._write_loop, name="aicache-shared-writer",
                                        daemon=True)
        self._writer.start()
        threading.Thread(target=self._connect, name="aicache-shared-connect", daemon=True).start()

    def path_of(self, key: BlockKey) -> str:
        """Where ``key``'s block file lives in the store (the local store's file name)."""
        d = key.digest(self.block_size)
        return f"{self.root}/{d[:2]}/{d}.blk"

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a thread of its own, waited on for at most ``timeout_s``: raises
        :class:`_Skipped` when ``call_slots`` calls are running already, ``TimeoutError``
        past the bound, or what ``fn`` raised. The threads are daemons: a call that hangs
        past its bound holds its slot, never the process's exit."""
        with self._busy_lock:
            if self._busy >= self.spec.call_slots:
                raise _Skipped()
            self._busy += 1
        fut: cf.Future[T] = cf.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                fut.set_exception(exc)
            finally:
                with self._busy_lock:
                    self._busy -= 1

        threading.Thread(target=run, name="aicache-shared-call", daemon=True).start()
        try:
            return fut.result(timeout=self.spec.timeout_s)
        except cf.TimeoutError:
            raise TimeoutError(f"no answer from the shared cache within {self.spec.timeout_s}s") from None

    # -- reads ---------------------------------------------------------------------------------
    def get(self, key: BlockKey, size: int) -> bytes | None:
        """The block's ``size`` bytes when the tier holds an intact copy of it; None for
        anything else (absent, rejected, failed, timed out, backing off) — never raises."""
        m = self.metrics
        if not self.breaker.allow():
            m.shared_skipped.inc()
            return None
        path = self.path_of(key)
        try:
            # a ranged read of exactly a block file's length: no more bytes than a block
            # moves, whatever sits at the name
            blob = self._call(lambda: bytes(self.fs.cat_file(path, start=0,
                                                             end=HEADER_SIZE + size)))
        except _Skipped:
            m.shared_skipped.inc()
            return None
        except FileNotFoundError:
            self.breaker.success()
            m.shared_misses.inc()
            return None
        except Exception as exc:  # noqa: BLE001 - a store client raises anything; the origin answers
            self._failed("read", path, exc)
            return None
        self.breaker.success()
        data = decode_block(key, blob, self.block_size)
        if data is None or len(data) != size:
            m.shared_rejects.inc()
            return None
        m.shared_hits.inc()
        m.shared_hit_bytes.inc(len(data))
        return data

    def _failed(self, what: str, path: str, exc: Exception) -> None:
        """A call failed or timed out: counted, told to the breaker; the first time the
        breaker opens, one warning (a tier that is down or misconfigured is otherwise
        silent: reads go on from the origin)."""
        self.breaker.failure()
        self.metrics.shared_errors.inc()
        log.debug("shared cache %s of %s failed: %s: %s", what, path, type(exc).__name__, exc)
        if self.breaker.open and not self._warned:
            self._warned = True
            log.warning("aicache: shared cache %s unavailable (%s: %s); reading from the origin, "
                        "trying it again every %gs", self.spec.url, type(exc).__name__, exc,
                        self.spec.backoff_s)

    def contains(self, key: BlockKey) -> bool | None:
        """Whether the tier has a file at ``key``'s name (not verified); None when it
        could not be asked (failed, timed out, backing off)."""
        if not self.breaker.allow():
            return None
        path = self.path_of(key)
        try:
            found = self._call(lambda: bool(self.fs.exists(path)))
        except _Skipped:
            return None
        except Exception as exc:  # noqa: BLE001 - timeouts and the client's errors alike
            self._failed("lookup", path, exc)
            return None
        self.breaker.success()
        return found

    # -- writes --------------------------------------------------------------------------------
    def offer(self, key: BlockKey, data: bytes) -> bool:
        """Queue ``data`` (fetched from the origin) for the writer; False when dropped (queue
        full, backing off, closed). Only waits with ``block_on_full`` (warmup)."""
        if self._closed or not self.breaker.allow():
            self.metrics.shared_write_drops.inc()
            return False
        with self._pending_cv:
            self._pending += 1
        try:
            if self.spec.block_on_full:
                self._queue.put((key, data))
            else:
                self._queue.put_nowait((key, data))
        except queue.Full:
            self._done_one()
            self.metrics.shared_write_drops.inc()
            return False
        return True

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    def _done_one(self) -> None:
        with self._pending_cv:
            self._pending -= 1
            if self._pending == 0:
                self._pending_cv.notify_all()

    def _connect(self) -> None:
        """One call at start, on a daemon thread of its own (no slot, no breaker): the
        store's client (its session, its connections) is then set up before a reader's
        first miss needs it. Its outcome is ignored; readers' calls judge the store."""
        try:
            self.fs.exists(self.path_of(BlockKey(self.root, "", 0)))
        except Exception:  # noqa: BLE001 - a down store is the readers' calls' to find
            pass

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._write(*item)
            finally:
                self._done_one()

    def _write(self, key: BlockKey, data: bytes) -> None:
        m = self.metrics
        if not self.breaker.allow():
            m.shared_write_drops.inc()
            return
        path = self.path_of(key)
        blob = encode_block(key, data, self.block_size)

        def put() -> None:
            try:
                self.fs.pipe_file(path, blob)
            except FileNotFoundError:  # a file system without the fan-out folder yet
                self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                self.fs.pipe_file(path, blob)

        try:
            self._call(put)
        except _Skipped:
            m.shared_write_drops.inc()
            return
        except Exception as exc:  # noqa: BLE001 - a failed write is a block not shared
            m.shared_write_drops.inc()
            self._failed("write", path, exc)
            return
        self.breaker.success()
        m.shared_writes.inc()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued block is written or dropped (at most ``timeout_s``);
        whether the queue emptied."""
        deadline = time.monotonic() + timeout_s
        with self._pending_cv:
            while self._pending > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._pending_cv.wait(left)
        return True

    def close(self, timeout_s: float | None = None) -> None:
        """Stop taking blocks, let the writer finish what is queued (each write bounded by
        ``timeout_s`` of the spec; waits at most ``timeout_s``, default twice the queue's
        worth of timeouts), and leave calls that hang to their daemon threads."""
        if self._closed:
            return
        self._closed = True
        bound = timeout_s if timeout_s is not None else 2 * self.spec.timeout_s * (self.spec.write_queue + 1)
        self.flush(bound)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # the writer is stuck: it is a daemon thread and dies with the process
        self._writer.join(timeout=self.spec.timeout_s)
