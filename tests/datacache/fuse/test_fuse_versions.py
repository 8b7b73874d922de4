"""One version per open file through a real FUSE mount, as through fsspec.

Handle A reads the first 64 KiB of a file; the file is replaced; once the metadata TTL
has passed, handle B opens it and reads the new version whole. A's later reads must be
all of A's version (or ESTALE) — never B's pages, which the kernel keeps per inode, not
per open file. Both drivers, each with its page-cache modes (the low-level driver keeps
pages across opens by default: each version is its own inode; the high-level one cannot
keep versions apart in the page cache and refuses ``--kernel-cache``); and the same again
with handle C opened after A and B are closed, which must see only the new version. The
same modes again under load (readers reopening while the file is replaced).
Also: file names that are not UTF-8 are listed and read through the mount.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from aicache.datacache.fuse import fuse_available, lowlevel_abi
from s3fixtures import start_mount, stop_mount

pytestmark = pytest.mark.skipif(bool(fuse_available()), reason="no FUSE here")

APIS = ["highlevel"] + (["lowlevel"] if lowlevel_abi.supported() else [])
#: (driver, page-cache flags) as a user can mount them
CASES = [("highlevel", ()), ("highlevel", ("--direct-io",))] + (
    [("lowlevel", ()), ("lowlevel", ("--kernel-cache",)), ("lowlevel", ("--no-kernel-cache",)),
     ("lowlevel", ("--direct-io",))] if lowlevel_abi.supported() else [])
CASE_IDS = [f"{api}-{''.join(m).lstrip('-') or 'default'}" for api, m in CASES]
SIZE = 4 << 20
HEAD = 64 << 10
TTL_S = 0.2
HANG_S = 60.0  # a condition polled under a generous deadline


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _read_rest(f, pos: int) -> list[bytes | int]:
    """A's reads from ``pos`` to the end in 64 KiB pieces: bytes, or the errno of a failed read."""
    out: list[bytes | int] = []
    while pos < SIZE:
        try:
            got = os.pread(f, HEAD, pos)
        except OSError as exc:
            out.append(exc.errno or 0)
            pos += HEAD
            continue
        if not got:
            break
        out.append(got)
        pos += len(got)
    return out


def _mount_one_file(tmp_path: Path, api: str, *mode: str):  # -> (source file, mount, process)
    """A folder holding ``f.bin`` (SIZE bytes of ``1``), mounted with a short metadata TTL."""
    src = tmp_path / "src"
    src.mkdir()
    f = src / "f.bin"
    f.write_bytes(b"1" * SIZE)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(str(src), str(mnt), str(tmp_path / "cache"), "--cache-size", "64MiB",
                       "--fuse-api", api, "--metadata-ttl", str(TTL_S), *mode)
    return f, mnt, proc


@pytest.mark.parametrize(("api", "mode"), CASES, ids=CASE_IDS)
def test_an_open_handle_never_reads_the_version_another_handle_opened(tmp_path: Path, api: str,
                                                                      mode: tuple[str, ...]) -> None:
    f, mnt, proc = _mount_one_file(tmp_path, api, *mode)
    try:
        for rnd, (old, new) in enumerate(((b"1", b"2"), (b"2", b"3"))):
            a = os.open(mnt / "f.bin", os.O_RDONLY)
            try:
                assert os.pread(a, HEAD, 0) == old * HEAD
                _replace(f, new * SIZE)
                deadline = time.monotonic() + HANG_S
                while True:  # B opens once the mount sees the new version (after the TTL)
                    b = os.open(mnt / "f.bin", os.O_RDONLY)
                    try:
                        whole = b""
                        while len(whole) < SIZE and (piece := os.pread(b, 1 << 20, len(whole))):
                            whole += piece
                    finally:
                        os.close(b)
                    if whole[:1] == new or time.monotonic() > deadline:
                        break
                    time.sleep(TTL_S / 4)
                assert whole == new * SIZE, f"round {rnd}: B read {set(whole)!r}"
                rest = _read_rest(a, HEAD)
                errs = {r for r in rest if isinstance(r, int)}
                assert errs <= {errno.ESTALE}, errs
                got = b"".join(r for r in rest if isinstance(r, bytes))
                assert set(got) <= set(old), f"round {rnd}: A mixed versions: {set(got)!r}"
                if not errs:
                    assert len(got) == SIZE - HEAD
            finally:
                os.close(a)
            # a handle opened after both closed reads the new version only
            assert (mnt / "f.bin").read_bytes() == new * SIZE
    finally:
        assert stop_mount(proc, str(mnt)) == 0
    assert not os.path.ismount(mnt)


