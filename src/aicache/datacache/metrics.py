"""Prometheus metrics of one cache engine.

Each engine owns its own ``CollectorRegistry`` (two engines in one process — tests, a
notebook — never collide on metric names), served by :meth:`EngineMetrics.serve`
(``aicache mount --metrics-port``). A hit read updates its count, its bytes and its latency
under one lock (:class:`DemandReads`); other counters are plain ``Counter.inc()`` calls
(a lock and an add); gauges that mirror other objects (bytes stored, the active pattern
per unit, advisor counters) are computed at scrape time by a custom collector, so the
read path never pays for them.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

_NS = "aicache"


class _Snapshot(Collector):
    """Scrape-time gauges from a callable returning the engine's current stats."""

    def __init__(self, stats: Callable[[], Mapping[str, Any]]) -> None:
        self._stats = stats

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # names are not registered up front; collect() reads live objects

    def collect(self) -> Iterable[GaugeMetricFamily]:
        s = self._stats()
        for name, help_ in (("used_bytes", "bytes stored in the cache directory"),
                            ("capacity_bytes", "the cache's byte budget"),
                            ("blocks", "blocks stored"),
                            ("inflight_fetches", "remote fetches in flight"),
                            ("mapped_bytes", "bytes of verified block files kept memory-mapped"),
                            ("mapped_blocks", "block files kept memory-mapped"),
                            ("mapped_stale_dropped",
                             "mappings dropped because their file was evicted or changed"),
                            ("advisor_calls", "advisor calls made"),
                            ("advisor_input_tokens", "advisor prompt tokens"),
                            ("advisor_output_tokens", "advisor completion tokens"),
                            ("advisor_latency_seconds_total", "advisor time, summed"),
                            ("advisor_no_advice", "advisor answers that were no advice"),
                            ("switches", "accepted pattern switches"),
                            ("shared_write_queue",
                             "blocks waiting to be written to the shared tier")):
            g = GaugeMetricFamily(f"{_NS}_{name}", help_)
            g.add_metric([], float(s.get(name, 0) or 0))
            yield g
        g = GaugeMetricFamily(f"{_NS}_active_pattern", "1 for the active pattern of each cache unit",
                              labels=["unit", "pattern"])
        for unit, pattern in sorted((s.get("active_patterns") or {}).items()):
            g.add_metric([str(unit), str(pattern)], 1.0)
        yield g


class LatencyHistogram(Collector):
    """A Prometheus histogram whose :meth:`observe` allocates nothing per call: fixed
    bucket bounds, one count per bucket in a preallocated list (a ``bisect`` finds it) and
    a running sum, under one lock; the cumulative buckets Prometheus wants are built at
    scrape time. (``prometheus_client.Histogram.observe`` walks every bound with a
    generator and takes a lock per value it touches.)

    Invariant: ``sum(counts)`` is the number of observations; ``counts[i]`` those in
    ``(bounds[i-1], bounds[i]]``, the last one those above every bound (``+Inf``)."""

    def __init__(self, name: str, help_: str, bounds: Iterable[float]) -> None:
        self.name, self.help = name, help_
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self.counts[i] += 1
            self.total += seconds

    def describe(self) -> list[HistogramMetricFamily]:
        return []

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            counts, total = list(self.counts), self.total
        buckets, running = [], 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), counts):
            running += n
            buckets.append((bound, float(running)))
        yield HistogramMetricFamily(self.name, self.help, buckets=buckets, sum_value=total)


class DemandReads(LatencyHistogram):
    """Demand block reads: the latency histogram plus the hit counters (``hits``,
    ``hit_bytes``), all under the histogram's one lock, so that a hit read (:meth:`hit`)
    pays one lock acquisition for its count, its bytes and its latency, and allocates
    nothing. Scraped as ``aicache_hits_total``, ``aicache_hit_bytes_total`` and the
    histogram.

    Invariant: ``hits`` counts every demand block read served without a fetch of its own
    (from the store or a fetch in flight); ``hit_bytes`` counts the bytes those reads
    handed to their readers — the part of the block each reader asked for, and the later
    pieces an open file serves from a block it holds after a hit (:meth:`count_bytes`) —
    never a whole block for a smaller read: a 1-byte read counts 1."""

    def __init__(self, name: str, help_: str, bounds: Iterable[float]) -> None:
        super().__init__(name, help_, bounds)
        self.hits = 0
        self.hit_bytes = 0

    def hit(self, nbytes: int, seconds: float) -> None:
        """A hit of ``nbytes`` that took ``seconds``."""
        i = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self.hits += 1
            self.hit_bytes += nbytes
            self.counts[i] += 1
            self.total += seconds

    def count_hit(self, nbytes: int) -> None:
        """A hit whose latency is observed on its own (a read that waited on a fetch)."""
        with self._lock:
            self.hits += 1
            self.hit_bytes += nbytes

    def count_bytes(self, nbytes: int) -> None:
        """Bytes an open file served from a block it holds after a hit (no new access)."""
        with self._lock:
            self.hit_bytes += nbytes

    def collect(self) -> Iterable[Metric]:
        yield from super().collect()
        with self._lock:
            hits, nbytes = self.hits, self.hit_bytes
        yield CounterMetricFamily(f"{_NS}_hits", "demand block reads served from the cache",
                                  value=float(hits))
        yield CounterMetricFamily(f"{_NS}_hit_bytes", "bytes that demand hits "
                                  "served from the cache to readers", value=float(nbytes))


