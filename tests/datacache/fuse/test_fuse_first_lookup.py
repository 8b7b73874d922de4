"""A mount lists its dataset root before it answers the kernel's INIT, so a job's first
lookups (a subfolder, a file at the top) and its first read ask the remote for nothing but
the file's bytes: the listing that used to sit in front of the first byte is made while
mounting."""

from __future__ import annotations

import os
import random
from pathlib import Path

from aicache.datacache.fuse import lowlevel_abi
from s3fixtures import BLOCK, s3, s3_mount_options, start_mount, stop_mount  # noqa: F401

import pytest

APIS = ["highlevel"] + (["lowlevel"] if lowlevel_abi.supported() else [])


@pytest.mark.parametrize("api", APIS)
def test_first_lookups_after_mounting_ask_the_remote_nothing(s3, tmp_path: Path,  # noqa: F811
                                                             api: str) -> None:
    rng = random.Random(5)
    root = f"aicache-test/first-{api}"
    files = {f"{root}/top.bin": rng.randbytes(BLOCK // 2),
             f"{root}/sub/inner.bin": rng.randbytes(3 * BLOCK + 7)}
    s3.filesystem().pipe(files)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(f"s3://{root}", str(mnt), str(tmp_path / "cache"), "--cache-size", "16MiB",
                       "--block-size", str(BLOCK), "--policy", "lru", "--fuse-api", api,
                       *s3_mount_options(s3))
    try:
        before = s3.requests.snapshot()
        assert os.path.isdir(mnt / "sub")  # the root's listing named it
        with open(mnt / "top.bin", "rb") as f:  # and sized this file: no HEAD
            assert f.read() == files[f"{root}/top.bin"]
        asked = s3.requests.snapshot() - before
        assert asked == {"get": 1}, asked
        with open(mnt / "sub" / "inner.bin", "rb") as f:  # a subfolder: listed at first use
            assert f.read() == files[f"{root}/sub/inner.bin"]
        asked = s3.requests.snapshot() - before
        assert asked["list"] == 1 and asked["head"] == 0, asked
    finally:
        assert stop_mount(proc, str(mnt)) == 0
