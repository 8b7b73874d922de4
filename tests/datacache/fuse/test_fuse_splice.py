"""The mount's spliced replies: the request cap that lets libfuse splice, the descriptors
handed to libfuse (closed only once the reply is out), and a real mount that serves exact
bytes through them. The bytes and the accounting of ``read_buf`` against the source are
checked in ``test_datacache_verify_modes.py`` (every verify mode, hypothesis reads)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

import pytest

from aicache.datacache.fuse.binding import splice_supported
from aicache.datacache.fuse.fdledger import FdLedger
from aicache.datacache.fuse.kernel import SPLICE_SLACK_PAGES, splice_request_bytes
from aicache.datacache.store import DEFAULT_RACY_WINDOW_S
from tests.s3fixtures import mounted_file, stop_mount

PAGE = os.sysconf("SC_PAGE_SIZE")
RACY_WAIT_S = DEFAULT_RACY_WINDOW_S + 0.1  # past it, verified blocks are remembered (ranges)


def test_the_request_cap_fits_a_pipe_this_process_can_grow() -> None:
    """Whatever the privileges here, the cap is whole pages, at most 1 MiB, and a pipe
    really grows to hold a reply of that size plus libfuse's slack — else libfuse would
    copy every reply instead of splicing it."""
    n = splice_request_bytes()
    assert n > 0 and n % PAGE == 0 and n <= 1 << 20
    r, w = os.pipe()
    try:
        assert fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, n + SPLICE_SLACK_PAGES * PAGE) >= n
    finally:
        os.close(r)
        os.close(w)


def test_the_cap_follows_pipe_max_size_when_the_pipe_cannot_grow(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """Unprivileged (growing a pipe past fs.pipe-max-size fails with EPERM), the cap is that
    limit minus the slack, in whole pages; an unreadable or tiny limit means no splicing."""
    import errno

    import aicache.datacache.fuse.kernel as fusemod

    def eperm(fd: int, cmd: int, arg: int = 0) -> int:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(fusemod.fcntl, "fcntl", eperm)
    limit = tmp_path / "pipe-max-size"
    limit.write_text("1048576\n")
    assert splice_request_bytes(1 << 20, str(limit)) == (1 << 20) - SPLICE_SLACK_PAGES * PAGE
    limit.write_text(f"{4 * 1024 * 1024 + 123}\n")
    assert splice_request_bytes(1 << 20, str(limit)) == 1 << 20  # ample: the full request
    limit.write_text("65536\n")
    assert splice_request_bytes(1 << 20, str(limit)) == 0
    assert splice_request_bytes(1 << 20, str(tmp_path / "missing")) == 0


class _Threads:
    """Stands in for the process's threads: which one is calling, which are alive. The
    ledger's rules are about *which* descriptors it closes and when, so the tests record
    its closes instead of probing descriptor numbers the process may have reused."""

    def __init__(self) -> None:
        self.current = 1
        self.alive = {1}
        self.closed: list[int] = []

    def ledger(self, sweep_at: int = 32) -> FdLedger:
        return FdLedger(sweep_at, close=self.closed.append,
                         current_thread=lambda: self.current,
                         live_threads=lambda: set(self.alive))


def test_handed_over_descriptors_close_on_the_threads_next_call_not_before() -> None:
    """A descriptor libfuse splices from must stay open until the reply is out, i.e. until
    the thread that handed it over calls in again; another thread's calls never close it."""
    th = _Threads()
    led = th.ledger()
    tid = led.settle()
    led.hold(tid, [10, 11])
    assert th.closed == [] and led.open_count() == 2
    th.current, th.alive = 2, {1, 2}  # another libfuse thread: nothing of ours is closed
    led.hold(led.settle(), [12])
    assert th.closed == [] and led.open_count() == 3
    th.current, th.alive = 1, {1}  # this thread's next call: its reply went out
    assert led.settle() == tid
    assert sorted(th.closed) == [10, 11] and led.open_count() == 1
    led.close_all()  # the other thread (now gone) held its descriptor until here
    assert sorted(th.closed) == [10, 11, 12] and led.open_count() == 0


def test_descriptors_of_threads_libfuse_retired_are_swept() -> None:
    """libfuse stops surplus idle workers; what they held is closed once the ledger holds
    more threads than ``sweep_at`` — but never what a live thread holds."""
    th = _Threads()
    led = th.ledger(sweep_at=2)
    th.current, th.alive = 2, {1, 2}
    led.hold(led.settle(), [20])  # a libfuse thread that replied once ...
    th.alive = {1}  # ... then was retired
    led.hold(99, [21])  # a holder that is no thread at all
    assert th.closed == []  # two holders: no sweep yet
    th.current = 1
    led.hold(led.settle(), [22])  # a third holder: the dead threads' descriptors go
    assert sorted(th.closed) == [20, 21]
    assert led.open_count() == 1
    led.close_all()
    assert sorted(th.closed) == [20, 21, 22]