class EngineMetrics:
    """The counters every engine keeps (names are stable; dashboards depend on them)."""

    def __init__(self, stats: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def c(name: str, help_: str) -> Counter:
            return Counter(f"{_NS}_{name}", help_, registry=r)

        self.misses = c("misses", "demand block reads fetched from the remote")
        self.remote_bytes = c("remote_bytes", "bytes fetched from the remote store")
        self.prefetch_issued = c("prefetch_issued", "background block fetches started")
        self.prefetch_used = c("prefetch_used", "prefetched blocks later read by demand")
        self.prefetch_wasted = c("prefetch_wasted", "prefetched blocks evicted before any read")
        self.prefetch_dropped = c("prefetch_dropped", "prefetches skipped: fetch budget full")
        self.evictions = c("evictions", "blocks evicted to stay within the budget")
        self.rejected = c("rejected", "fetched blocks the policy did not admit")
        self.corrupt_blocks = c("corrupt_blocks", "blocks whose checksum failed (dropped, refetched)")
        self.misplaced_blocks = c("misplaced_blocks", "block files whose header names another "
                                  "block or an earlier format (dropped, refetched)")
        self.enospc = c("enospc", "blocks not stored because the local disk was full")
        self.remote_retries = c("remote_retries", "remote requests retried")
        self.remote_errors = c("remote_errors", "remote reads that failed after all retries")
        self.versions_gone = c("versions_gone", "range reads refused because the version an open "
                               "file reads was overwritten or deleted on the remote")
        # the shared tier (aicache.datacache.shared): every shared hit is an origin request
        # saved; a shared hit is still a local miss (``misses``), never a ``hits`` read
        self.shared_hits = c("shared_hits", "local misses served by the shared tier "
                             "(each one an origin request saved)")
        self.shared_hit_bytes = c("shared_hit_bytes", "bytes the shared tier served "
                                  "(origin bytes saved)")
        self.shared_misses = c("shared_misses", "local misses the shared tier did not hold")
        self.shared_rejects = c("shared_rejects", "shared blocks refused: torn, corrupt, or "
                                "another block's or version's (read from the origin instead)")
        self.shared_errors = c("shared_errors", "shared-tier calls that failed or passed "
                               "their timeout (the origin answered instead)")
        self.shared_skipped = c("shared_skipped", "shared-tier calls not made: backing off "
                                "after failures, or every call slot held by a slow call")
        self.shared_writes = c("shared_writes", "blocks written to the shared tier")
        self.shared_write_drops = c("shared_write_drops", "blocks not written to the shared "
                                    "tier: its write queue full, backing off, or the write failed")
        self.policy_errors = c("policy_errors", "policy calls that raised (the read went on)")
        self.fuse_inline = c("fuse_inline_replies",
                             "FUSE requests answered at once by the session thread (low-level mount)")
        self.fuse_deferred = c("fuse_worker_replies",
                               "FUSE requests handed to a worker: they waited on the remote or "
                               "on a whole-block verification (low-level mount)")
        #: hits, hit bytes and the read-latency histogram
        self.reads = DemandReads(
            f"{_NS}_read_seconds", "demand block reads: time until the block's bytes are in hand "
            "(hits and fetches; ranged FUSE hits, counted in fuse_inline_replies, are not timed)",
            (1e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.02, 0.1, 0.5, 2.0))
        r.register(self.reads)
        if stats is not None:
            r.register(_Snapshot(stats))

    def value(self, name: str) -> float:
        """Current value of counter ``name`` (tests, stats output)."""
        v = self.registry.get_sample_value(f"{_NS}_{name}_total")
        if v is None:
            v = self.registry.get_sample_value(f"{_NS}_{name}")
        return float(v or 0.0)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` on ``addr:port`` in a daemon thread; returns the server
        (call ``.shutdown()`` to stop). Port 0 picks a free port (``server.server_port``)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server
