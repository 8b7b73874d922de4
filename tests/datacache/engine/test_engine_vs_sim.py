"""One policy core, two drivers, the same decisions: the real engine ≡ the simulator.

The data-cache twin of ``test_kvstore_vs_sim.py``. A block trace over a small dataset on
a local directory is replayed twice with fresh instances of the same system:

* through :class:`CacheEngine` in its deterministic mode (``sync_prefetch``: a read
  fetches and stores the prefetches it asked for before it returns) with an injected
  clock that reads ``i * STEP`` at read ``i``, real files and a real block store;
* through :func:`simulate_datacache` with the cost model under which that is exactly the
  engine's timeline: one loader worker, ``STEP`` of compute per read, zero-latency hits
  and remote fetches (so every fetch has arrived before the next read starts), the
  engine's prefetch cap, and the store's per-block header counted in the budget.

Both must report the same hits, misses, evictions, rejections, prefetches issued and used,
and end holding the same blocks, for every registered system and a few pairs and bare
eviction names. Any difference is a second driver hiding in one of them.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

from aicache.datacache.policy.registry import DATACACHE_SYSTEMS, make_system
from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.store import ALLOC_UNIT, HEADER_SIZE, INDEX_ROW, block_budget
from aicache.sim.datacache import BlockWorkload, CostModel, PhaseSegment, simulate_datacache

BLOCK = 4096
STEP = 0.25  #: virtual seconds between reads
MAX_PREFETCH = 32  #: the engine queues at most 2 x this: the simulator's prefetch_inflight
#: (folder, file, size): partial last blocks, so block sizes differ
FILES = [(d, f"{i}.bin", BLOCK * (1 + (i * 5 + len(d)) % 4) - (i * 277) % 900)
         for d in ("a", "b", "c", "d") for i in range(5)]
NAMES = [*DATACACHE_SYSTEMS.names(), "s3fifo+none", "arc", "lru", "lecar+readahead", "lru+stride",
         "2q+neighborhood"]
BUDGET_BLOCKS = 12


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _dataset(root: Path) -> list[tuple[str, int]]:
    out = []
    for d, f, size in FILES:
        p = root / d / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(random.Random(f"{d}/{f}").randbytes(size))
        out.append((f"{d}/{f}", size))
    return sorted(out)


def _trace(files: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """(file index, block index): sequential passes, a strided pass, skewed random reads
    and a re-read of the first folder."""
    blocks = [(fi, b) for fi, (_p, s) in enumerate(files) for b in range(math.ceil(s / BLOCK))]
    rng = random.Random(3)
    hot = blocks[: len(blocks) // 4]
    skewed = [rng.choice(hot) if rng.random() < 0.75 else rng.choice(blocks) for _ in range(150)]
    first = [b for b in blocks if files[b[0]][0].startswith("a/")]
    return blocks + blocks[::3] + skewed + first + blocks


def _workload(files: list[tuple[str, int]], reads: list[tuple[int, int]]) -> BlockWorkload:
    """The trace with the engine's block ids: files sorted by path, consecutive ranges."""
    base, sizes, owner = [], [], []
    for fi, (_p, s) in enumerate(files):
        base.append(len(sizes))
        for b in range(math.ceil(s / BLOCK)):
            sizes.append(min(BLOCK, s - b * BLOCK))
            owner.append(fi)
    ids = np.array([base[fi] + b for fi, b in reads], dtype=np.int64)
    n = len(reads)
    return BlockWorkload(
        name="replay", obj_id=ids, obj_size=np.array([sizes[i] for i in ids], dtype=np.int64),
        unit=np.array([fi for fi, _b in reads], dtype=np.int64), units=[p for p, _s in files],
        phase=np.full(n, -1, dtype=np.int8),
        segments=[PhaseSegment("replay", "unknown", 0, n, STEP)],
        block_size_of=sizes, block_unit_of=owner, workers=1, dataset_bytes=sum(sizes))


def _system(name: str, cap: int, wl: BlockWorkload) -> Any:
    extra = {"trace": wl.all_ids()} if name == "clairvoyant" else {}
    return make_system(name, cap, BLOCK, seed=0, **extra)


@pytest.mark.parametrize("name", NAMES)
def test_engine_and_simulator_make_the_same_decisions(tmp_path: Path, name: str) -> None:
    root = tmp_path / "data"
    files = _dataset(root)
    reads = _trace(files)
    wl = _workload(files, reads)
    cap = BUDGET_BLOCKS * (BLOCK + HEADER_SIZE)

    sim_system = _system(name, cap, wl)
    cost = CostModel(hit_ms=0.0, miss_ms=0.0, remote_bw=math.inf,
                     prefetch_inflight=2 * MAX_PREFETCH)
    sim = simulate_datacache(wl, sim_system, block_budget(cap), cost=cost, block_size=BLOCK,
                             block_overhead=HEADER_SIZE, block_align=ALLOC_UNIT,
                             block_extra=INDEX_ROW)
    assert sim.late_prefetch_reads == 0  # every fetch arrived before the next read

    clock = _Clock()
    eng_system = _system(name, cap, wl)
    e = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), cap, policy=eng_system,
                    params=EngineParams(block_size=BLOCK, sync_prefetch=True,
                                        max_prefetch=MAX_PREFETCH, stats_interval_s=0,
                                        metadata_ttl_s=1e9, list_root=True),
                    root=str(root), clock=clock)
    try:
        for i, (fi, b) in enumerate(reads):
            clock.now = i * STEP
            path = str(root / files[fi][0])
            data = e.read_block(e.stat(path), b)
            with open(path, "rb") as fh:
                fh.seek(b * BLOCK)
                assert data == fh.read(BLOCK)
        st = e.stats()
        got = {"hits": st["hits"], "misses": st["misses"], "evictions": st["evictions"],
               "rejected": st["rejected"], "prefetched": st["prefetch_issued"],
               "prefetch_used": st["prefetch_used"], "dropped": st["prefetch_dropped"]}
        want = {"hits": sim.hits, "misses": sim.requests - sim.hits, "evictions": sim.evictions,
                "rejected": sim.rejected, "prefetched": sim.prefetched_blocks,
                "prefetch_used": round((sim.prefetch_accuracy or 0.0) * sim.prefetched_blocks),
                "dropped": sim.prefetch_dropped}
        assert got == want, f"{name}: engine {got} != simulator {want}"
        assert set(e.policy.resident) == set(sim_system.held()) == set(eng_system.held())
        assert e.store.used == sum(e.policy.resident.values()) <= cap
        if name != "nocache":
            assert sim.hits > 0 and sim.evictions > 0, f"{name}: the trace exercises nothing"
    finally:
        e.close()
