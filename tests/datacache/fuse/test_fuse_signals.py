"""SIGINT (Ctrl-C) and SIGTERM on ``aicache mount --foreground`` unmount, on both FUSE
drivers: the process exits, the mount point is no longer a mount (it lists, it mounts
again), and a reader that held a file open gets an error instead of hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aicache.datacache.fuse import lowlevel_abi
from s3fixtures import BLOCK, Dataset, s3, s3_dataset, s3_mount_options, start_mount, stop_mount  # noqa: F401

#: a generous bound for a loaded CI machine; the condition is polled, so a fast exit is fast
DEADLINE_S = 30.0

#: reads its file when told (a line on stdin), and prints how that went
HOLDER = """
import sys
f = open(sys.argv[1], "rb")
print("open", flush=True)
sys.stdin.readline()
try:
    f.read()
    print("read")
except OSError as exc:
    print("error", exc.errno)
"""


def _mounted(path: Path) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return os.path.ismount(path) or any(line.split()[1] == real for line in f)


APIS = ["highlevel"] + (["lowlevel"] if lowlevel_abi.supported() else [])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("api", APIS)
def test_a_signal_unmounts_a_foreground_mount(s3_dataset: Dataset, tmp_path: Path,  # noqa: F811
                                              api: str, sig: signal.Signals) -> None:
    mnt, cache = tmp_path / "mnt", tmp_path / "cache"
    mnt.mkdir()
    args = [f"s3://{s3_dataset.root}", str(mnt), str(cache), "--cache-size", "16MiB",
            "--block-size", str(BLOCK), "--fuse-api", api, *s3_mount_options(s3_dataset.server)]
    first, held = sorted(s3_dataset.files)[-1], sorted(s3_dataset.files)[-2]
    proc = start_mount(*args)
    holder = None
    try:
        with open(mnt / s3_dataset.rel(first), "rb") as f:
            assert f.read() == s3_dataset.files[first]  # serving, the remote's client running
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(mnt / s3_dataset.rel(held))],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "open"
        proc.send_signal(sig)
        deadline = time.monotonic() + DEADLINE_S
        while (proc.poll() is None or _mounted(mnt)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() == 0, f"mount still running {DEADLINE_S}s after {sig.name}"
        assert not _mounted(mnt)
        out, _ = holder.communicate("go\n", timeout=DEADLINE_S)  # a hang fails here
        assert out.split()[0] == "error", out  # the file's mount is gone: an error, not bytes
        assert os.listdir(mnt) == []  # the bare directory again
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        if proc.poll() is None or _mounted(mnt):
            stop_mount(proc, str(mnt))
    proc = start_mount(*args)  # mounts again on the same point and cache dir
    try:
        with open(mnt / s3_dataset.rel(held), "rb") as f:
            assert f.read() == s3_dataset.files[held]
    finally:
        assert stop_mount(proc, str(mnt)) == 0
    assert not _mounted(mnt)
