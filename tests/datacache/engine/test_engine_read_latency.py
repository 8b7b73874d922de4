"""``aicache_read_seconds``: every demand block read is observed, timed by the engine's
injected clock — a fetch takes what the remote took, a hit what the store took."""

from __future__ import annotations

import os
import random
import tracemalloc
from typing import Any

from fsspec.implementations.memory import MemoryFileSystem

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.metrics import DemandReads

BLOCK = 4096
FETCH_S = 0.25  # what one remote read costs on the fake clock


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _TimedRemote(MemoryFileSystem):
    """A memory filesystem whose reads advance the test's clock by FETCH_S."""

    clock: _Clock

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kw: Any) -> bytes:
        self.clock.now += FETCH_S
        return super().cat_file(path, start=start, end=end, **kw)


def _sample(m: Any, suffix: str, le: str | None = None) -> float:
    labels = {} if le is None else {"le": le}
    v = m.registry.get_sample_value(f"aicache_read_seconds{suffix}", labels)
    return float(v or 0.0)


def test_read_latency_observes_each_block_read_with_the_engines_clock(tmp_path) -> None:
    clock = _Clock()
    fs = _TimedRemote(skip_instance_cache=True)
    fs.store = {}  # a private store: MemoryFileSystem's is class-wide
    fs.pseudo_dirs = [""]
    fs.clock = clock
    data = random.Random(3).randbytes(3 * BLOCK)
    fs.pipe_file("/ds/x.bin", data)
    eng = CacheEngine(fs, str(tmp_path / "cache"), 1 << 20, policy="lru", clock=clock,
                      params=EngineParams(block_size=BLOCK, max_prefetch=0))
    try:
        assert eng.read("/ds/x.bin") == data  # three misses: one remote read each
        assert eng.read("/ds/x.bin") == data  # three hits: the clock does not move
        m = eng.metrics
        hits, misses = m.value("hits"), m.value("misses")
        assert (hits, misses) == (3, 3)
        assert _sample(m, "_count") == hits + misses
        assert _sample(m, "_sum") == 3 * FETCH_S
        assert _sample(m, "_bucket", "1e-05") == hits  # the hits took no time
        assert _sample(m, "_bucket", "0.1") == hits
        assert _sample(m, "_bucket", "0.5") == hits + misses  # each fetch took FETCH_S
        assert b"aicache_read_seconds_bucket" in m.text()
    finally:
        eng.close()


def test_observe_keeps_no_memory_per_call() -> None:
    h = DemandReads("x_seconds", "x", (1e-3, 1e-2, 0.1))
    values = [0.0005, 0.005, 0.05, 5.0] * 250
    tracemalloc.start()
    try:
        # warm up under tracing: the running sum is then a traced float, so replacing it
        # nets to zero whatever the float free list held before
        for v in values:
            h.observe(v)
            h.hit(4096, v)
        before = tracemalloc.take_snapshot()
        for v in values:
            h.observe(v)
            h.hit(4096, v)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename")
                if s.traceback[0].filename.endswith(os.path.join("datacache", "metrics.py")))
    assert grown <= 0  # no block allocated in metrics.py stays, however many calls
    assert h.counts == [1000, 1000, 1000, 1000] and sum(h.counts) == 4 * len(values)
    assert (h.hits, h.hit_bytes) == (2 * len(values), 2 * len(values) * 4096)
