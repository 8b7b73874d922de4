"""``aicache umount``: a live mount, a busy one (an error naming ``--lazy``, then ``--lazy``),
one whose process was killed, and bad input (one line, exit 2)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from aicache.cli.umount import mount_entry
from s3fixtures import start_mount, stop_mount

DATA = random.Random(3).randbytes(300_000)


def umount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", "umount", *args],
                          capture_output=True, text=True, timeout=60)


def _mount(tmp_path: Path) -> tuple[Path, subprocess.Popen[bytes]]:
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "x.bin").write_bytes(DATA)
    return mnt, start_mount(str(src), str(mnt), str(tmp_path / "cache"), "--cache-size", "16MiB")


def _wait_exit(proc: subprocess.Popen[bytes]) -> int | None:
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        return None


def test_umount_unmounts_and_the_mount_process_exits(tmp_path: Path) -> None:
    mnt, proc = _mount(tmp_path)
    try:
        assert (mnt / "x.bin").read_bytes() == DATA
        r = umount(str(mnt))
        assert r.returncode == 0, r.stderr
        assert mount_entry(str(mnt)) is None
        assert _wait_exit(proc) == 0
        assert os.listdir(mnt) == []
    finally:
        if proc.poll() is None:
            stop_mount(proc, str(mnt))


def test_a_busy_mount_is_an_error_naming_lazy_which_detaches_it(tmp_path: Path) -> None:
    mnt, proc = _mount(tmp_path)
    try:
        with open(mnt / "x.bin", "rb") as held:
            r = umount(str(mnt))
            assert r.returncode == 1 and "busy" in r.stderr and "--lazy" in r.stderr
            assert len(r.stderr.strip().splitlines()) == 1
            assert mount_entry(str(mnt)) is not None  # still mounted, still serving
            assert held.read() == DATA
            r = umount("--lazy", str(mnt))
            assert r.returncode == 0, r.stderr
            assert mount_entry(str(mnt)) is None  # detached at once
            assert proc.poll() is None  # serving the open file until it is closed
        assert _wait_exit(proc) == 0
    finally:
        if proc.poll() is None:
            stop_mount(proc, str(mnt))


def test_umount_clears_a_mount_whose_process_died(tmp_path: Path) -> None:
    mnt, proc = _mount(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    try:
        assert mount_entry(str(mnt)) is not None
        with pytest.raises(OSError):  # ENOTCONN: what the user sees before umount
            os.listdir(mnt)
        r = umount(str(mnt))
        assert r.returncode == 0, r.stderr
        assert mount_entry(str(mnt)) is None and os.listdir(mnt) == []
    finally:
        if mount_entry(str(mnt)) is not None:
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)


@pytest.mark.parametrize("case", ["missing", "not-mounted", "other-fs"])
def test_bad_mountpoints_are_one_line_errors(tmp_path: Path, case: str) -> None:
    path = {"missing": str(tmp_path / "nope"), "not-mounted": str(tmp_path), "other-fs": "/proc"}[case]
    r = umount(path)
    want = {"missing": "does not exist", "not-mounted": "is not mounted",
            "other-fs": "not an aicache mount"}[case]
    assert r.returncode == 2 and want in r.stderr and len(r.stderr.strip().splitlines()) == 1
