"""The low-level FUSE driver (:mod:`aicache.datacache.fuse.lowlevel`): one session thread answers
local requests inline and hands the rest to workers. What it must show on a real mount:
a read that waits on the remote does not hold up another reader's cached reads; the
kernel-cache option really keeps pages across opens; listings page through the kernel's
readdir buffer completely; unknown names are ENOENT. And its inode table counts the
kernel's lookups, so forgotten inodes go.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from aicache.datacache.fuse import lowlevel, lowlevel_abi
from aicache.datacache.store import DEFAULT_RACY_WINDOW_S
from s3fixtures import mounted_file, start_mount, stop_mount, wait_mounted



def test_setup_provides_the_libfuse_the_low_level_driver_is_built_for() -> None:
    """scripts/setup.sh installs fuse3 (libfuse 3.14 on this Debian); the driver's structure
    layouts are those of libfuse 3 before 3.17. A machine without it fails here instead of
    passing the tests below as nothing tested."""
    assert lowlevel_abi.supported(), (
        f"{lowlevel_abi.libfuse_version()}: the low-level driver needs libfuse 3 before 3.17 "
        "(scripts/setup.sh installs fuse3)")

RACY_WAIT_S = DEFAULT_RACY_WINDOW_S + 0.1
MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f"aicache_{name}_total ") or line.startswith(f"aicache_{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def read_all(path: Path) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return b"".join(iter(lambda: f.read(4 * MiB), b""))


def test_the_inode_table_follows_kernel_lookups_and_forgets() -> None:
    s = lowlevel.LowLevelSession(None, "/nowhere")
    a = s._remember("/a", None)
    assert s._remember("/a", None) == a and s._remember("/b", None) != a
    s._forget(a, 1)
    assert s._path(a) == "/a"  # one lookup reference left
    s._forget(a, 1)
    with pytest.raises(lowlevel._Reply) as r:
        s._path(a)
    assert r.value.code == errno.ESTALE
    assert s._remember("/a", None) != a  # a new inode after the kernel forgot the old one
    s._forget(1, 10)
    assert s._path(1) == "/"  # the root is never forgotten
    assert s.known_inodes() == 3


def test_each_version_of_a_file_is_its_own_inode() -> None:
    """A replaced file gets a new inode; the old one keeps its version's attributes for the
    handles that read it, and forgetting it leaves the new one the path's."""
    s = lowlevel.LowLevelSession(None, "/nowhere")
    v1 = ("etag-1", {"st_size": 10})
    v2 = ("etag-2", {"st_size": 20})
    a = s._remember("/f", v1)
    assert s._remember("/f", v1) == a  # same version: same inode, one more reference
    b = s._remember("/f", v2)
    assert b != a and s._path(a) == s._path(b) == "/f"
    assert s._versions[a] == v1 and s._versions[b] == v2
    s._forget(a, 2)  # the kernel drops the old version's inode
    assert s._remember("/f", v2) == b  # the path still names the newest version
    assert a not in s._versions


_SWITCHED_MOUNT = """
import sys
import aicache.datacache.fuse as F
from aicache.datacache.engine import EngineParams
from aicache.testing import SlowFileSystem
src, mnt, switch, port = sys.argv[1:5]

def _knob(suffix):
    # read from a file, so the test can turn the remote slow or broken mid-run
    return property(lambda self: float(open(switch + suffix).read() or 0) if __import__("os").path.exists(switch + suffix) else 0.0,
                    lambda self, v: None)

class Switched(SlowFileSystem):
    latency = _knob("")
    error_rate = _knob(".errors")

F.mount(Switched(target_protocol="file"), src, mnt, cache_dir=mnt + "-cache",
        cache_size=1 << 26, policy="lru", params=EngineParams(block_size=1 << 20),
        metrics_port=int(port), fuse_api="lowlevel")
"""