def test_a_sweep_closes_nothing_when_the_live_threads_are_unknown() -> None:
    """Without ``/proc`` the ledger cannot tell a retired thread from a busy one: it keeps
    every descriptor (a leak bounded by the worker count, never a reply cut short)."""
    th = _Threads()
    led = FdLedger(1, close=th.closed.append, current_thread=lambda: th.current,
                    live_threads=lambda: None)
    led.hold(5, [30])
    led.hold(6, [31])
    assert th.closed == [] and led.open_count() == 2


def test_the_ledger_closes_real_descriptors_by_default() -> None:
    """With the default closer a settled descriptor is really closed: the write end of a
    pipe, once closed, makes its read end see end-of-file (a property of the pipe, not of
    a descriptor number the process might reuse)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        led = FdLedger()
        led.hold(led.settle(), [w])
        with pytest.raises(BlockingIOError):
            os.read(r, 1)  # the writer is still open: no data, no end-of-file
        led.settle()
        assert os.read(r, 1) == b""  # end-of-file: the ledger closed the writer
    finally:
        os.close(r)


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_real_mount_splices_exact_bytes_across_unaligned_requests(tmp_path: Path, api) -> None:
    """As root with fuse3 (the README's setup): a mount whose requests are capped below
    1 MiB, so they straddle its 1 MiB blocks, serves a file byte-identical to the source,
    cold (fetched) and warm (spliced from verified block files), with many reads open at
    once (each holding descriptors) — through either libfuse API."""
    assert splice_supported(), "setup installs Debian's libfuse 3.14: replies can be spliced"
    data = os.urandom(7 * 1024 * 1024 + 4321)
    want = hashlib.sha256(data).hexdigest()
    with mounted_file(tmp_path, "big.bin", data, "--block-size", "1MiB", "--policy", "lru",
                      "--fuse-api", api) as (mnt, _):
        for rnd in range(3):  # cold, then twice warm (past the store's racy window: ranges)
            if rnd == 1:
                time.sleep(RACY_WAIT_S)
            h = hashlib.sha256()
            with open(mnt / "big.bin", "rb", buffering=0) as fh:
                while chunk := fh.read(3 << 20):
                    h.update(chunk)
            assert h.hexdigest() == want
        fds = [os.open(mnt / "big.bin", os.O_RDONLY) for _ in range(8)]
        try:
            for i, fd in enumerate(fds):
                off = (i * 917_503) % len(data)
                assert os.pread(fd, 2 << 20, off) == data[off:off + (2 << 20)]
        finally:
            for fd in fds:
                os.close(fd)


def _aligned_read(fd: int, size: int, off: int) -> bytes:
    """``pread`` into a page-aligned buffer, as ``O_DIRECT`` requires."""
    import mmap

    buf = mmap.mmap(-1, size)
    try:
        n = os.preadv(fd, [buf], off)
        return bytes(buf[:n])
    finally:
        buf.close()


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_direct_io_mount_and_o_direct_readers_get_exact_bytes(tmp_path: Path, api) -> None:
    """``--direct-io`` (every open bypasses the kernel's page cache) serves exact bytes to
    large and small reads, and refuses ``mmap`` — the documented price; on the default
    mount, a reader that opens with ``O_DIRECT`` gets exact bytes too, while ``mmap`` of
    a normally opened file works there."""
    import mmap

    data = os.urandom(5 * 1024 * 1024 + 777)
    for direct in (True, False):
        with mounted_file(tmp_path, "big.bin", data, "--block-size", "1MiB", "--policy", "lru",
                          "--fuse-api", api, *(["--direct-io"] if direct else []),
                          tag=str(int(direct))
                          ) as (mnt, _):
            for rnd in range(2):  # cold, then warm past the racy window (spliced ranges)
                if rnd:
                    time.sleep(RACY_WAIT_S)
                if direct:
                    with open(mnt / "big.bin", "rb", buffering=0) as fh:
                        got = b"".join(iter(lambda: fh.read(4 << 20), b""))
                    assert got == data
                    with open(mnt / "big.bin", "rb") as fh:  # small buffered reads
                        fh.seek(1_234_567)
                        assert fh.read(10_000) == data[1_234_567:1_244_567]
                else:
                    fd = os.open(mnt / "big.bin", os.O_RDONLY | os.O_DIRECT)
                    try:
                        got = b"".join(_aligned_read(fd, 4 << 20, off)
                                       for off in range(0, len(data), 4 << 20))
                    finally:
                        os.close(fd)
                    assert got == data
            with open(mnt / "big.bin", "rb") as fh:
                if direct:
                    with pytest.raises(OSError):
                        mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                else:
                    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                        assert m[3_000_000:3_000_100] == data[3_000_000:3_000_100]


def _reader(args: tuple[str, int, int]) -> str:
    """Child process: read random ranges of the mounted file; the digest of all of them."""
    import random as _r

    path, seed, size = args
    rng = _r.Random(seed)
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        for _ in range(60):
            off = rng.randrange(size)
            fh.seek(off)
            h.update(fh.read(rng.choice((4096, 300_000, 2 << 20))))
    return h.hexdigest()


def _expected(data: bytes, seed: int) -> str:
    import random as _r

    rng = _r.Random(seed)
    h = hashlib.sha256()
    for _ in range(60):
        off = rng.randrange(len(data))
        h.update(data[off:off + rng.choice((4096, 300_000, 2 << 20))])
    return h.hexdigest()


def test_concurrent_processes_read_exact_bytes_and_the_daemon_holds_few_descriptors(
        tmp_path: Path) -> None:
    """Four processes read random ranges of a warm mounted file at once (libfuse runs
    several worker threads, each handing block descriptors over for its replies): every
    byte matches, and afterwards the daemon holds at most a few descriptors per worker
    thread — the ones not yet closed by that thread's next call — not one per reply."""
    from concurrent.futures import ProcessPoolExecutor

    assert splice_supported(), "setup installs Debian's libfuse 3.14: replies can be spliced"
    data = os.urandom(12 * 1024 * 1024 + 99)
    with mounted_file(tmp_path, "f.bin", data, "--block-size", "1MiB", "--policy", "chiron"
                      ) as (mnt, proc):
        assert (mnt / "f.bin").read_bytes() == data  # fill
        time.sleep(RACY_WAIT_S)  # verified blocks are now remembered: replies are spliced
        base = len(os.listdir(f"/proc/{proc.pid}/fd"))
        with ProcessPoolExecutor(4) as pool:
            got = list(pool.map(_reader, [(str(mnt / "f.bin"), s, len(data)) for s in range(8)]))
        assert got == [_expected(data, s) for s in range(8)]
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        held = len(os.listdir(f"/proc/{proc.pid}/fd")) - base
        assert held <= 2 * threads, (held, threads)  # 480 replies were made


_COUNTING_MOUNT = """
import sys, threading, fsspec
import aicache.datacache.fuse as F
import aicache.datacache.fuse.highlevel as H
if sys.argv[3] == "fresh":  # what ctypes does without keep_thread_state
    H.keep_thread_state = lambda: None
tls = threading.local()
plain = F.CacheFuse.statfs
def statfs(self, path):
    tls.calls = getattr(tls, "calls", 0) + 1  # survives only if the thread state does
    return {**plain(self, path), "f_files": tls.calls}
F.CacheFuse.statfs = statfs
F.mount(fsspec.filesystem("file"), sys.argv[1], sys.argv[2], cache_dir=sys.argv[2] + "-cache",
        cache_size=1 << 24, fuse_api="highlevel")  # libfuse's worker threads
"""


@pytest.mark.parametrize("mode", ["kept", "fresh"])
def test_callbacks_on_a_worker_thread_share_one_python_thread_state(tmp_path: Path, mode) -> None:
    """libfuse calls us on its own worker threads. The mount keeps each worker's Python
    thread state across callbacks, so a thread-local value set by one callback is there in
    the next one on that thread: over 60 calls on a pool of at most FUSE_THREADS threads,
    some thread's count reaches 60 / FUSE_THREADS. Without keeping it (``fresh``, what
    ctypes does by itself) every callback starts from an empty thread state."""
    import subprocess
    import sys

    from aicache.datacache.fuse.highlevel import FUSE_THREADS
    from tests.s3fixtures import wait_mounted

    src = tmp_path / "src"
    src.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _COUNTING_MOUNT, str(src), str(mnt), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_mounted(str(mnt), proc)
    try:
        counts = [os.statvfs(mnt).f_files for _ in range(60)]
    finally:
        rc = stop_mount(proc, str(mnt))
    assert rc == 0
    if mode == "kept":
        assert max(counts) >= 60 // FUSE_THREADS
    else:
        assert set(counts) == {1}
