"""Several policies × several cache sizes over one parse of a trace (libCacheSim's habit:
``--policy lru,s3fifo --cache-size 1%,5%,10%``).

The trace is read once: one pre-pass (working set, and next-access times when any policy
``needs_future``), then every batch is replayed through every cell's cache in lockstep
before the next batch is read, so memory does not grow with the number of cells beyond the
caches themselves, and a trace too large to keep is still parsed only twice (pre-pass and
replay) whatever the grid. Each cell is its own :class:`~aicache.sim.cache.Cache` with its
own ``random.Random(seed)``, fed the same requests in the same order as
:func:`~aicache.sim.cache_sim.simulate` feeds them, so a cell equals the single run of that
policy and size exactly (``tests/sim/test_sim_sweep.py`` checks it). Prefetching is left to
single runs: a prefetcher's pending set is per replay and is not part of a sweep.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aicache.errors import BadInput
from aicache.policies import EVICTION, make_eviction
from aicache.sim.cache import Cache
from aicache.sim.cache_sim import (RETAIN_BYTES, SIZE_MODES, CacheSimResult, _open,
                                   resolve_cache_size, scan)
from aicache.traces.formats._common import DEFAULT_BATCH, TraceSource
from aicache.units import parse_size


def split_list(text: str | Sequence[str], what: str) -> list[str]:
    """``"lru,s3fifo"`` → ``["lru", "s3fifo"]`` (a list passes through); empty items are
    bad input, duplicates are dropped keeping the first."""
    items = [str(x).strip() for x in (text.split(",") if isinstance(text, str) else text)]
    if not items or any(not x for x in items):
        raise BadInput(f"{what} {text!r} has an empty item; give a comma-separated list like lru,s3fifo")
    return list(dict.fromkeys(items))


@dataclass(slots=True)
class _Cell:
    policy: str
    size: str
    cache: Cache
    seconds: float = 0.0


def sweep(
    source_or_path: TraceSource | str | os.PathLike[str],
    policies: Sequence[str],
    cache_sizes: Sequence[str | int],
    size_mode: str = "objects",
    seed: int = 0,
    fmt: str = "auto",
    skip_bad: bool = False,
    batch_size: int = DEFAULT_BATCH,
) -> list[CacheSimResult]:
    """One :class:`CacheSimResult` per (policy, size), policies outer, sizes inner.

    A cell's ``wall_seconds`` is the pre-pass plus that cell's own replay time; its
    ``scan_seconds`` is the shared pre-pass.
    """
    if size_mode not in SIZE_MODES:
        raise BadInput(f"size mode {size_mode!r} is not one of {', '.join(SIZE_MODES)}")
    classes = [EVICTION.get(p) for p in policies]  # unknown names fail before any reading
    for s in cache_sizes:
        if not str(s).strip().endswith("%"):
            parse_size(s, what="cache size")
    t0 = time.perf_counter()
    src = _open(source_or_path, fmt, skip_bad)
    need_future = any(getattr(c, "needs_future", False) for c in classes)
    ws = scan(src, need_bytes=size_mode == "bytes", need_future=need_future,
              batch_size=batch_size, retain_bytes=RETAIN_BYTES)
    if ws.requests == 0:
        raise BadInput(f"trace {src.path!r} has no requests; check the file and --format")
    caps = [resolve_cache_size(s, ws, size_mode, src.path) for s in cache_sizes]
    t_scan = time.perf_counter() - t0
    cells = [_Cell(p, str(s), Cache(cap, make_eviction(p, cap, rng=random.Random(seed)), size_mode))
             for p in policies for s, cap in zip(cache_sizes, caps)]
    futures = [bool(getattr(c.cache.policy, "needs_future", False)) for c in cells]
    nxt = ws.next_access
    pos = 0
    clock = time.perf_counter
    for b in (iter(ws.batches) if ws.batches is not None else src.batches(batch_size)):
        n = len(b)
        keys, sizes, times = b.obj_id.tolist(), b.obj_size.tolist(), b.timestamp.tolist()
        fut = nxt[pos:pos + n].tolist() if nxt is not None else None
        for cell, wants in zip(cells, futures):
            t = clock()
            cell.cache.request_batch(keys, sizes, times, fut if wants else None)
            cell.seconds += clock() - t
        pos += n
    out = []
    for cell in cells:
        st = cell.cache.stats
        wall = t_scan + cell.seconds
        out.append(CacheSimResult(
            trace=src.path, policy=cell.policy, prefetch="none", size_mode=size_mode,
            cache_size=cell.cache.capacity, requests=st.requests, hits=st.hits,
            miss_ratio=st.miss_ratio, byte_miss_ratio=st.byte_miss_ratio, wall_seconds=wall,
            requests_per_second=st.requests / wall if wall > 0 else 0.0, format=src.format,
            working_set=ws.size(size_mode), evictions=st.evictions, bad_records=src.bad_records,
            zero_size_skipped=src.zero_size_records, scan_seconds=t_scan, seed=seed))
    return out
