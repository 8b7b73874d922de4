"""The store's checksum verify modes (``full`` / ``stat`` / ``none``) against a reference:
the bytes that were put (and their blake2b digest, computed here, not by the store).

``full`` and ``stat`` must never serve a block whose file was changed through the file
system — in particular after it was verified and remembered (``stat``'s fast path), which
only happens once the block's ctime is older than the racy window; the tests use a short
window (50 ms, far above the kernel's jiffy-coarse timestamps) and wait it out, so the
fast path is really taken. ``none`` is documented to serve corrupted payload bytes: the
test pins that trade-off down (and that a structurally broken file is still refused).
"""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.keys import BlockKey
from aicache.datacache.store import HEADER_SIZE, VERIFY_MODES, BlockStore
from aicache.errors import BadInput

BLOCK = 64 * 1024
WINDOW = 0.05


def digest(b: bytes) -> str:
    return hashlib.blake2b(b, digest_size=16).hexdigest()


def payload(seed: int, n: int = BLOCK) -> bytes:
    return hashlib.shake_256(seed.to_bytes(8, "little")).digest(n)


def store(tmp_path, mode: str) -> BlockStore:
    return BlockStore(tmp_path / mode, 1 << 24, BLOCK, verify=mode, racy_window_s=WINDOW)


def settle() -> None:
    """Let freshly written blocks leave the racy window so ``stat`` remembers them."""
    time.sleep(WINDOW * 3)


