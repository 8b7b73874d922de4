"""No prefetch storm: a recorded skewed, multi-threaded job replayed through the real engine
fetches no more from the remote than a plain LRU cache of the same budget.

The job: four reader threads draw small files (one block each, as a dataset of many small
samples is) by a Zipf law whose popularity is unrelated to path order, and read each drawn
file whole through a :class:`CacheEngine`, which records every demand access (the hook
``aicache record`` uses). The recorded trace — in the order the threads interleaved — is
then replayed through fresh engines, one reader in the recorded order, in the engine's
deterministic mode (``sync_prefetch``, the recorded timestamps as the clock, the advisor
answering in virtual time), over a
target that counts every ranged GET and its bytes at the source.

Path order says nothing about popularity here, so the blocks next to a missed one are
rarely read soon: a prefetcher that fetches them (Chiron's skewed executor names a miss's
neighbours) moves more bytes than the job reads, unless its speculation is bounded by what
it has earned (:class:`~aicache.policies.prefetch.credit.PrefetchCredit`). The unbounded
variant (``prefetch_credit=False``) is replayed too, to show the trace provokes the storm.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from aicache.adaptive.controller import ChironParams, ChironSystem
from aicache.adaptive.observer import ChironObserver
from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.store import ALLOC_UNIT, HEADER_SIZE, INDEX_ROW, block_budget
from aicache.sim.datacache import simulate_datacache, workload_from_trace

BLOCK = 64 * 1024
N_FILES = 300
N_READS = 1500
THREADS = 4


class CountingLocal(LocalFileSystem):
    """A local target that counts ranged reads (the engine's GETs) and their bytes."""

    protocol = "counting-local"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gets = 0
        self.bytes = 0
        self._mutex = threading.Lock()

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        data: bytes = super().cat_file(path, start=start, end=end, **kwargs)
        with self._mutex:
            self.gets += 1
            self.bytes += len(data)
        return data


def _dataset(root: Path) -> list[tuple[str, bytes]]:
    rng = random.Random(7)
    files = []
    for i in range(N_FILES):
        data = rng.randbytes(rng.randrange(BLOCK // 4, BLOCK - HEADER_SIZE))
        p = root / "data" / f"{i:05d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        files.append((str(p), data))
    return files


def _record(files: list[tuple[str, bytes]], cache: Path, cache_bytes: int, out: Path
            ) -> list[tuple[float, str, int]]:
    """Run the skewed job with four threads, recording as ``aicache record`` does (its
    block-csv recorder on the engine's access hook); the trace read back."""
    from aicache.cli.mount import CsvRecorder
    from aicache.traces.io import open_trace

    rec = CsvRecorder(str(out))
    eng = CacheEngine(fsspec.filesystem("file"), str(cache), cache_bytes, policy="lru",
                      params=EngineParams(block_size=BLOCK), record=rec)
    rng = random.Random(11)
    order = list(range(N_FILES))
    rng.shuffle(order)  # popularity unrelated to path order
    weights = [1.0 / (k + 1) ** 0.9 for k in range(N_FILES)]
    draws = [order[k] for k in rng.choices(range(N_FILES), weights=weights, k=N_READS)]
    errors: list[str] = []

    def reader(t: int) -> None:
        for k in draws[t::THREADS]:
            path, data = files[k]
            if eng.read(path) != data:
                errors.append(path)

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    eng.close()
    rec.close()
    assert not errors, f"wrong bytes while recording: {errors[:3]}"
    src = open_trace(str(out))
    trace: list[tuple[float, str, int]] = []
    for b in src.batches():  # without a mount root, a block's unit is its file's path
        assert b.unit is not None
        trace.extend((float(t), src.units[int(u)], int(i))
                     for t, u, i in zip(b.timestamp.tolist(), b.unit.tolist(), b.obj_id.tolist()))
    return trace


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _replay(trace: list[tuple[float, str, int]], data: dict[str, bytes], cache: Path,
            cache_bytes: int, policy: str | ChironSystem) -> tuple[int, int]:
    """Remote GETs and bytes of one replay (each recorded access reads its whole file)."""
    target = CountingLocal(skip_instance_cache=True)  # fresh counters per replay
    clock = _Clock()
    eng = CacheEngine(target, str(cache), cache_bytes, policy=policy, clock=clock,
                      params=EngineParams(block_size=BLOCK, sync_prefetch=True, stats_interval_s=0))
    try:
        for now, path, _bid in trace:
            clock.now = now
            assert eng.read(path) == data[path]
    finally:
        eng.close()
    return target.gets, target.bytes


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[list[tuple[float, str, int]], dict[str, bytes], int, Path]:
    root = tmp_path_factory.mktemp("storm")
    files = _dataset(root)
    total = sum(len(d) + HEADER_SIZE for _, d in files)
    cache_bytes = total // 10
    trace = _record(files, root / "record-cache", cache_bytes, root / "job.csv")
    assert len(trace) == N_READS
    return trace, dict(files), cache_bytes, root / "job.csv"


def test_chiron_fetches_no_more_than_lru_on_a_recorded_skewed_job(
        recorded: tuple[list[tuple[float, str, int]], dict[str, bytes], int, Path], tmp_path: Path) -> None:
    trace, data, cache_bytes, _csv = recorded
    lru_gets, lru_bytes = _replay(trace, data, tmp_path / "lru", cache_bytes, "lru")
    # the default system, with its advisor answering in virtual time (deterministic)
    chiron = ChironSystem(cache_bytes, runner="virtual")
    ch_gets, ch_bytes = _replay(trace, data, tmp_path / "chiron", cache_bytes, chiron)
    assert ch_gets <= lru_gets and ch_bytes <= lru_bytes, (ch_gets, lru_gets, ch_bytes, lru_bytes)


def test_the_trace_provokes_the_storm_without_the_credit(
        recorded: tuple[list[tuple[float, str, int]], dict[str, bytes], int, Path], tmp_path: Path) -> None:
    trace, data, cache_bytes, _csv = recorded
    trace = trace[:500]  # the storm shows from the first misses
    lru_gets, _ = _replay(trace, data, tmp_path / "lru", cache_bytes, "lru")
    unbounded = ChironSystem(cache_bytes, params=ChironParams(prefetch_credit=False), runner="virtual")
    storm_gets, _ = _replay(trace, data, tmp_path / "unbounded", cache_bytes, unbounded)
    assert storm_gets > lru_gets, (storm_gets, lru_gets)


def test_a_sequential_pass_keeps_its_readahead(tmp_path: Path) -> None:
    """Prefetches that are read give their credit back: a sequential pass over multi-block
    files is served as without the bound (same GETs, same hits)."""
    rng = random.Random(5)
    files = []
    for i in range(6):
        p = tmp_path / "seq" / f"{i:02d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(BLOCK * 20 + 100 * i))
        files.append((str(p), p.read_bytes()))
    trace = [(0.01 * k, path, 0) for k, (path, _) in enumerate(files)]
    budget = sum(len(d) for _, d in files) // 2  # full after three files: readahead, not fill
    out = {}
    for credit in (True, False):
        system = ChironSystem(budget, params=ChironParams(prefetch_credit=credit), runner="virtual")
        target = CountingLocal(skip_instance_cache=True)
        clock = _Clock()
        eng = CacheEngine(target, str(tmp_path / f"c{credit}"), budget, policy=system, clock=clock,
                          params=EngineParams(block_size=BLOCK, sync_prefetch=True, stats_interval_s=0))
        try:
            for now, path, _ in trace:  # each file front to back, in 64 KiB reads
                data = dict(files)[path]
                for off in range(0, len(data), BLOCK):
                    clock.now = now + off * 1e-9
                    assert eng.read(path, off, BLOCK) == data[off:off + BLOCK]
            out[credit] = (target.gets, eng.stats()["hits"], eng.stats()["prefetch_used"])
        finally:
            eng.close()
    assert out[True] == out[False]
    assert out[True][2] > 0  # the pass was read ahead


class _Switches(ChironObserver):
    def __init__(self) -> None:
        self.log: list[tuple[str, str | None, str]] = []

    def on_switch(self, unit: str, old: str | None, new: str, now: float) -> None:
        self.log.append((unit, old, new))


def test_engine_and_simulator_diagnose_the_recorded_job_alike(
        recorded: tuple[list[tuple[float, str, int]], dict[str, bytes], int, Path], tmp_path: Path) -> None:
    """The recorded trace, replayed by the simulator and through the real engine: the same
    units, the same switches (unit, from, to) in the same order, the same final patterns."""
    trace, data, cache_bytes, csv = recorded
    seen = []
    for driver in ("engine", "sim"):
        system = ChironSystem(cache_bytes, runner="virtual")
        obs = _Switches()
        system.add_observer(obs)
        if driver == "engine":
            _replay(trace, data, tmp_path / "engine", cache_bytes, system)
        else:
            simulate_datacache(workload_from_trace(str(csv), workers=THREADS), system,
                               block_budget(cache_bytes), block_size=BLOCK, block_overhead=HEADER_SIZE,
                               block_align=ALLOC_UNIT, block_extra=INDEX_ROW)
        seen.append((obs.log, system.stats()["active_patterns"]))
    assert seen[0] == seen[1]
    assert seen[0][1] == {Path(trace[0][1]).parts[1]: "skewed"}  # a Zipf draw over one folder


def test_readahead_stays_inside_its_dataset_folder(tmp_path: Path) -> None:
    """A checkpoint load (large files read whole, in path order) under a root whose next
    folder holds small files: the readahead of the large files' unit ends with its last
    file, and Chiron fetches exactly what plain LRU does (the block map gives every file
    under the root one sorted id range, so the small files' blocks follow the last large
    one)."""
    rng = random.Random(9)
    files: dict[str, bytes] = {}
    for i in range(3):
        p = tmp_path / "root" / "large" / f"l{i}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(BLOCK * 8))
        files[str(p)] = p.read_bytes()
    for i in range(40):
        p = tmp_path / "root" / "small" / f"s{i:02d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(BLOCK // 3))
    budget = 4 * sum(len(d) for d in files.values())
    gets = {}
    for name in ("lru", "chiron"):
        system: str | ChironSystem = name if name == "lru" else ChironSystem(budget, runner="virtual")
        target = CountingLocal(skip_instance_cache=True)
        clock = _Clock()
        eng = CacheEngine(target, str(tmp_path / f"cache-{name}"), budget, policy=system, clock=clock,
                          root=str(tmp_path / "root"),
                          params=EngineParams(block_size=BLOCK, sync_prefetch=True, stats_interval_s=0))
        try:
            k = 0
            for _ in range(2):
                for path, data in files.items():  # in path order, in block-sized reads
                    for off in range(0, len(data), BLOCK):
                        k += 1
                        clock.now = 0.01 * k
                        assert eng.read(path, off, BLOCK) == data[off:off + BLOCK]
        finally:
            eng.close()
        gets[name] = target.gets
    assert gets["chiron"] <= gets["lru"] == 24, gets


@pytest.mark.parametrize("passes", [1, 2])
def test_parallel_shard_readers_fetch_no_more_than_lru(tmp_path: Path, passes: int) -> None:
    """Three readers, each reading its own multi-block shard front to back, their reads
    interleaved (as threads of a data loader interleave), a cache of half the shards: the
    default system fetches no more blocks and bytes than plain LRU. Without the bounds on
    concurrent readahead it did not: the three streams' fills and readaheads together asked
    for more than the cache holds and evicted each other's unread prefetches, and a stream
    at its shard's end read ahead into the next shard, which another reader had read."""
    rng = random.Random(13)
    files = []
    for i in range(3):
        p = tmp_path / "shards" / f"{i:02d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(BLOCK * 8))
        files.append((str(p), p.read_bytes()))
    data = dict(files)
    budget = block_budget(sum(len(d) + HEADER_SIZE for d in data.values()) // 2)
    reads = [(path, off) for _ in range(passes) for off in range(0, BLOCK * 8, BLOCK)
             for path, _ in files]  # round robin over the shards, one block per turn
    out = {}
    for policy in ("lru", "chiron"):
        system: str | ChironSystem = policy if policy == "lru" else ChironSystem(budget, runner="virtual")
        target = CountingLocal(skip_instance_cache=True)
        clock = _Clock()
        eng = CacheEngine(target, str(tmp_path / policy), budget, policy=system, clock=clock,
                          params=EngineParams(block_size=BLOCK, sync_prefetch=True, stats_interval_s=0))
        try:
            for k, (path, off) in enumerate(reads):
                clock.now = 0.01 * k
                assert eng.read(path, off, BLOCK) == data[path][off:off + BLOCK]
        finally:
            eng.close()
        out[policy] = (target.gets, target.bytes)
    assert out["chiron"][0] <= out["lru"][0] and out["chiron"][1] <= out["lru"][1], out


def _shuffled_epochs(tmp_path: Path, epochs: int, share: float, params: ChironParams | None
                     ) -> dict[str, tuple[int, int, int]]:
    """Shuffled epochs over N_FILES one-block files through the real engine with a cache of
    ``share`` of them, replayed deterministically: per system (``lru``, ``chiron`` with
    ``params``), the remote GETs and bytes and the prefetches that were read."""
    root = tmp_path / "epochs"
    files = _dataset(root)
    data = dict(files)
    budget = block_budget(int(sum(len(d) + HEADER_SIZE for d in data.values()) * share))
    rng = random.Random(3)
    order: list[str] = []
    for _ in range(epochs):
        names = sorted(data)
        rng.shuffle(names)
        order += names
    out = {}
    for policy in ("lru", "chiron"):
        system: str | ChironSystem = policy if policy == "lru" else ChironSystem(
            budget, params=params, runner="virtual")
        target = CountingLocal(skip_instance_cache=True)
        clock = _Clock()
        eng = CacheEngine(target, str(tmp_path / policy), budget, policy=system, clock=clock,
                          params=EngineParams(block_size=BLOCK, sync_prefetch=True, stats_interval_s=0))
        try:
            for k, path in enumerate(order):
                clock.now = 0.01 * k
                assert eng.read(path) == data[path]
            used = int(eng.metrics.value("prefetch_used"))
        finally:
            eng.close()
        out[policy] = (target.gets, target.bytes, used)
    return out


@pytest.mark.parametrize("share", [0.33, 0.67, 0.9])
def test_an_epoch_scan_is_fetched_ahead_within_lru_fetches(tmp_path: Path, share: float) -> None:
    """Shuffled epochs read every file once per epoch: once the reads pass the scan test
    (a run of distinct files that draws with replacement would rarely make) and the unit is
    diagnosed random, files the epoch has not read yet are fetched ahead into free space,
    and read from the cache. The job's GETs and bytes stay within LRU's; where free space
    is left after the test passes (not at a third of the files: the first third of an
    epoch fills it), more prefetches are read than with scan fill off."""
    on = _shuffled_epochs(tmp_path / "on", 3, share, None)
    off = _shuffled_epochs(tmp_path / "off", 3, share, ChironParams(scan_in_flight=0))
    for got in (on, off):
        assert got["chiron"][0] <= got["lru"][0] and got["chiron"][1] <= got["lru"][1], got
    if share > 0.5:
        assert on["chiron"][2] > off["chiron"][2], (on, off)
def test_a_skewed_job_gets_no_scan_fill(
        recorded: tuple[list[tuple[float, str, int]], dict[str, bytes], int, Path], tmp_path: Path) -> None:
    """A hot set re-reads its files long before the scan test passes: scan fill on or off,
    the recorded skewed job makes the same fetches."""
    trace, data, cache_bytes, _csv = recorded
    trace = trace[:600]
    on = _replay(trace, data, tmp_path / "on", cache_bytes, ChironSystem(cache_bytes, runner="virtual"))
    off = _replay(trace, data, tmp_path / "off", cache_bytes, ChironSystem(
        cache_bytes, params=ChironParams(scan_in_flight=0), runner="virtual"))
    assert on == off


def test_a_hot_set_behind_the_kernel_page_cache_is_no_scan(tmp_path: Path) -> None:
    """Behind a mount, the kernel's page cache serves re-reads of the files it holds: only
    each file's first read reaches the engine, so a Zipf job looks to its reads like a scan
    without replacement, and scan fill fetched files the job never read (2 GETs past LRU's
    on the peers benchmark's job C). The mount tells every open (``CacheEngine.opened``),
    and the re-opens of hot files end each run long before the scan test passes. Replayed
    with the kernel's part played here: every draw opens, first draws read."""
    root = tmp_path / "hot"
    files = _dataset(root)
    data = dict(files)
    budget = block_budget(sum(len(d) + HEADER_SIZE for d in data.values()) // 2)
    rng = random.Random(17)
    names = sorted(data)
    rng.shuffle(names)  # popularity unrelated to path order
    weights = [1.0 / (k + 1) for k in range(len(names))]
    draws = [names[k] for k in rng.choices(range(len(names)), weights=weights, k=N_READS)]
    gets = {}
    for name, tell_opens in (("lru", True), ("chiron", True), ("chiron-no-opens", False)):
        system: str | ChironSystem = "lru" if name == "lru" else ChironSystem(budget, runner="virtual")
        target = CountingLocal(skip_instance_cache=True)
        clock = _Clock()
        eng = CacheEngine(target, str(tmp_path / name), budget, policy=system, clock=clock,
                          params=EngineParams(block_size=BLOCK, sync_prefetch=True, stats_interval_s=0))
        seen: set[str] = set()
        try:
            for k, path in enumerate(draws):
                clock.now = 0.01 * k
                if tell_opens:
                    eng.opened(eng.stat(path))
                if path not in seen:  # the kernel serves the rest
                    seen.add(path)
                    assert eng.read(path) == data[path]
        finally:
            eng.close()
        gets[name] = target.gets
    assert gets["lru"] == len(seen)
    assert gets["chiron"] <= gets["lru"], gets
    assert gets["chiron-no-opens"] > gets["lru"], gets  # what the opens prevent
