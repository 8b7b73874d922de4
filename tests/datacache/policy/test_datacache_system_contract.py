"""One contract, every data-cache system, driven through the real engine.

Every registered system (:data:`aicache.datacache.policy.registry.DATACACHE_SYSTEMS`), every bare eviction
name (``lru``: that policy with no prefetch) and a few ``EVICTION+PREFETCH`` pairs read a
small dataset on a local directory through :class:`CacheEngine` with a cache far smaller
than the data. After every read (prefetches drained, so nothing is in flight) the test
checks what any driver of any system must guarantee:

* the driver's resident set equals the set of blocks the system holds;
* the store holds exactly the driver's resident blocks, within its byte budget;
* a bare eviction name ``E`` decides exactly as ``E+none`` (same hits, misses, evictions
  and final contents): a bare name is that policy with no prefetch, not a second adapter
  that skips events (ARC's ghost hits come from ``on_miss``);
* the simulator accepts every name the engine accepts.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import fsspec
import pytest

from aicache.datacache.policy.registry import DATACACHE_SYSTEMS, make_system
from aicache.datacache.policy.baselines import ClairvoyantSystem
from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.policies import EVICTION, make_eviction

BLOCK = 4096
#: (folder, file, size): sizes with partial last blocks, so blocks differ in size
FILES = [(d, f"{i}.bin", BLOCK * (1 + (i * 7 + len(d)) % 4) - (i * 331) % 1000)
         for d in ("a", "b", "c") for i in range(4)]
BARE = [n for n in EVICTION.names() if not EVICTION.get(n).needs_future]
NAMES = [*DATACACHE_SYSTEMS.names(), "s3fifo+none", "arc+none", "lru+stride", "lecar+readahead", *BARE]
#: cache budgets in blocks: small (S3-FIFO declines full blocks) and roomier
BUDGETS = (6, 16)


def _dataset(root: Path) -> list[tuple[str, int]]:
    out = []
    for d, f, size in FILES:
        p = root / d / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(random.Random(f"{d}/{f}").randbytes(size))
        out.append((str(p), size))
    return sorted(out)


def _reads(files: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """(path, block index): a sequential pass, a skewed random phase, then the first folder
    again (blocks evicted long ago: ghost hits for ARC, S3-FIFO, LeCaR)."""
    blocks = [(p, i) for p, s in files for i in range(math.ceil(s / BLOCK))]
    rng = random.Random(7)
    hot = blocks[: len(blocks) // 3]
    skewed = [rng.choice(hot) if rng.random() < 0.7 else rng.choice(blocks) for _ in range(60)]
    first = [b for b in blocks if "/a/" in b[0]]
    return blocks + skewed + first + first


def _block_ids(files: list[tuple[str, int]], reads: list[tuple[str, int]]) -> list[int]:
    """The ids the engine gives (files sorted by path, consecutive ranges from 0)."""
    base, nxt = {}, 0
    for p, s in files:
        base[p] = nxt
        nxt += max(1, math.ceil(s / BLOCK))
    return [base[p] + i for p, i in reads]


def _held(system: Any) -> set[int]:
    return set(system.held())


def _engine(tmp: Path, name: str, budget: int, files: list[tuple[str, int]],
            reads: list[tuple[str, int]]) -> CacheEngine:
    cap = budget * BLOCK
    policy: Any = name
    if name == "clairvoyant":
        policy = ClairvoyantSystem(_block_ids(files, reads), cap)
    return CacheEngine(fsspec.filesystem("file"), str(tmp / f"cache-{name}"), cap, policy=policy,
                       params=EngineParams(block_size=BLOCK, max_prefetch=2, stats_interval_s=0),
                       root=str(tmp / "data"))


def _run(tmp: Path, name: str, budget: int) -> tuple[CacheEngine, dict[str, Any], set[int]]:
    files = _dataset(tmp / "data") if not (tmp / "data").exists() else sorted(
        (str(tmp / "data" / d / f), s) for d, f, s in FILES)
    reads = _reads(files)
    e = _engine(tmp, name, budget, files, reads)
    drv = e.policy
    for step, (path, idx) in enumerate(reads):
        meta = e.stat(path)
        data = e.read_block(meta, idx)
        with open(path, "rb") as fh:
            fh.seek(idx * BLOCK)
            assert data == fh.read(BLOCK), f"{name}: wrong bytes at read {step}"
        e.wait_prefetches()
        held = _held(drv.system)
        resident = set(drv.resident)
        assert resident == held, (
            f"{name} (budget {budget}): after read {step} the driver holds "
            f"{sorted(resident - held)} the system does not, and the system "
            f"{sorted(held - resident)} the driver does not")
        stored = set(e.store.keys())
        assert stored == {drv.keys[b] for b in resident}, (
            f"{name} (budget {budget}): after read {step} the store and the driver disagree")
        assert e.store.used <= e.store.capacity
    return e, e.stats(), set(drv.resident)


def _caches_a_full_block(name: str, budget: int) -> bool:
    """False for a policy that refuses a full block outright at this budget, as
    libCacheSim's does (S3-FIFO's small queue, LIRS's HIR queue and W-TinyLFU's window are
    a tenth or a hundredth of it): such a case checks the refusals, not the hits."""
    ev = name.partition("+")[0]
    if ev not in EVICTION:
        return True
    policy = make_eviction(ev, budget * BLOCK)
    return not policy.sees_misses or policy.on_miss(-1, BLOCK, 0.0) is not False


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", NAMES)
def test_driver_store_and_system_agree_after_every_read(tmp_path: Path, name: str,
                                                         budget: int) -> None:
    e, st, _ = _run(tmp_path, name, budget)
    try:
        assert st["hits"] + st["misses"] == len(_reads(sorted(
            (str(tmp_path / "data" / d / f), s) for d, f, s in FILES)))
        if name != "nocache" and _caches_a_full_block(name, budget):
            assert st["hits"] > 0, f"{name} never hit: the test exercises nothing"
    finally:
        e.close()


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", BARE)
def test_a_bare_eviction_name_is_that_policy_with_no_prefetch(tmp_path: Path, name: str,
                                                              budget: int) -> None:
    e1, st1, held1 = _run(tmp_path, name, budget)
    e2, st2, held2 = _run(tmp_path, f"{name}+none", budget)
    try:
        for k in ("hits", "misses", "evictions", "rejected"):
            assert st1[k] == st2[k], f"{name} vs {name}+none: {k} {st1[k]} != {st2[k]}"
        assert held1 == held2
    finally:
        e1.close()
        e2.close()


@pytest.mark.parametrize("name", [n for n in NAMES if n != "clairvoyant"])
def test_the_simulator_accepts_every_engine_name(name: str) -> None:
    make_system(name, 16 * BLOCK, BLOCK).close()