@contextlib.contextmanager
def switched_mount(tmp_path: Path, a: bytes, b: bytes
                   ) -> Iterator[tuple[Path, int, Path, Path, subprocess.Popen[bytes]]]:
    """``a.bin`` and ``b.bin`` mounted (low-level, lru, 1 MiB blocks) over a remote whose
    latency and error rate the test sets by writing the files it yields; yields
    ``(mount point, metrics port, latency file, error-rate file, process)`` and checks
    that the mount stops cleanly (with the remote healthy again)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "a.bin").write_bytes(a)
    (src / "b.bin").write_bytes(b)
    switch, errors = tmp_path / "latency", tmp_path / "latency.errors"
    switch.write_text("0")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", _SWITCHED_MOUNT, str(src), str(mnt), str(switch),
                             str(port)], stderr=subprocess.PIPE)
    try:
        wait_mounted(str(mnt), proc)
        yield mnt, port, switch, errors, proc
    finally:
        switch.write_text("0")
        errors.write_text("0")
        rc = stop_mount(proc, str(mnt))
    assert rc == 0 and not os.path.ismount(mnt)


def test_a_read_waiting_on_the_remote_does_not_hold_up_cached_reads(tmp_path: Path) -> None:
    a, b = os.urandom(3 * MiB + 11), os.urandom(3 * MiB + 7)
    with switched_mount(tmp_path, a, b) as (mnt, port, switch, _errors, _proc):
        assert read_all(mnt / "a.bin") == a  # fetched
        time.sleep(RACY_WAIT_S)
        assert read_all(mnt / "a.bin") == a  # verified: from now on its pieces are local
        assert sorted(os.listdir(mnt)) == ["a.bin", "b.bin"]
        switch.write_text("3.0")  # every remote request now takes 3 s
        got: dict[str, object] = {}

        def slow_reader() -> None:
            got["b"] = read_all(mnt / "b.bin")
            got["t"] = time.monotonic()

        t = threading.Thread(target=slow_reader)
        t.start()
        deadline = time.monotonic() + 60
        while metric(port, "inflight_fetches") < 1:  # until b's first block is being fetched
            assert time.monotonic() < deadline and t.is_alive(), "b's read never reached the remote"
            time.sleep(0.01)
        inline0 = metric(port, "fuse_inline_replies")
        t0 = time.monotonic()
        assert read_all(mnt / "a.bin") == a
        took = time.monotonic() - t0
        # done while b still waits on the remote; the bound is one remote request's 3 s (a
        # read that waited on the remote even once would take that), not a speed
        assert t.is_alive() and took < 3.0, took
        assert metric(port, "fuse_inline_replies") - inline0 >= 4  # a's pieces, inline
        t.join(60)
        assert got["b"] == b
        assert metric(port, "fuse_worker_replies") >= 4  # b's fetches went to workers


@pytest.mark.parametrize("flag", [None, "--kernel-cache", "--no-kernel-cache"])
def test_kernel_cache_keeps_pages_across_opens(tmp_path: Path, flag: str | None) -> None:
    """By default (and with ``--kernel-cache``) an open answers ``keep_cache``: a re-read of
    an unchanged file is served by the kernel's page cache and never reaches the engine
    (each version is its own inode, so the pages kept are the reader's version); with
    ``--no-kernel-cache`` each open drops the pages and the re-read is served (and counted)
    by the engine."""
    kernel_cache = flag != "--no-kernel-cache"
    data = os.urandom(2 * MiB + 5)
    port = free_port()
    extra = ["--block-size", "1MiB", "--policy", "lru", "--metrics-port", str(port)]
    with mounted_file(tmp_path, "f.bin", data, *extra, *([flag] if flag else [])) as (mnt, _):
        assert read_all(mnt / "f.bin") == data
        seen = metric(port, "hits") + metric(port, "misses")
        assert seen >= 3
        assert read_all(mnt / "f.bin") == data
        again = metric(port, "hits") + metric(port, "misses")
        assert (again == seen) if kernel_cache else (again >= seen + 3)


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_listings_page_through_readdir_and_unknown_names_are_enoent(tmp_path: Path, api) -> None:
    names = [f"file-with-a-rather-long-name-{i:05d}.bin" for i in range(700)]  # > 4 KiB of entries
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for i, n in enumerate(names):
        (src / n).write_bytes(hashlib.sha256(str(i).encode()).digest())
    (src / "sub" / "x.txt").write_bytes(b"x")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(str(src), str(mnt), str(tmp_path / "c2"), "--cache-size", "16MiB",
                       "--fuse-api", api)
    try:
        assert sorted(os.listdir(mnt)) == sorted(names + ["sub"])
        assert os.path.isdir(mnt / "sub") and not os.path.isdir(mnt / names[0])
        assert [e.is_dir() for e in os.scandir(mnt) if e.name == "sub"] == [True]
        assert (mnt / "sub" / "x.txt").read_bytes() == b"x"
        assert (mnt / names[123]).read_bytes() == hashlib.sha256(b"123").digest()
        with pytest.raises(FileNotFoundError):
            os.stat(mnt / "no-such-file")
        with pytest.raises(OSError) as e:
            open(mnt / names[0], "r+b")
        assert e.value.errno in (errno.EROFS, errno.EACCES)
        st = os.stat(mnt / names[0])
        assert abs(st.st_mtime - os.stat(src / names[0]).st_mtime) < 1.0  # real times
    finally:
        rc = stop_mount(proc, str(mnt))
    assert rc == 0


def test_an_engine_that_cannot_start_fails_the_mount_and_unmounts(tmp_path: Path) -> None:
    """The engine is built in FUSE's init (after mounting); if that fails, the session
    ends, the mount point is released and ``mount`` raises — no mount that answers every
    request with an error, and no exit status 0."""
    (tmp_path / "file").write_bytes(b"x")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = ("import sys, fsspec\nimport aicache.datacache.fuse as F\n"
              "F.mount(fsspec.filesystem('file'), sys.argv[1], sys.argv[2], "
              "cache_dir=sys.argv[3], cache_size=1 << 24, fuse_api='lowlevel')\n")
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path), str(mnt),
                        str(tmp_path / "file" / "cache")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "NotADirectoryError" in r.stderr, r.stderr[-2000:]
    assert not os.path.ismount(mnt)


def test_remote_failures_reach_the_reader_as_eio_and_the_mount_survives(tmp_path: Path) -> None:
    """Faults through the low-level mount: a read whose fetch fails after the engine's
    bounded retries is answered EIO by its worker (the session thread never raises into
    libfuse); cached files keep being served meanwhile; once the remote recovers the
    same file reads right — nothing partial was cached."""
    a, b = os.urandom(2 * MiB + 3), os.urandom(2 * MiB + 5)
    with switched_mount(tmp_path, a, b) as (mnt, port, _switch, errors, proc):
        assert read_all(mnt / "a.bin") == a
        assert sorted(os.listdir(mnt)) == ["a.bin", "b.bin"]  # metadata cached from here
        errors.write_text("1.0")  # every remote request fails from now on
        with pytest.raises(OSError) as e:
            read_all(mnt / "b.bin")
        assert e.value.errno == errno.EIO
        assert read_all(mnt / "a.bin") == a  # cached: still served
        assert metric(port, "remote_errors") >= 1
        errors.write_text("0")
        assert read_all(mnt / "b.bin") == b  # recovered, and the bytes are right
        assert proc.poll() is None
