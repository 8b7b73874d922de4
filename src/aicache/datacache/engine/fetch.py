"""Single-flight fetches and the bounded prefetch pool (:class:`Flights`).

A *flight* is one fetch of one block (or page) in progress, in a table keyed by the block's
key: the reader that registers it (or *claims* a queued prefetch's) fetches, every other
reader of the block waits on its future instead of fetching again. Invariants:

* a flight always resolves — its fetch's bytes or its error — and a failed one leaves the
  table, so no later reader waits on a fetch nobody makes;
* a flight leaves the table when its block is stored, refused or failed; a block handed to
  a writer (write-behind) keeps its flight until the writer :meth:`Flights.end`\\ s it, so
  a reader meanwhile takes its bytes from the flight;
* at most ``max_prefetch`` prefetches run at once (twice that queued) and at most
  ``max_prefetch_bytes`` are in flight for them; more are refused (:class:`Offer.DROPPED`).

This part owns the table, the prefetch counters, the pool and its lock; what a fetch is and
where its bytes go are the caller's (``fetch``/``keep`` callables).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Callable
from enum import Enum

from aicache.datacache.keys import BlockKey

log = logging.getLogger("aicache.datacache")


class Flight:
    """One in-flight fetch of a block. Whoever ``claim``\\ s it fetches; others wait."""

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


#: a fetch: the block's bytes (raises on failure)
Fetch = Callable[[], bytes]
#: what becomes of fetched bytes: True when their flight ends later (a writer ends it)
Keep = Callable[[bytes, Flight], bool]


class Offer(Enum):
    """What became of a prefetch offered to :meth:`Flights.prefetch`."""

    ISSUED = "issued"
    #: the block is being fetched already
    IN_FLIGHT = "in_flight"
    #: past the prefetch limits
    DROPPED = "dropped"
    #: the pool is shut down: offer no more
    CLOSED = "closed"


class Flights:
    """The in-flight table and the prefetch pool of one engine. ``sync``: prefetches are
    queued and run by :meth:`run_queued` in the caller's thread, in order (deterministic
    replays) instead of on the pool."""

    def __init__(self, *, max_prefetch: int, max_prefetch_bytes: int, sync: bool = False) -> None:
        self.max_prefetch = max_prefetch
        self.max_prefetch_bytes = max_prefetch_bytes
        self._lock = threading.Lock()
        self._inflight: dict[BlockKey, Flight] = {}
        self._prefetch_bytes = 0
        self._prefetch_count = 0
        self._closed = False
        self._queue: list[tuple[BlockKey, Flight, Fetch, Keep]] | None = [] if sync else None
        self._pool = cf.ThreadPoolExecutor(max_workers=max(1, max_prefetch),
                                           thread_name_prefix="aicache-prefetch")

    # -- the table ----------------------------------------------------------------------------
    def busy(self, key: BlockKey) -> bool:
        """Whether ``key`` is being fetched (or written after its fetch)."""
        return key in self._inflight  # a dict read is atomic: no lock

    def pending(self) -> int:
        """Flights in the table (0: no reader can be waiting on one)."""
        return len(self._inflight)

    def join(self, key: BlockKey) -> tuple[Flight, bool, bool]:
        """The flight of ``key`` (registered, claimed by this reader, if none), whether this
        reader leads it (fetches: it registered it, or took over a queued prefetch not
        started yet) and whether it registered it."""
        with self._lock:
            flight = self._inflight.get(key)
            if flight is None:
                flight = self._inflight[key] = Flight(0, claimed=True)
                return flight, True, True
        return flight, flight.claim(), False

    def register(self, key: BlockKey) -> Flight | None:
        """A flight of ``key`` led by this caller; None when ``key`` has one already."""
        with self._lock:
            if key in self._inflight:
                return None
            flight = self._inflight[key] = Flight(0, claimed=True)
        return flight

    def restart(self, key: BlockKey) -> Flight:
        """A new flight of ``key`` led by this reader (the one it waited on failed)."""
        with self._lock:
            flight = self._inflight[key] = Flight(0, claimed=True)
        return flight

    def end(self, key: BlockKey, flight: Flight) -> None:
        """``flight`` is over (its block stored, refused or failed): later readers go to the
        store (or fetch anew)."""
        with self._lock:
            if self._inflight.get(key) is flight:
                del self._inflight[key]

    def fail(self, key: BlockKey, flight: Flight, exc: BaseException) -> None:
        """Fail a flight its leader will not fetch (its waiters fetch themselves)."""
        if not flight.future.done():
            flight.future.set_exception(exc)
        self.end(key, flight)

    def lead(self, key: BlockKey, flight: Flight, fetch: Fetch, keep: Keep) -> bytes:
        """The leader's fetch of ``key``: ``fetch()``, then ``keep`` the bytes; waiters get
        them once kept (or refused). A failed fetch fails the flight and raises."""
        try:
            data = fetch()
        except BaseException as exc:
            self.fail(key, flight, exc)
            raise
        deferred = False
        try:
            deferred = keep(data, flight)
        finally:
            flight.future.set_result(data)  # waiting readers get the bytes now
            if not deferred:
                self.end(key, flight)
        return data

    # -- prefetches ---------------------------------------------------------------------------
    def prefetch(self, key: BlockKey, nbytes: int, fetch: Fetch, keep: Keep) -> Offer:
        """Queue a prefetch of ``key`` (``nbytes``) within the limits; a demand read of it
        before it starts takes it over (:meth:`join`)."""
        with self._lock:
            if key in self._inflight:
                return Offer.IN_FLIGHT
            if (self._prefetch_count >= 2 * self.max_prefetch
                    or self._prefetch_bytes + nbytes > self.max_prefetch_bytes):
                return Offer.DROPPED
            flight = self._inflight[key] = Flight(nbytes, claimed=False)
            self._prefetch_count += 1
            self._prefetch_bytes += nbytes
        if self._queue is not None:
            self._queue.append((key, flight, fetch, keep))
            return Offer.ISSUED
        try:
            self._pool.submit(self._run, key, flight, fetch, keep)
        except RuntimeError:  # pool shut down
            self._release(key, flight)
            return Offer.CLOSED
        return Offer.ISSUED

    def run_queued(self) -> None:
        """``sync``: fetch and keep the queued prefetches now, in order."""
        q = self._queue
        assert q is not None
        while q:
            self._run(*q.pop(0))

    @property
    def sync(self) -> bool:
        return self._queue is not None

    def _run(self, key: BlockKey, flight: Flight, fetch: Fetch, keep: Keep) -> None:
        try:
            if self._closed or not flight.claim():  # a demand read took it over (or closing)
                return
            try:
                self.lead(key, flight, fetch, keep)
            except Exception as exc:  # noqa: BLE001 - prefetch failures are counted, not raised
                log.debug("prefetch of %s failed: %s", key, exc)
        finally:
            with self._lock:
                self._prefetch_count -= 1
                self._prefetch_bytes -= flight.nbytes

    def _release(self, key: BlockKey, flight: Flight) -> None:
        """Give up a queued prefetch that will not run (pool shut down)."""
        mine = flight.claim()  # False: a demand read took it over and will finish it
        with self._lock:
            if mine and self._inflight.get(key) is flight:
                del self._inflight[key]
            self._prefetch_count -= 1
            self._prefetch_bytes -= flight.nbytes
        if mine:
            flight.future.set_exception(OSError(5, "prefetch cancelled"))

    def prefetching(self) -> int:
        """Prefetches queued or running."""
        return self._prefetch_count

    def wait_idle(self, timeout: float, also: Callable[[], bool] = lambda: True) -> bool:
        """Block until no prefetch is queued or running and ``also()`` holds (tests,
        benchmarks); False past ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._prefetch_count == 0 and also():
                return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        """Stop: queued prefetches are dropped, running ones finish."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
