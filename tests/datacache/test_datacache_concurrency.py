"""Many readers, one cache directory: 8 threads of this process and 4 other processes read
random ranges through one cache dir with a budget far below the dataset. While they run, a
monitor holding the store's lock (so it sees a committed state) checks that the committed
blocks never exceed the budget and that the only extra bytes are temp files of fetches in
flight (at most one block each). Every byte read is compared with the source; at the end
``verify`` finds every checksum good."""

from __future__ import annotations

import fcntl
import signal
import time
import os
import random
import subprocess
import sys
import textwrap
import threading
from typing import Any

from aicache.datacache.fs import AICacheFileSystem
from aicache.testing import SlowFileSystem
from aicache.datacache.store import HEADER_SIZE, BlockStore

BLOCK = 32 * 1024
BUDGET = 10 * (BLOCK + HEADER_SIZE)
THREADS, PROCS, PREFETCH = 8, 4, 4
# demand fetches (one per reading thread) + prefetch pool slots, over all processes
MAX_INFLIGHT = THREADS + PREFETCH + PROCS * (1 + PREFETCH)

WORKER = textwrap.dedent("""
    import random, sys
    from aicache.datacache.fs import AICacheFileSystem
    from aicache.testing import SlowFileSystem
    src, cache, seed, budget, block = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    names = sorted(__import__("os").listdir(src))
    ref = {n: open(f"{src}/{n}", "rb").read() for n in names}
    fs = AICacheFileSystem(fs=SlowFileSystem(latency=0.002, seed=seed), cache_dir=cache,
                           cache_size=budget, block_size=block, policy="juicefs", max_prefetch=4,
                           skip_instance_cache=True)
    rng = random.Random(seed)
    for _ in range(150):
        n = rng.choice(names); off = rng.randrange(0, len(ref[n]) + 1); ln = rng.randrange(0, 3 * block)
        if fs.cat_file(f"{src}/{n}", off, off + ln) != ref[n][off:off + ln]:
            print("MISMATCH", n, off, ln); sys.exit(3)
    fs.close()
""")


