"""The FUSE mount's kernel readahead window: found through mountinfo, raised (never
lowered) through sysfs, and in force on a real mount — it bounds the size of the read
requests the kernel sends the server (1 MiB on libfuse 3 instead of 128 KiB)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from aicache.datacache.fuse.binding import LIBFUSE_MAJOR
from aicache.datacache.fuse.kernel import mount_device, raise_readahead
from tests.s3fixtures import mounted_file


def _mountinfo(tmp_path: Path, lines: list[str]) -> str:
    p = tmp_path / "mountinfo"
    p.write_text("".join(line + "\n" for line in lines))
    return str(p)


def test_mount_device_unescapes_paths_and_takes_the_topmost_mount(tmp_path: Path) -> None:
    mp = Path(os.path.realpath(tmp_path)) / "my data"
    mp.mkdir()
    esc = str(mp).replace(" ", "\\040")
    info = _mountinfo(tmp_path, [
        "22 1 0:21 / / rw,relatime - overlay overlay rw",
        f"40 22 0:39 / {esc} ro,nosuid - fuse.aicache aicache ro",
        f"41 40 0:45 / {esc} ro,nosuid - fuse.aicache aicache ro",
        f"42 22 0:46 / {esc}x ro - fuse.other other ro",
    ])
    assert mount_device(str(mp), info) == "0:45"
    assert mount_device(str(tmp_path / "elsewhere"), info) is None
    assert mount_device(str(mp), str(tmp_path / "no-such-file")) is None


def test_raise_readahead_raises_but_never_lowers(tmp_path: Path, monkeypatch) -> None:
    import aicache.datacache.fuse.kernel as fusemod

    bdi = tmp_path / "bdi" / "0:45"
    bdi.mkdir(parents=True)
    knob = bdi / "read_ahead_kb"
    knob.write_text("128\n")
    monkeypatch.setattr(fusemod, "mount_device", lambda mp: "0:45" if mp == "/mnt/x" else None)
    assert raise_readahead("/mnt/x", 4096, sysfs=str(tmp_path / "bdi")) == 4096
    assert knob.read_text().strip() == "4096"
    assert raise_readahead("/mnt/x", 1024, sysfs=str(tmp_path / "bdi")) == 4096  # not lowered
    assert knob.read_text().strip() == "4096"
    assert raise_readahead("/mnt/y", 4096, sysfs=str(tmp_path / "bdi")) is None  # not mounted
    knob.write_text("garbage")
    assert raise_readahead("/mnt/x", 4096, sysfs=str(tmp_path / "bdi")) is None  # unreadable: left alone


def test_real_mount_gets_the_readahead_window_and_serves_exact_bytes(tmp_path: Path) -> None:
    """As root (the tests run so, with /dev/fuse): the window is set on the live mount, and
    a large file read with 4 MiB reads through it is byte-identical to the source."""
    assert os.geteuid() == 0, "the FUSE tests run as root (see README)"
    assert LIBFUSE_MAJOR == 3, "setup installs fuse3; mfusepy should bind libfuse 3"
    data = os.urandom(9 * 1024 * 1024 + 12345)
    with mounted_file(tmp_path, "big.bin", data, "--block-size", "2MiB", "--policy", "lru"
                      ) as (mnt, _):
        dev = mount_device(os.path.realpath(mnt))
        assert dev is not None
        knob = Path("/sys/class/bdi") / dev / "read_ahead_kb"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and int(knob.read_text()) < 2048:
            time.sleep(0.1)
        assert int(knob.read_text()) >= 2048  # default: the block size
        h = hashlib.sha256()
        with open(mnt / "big.bin", "rb", buffering=0) as f:
            while chunk := f.read(4 << 20):
                h.update(chunk)
        assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_the_window_is_in_force_when_the_first_open_returns(tmp_path: Path) -> None:
    """The kernel copies the mount's window into a file when its open returns, so a file
    opened right after mounting must already get the raised window: the first open sets
    it (without waiting for the background setter) before it answers."""
    assert os.geteuid() == 0, "the FUSE tests run as root (see README)"
    data = os.urandom(3 * 1024 * 1024)
    with mounted_file(tmp_path, "big.bin", data, "--block-size", "2MiB", "--policy", "lru"
                      ) as (mnt, _):
        dev = mount_device(os.path.realpath(mnt))
        assert dev is not None
        knob = Path("/sys/class/bdi") / dev / "read_ahead_kb"
        with open(mnt / "big.bin", "rb", buffering=0) as f:
            assert int(knob.read_text()) >= 2048  # no wait: the open set it
            assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