def flip(path: str, at: int) -> None:
    """Corrupt one byte through the file system (what a stray writer would do)."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def fuse_ops(d, data: bytes, mode: str):  # type: ignore[no-untyped-def]
    """The mount's operations object (no mount: called directly) over ``d/src/f.bin`` =
    ``data``, an lru engine with 64 KiB blocks in verify ``mode``, initialised, with
    blocks remembered as verified at once (no writes follow in these tests)."""
    import fsspec

    from aicache.datacache.fuse import CacheFuse

    (d / "src").mkdir()
    (d / "src" / "f.bin").write_bytes(data)
    target = fsspec.filesystem("file")
    ops = CacheFuse(lambda: CacheEngine(target, str(d / "cache"), 1 << 24, policy="lru",
                                        params=EngineParams(block_size=BLOCK, verify=mode)),
                    str(d / "src"), splice_bytes=1 << 20)
    ops.init("/")
    assert ops.engine is not None
    ops.engine.store.reads.racy_ns = 0
    return ops, ops.engine


def spliced(ops, off: int, size: int, fh: int) -> bytes:  # type: ignore[no-untyped-def]
    """A read through ``read_buf``, the mount's splice path, decoded as libfuse would send
    it: each buffer of the returned ``fuse_bufvec`` read from its descriptor at its offset
    (what the splice moves) or from its memory; then freed as libfuse frees it."""
    import ctypes

    from aicache.datacache.fuse.binding import FUSE_BUF_IS_FD, bufvec_type, libc

    assert ops.read_buf is not None, "splice path unavailable: libfuse 3 < 3.17 is installed"
    slot = ctypes.c_void_p()
    assert ops.read_buf("/f.bin", ctypes.pointer(slot), size, off, fh) == 0
    count = ctypes.c_size_t.from_address(slot.value).value
    bv = bufvec_type(count).from_address(slot.value)
    out = []
    for b in bv.buf[:count]:
        if b.flags & FUSE_BUF_IS_FD:
            out.append(os.pread(b.fd, b.size, b.pos))
            os.fstat(b.fd)  # still open: it is closed on this thread's next call
        else:
            out.append(ctypes.string_at(b.mem, b.size) if b.size else b"")
            libc.free(b.mem)
    libc.free(slot.value)
    return b"".join(out)


@pytest.mark.parametrize("mode", ["full", "stat"])
def test_full_and_stat_detect_a_block_corrupted_after_it_was_verified(tmp_path, mode) -> None:
    s = store(tmp_path, mode)
    try:
        key = BlockKey("/d/f", "v1", 0)
        data = payload(1)
        assert s.put(key, data)
        settle()
        for _ in range(3):  # verified, then (stat) served from the memo
            assert digest(s.get(key) or b"") == digest(data)
        if mode == "stat":
            assert s.serves_ranges(key)  # verified and remembered: the fast path is in use
        flip(s.block_path(key), HEADER_SIZE + 1234)
        assert s.get(key) is None  # never the corrupt bytes
        assert s.corrupt_dropped == 1
        assert not os.path.exists(s.block_path(key))  # dropped from disk and index
        assert s.stats().blocks == 0
        assert s.put(key, data)  # a re-fetched copy is served again
        assert s.get(key) == data
    finally:
        s.close()


def test_stat_mode_does_not_remember_blocks_inside_the_racy_window(tmp_path) -> None:
    """A block written 'now' is re-hashed on each read: a write in the same timestamp tick
    as the verification would otherwise leave (size, mtime, ctime) unchanged."""
    s = BlockStore(tmp_path / "c", 1 << 24, BLOCK, verify="stat", racy_window_s=3600)
    try:
        key = BlockKey("/d/f", "v1", 0)
        data = payload(2)
        s.put(key, data)
        assert s.get(key) == data
        assert not s.serves_ranges(key)  # not remembered: the next read hashes again
        flip(s.block_path(key), HEADER_SIZE)  # immediately: same coarse tick is possible
        assert s.get(key) is None
    finally:
        s.close()


def test_none_serves_corrupted_payload_but_refuses_a_broken_file(tmp_path) -> None:
    """Documented trade-off of ``none``: payload corruption is NOT detected on reads (only
    ``aicache cache verify`` finds it); a truncated file or a bad header still is."""
    s = store(tmp_path, "none")
    try:
        k1, k2 = BlockKey("/d/a", "v1", 0), BlockKey("/d/b", "v1", 0)
        d1, d2 = payload(3), payload(4)
        s.put(k1, d1)
        s.put(k2, d2)
        settle()
        assert s.get(k1) == d1
        flip(s.block_path(k1), HEADER_SIZE + 7)
        served = s.get(k1)
        assert served is not None and served != d1 and len(served) == len(d1)
        assert sum(a != b for a, b in zip(served, d1)) == 1  # exactly the flipped byte
        assert s.verify(clean=False).bad == 1  # the offline check still finds it
        with open(s.block_path(k2), "r+b") as f:  # structural damage: file cut short
            f.truncate(HEADER_SIZE + 100)
        assert s.get(k2) is None
    finally:
        s.close()


@pytest.mark.parametrize("mode", VERIFY_MODES)
def test_every_mode_serves_the_right_bytes_and_survives_restart(tmp_path, mode) -> None:
    keys = {BlockKey(f"/d/f{i}", "v1", i % 3): payload(10 + i, 1000 * i + 1) for i in range(12)}
    s = store(tmp_path, mode)
    for k, v in keys.items():
        assert s.put(k, v)
    settle()
    for _ in range(2):
        for k, v in keys.items():
            assert digest(s.get(k) or b"") == digest(v)
    s.close()
    s = store(tmp_path, mode)  # a new process-equivalent: memo empty, bytes the same
    try:
        for k, v in keys.items():
            assert s.get(k) == v
    finally:
        s.close()


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["read", "corrupt", "put"]), st.integers(0, 5),
                              st.integers(0, BLOCK - 1)), min_size=1, max_size=25))
def test_stat_mode_never_serves_bytes_other_than_put(tmp_path_factory, ops) -> None:
    """Property: whatever the interleaving of reads, in-place corruptions and re-puts, a
    ``stat``-mode read returns exactly the bytes last put for the key, or None."""
    d = tmp_path_factory.mktemp("prop")
    s = BlockStore(d, 1 << 24, BLOCK, verify="stat", racy_window_s=0.0)
    ref: dict[int, bytes] = {}
    try:
        for op, i, at in ops:
            key = BlockKey(f"/p/{i}", "v", 0)
            if op == "put":
                ref.setdefault(i, payload(100 + i))
                s.put(key, ref[i])
            elif op == "corrupt" and os.path.exists(s.block_path(key)):
                # window 0 remembers blocks at once, so let the coarse timestamp clock tick
                # (≤ 10 ms) past the put/previous write first: that is what the window does
                time.sleep(0.02)
                flip(s.block_path(key), HEADER_SIZE + at % len(ref[i]))
            else:
                got = s.get(key)
                assert got is None or got == ref.get(i)
                if got is None:
                    ref.pop(i, None)
                    assert not os.path.exists(s.block_path(key))
    finally:
        s.close()


def test_engine_passes_the_mode_and_refetches_a_corrupt_remembered_block(tmp_path) -> None:
    import fsspec

    src = tmp_path / "src"
    src.mkdir()
    data = payload(7, 3 * BLOCK + 5)
    (src / "x.bin").write_bytes(data)
    path = str(src / "x.bin")
    e = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 24, policy="lru",
                    params=EngineParams(block_size=BLOCK, verify="stat"))
    try:
        e.store.reads.racy_ns = int(WINDOW * 1e9)
        assert e.read(path) == data
        settle()
        assert e.read(path) == data  # verified, remembered
        fetched = e.metrics.value("remote_bytes")
        meta = e.stat(path)
        flip(e.store.block_path(BlockKey(meta.path, meta.version, 1)), HEADER_SIZE + 3)
        assert e.read(path) == data
        assert e.metrics.value("corrupt_blocks") == 1
        assert e.metrics.value("remote_bytes") == fetched + BLOCK
    finally:
        e.close()


def test_unknown_verify_mode_is_bad_input(tmp_path) -> None:
    with pytest.raises(BadInput, match="verify mode 'sometimes'.*full, stat, none"):
        BlockStore(tmp_path, 1 << 20, BLOCK, verify="sometimes")


@settings(max_examples=20, deadline=None)
@given(reads=st.lists(st.tuples(st.integers(0, 3 * BLOCK + 99), st.integers(1, 3 * BLOCK)),
                      min_size=1, max_size=30),
       mode=st.sampled_from(VERIFY_MODES), path=st.sampled_from(["bytes", "into", "splice"]))
def test_fuse_handle_pieces_match_the_source_and_count_one_access_per_block(
        tmp_path_factory, reads, mode, path) -> None:
    """The FUSE read path (no mount needed: the operations object is called directly) in
    every verify mode, with blocks old enough for ``stat``'s range reads: every piece
    equals the source's bytes, and a handle makes one demand access per block it moves
    to (the kernel's pieces of one block are one access). ``into``: the same through
    ``read_into`` (reads into the reply buffer); ``splice``: through ``read_buf``, the
    mount's path on libfuse 3 (block-file descriptors that libfuse splices), where a
    read across a block boundary is one piece per block."""
    data = payload(42, 3 * BLOCK + 100)
    ops, e = fuse_ops(tmp_path_factory.mktemp("fuse"), data, mode)
    try:
        fh = ops.open("/f.bin", os.O_RDONLY)
        for off in range(0, len(data), BLOCK):  # fill + verify every block
            assert ops.read("/f.bin", BLOCK, off, fh) == data[off:off + BLOCK]
        ops.release("/f.bin", fh)
        fh = ops.open("/f.bin", os.O_RDONLY)
        hits0 = e.metrics.value("hits") + e.metrics.value("misses")
        expected = 0
        cur = prev = -1  # reference model of the handle: the two blocks it holds
        for off, size in reads:
            if path == "splice":
                got = spliced(ops, off, size, fh)
            elif path == "into":
                buf = bytearray(b"\xee" * size)
                n = ops.read_into("/f.bin", memoryview(buf), off, fh)
                got = bytes(buf[:n])
                assert buf[n:] == b"\xee" * (size - n)  # nothing written past the count
            else:
                got = ops.read("/f.bin", size, off, fh)
            assert got == data[off:off + size]
            end = min(off + size, len(data))
            if off >= len(data):
                continue
            if off // BLOCK == (end - 1) // BLOCK or path == "splice":
                for idx in range(off // BLOCK, (end - 1) // BLOCK + 1):
                    if idx not in (cur, prev):
                        expected += 1
                        prev, cur = cur, idx
            else:  # spanning reads go through engine.read_meta: one access per block
                expected += (end - 1) // BLOCK - off // BLOCK + 1
        accesses = e.metrics.value("hits") + e.metrics.value("misses") - hits0
        assert accesses == expected
        assert e.metrics.value("remote_bytes") == len(data)  # all served from the cache
        ops.release("/f.bin", fh)
    finally:
        ops.destroy("/")


def test_get_range_never_serves_an_unverified_or_changed_file(tmp_path) -> None:
    s = BlockStore(tmp_path / "c", 1 << 24, BLOCK, verify="stat", racy_window_s=WINDOW)
    try:
        key = BlockKey("/d/f", "v1", 0)
        data = payload(5)
        s.put(key, data)
        assert s.get_range(key, 0, 10) is None  # never verified in this process
        settle()
        assert s.get(key) == data
        assert s.get_range(key, 100, 5000) == data[100:5000]
        assert s.get_range(key, BLOCK - 3, BLOCK + 50) == data[BLOCK - 3:]  # clipped
        time.sleep(WINDOW)
        flip(s.block_path(key), HEADER_SIZE + 200)
        assert s.get_range(key, 100, 5000) is None  # changed since: not trusted
        assert s.get(key) is None  # and the full read drops it
        full = BlockStore(tmp_path / "f", 1 << 24, BLOCK, verify="full")
        full.put(key, data)
        assert full.get(key) == data and full.get_range(key, 0, 10) is None  # full: never
        full.close()
    finally:
        s.close()


@pytest.mark.parametrize("splice", [False, True])
@pytest.mark.parametrize("mode", VERIFY_MODES)
def test_concurrent_pieces_of_one_handle_read_right_and_count_one_access_per_block(
        tmp_path, mode, splice) -> None:
    """The kernel's readahead sends the pieces of a block concurrently on several libfuse
    threads. With 4 threads per block racing through ``read_into`` or ``read_buf`` (the
    first piece makes the access; the others read outside the handle's lock), every piece
    has the source's bytes and each block is still one demand access."""
    import threading

    nblocks = 12
    data = payload(7, nblocks * BLOCK)
    ops, e = fuse_ops(tmp_path, data, mode)
    try:
        for rnd in range(2):  # cold (misses, whole-block reads), then warm (range reads)
            fh = ops.open("/f.bin", os.O_RDONLY)
            before = e.metrics.value("hits") + e.metrics.value("misses")
            piece = BLOCK // 4
            errors: list[str] = []
            for idx in range(nblocks):
                bufs = [bytearray(piece) for _ in range(4)]

                def read(k: int, idx: int = idx, bufs: list[bytearray] = bufs) -> None:
                    off = idx * BLOCK + k * piece
                    if splice:
                        got = spliced(ops, off, piece, fh)
                        bufs[k][:len(got)] = got
                        n = len(got)
                    else:
                        n = ops.read_into("/f.bin", memoryview(bufs[k]), off, fh)
                    if n != piece or bytes(bufs[k]) != data[off:off + piece]:
                        errors.append(f"round {rnd} block {idx} piece {k}")

                threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            assert not errors
            assert e.metrics.value("hits") + e.metrics.value("misses") - before == nblocks
            ops.release("/f.bin", fh)
    finally:
        ops.destroy("/")


@pytest.mark.parametrize("splice", [False, True])
def test_a_block_corrupted_between_two_fuse_pieces_is_refetched(tmp_path, splice) -> None:
    """Verify mode ``stat``: the mount's first piece of a verified block only accounts it,
    and later pieces read their range straight from the block file. If the file is
    corrupted in between (a stray writer: its ctime changes), the next piece must not serve
    it: the range read sees a different file version, the whole block is re-read and
    checked, found corrupt, dropped and fetched again, and the piece has the source's
    bytes. (``full`` keeps the verified block in memory and never reads the file again
    for that handle; ``none`` checks no checksums, by definition.)"""
    data = payload(11, 2 * BLOCK)
    ops, e = fuse_ops(tmp_path, data, "stat")
    try:
        path = str(tmp_path / "src" / "f.bin")
        assert e.read(path) == data  # fetched and stored
        e.wait_prefetches()  # by the writer, after the read had its bytes
        assert e.read(path) == data  # read back from the store: verified, remembered
        fetched = e.metrics.value("remote_bytes")
        fh = ops.open("/f.bin", os.O_RDONLY)
        half = BLOCK // 2

        def piece(off: int) -> bytes:
            if splice:
                return spliced(ops, off, half, fh)
            buf = bytearray(half)
            return bytes(buf[:ops.read_into("/f.bin", memoryview(buf), off, fh)])

        assert piece(0) == data[:half]
        h = ops._handles[fh]
        assert h.cur[0] == 0 and h.cur[1] is None  # accounted, served as a range
        meta = e.stat(path)
        flip(e.store.block_path(BlockKey(meta.path, meta.version, 0)), HEADER_SIZE + half + 7)
        assert piece(half) == data[half:BLOCK]
        assert e.metrics.value("corrupt_blocks") == 1
        assert e.metrics.value("remote_bytes") == fetched + BLOCK  # refetched once
        ops.release("/f.bin", fh)
    finally:
        ops.destroy("/")