@pytest.mark.parametrize("api", APIS)
def test_non_utf8_names_are_listed_and_read_through_the_mount(tmp_path: Path, api: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    truth = {}
    for i, raw in enumerate([b"caf\xe9.bin", b"\xff\xfe-odd.bin"]):
        data = os.urandom(100_000 + i)
        with open(os.path.join(os.fsencode(str(src)), raw), "wb") as fh:
            fh.write(data)
        truth[raw] = data
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(str(src), str(mnt), str(tmp_path / "cache"), "--cache-size", "64MiB",
                       "--fuse-api", api, "--block-size", "64KiB")
    try:
        m = os.fsencode(str(mnt))
        assert sorted(os.listdir(m)) == sorted(truth)
        for _ in range(2):  # fetched, then from the cache
            for raw, data in truth.items():
                with open(os.path.join(m, raw), "rb") as fh:
                    assert fh.read() == data
    finally:
        assert stop_mount(proc, str(mnt)) == 0


@pytest.mark.parametrize(("api", "mode"), [c for c in CASES if "--direct-io" not in c[1]],
                         ids=[i for c, i in zip(CASES, CASE_IDS) if "--direct-io" not in c[1]])
def test_under_load_every_open_reads_one_version(tmp_path: Path, api: str,
                                                 mode: tuple[str, ...]) -> None:
    """Readers keep opening and reading the file while it is replaced again and again:
    every read of every open is of one version (the one its first bytes show), or ESTALE."""
    import threading

    src = tmp_path / "src"
    src.mkdir()
    f = src / "f.bin"
    size = 1 << 20
    f.write_bytes(b"0" * size)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(str(src), str(mnt), str(tmp_path / "cache"), "--cache-size", "64MiB",
                       "--fuse-api", api, "--metadata-ttl", str(TTL_S), "--block-size", "256KiB",
                       *mode)
    stop = threading.Event()
    reads: list[int] = []
    mixed: list[str] = []
    errors: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            fd = os.open(mnt / "f.bin", os.O_RDONLY)
            try:
                seen: set[int] = set()
                pos = 0
                while pos < size:
                    try:
                        piece = os.pread(fd, 64 << 10, pos)
                    except OSError as exc:
                        errors.append(exc.errno or 0)
                        break
                    if not piece:
                        break
                    reads.append(1)
                    seen |= set(piece)
                    pos += len(piece)
                if len(seen) > 1:
                    mixed.append(bytes(sorted(seen)).decode())
            finally:
                os.close(fd)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        for v in b"123456":
            time.sleep(TTL_S * 2)
            _replace(f, bytes([v]) * size)
        time.sleep(TTL_S * 2)
    finally:
        stop.set()
        for t in threads:
            t.join(HANG_S)
        assert stop_mount(proc, str(mnt)) == 0
    assert not any(t.is_alive() for t in threads)
    assert reads and not mixed, f"{len(mixed)} of the opens mixed versions: {mixed[:5]}"
    assert set(errors) <= {errno.ESTALE}, set(errors)


def test_the_high_level_driver_refuses_the_kernel_cache(tmp_path: Path) -> None:
    """It names inodes by path, so two versions would share one inode's pages: exit 2."""
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "mount", str(src), str(mnt),
                        "--cache-dir", str(tmp_path / "cache"), "--cache-size", "64MiB",
                        "--fuse-api", "highlevel", "--kernel-cache", "--foreground"],
                       capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 2, r.stderr
    assert "--kernel-cache" in r.stderr and "low-level" in r.stderr
    assert not os.path.ismount(mnt)


def test_a_replaced_file_is_a_new_inode_and_the_old_keeps_its_attributes(tmp_path: Path) -> None:
    """The low-level driver's inode per version: once the mount sees the new object, the
    path names another inode, of the new size; the handle open on the old one still sees
    the old size (its version's snapshot) and reads only the old bytes. Where libfuse has
    no low-level driver we support (3.17 and later), asking for it is refused instead."""
    if not lowlevel_abi.supported():
        import subprocess
        import sys

        r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "mount", str(tmp_path), str(tmp_path),
                            "--cache-dir", str(tmp_path / "cache"), "--fuse-api", "lowlevel", "--foreground"],
                           capture_output=True, text=True, timeout=HANG_S)
        assert r.returncode == 2 and "--fuse-api lowlevel" in r.stderr
        return
    f, mnt, proc = _mount_one_file(tmp_path, "lowlevel")
    try:
        a = os.open(mnt / "f.bin", os.O_RDONLY)
        try:
            old = os.fstat(a)
            assert old.st_size == SIZE and os.pread(a, HEAD, 0) == b"1" * HEAD
            _replace(f, b"2" * (SIZE // 2))
            deadline = time.monotonic() + HANG_S
            while os.stat(mnt / "f.bin").st_ino == old.st_ino and time.monotonic() < deadline:
                time.sleep(TTL_S / 4)
            new = os.stat(mnt / "f.bin")
            assert new.st_ino != old.st_ino and new.st_size == SIZE // 2
            assert (mnt / "f.bin").read_bytes() == b"2" * (SIZE // 2)
            assert os.fstat(a).st_size == SIZE  # the old inode's attributes are its version's
            try:
                rest = os.pread(a, SIZE, HEAD)
            except OSError as exc:  # the old version is gone from the remote: ESTALE, no bytes
                assert exc.errno == errno.ESTALE
            else:
                assert set(rest) <= {ord("1")}
        finally:
            os.close(a)
    finally:
        assert stop_mount(proc, str(mnt)) == 0
