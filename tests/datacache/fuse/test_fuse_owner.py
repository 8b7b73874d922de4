"""``aicache mount --uid/--gid``: the owner of every file and directory in the mount, as
Mountpoint's flags (default: the mounting user), on a real mount with each driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aicache.datacache.fuse import lowlevel_abi
from s3fixtures import start_mount, stop_mount

APIS = ["highlevel"] + (["lowlevel"] if lowlevel_abi.supported() else [])


def owners(mnt: Path) -> set[tuple[int, int]]:
    """(uid, gid) of the mount's root, a folder and a file in it, read by the kernel."""
    return {(st.st_uid, st.st_gid) for st in
            (os.stat(mnt), os.stat(mnt / "d"), os.stat(mnt / "d" / "f.bin"))}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("flags", [("--uid", "4321", "--gid", "8765"), ()], ids=["given", "default"])
def test_files_and_dirs_belong_to_the_given_owner(tmp_path: Path, api: str, flags) -> None:
    (tmp_path / "src" / "d").mkdir(parents=True)
    (tmp_path / "src" / "d" / "f.bin").write_bytes(b"abc" * 1000)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(str(tmp_path / "src"), str(mnt), str(tmp_path / "cache"),
                       "--cache-size", "16MiB", "--fuse-api", api, *flags)
    try:
        want = (4321, 8765) if flags else (os.getuid(), os.getgid())
        assert owners(mnt) == {want}
        assert (mnt / "d" / "f.bin").read_bytes() == b"abc" * 1000
    finally:
        assert stop_mount(proc, str(mnt)) == 0
    assert not os.path.ismount(mnt)


@pytest.mark.parametrize("flag,value", [("--uid", "-1"), ("--uid", "no-such-user-xyz"),
                                        ("--gid", "4294967295"), ("--gid", "no-such-group-xyz")])
def test_a_bad_owner_is_one_line_and_exit_2(tmp_path: Path, flag: str, value: str) -> None:
    (tmp_path / "mnt").mkdir()
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "mount", str(tmp_path),
                        str(tmp_path / "mnt"), "--cache-dir", str(tmp_path / "c"),
                        "--cache-size", "16MiB", "--foreground", f"{flag}={value}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and value in lines[0], r.stderr
    assert not os.path.ismount(tmp_path / "mnt")
