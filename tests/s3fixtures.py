"""Shared fixtures of the data-cache tests: a moto S3 server on a free loopback port, a
seeded dataset uploaded to it, and a real FUSE mount of it (unmounted in teardown).

Import the fixtures into a test module (``from s3fixtures import s3, s3_dataset``); this
module leaves ``tests/conftest.py`` to its owner.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aicache.testing import S3Server, start_s3

BLOCK = 64 * 1024


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3(("aicache-test",))
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Dataset:
    bucket: str
    root: str  # "bucket/prefix"
    files: dict[str, bytes]  # full remote path → content (the reference)
    server: S3Server

    def rel(self, path: str) -> str:
        return path[len(self.root) + 1:]


def make_files(seed: int, block: int = BLOCK) -> dict[str, bytes]:
    """Sizes around block boundaries: empty, 1 byte, block±1, exact multiples, 3.5 blocks."""
    rng = random.Random(seed)
    sizes = [0, 1, block - 1, block, block + 1, 2 * block, int(3.5 * block), 5 * block + 17]
    return {f"f{i:02d}.bin": rng.randbytes(n) for i, n in enumerate(sizes)}


@pytest.fixture(scope="module")
def s3_dataset(s3: S3Server) -> Dataset:
    fs = s3.filesystem()
    root = "aicache-test/ds"
    files = {f"{root}/{name}": data for name, data in make_files(7).items()}
    for path, data in files.items():
        fs.pipe_file(path, data)
    return Dataset("aicache-test", root, files, s3)


def wait_mounted(mountpoint: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.ismount(mountpoint):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"aicache mount exited with {proc.returncode}: "
                               f"{proc.stderr.read().decode() if proc.stderr else ''}")
        time.sleep(0.05)
    raise TimeoutError(f"{mountpoint} was not mounted within {timeout}s")


def start_mount(remote_url: str, mountpoint: str, cache_dir: str, *extra: str
                ) -> subprocess.Popen[bytes]:
    """``aicache mount … --foreground`` as a child process; returns once mounted."""
    cmd = [sys.executable, "-m", "aicache.cli.main", "mount", remote_url, mountpoint,
           "--cache-dir", cache_dir, "--foreground", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_mounted(mountpoint, proc)
    return proc


def stop_mount(proc: subprocess.Popen[bytes], mountpoint: str) -> int:
    """SIGTERM (libfuse unmounts cleanly); returns the exit code. Force-unmounts on failure."""
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    if os.path.ismount(mountpoint):
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)
        subprocess.run(["umount", "-l", mountpoint], check=False)
    return rc


@contextlib.contextmanager
def mounted_file(tmp_path: Path, name: str, data: bytes, *extra: str, tag: str = ""
                 ) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A local directory holding ``name`` = ``data``, mounted through ``aicache mount``
    (64 MiB cache, ``extra`` flags); yields ``(mount point, process)`` and then checks
    that SIGTERM unmounts cleanly (exit 0, nothing left mounted)."""
    src = tmp_path / f"src{tag}"
    src.mkdir(exist_ok=True)
    (src / name).write_bytes(data)
    mnt = tmp_path / f"mnt{tag}"
    mnt.mkdir()
    proc = start_mount(str(src), str(mnt), str(tmp_path / f"cache{tag}"), "--cache-size", "64MiB",
                       *extra)
    try:
        yield mnt, proc
    finally:
        rc = stop_mount(proc, str(mnt))
    assert rc == 0 and not os.path.ismount(mnt)


def s3_mount_options(server: S3Server) -> list[str]:
    return ["-o", f"endpoint_url={server.endpoint_url}", "-o", "key=testing", "-o", "secret=testing",
            "-o", "skip_instance_cache=true"]
