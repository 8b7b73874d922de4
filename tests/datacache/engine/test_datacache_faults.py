"""Faults the real cache must survive: kill -9 mid-prefetch, a block corrupted on disk,
remote errors and timeouts, a short remote read, a full local disk, a broken advisor."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from aicache.datacache.engine import CacheEngine, EngineParams, RemoteReadError
from aicache.datacache.keys import BlockKey
from aicache.testing import SlowFileSystem
from aicache.datacache.store import HEADER_SIZE, BlockStore

BLOCK = 64 * 1024


@pytest.fixture()
def dataset(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(11)
    files = {}
    for i in range(4):
        data = rng.randbytes(16 * BLOCK + 123)
        p = src / f"shard-{i}"
        p.write_bytes(data)
        files[str(p)] = data
    return files


def engine(tmp_path, remote, policy="alluxio", size=64 * 1024 * 1024, **kw) -> CacheEngine:
    return CacheEngine(remote, str(tmp_path / "cache"), size, policy=policy,
                       params=EngineParams(block_size=BLOCK, **kw))


KILLED_WORKER = textwrap.dedent("""
    import sys, threading
    from aicache.datacache.engine import CacheEngine, EngineParams
    from aicache.datacache.store import layout
    from aicache.testing import SlowFileSystem
    path, cache, block = sys.argv[1], sys.argv[2], int(sys.argv[3])
    e = CacheEngine(SlowFileSystem(latency=0.05), cache, 1 << 30, policy="juicefs",
                    params=EngineParams(block_size=block, max_prefetch=8))
    for i in range(3):
        e.read(path, i * block, block)
    e.wait_prefetches()  # the first three blocks are written before the kill
    write_all, armed, told = layout.write_all, threading.Event(), threading.Lock()

    def half_then_stop(fd, data):
        # once armed, the next block's data is half written and its writer stops there:
        # the parent kills the process with a temp file half full (no race with the writer)
        if not armed.is_set() or len(data) < block // 2:
            return write_all(fd, data)
        write_all(fd, data[:len(data) // 2])
        if told.acquire(blocking=False):
            print("MIDWRITE", flush=True)
        threading.Event().wait()

    layout.write_all = half_then_stop
    armed.set()
    print("READY", flush=True)
    for n in range(3, 3 + 2 * 16):  # reads that leave the rest of the file to the prefetcher
        e.read(path, (n % 16) * block, block)
    e.wait_prefetches()  # a block still queued for its writer reaches the stop (and waits here)
    if not told.locked():
        print("NOWRITE", flush=True)  # every block was cached before READY: nothing to kill
""")


def test_kill_9_during_prefetch_then_restart(tmp_path, dataset) -> None:
    path = sorted(dataset)[0]
    cache = str(tmp_path / "cache")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WORKER, path, cache, str(BLOCK)],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
    assert proc.stdout.readline().strip() == b"MIDWRITE"  # a block's writer stopped mid-file
    assert os.listdir(os.path.join(cache, "tmp"))  # its temp file is there, half full
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    store = BlockStore(cache, 1 << 30, BLOCK)  # reopening recovers
    res = store.verify(clean=False)
    assert (res.bad, res.missing, res.orphans) == (0, 0, 0)
    assert os.listdir(os.path.join(cache, "tmp")) == []  # the dead writer's temp files are gone
    store.close()
    e = CacheEngine(SlowFileSystem(latency=0.05), cache, 1 << 30, policy="alluxio",
                    params=EngineParams(block_size=BLOCK))
    try:
        for i in range(3):  # the blocks read before the kill are still cached
            assert e.read(path, i * BLOCK, BLOCK) == dataset[path][i * BLOCK:(i + 1) * BLOCK]
        assert e.metrics.value("hits") == 3 and e.metrics.value("remote_bytes") == 0
    finally:
        e.close()


def test_corrupt_block_is_detected_dropped_and_refetched(tmp_path, dataset) -> None:
    path = sorted(dataset)[1]
    remote = SlowFileSystem()
    e = engine(tmp_path, remote)
    try:
        ref = dataset[path][BLOCK:2 * BLOCK]
        assert e.read(path, BLOCK, BLOCK) == ref
        e.wait_prefetches()  # stored by the writer
        meta = e.stat(path)
        f = e.store.block_path(BlockKey(path, meta.version, 1))
        with open(f, "r+b") as fh:  # flip one byte of the block's data
            fh.seek(HEADER_SIZE + 1000)
            b = fh.read(1)
            fh.seek(HEADER_SIZE + 1000)
            fh.write(bytes([b[0] ^ 0xFF]))
        fetched = e.metrics.value("remote_bytes")
        assert e.read(path, BLOCK, BLOCK) == ref  # never the corrupt bytes
        assert e.metrics.value("corrupt_blocks") == 1
        assert e.metrics.value("remote_bytes") == fetched + BLOCK  # refetched
        e.wait_prefetches()
        assert e.read(path, BLOCK, BLOCK) == ref
        assert e.metrics.value("remote_bytes") == fetched + BLOCK  # and cached again
        assert e.store.verify().bad == 0
    finally:
        e.close()


def test_remote_errors_bounded_retries_then_clear_error(tmp_path, dataset) -> None:
    path = sorted(dataset)[0]
    remote = SlowFileSystem()
    e = engine(tmp_path, remote, retries=3, backoff_s=0.01)
    try:
        e.stat(path)
        remote.error_rate = 1.0
        t0 = time.monotonic()
        with pytest.raises(RemoteReadError, match=r"failed after 4 attempts: ConnectionError"):
            e.read(path, 0, 10)
        assert time.monotonic() - t0 >= 0.01 + 0.02 + 0.04  # the backoff really slept (a
        # lower bound: sleeps never end early); the retry count below is the exact check
        assert e.metrics.value("remote_retries") == 3
        assert e.metrics.value("remote_errors") == 1
        assert e.store.stats().blocks == 0  # nothing cached
        remote.error_rate = 0.0
        assert e.read(path, 0, 10) == dataset[path][:10]  # the store recovers with the remote
    finally:
        e.close()


def test_intermittent_errors_are_retried_transparently(tmp_path, dataset) -> None:
    path = sorted(dataset)[2]
    remote = SlowFileSystem(seed=5)
    e = engine(tmp_path, remote, retries=6, backoff_s=0.001)
    try:
        e.stat(path)
        remote.error_rate = 0.4
        assert e.read(path, 0, 16 * BLOCK + 123) == dataset[path]
        assert e.metrics.value("remote_retries") > 0 and e.metrics.value("remote_errors") == 0
    finally:
        e.close()


def test_remote_timeouts_client_side_and_engine_side(tmp_path, dataset) -> None:
    path = sorted(dataset)[0]
    remote = SlowFileSystem(timeout_s=0.02)
    e = engine(tmp_path, remote, retries=2, backoff_s=0.001)
    try:
        e.stat(path)
        remote.timeout_rate = 1.0  # the client raises TimeoutError after a stall
        with pytest.raises(RemoteReadError, match="TimeoutError"):
            e.read(path, 0, 10)
        assert e.metrics.value("remote_retries") == 2
    finally:
        e.close()
    hanging = SlowFileSystem()
    e = CacheEngine(hanging, str(tmp_path / "cache2"), 1 << 30, policy="alluxio",
                    params=EngineParams(block_size=BLOCK, retries=1, backoff_s=0.001,
                                        request_timeout_s=0.1))
    try:
        e.stat(path)
        hanging.latency = 5.0  # a remote that never answers in time: the engine gives up
        t0 = time.monotonic()
        with pytest.raises(RemoteReadError, match="no answer within 0.1s"):
            e.read(path, 0, 10)
        # a safety bound: waiting for any answer would take the remote's 5 s, twice
        assert time.monotonic() - t0 < hanging.latency
        assert e.store.stats().blocks == 0
    finally:
        hanging.latency = 0.0
        e.close()


class ShortReads(SlowFileSystem):
    """A remote that returns one byte less than asked (a truncated response)."""

    def cat_file(self, path, start=None, end=None, **kw):
        return super().cat_file(path, start, end, **kw)[:-1]


def test_short_remote_read_is_an_error_and_never_cached(tmp_path, dataset) -> None:
    path = sorted(dataset)[0]
    e = engine(tmp_path, ShortReads(), retries=1, backoff_s=0.001)
    try:
        with pytest.raises(RemoteReadError, match="short read"):
            e.read(path, 0, BLOCK)
        assert e.store.stats().blocks == 0
        assert os.listdir(tmp_path / "cache" / "tmp") == []
    finally:
        e.close()


def test_full_local_disk_serves_reads_uncached(tmp_path, dataset) -> None:
    """A real 1 MiB tmpfs as the cache disk, a 64 MiB budget (capped by the free-disk guard
    at open), then filled by another program: writes hit ENOSPC."""
    small = tmp_path / "small"
    small.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                       capture_output=True)
    real_tmpfs = r.returncode == 0
    patch = None
    if not real_tmpfs:  # no CAP_SYS_ADMIN: emulate ENOSPC at the write syscall
        import errno

        real_write = os.write

        def write(fd, data):
            if os.fstat(fd).st_size + len(data) > 256 * 1024 or len(data) > 256 * 1024:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        patch = pytest.MonkeyPatch()
        patch.setattr(os, "write", write)
    try:
        path = sorted(dataset)[3]
        e = CacheEngine(SlowFileSystem(), str(small / "cache"), 64 * 1024 * 1024, policy="alluxio",
                        params=EngineParams(block_size=BLOCK))
        if real_tmpfs:  # another program fills the disk after the open's free-disk guard
            st = os.statvfs(small)
            (small / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 3 * BLOCK))
            assert e.store.capacity > 3 * BLOCK + 72, e.store.capacity  # more than fits now
        try:
            assert e.read(path) == dataset[path]
            e.wait_prefetches()  # the writer has tried to store every block
            assert e.read(path) == dataset[path]
            e.wait_prefetches()
            assert e.metrics.value("enospc") > 0
            assert e.metrics.value("hits") > 0  # what did fit is still used
            assert e.store.verify().bad == 0
        finally:
            e.close()
    finally:
        if patch is not None:
            patch.undo()
        if real_tmpfs:
            subprocess.run(["umount", str(small)], check=True)


class HangingAdvisor:
    """Blocks on every call until released (an LLM endpoint that never answers)."""

    def __new__(cls, *a, **k):  # built lazily so the import stays inside the test
        from aicache.adaptive.advisor.base import Advisor

        class _Hanging(Advisor):
            name = "hanging"

            def __init__(self) -> None:
                super().__init__()
                import threading

                self.entered = threading.Event()
                self.release = threading.Event()
                self.returned = threading.Event()

            def advise(self, request):
                self.entered.set()
                self.release.wait(60)
                self.returned.set()
                return None

        return _Hanging()


class GarbageAdvisor:
    def __new__(cls, *a, **k):
        from aicache.adaptive.advisor.base import Advice, Advisor

        class _Garbage(Advisor):
            name = "garbage"

            def __init__(self) -> None:
                super().__init__()
                self.calls = 0

            def advise(self, request):
                self.calls += 1
                if self.calls % 2:
                    return Advice(pattern="banana", confidence=7.0, reason="}{not json")
                raise RuntimeError("advisor crashed")

        return _Garbage()


@pytest.mark.parametrize("kind", ["hanging", "garbage"])
def test_broken_advisor_never_slows_reads(tmp_path, dataset, kind) -> None:
    from aicache.datacache.policy.registry import make_system

    advisor = HangingAdvisor() if kind == "hanging" else GarbageAdvisor()
    system = make_system("chiron", 1 << 30, BLOCK, advisor=advisor, runner="thread",
                         first_review_s=0.01, early_retry_s=0.01, routine_interval_s=0.02,
                         reflection_interval_s=0.02, min_window=10, round_s=0.05)
    e = CacheEngine(SlowFileSystem(), str(tmp_path / "cache"), 1 << 30, policy=system,
                    params=EngineParams(block_size=BLOCK))
    try:
        path = sorted(dataset)[0]
        assert e.read(path) == dataset[path]  # warm: every block cached
        e.wait_prefetches()
        # read on until the advisor has been consulted (twice for the garbage one) and at
        # least 200 reads were made; the deadline only catches a system that never asks
        deadline = time.monotonic() + 60
        i = 0
        while i < 200 or not (advisor.entered.is_set() if kind == "hanging" else advisor.calls >= 2):
            assert time.monotonic() < deadline, "the advisor was never consulted"
            off = (i * 7 % 16) * BLOCK
            assert e.read(path, off, BLOCK) == dataset[path][off:off + BLOCK]
            i += 1
        assert system.advisor_calls >= 1  # the advisor really was consulted
        if kind == "hanging":
            # every read above returned while advise() was still blocked (it returns only
            # once released): no read waited on it — a fact, not a latency under load
            assert advisor.entered.is_set() and not advisor.returned.is_set()
        assert system.switches == 0  # no advice ⇒ the policy did not change
    finally:
        if kind == "hanging":
            advisor.release.set()
        e.close()


def test_a_policy_that_raises_never_fails_a_read(tmp_path, dataset) -> None:
    """A buggy system (every call raises): reads still return the right bytes, the budget
    still holds (the store evicts oldest-first), and the failures are counted."""
    from aicache.policies.system import DataCacheSystem

    class Broken(DataCacheSystem):
        name = "broken"

        def on_access(self, *a):
            raise RuntimeError("bug")

        admit = on_insert = victim = on_remove = on_access

    path = sorted(dataset)[2]
    cap = 4 * (BLOCK + HEADER_SIZE)
    e = CacheEngine(SlowFileSystem(), str(tmp_path / "cache"), cap, policy=Broken(),
                    params=EngineParams(block_size=BLOCK))
    try:
        assert e.read(path) == dataset[path]
        assert e.read(path, 3 * BLOCK, 2 * BLOCK) == dataset[path][3 * BLOCK:5 * BLOCK]
        assert e.metrics.value("policy_errors") > 0
        e.wait_prefetches()  # every fetched block written (write-behind)
        assert e.store.stats().used_bytes <= cap and e.store.stats().blocks == 4
    finally:
        e.close()