def _committed_and_tmp(cache_dir: str) -> tuple[int, list[int]]:
    """(bytes of committed block files, sizes of temp files) while holding the store lock."""
    fd = os.open(os.path.join(cache_dir, "lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        committed = 0
        for dirpath, _d, files in os.walk(os.path.join(cache_dir, "blocks")):
            committed += sum(os.stat(os.path.join(dirpath, f)).st_size for f in files)
        tmp = []  # written outside the lock: one may vanish (renamed, dropped) meanwhile
        for f in os.listdir(os.path.join(cache_dir, "tmp")):
            try:
                tmp.append(os.stat(os.path.join(cache_dir, "tmp", f)).st_size)
            except FileNotFoundError:
                pass
        return committed, tmp
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def test_threads_and_processes_share_one_cache_dir(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(3)
    ref = {}
    for i in range(12):  # ≈ 48 blocks in all, ~5x the budget
        data = rng.randbytes(rng.randrange(BLOCK, 7 * BLOCK))
        (src / f"part-{i:03d}").write_bytes(data)
        ref[f"part-{i:03d}"] = data
    cache = str(tmp_path / "cache")
    fs = AICacheFileSystem(fs=SlowFileSystem(latency=0.002), cache_dir=cache, cache_size=BUDGET,
                           block_size=BLOCK, policy="juicefs", max_prefetch=PREFETCH,
                           skip_instance_cache=True)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(src), cache, str(100 + k),
                               str(BUDGET), str(BLOCK)]) for k in range(PROCS)]
    errors: list[str] = []
    samples: list[tuple[int, list[int]]] = []
    done = threading.Event()

    def reader(seed: int) -> None:
        r = random.Random(seed)
        names = sorted(ref)
        for _ in range(120):
            n = r.choice(names)
            off = r.randrange(0, len(ref[n]) + 1)
            ln = r.randrange(0, 3 * BLOCK)
            if fs.cat_file(str(src / n), off, off + ln) != ref[n][off:off + ln]:
                errors.append(f"{n}[{off}:{off + ln}]")

    def monitor() -> None:
        try:
            while not done.is_set():
                samples.append(_committed_and_tmp(cache))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(f"monitor: {exc!r}")

    mon = threading.Thread(target=monitor)
    mon.start()
    threads = [threading.Thread(target=reader, args=(s,)) for s in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rcs = [p.wait(timeout=120) for p in procs]
    done.set()
    mon.join()
    fs.engine.wait_prefetches()
    fs.close()

    assert errors == []
    assert rcs == [0] * PROCS
    assert len(samples) > 20  # the monitor really watched the run
    for committed, tmp in samples:
        assert committed <= BUDGET
        assert len(tmp) <= MAX_INFLIGHT
        assert all(t <= BLOCK + HEADER_SIZE for t in tmp)
    assert max(len(t) for _c, t in samples) >= 1  # fetches were in flight while sampled
    store = BlockStore.open_existing(cache)
    try:
        res = store.verify(clean=False)
        assert res.bad == 0 and res.missing == 0 and res.orphans == 0
        assert 0 < res.checked and store.stats().used_bytes <= BUDGET
    finally:
        store.close()


DAEMON_WORKER = textwrap.dedent("""
    import os, sys, time
    from aicache.datacache.fs import AICacheFileSystem
    src, cache, k, n, block, daemon = sys.argv[1:7]
    k, n, block = int(k), int(n), int(block)
    fs = AICacheFileSystem(target_protocol="file", cache_dir=cache, cache_size=1 << 30, block_size=block,
                           policy="juicefs", daemon=daemon == "1" and "connect", skip_instance_cache=True)
    marks = os.path.join(os.path.dirname(src), "marks")
    reads = 0
    for i in range(k, 60, n):  # DataLoader-style: worker k reads samples k, k+n, k+2n, ...
        while i and not os.path.exists(f"{marks}/{i - 1}"):  # the global order: one pass
            time.sleep(0.001)
        p = f"{src}/img-{i:03d}"
        if fs.cat_file(p) != open(p, "rb").read():
            sys.exit(3)
        fs.engine.wait_prefetches()  # the readahead this read triggered has landed: what
        open(f"{marks}/{i}", "w").close()  # the next worker finds is decided, not raced
        reads += 1
    fs.engine.wait_prefetches()
    print(reads, int(fs.engine.metrics.value("hits")), int(fs.engine.metrics.value("misses")))
    fs.close()
""")


def _pass_with_workers(tmp_path, use_daemon: bool) -> tuple[int, int, int, Any, str]:
    from aicache.datacache.daemon import PolicyDaemon
    from aicache.datacache.engine import make_engine_system
    from aicache.datacache.policy.driver import SystemDriver

    base = tmp_path / ("d" if use_daemon else "nod")
    src = base / "src"
    src.mkdir(parents=True)
    (base / "marks").mkdir()
    rng = random.Random(9)
    for i in range(60):
        (src / f"img-{i:03d}").write_bytes(rng.randbytes(rng.randrange(1000, BLOCK)))
    cache = str(base / "cache")
    os.makedirs(cache)
    daemon = None
    if use_daemon:
        daemon = PolicyDaemon(cache, SystemDriver(make_engine_system("juicefs", 1 << 30, BLOCK), BLOCK))
        daemon.start_thread()
    try:
        procs = [subprocess.Popen([sys.executable, "-c", DAEMON_WORKER, str(src), cache, str(k), "3",
                                   str(BLOCK), "1" if use_daemon else "0"], stdout=subprocess.PIPE,
                                  text=True) for k in range(3)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0]
        reads, hits, misses = (sum(int(o.split()[j]) for o in outs) for j in range(3))
        return reads, hits, misses, daemon, cache
    finally:
        if daemon is not None:
            daemon.server.shutdown()


def test_worker_processes_share_one_policy_through_the_daemon(tmp_path) -> None:
    """Three processes read every third sample of one sorted pass, in the pass's order.
    Alone, each process sees a stride-3 stream; through the daemon the one policy sees the
    sequential pass: it gets every access, holds exactly the stored blocks, and its
    readahead serves each worker with blocks the previous worker's read triggered."""
    reads, hits, misses, daemon, cache = _pass_with_workers(tmp_path, use_daemon=True)
    try:
        assert reads == 60 and hits + misses == 60
        assert daemon.accesses == 60  # one policy saw every worker's reads
        store = BlockStore.open_existing(cache)
        try:  # ... and holds exactly what is stored
            assert set(daemon.policy.keys.values()) == set(store.keys())
            assert len(daemon.policy.resident) == store.stats().blocks == 60
        finally:
            store.close()
    finally:
        daemon.stop()
    alone_reads, alone_hits, _m, _d, _c = _pass_with_workers(tmp_path, use_daemon=False)
    assert alone_reads == 60
    assert hits >= 30 and hits > alone_hits  # readahead across workers needs the one policy


def test_first_client_starts_the_daemon_and_others_join_it(tmp_path) -> None:
    """``daemon=True``: the first engine finds no daemon and starts one (its own session);
    a second engine joins it; when the daemon goes away, engines keep reading on their own."""
    src = tmp_path / "src"
    src.mkdir()
    data = random.Random(2).randbytes(3 * BLOCK)
    (src / "x.bin").write_bytes(data)
    cache = str(tmp_path / "cache")
    kw = dict(target_protocol="file", cache_dir=cache, cache_size=1 << 24, block_size=BLOCK,
              policy="alluxio", daemon=True, skip_instance_cache=True)
    a = AICacheFileSystem(**kw)
    b = AICacheFileSystem(**kw)
    pid = a.engine.policy._call("hello", [])["pid"]
    try:
        assert pid != os.getpid() and b.engine.policy._call("hello", [])["pid"] == pid
        assert a.cat_file(str(src / "x.bin")) == data
        a.engine.wait_prefetches()  # a's blocks are written (write-behind) before b looks
        assert b.cat_file(str(src / "x.bin")) == data
        st = a.engine.policy.stats()
        assert st["accesses"] == 6 and st["clients"] == 2 and st["resident_blocks"] == 3
        assert b.engine.metrics.value("hits") == 3  # b read what a's reads stored
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert not _alive(pid)
    assert a.cat_file(str(src / "x.bin"), 5, 2 * BLOCK) == data[5:2 * BLOCK]  # degraded, still right
    a.close()
    b.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our child's child, reaped by init) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


class _CountingRemote(SlowFileSystem):
    """Counts byte-range fetches per (path, start)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.fetches: dict[tuple[str, int | None], int] = {}
        self._count_lock = threading.Lock()

    def cat_file(self, path, start=None, end=None, **kw):
        with self._count_lock:
            self.fetches[(path, start)] = self.fetches.get((path, start), 0) + 1
        if start == BLOCK:
            time.sleep(0.5)  # block 1 is slow: its prefetch is still in flight when wanted
        return super().cat_file(path, start, end, **kw)


def _next_block_system() -> Any:
    """alluxio (LRU, no prefetch) that also asks for block+1 on every access."""
    from aicache.policies.system import DataCacheSystem
    from aicache.datacache.policy.registry import make_system

    inner = make_system("alluxio", 1 << 30, BLOCK)

    class NextBlock(DataCacheSystem):
        name = "next-block"

        def on_access(self, unit, block, size, hit, now):
            inner.on_access(unit, block, size, hit, now)
            return [block + 1]

        def admit(self, *a):
            return inner.admit(*a)

        def on_insert(self, *a):
            return inner.on_insert(*a)

        def victim(self, now):
            return inner.victim(now)

        def on_remove(self, block):
            inner.on_remove(block)

    return NextBlock()


def test_single_flight_one_fetch_per_block(tmp_path) -> None:
    """8 threads missing the same block cause one remote fetch; a demand read of a block
    being prefetched waits for that prefetch instead of fetching it again."""
    from aicache.datacache.engine import CacheEngine, EngineParams

    data = random.Random(5).randbytes(4 * BLOCK)
    path = str(tmp_path / "f.bin")
    with open(path, "wb") as f:
        f.write(data)
    remote = _CountingRemote(latency=0.2)
    e = CacheEngine(remote, str(tmp_path / "cache"), 1 << 30, policy=_next_block_system(),
                    params=EngineParams(block_size=BLOCK))
    try:
        e.stat(path)
        barrier = threading.Barrier(8)
        got: list[bytes] = []

        def reader() -> None:
            barrier.wait()
            got.append(e.read(path, 2 * BLOCK + 10, 100))

        threads = [threading.Thread(target=reader) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == [data[2 * BLOCK + 10:2 * BLOCK + 110]] * 8
        assert remote.fetches[(path, 2 * BLOCK)] == 1
        # block 0 on demand (0.2 s) starts a prefetch of block 1 (0.7 s): asked for at once,
        # block 1 waits for that prefetch rather than fetching it a second time
        assert e.read(path, 0, BLOCK) == data[:BLOCK]
        deadline = time.monotonic() + 60
        while (path, BLOCK) not in remote.fetches:  # until the prefetch is on its way
            assert time.monotonic() < deadline, "no prefetch of block 1"
            time.sleep(0.005)
        assert e.read(path, BLOCK, BLOCK) == data[BLOCK:2 * BLOCK]
        e.wait_prefetches()
        # one fetch of block 1, used by the demand read: it waited for the prefetch (or
        # found it stored) rather than fetching a second time — counts, not a duration
        assert remote.fetches[(path, 0)] == 1 and remote.fetches[(path, BLOCK)] == 1
        assert e.metrics.value("prefetch_used") == 1
    finally:
        e.close()
