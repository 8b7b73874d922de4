"""Mapped hot blocks (:mod:`aicache.datacache.mapped`): a hit on a block kept mapped must
return exactly the bytes that were put, never a file other than the verified one, and a
mapping must not outlive its file for long (it would hold evicted blocks' disk space).

References: the bytes put (compared directly, and by blake2b digest); the kernel's own
list of this process's mappings (``/proc/self/maps``) for what is really mapped.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.datacache.keys import BlockKey
from aicache.datacache.mapped import SUPPORTED, MappedBlocks
from aicache.datacache.store import HEADER_SIZE, BlockStore

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="mmap reads need CPython on Linux")

BLOCK = 64 * 1024
WINDOW = 0.05


def payload(seed: int, n: int = BLOCK) -> bytes:
    return hashlib.shake_256(seed.to_bytes(8, "little")).digest(n)


def settle() -> None:
    time.sleep(WINDOW * 3)


def mapped_paths(under: str) -> list[str]:
    """Block files under ``under`` that this process has mapped, per the kernel (SQLite's
    shared-memory index file is mapped too, and is not a block)."""
    with open("/proc/self/maps") as f:
        return [line.split(None, 5)[5].strip() for line in f
                if len(line.split(None, 5)) == 6 and under in line and ".sqlite" not in line]


def new_store(d, mmap_bytes: int = 1 << 30, mode: str = "stat") -> BlockStore:
    return BlockStore(d, 1 << 26, BLOCK, verify=mode, racy_window_s=WINDOW, mmap_bytes=mmap_bytes)


def fill(s: BlockStore, n: int, sizes: list[int] | None = None) -> dict[BlockKey, bytes]:
    keys = {}
    for i in range(n):
        k = BlockKey(f"/d/f{i}", "v1", 0)
        keys[k] = payload(i, sizes[i % len(sizes)] if sizes else BLOCK)
        assert s.put(k, keys[k])
    settle()
    return keys


def read_until_mapped(s: BlockStore, keys: dict[BlockKey, bytes]) -> None:
    """Read each block three times — verified, remembered, mapped — checking its bytes."""
    for k, v in keys.items():
        for _ in range(3):
            assert s.get(k) == v


def test_a_block_read_again_is_mapped_and_then_served_without_opening_its_file(
        tmp_path, monkeypatch) -> None:
    s = new_store(tmp_path)
    try:
        keys = fill(s, 6, sizes=[1, 7, BLOCK, BLOCK - 1, 4097, 1000])
        read_until_mapped(s, keys)
        assert len(s.mapped) == 6 and s.mapped.mapped_total == 6
        assert sorted(mapped_paths(str(tmp_path))) == sorted(s.block_path(k) for k in keys)

        def no_open(*a, **k):  # noqa: ANN002, ANN003
            raise AssertionError("a mapped hit opened a file")

        monkeypatch.setattr(os, "open", no_open)  # the hit path calls os.open
        for k, v in keys.items():
            assert hashlib.blake2b(s.get(k)).digest() == hashlib.blake2b(v).digest()
    finally:
        monkeypatch.undo()
        s.close()
    assert mapped_paths(str(tmp_path)) == []  # close unmaps everything


def test_a_mapped_block_corrupted_in_place_is_detected_not_served(tmp_path) -> None:
    s = new_store(tmp_path)
    try:
        keys = fill(s, 1)
        read_until_mapped(s, keys)
        (k, v), = keys.items()
        assert len(s.mapped) == 1
        time.sleep(0.02)  # let the coarse timestamp clock tick past the put
        with open(s.block_path(k), "r+b") as f:  # the shared mapping sees this write
            f.seek(HEADER_SIZE + 99)
            f.write(b"\x00\xff")
        assert s.get(k) is None
        assert s.corrupt_dropped == 1 and len(s.mapped) == 0
        assert mapped_paths(str(tmp_path)) == []
    finally:
        s.close()


def test_a_mapped_block_evicted_by_another_process_is_not_served_and_is_unmapped(tmp_path) -> None:
    a, b = new_store(tmp_path), new_store(tmp_path)  # two processes' views of one dir
    try:
        keys = fill(a, 3)
        read_until_mapped(a, keys)
        assert len(a.mapped) == 3
        gone, kept = list(keys)[:2], list(keys)[2]
        for k in gone:
            assert b.remove(k)
        for k in gone:
            assert a.get(k) is None  # the file is gone: a miss, not the mapped old copy
        assert a.get(kept) == keys[kept]
        assert mapped_paths(str(tmp_path)) == [a.block_path(kept)]
        assert b.put(gone[0], keys[gone[0]])  # stored again (a new file): served again
        assert a.get(gone[0]) == keys[gone[0]]
    finally:
        a.close()
        b.close()


def test_the_sweeper_releases_mappings_whose_files_another_process_evicted(tmp_path) -> None:
    a, b = new_store(tmp_path), new_store(tmp_path)
    a.mapped.sweep_s = 0.05
    try:
        keys = fill(a, 4)
        read_until_mapped(a, keys)
        assert len(mapped_paths(str(tmp_path))) == 4
        assert b.clear() == 4  # another process empties the cache; `a` reads nothing more
        deadline = time.monotonic() + 5
        while mapped_paths(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mapped_paths(str(tmp_path)) == []  # no deleted file kept mapped
        assert len(a.mapped) == 0 and a.mapped.mapped_bytes == 0
    finally:
        a.close()
        b.close()


def test_a_scan_over_more_than_the_bound_maps_nothing_and_a_hot_set_is_mapped(tmp_path) -> None:
    length = BLOCK + HEADER_SIZE
    s = new_store(tmp_path, mmap_bytes=4 * length)
    try:
        keys = fill(s, 12)
        ks = list(keys)
        for _ in range(3):  # round-robin over 12 blocks, bound 4: each comes back too late
            for k in ks:
                assert s.get(k) == keys[k]
        assert s.mapped.mapped_total == 0
        for _ in range(3):  # a hot set within the bound is mapped
            for k in ks[:3]:
                assert s.get(k) == keys[k]
        assert len(s.mapped) == 3 and s.mapped.mapped_bytes == 3 * length
    finally:
        s.close()


def test_full_mode_and_a_zero_bound_map_nothing(tmp_path) -> None:
    for d, mode, bound in (("full", "full", 1 << 30), ("off", "stat", 0)):
        s = new_store(tmp_path / d, mmap_bytes=bound, mode=mode)
        try:
            keys = fill(s, 3)
            for _ in range(4):
                for k, v in keys.items():
                    assert s.get(k) == v
            assert s.mapped.mapped_total == 0 and mapped_paths(str(tmp_path / d)) == []
        finally:
            s.close()


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["read", "read", "read", "remove", "put"]),
                              st.integers(0, 7)), min_size=1, max_size=60),
       bound_blocks=st.integers(1, 5))
def test_bounds_hold_and_reads_are_right_under_any_sequence(tmp_path_factory, ops,
                                                           bound_blocks) -> None:
    d = tmp_path_factory.mktemp("mm")
    s = BlockStore(d, 1 << 26, BLOCK, verify="stat", racy_window_s=0.0,
                   mmap_bytes=bound_blocks * (BLOCK + HEADER_SIZE))
    s.mapped.max_count = 3
    ref = {i: payload(500 + i, 100 + 997 * i) for i in range(8)}
    stored: set[int] = set()
    try:
        for op, i in ops:
            k = BlockKey(f"/p/{i}", "v", 0)
            if op == "put":
                assert s.put(k, ref[i])
                stored.add(i)
            elif op == "remove":
                s.remove(k)
                stored.discard(i)
            else:
                got = s.get(k)
                assert got == (ref[i] if i in stored else None)
            assert s.mapped.mapped_bytes <= s.mapped.max_bytes and len(s.mapped) <= 3
            assert len(mapped_paths(str(d))) == len(s.mapped)
    finally:
        s.close()
    assert mapped_paths(str(d)) == []


def test_threads_read_right_bytes_while_blocks_are_evicted_and_stored_again(tmp_path) -> None:
    a = new_store(tmp_path, mmap_bytes=6 * (BLOCK + HEADER_SIZE))
    b = new_store(tmp_path)  # the evicting "other process"
    a.mapped.sweep_s = 0.01
    keys = fill(a, 10)
    ks = list(keys)
    stop = threading.Event()
    errors: list[BaseException] = []
    served = [0]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                k = ks[rng.randrange(4) if rng.random() < 0.8 else rng.randrange(10)]
                got = a.get(k)
                assert got is None or got == keys[k]
                served[0] += got is not None
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def churn() -> None:
        rng = random.Random(99)
        try:
            while not stop.is_set():
                k = ks[rng.randrange(10)]
                (b if rng.random() < 0.5 else a).remove(k)
                time.sleep(0.002)
                a.put(k, keys[k])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    ts = [threading.Thread(target=reader, args=(i,)) for i in range(8)] + [threading.Thread(target=churn)]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 60  # run until enough reads raced the churn, not for a time
    while (served[0] <= 300 or a.mapped.mapped_total == 0) and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for t in ts:
        t.join()
    try:
        assert not errors, errors[:3]
        assert served[0] > 100 and a.mapped.mapped_total > 0  # the mapped path really ran
        assert a.mapped.mapped_bytes <= a.mapped.max_bytes
    finally:
        a.close()
        b.close()
    assert mapped_paths(str(tmp_path)) == []


def test_a_mapping_dropped_while_pinned_is_unmapped_when_its_copy_ends(tmp_path) -> None:
    p = str(tmp_path / "blk")
    data = payload(3, 3 * 4096 + 5)
    with open(p, "wb") as f:
        f.write(b"h" * HEADER_SIZE + data)
    os.chmod(p, 0o400)  # read-only, as the store writes block files: only such are mapped
    mb = MappedBlocks(1 << 20)
    fd = os.open(p, os.O_RDONLY)
    try:
        st_ = os.fstat(fd)
        sig = (st_.st_dev, st_.st_ino, st_.st_size, st_.st_mtime_ns, st_.st_ctime_ns)
        assert mb.admit(p, fd, sig, HEADER_SIZE, len(data)) is None  # first read: a ghost
        assert mb.admit(p, fd, sig, HEADER_SIZE, len(data)) == data  # second: mapped
    finally:
        os.close(fd)
    assert mb.copy(p) == data
    m = mb._maps[p]
    with mb._lock:
        m.pins += 1  # a copy in progress (another thread)
    mb.drop(p)
    assert p not in mb._maps and m.addr != 0 and mapped_paths(p) == [p]  # still mapped
    mb._unpin(m)
    assert m.addr == 0 and mapped_paths(p) == []
    assert mb.copy(p) is None
    mb.close()


def _child_reads(d: str, items: list[tuple[BlockKey, bytes]], q) -> None:  # type: ignore[no-untyped-def]
    s = _FORKED[0]
    ok = all(s.get(k) == v for k, v in items for _ in range(3))
    s.remove(items[0][0])
    q.put((ok, s.get(items[0][0]) is None))


_FORKED: list[BlockStore] = []


def test_a_forked_worker_reads_the_mapped_blocks_it_inherited(tmp_path) -> None:
    """DataLoader workers fork from a process whose store already has mappings."""
    s = new_store(tmp_path)
    try:
        keys = fill(s, 3)
        read_until_mapped(s, keys)
        assert len(s.mapped) == 3
        _FORKED[:] = [s]
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_child_reads, args=(str(tmp_path), list(keys.items()), q))
        p.start()
        ok, removed = q.get(timeout=30)
        p.join(30)
        assert p.exitcode == 0 and ok and removed
        first = next(iter(keys))
        assert s.get(first) is None  # the child's eviction is seen here too
    finally:
        _FORKED.clear()
        s.close()


def test_a_set_nobody_closed_unmaps_when_collected_and_its_sweeper_ends(tmp_path) -> None:
    import gc

    p = str(tmp_path / "blk")
    data = payload(9, 5000)
    with open(p, "wb") as f:
        f.write(b"h" * HEADER_SIZE + data)
    os.chmod(p, 0o400)  # read-only, as the store writes block files: only such are mapped
    mb = MappedBlocks(1 << 20, sweep_s=0.01)
    fd = os.open(p, os.O_RDONLY)
    try:
        st_ = os.fstat(fd)
        sig = (st_.st_dev, st_.st_ino, st_.st_size, st_.st_mtime_ns, st_.st_ctime_ns)
        mb.admit(p, fd, sig, HEADER_SIZE, len(data))
        assert mb.admit(p, fd, sig, HEADER_SIZE, len(data)) == data
    finally:
        os.close(fd)
    sweeper = mb._sweeper
    assert sweeper is not None and sweeper.is_alive() and mapped_paths(p) == [p]
    del mb
    gc.collect()
    assert mapped_paths(p) == []
    sweeper.join(2)
    assert not sweeper.is_alive()


def test_the_engine_reports_its_mapped_blocks_on_the_metrics_endpoint(tmp_path) -> None:
    import fsspec

    from aicache.datacache.engine import CacheEngine, EngineParams

    src = tmp_path / "src.bin"
    data = payload(11, 3 * BLOCK)
    src.write_bytes(data)
    e = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 24, policy="lru",
                    params=EngineParams(block_size=BLOCK))
    try:
        e.store.reads.racy_ns = int(WINDOW * 1e9)
        assert e.read(str(src)) == data  # fetched
        settle()
        for _ in range(3):  # verified, remembered, mapped
            assert e.read(str(src)) == data
        samples = {line.split(" ")[0]: float(line.split(" ")[1])
                   for line in e.metrics.text().decode().splitlines()
                   if line and not line.startswith("#")}
        assert samples["aicache_mapped_blocks"] == 3.0
        assert samples["aicache_mapped_bytes"] == 3.0 * (BLOCK + HEADER_SIZE)
        assert samples["aicache_mapped_stale_dropped"] == 0.0
    finally:
        e.close()


def test_only_read_only_block_files_of_this_user_are_mapped(tmp_path) -> None:
    """A block file another process could truncate under a mapping (writable, or another
    user's) is never mapped: it is read with ``pread``, where a truncation is a miss."""
    data = payload(5, 2 * 4096)
    mb = MappedBlocks(1 << 20)
    try:
        for i, mode in enumerate((0o600, 0o640, 0o400)):
            p = str(tmp_path / f"blk{i}")
            with open(p, "wb") as f:
                f.write(b"h" * HEADER_SIZE + data)
            os.chmod(p, mode)
            fd = os.open(p, os.O_RDONLY)
            try:
                st_ = os.fstat(fd)
                sig = (st_.st_dev, st_.st_ino, st_.st_size, st_.st_mtime_ns, st_.st_ctime_ns)
                got = [mb.admit(p, fd, sig, HEADER_SIZE, len(data)) for _ in range(2)]
            finally:
                os.close(fd)
            assert got == ([None, data] if mode == 0o400 else [None, None]), oct(mode)
        assert len(mb) == 1
    finally:
        mb.close()
