"""The budget rules of :mod:`aicache.datacache.budget`: a budget above what the disk holds
(keeping ``free_space_ratio`` of it free) is capped with a warning, checked against the
disk's own ``statvfs``; a second store (another process, or another open in this one) on a
cache dir in use must give the recorded budget, and a store alone on it resizes it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from aicache.datacache.budget import disk_capped
from aicache.datacache.keys import BlockKey
from aicache.datacache.store import BlockStore
from aicache.errors import BadInput

BLOCK = 64 * 1024
MiB = 1 << 20


def _disk(total: int, free: int, frsize: int = 4096) -> object:
    return lambda _path: SimpleNamespace(f_blocks=total // frsize, f_bavail=free // frsize,
                                         f_frsize=frsize)


def test_the_free_disk_guard_caps_a_budget_beyond_the_disk(caplog) -> None:
    # a 100 GiB disk with 30 GiB free, 5 GiB of it already ours, 10% kept free
    disk = _disk(100 << 30, 30 << 30)
    with caplog.at_level(logging.WARNING, "aicache.datacache"):
        assert disk_capped("/c", 20 << 30, 5 << 30, 0.1, BLOCK, disk) == 20 << 30
        assert not caplog.records
        assert disk_capped("/c", 50 << 30, 5 << 30, 0.1, BLOCK, disk) == 25 << 30
    assert "capped at 25.00 GiB" in caplog.text and "50.00 GiB" in caplog.text
    assert disk_capped("/c", 50 << 30, 5 << 30, 0.0, BLOCK, disk) == 35 << 30
    assert disk_capped("/c", 50 << 30, 0, 0.5, BLOCK, disk) == BLOCK  # never below one block


def test_a_real_store_is_capped_by_its_disks_free_space(tmp_path: Path, caplog) -> None:
    huge = 1 << 60
    with caplog.at_level(logging.WARNING, "aicache.datacache"):
        with BlockStore(tmp_path / "c", huge, BLOCK, free_space_ratio=0.0) as st:
            st_v = os.statvfs(tmp_path)
            assert BLOCK <= st.capacity <= st_v.f_blocks * st_v.f_frsize < huge
            assert st.stats().capacity_bytes == st.capacity
    assert "capped" in caplog.text
    with pytest.raises(BadInput, match="free space ratio"):
        BlockStore(tmp_path / "d", MiB, BLOCK, free_space_ratio=1.0)


def test_a_dir_in_use_keeps_its_budget_and_a_lone_opener_resizes_it(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = BlockStore(d, MiB, BLOCK)
    with pytest.raises(BadInput, match=r"2\.00 MiB differs from 1\.00 MiB"):
        BlockStore(d, 2 * MiB, BLOCK)
    with BlockStore(d, MiB, BLOCK) as same:  # the same budget shares the dir
        same.put(BlockKey("f", "v", 0), b"x" * BLOCK)
    first.close()
    with BlockStore(d, 4 * BLOCK, BLOCK) as resized:  # alone: the new budget replaces it
        assert resized.capacity == 4 * BLOCK
    with BlockStore.open_existing(d) as admin:
        assert admin.capacity == 4 * BLOCK


def test_another_process_holding_the_dir_refuses_a_different_budget(tmp_path: Path) -> None:
    d = tmp_path / "c"
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from aicache.datacache.store import BlockStore; "
         f"s = BlockStore({str(d)!r}, {MiB}, {BLOCK}); print('open', flush=True); "
         "sys.stdin.read(); s.close()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "open"
        with pytest.raises(BadInput, match="another process uses now"):
            BlockStore(d, 2 * MiB, BLOCK)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    with BlockStore(d, 2 * MiB, BLOCK) as st:  # that process is gone: a resize
        assert st.capacity == 2 * MiB


def test_mount_refuses_a_bad_free_space_ratio(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "mount", str(tmp_path),
                        str(tmp_path), "--cache-dir", str(tmp_path / "c"), "--cache-size", "1GiB",
                        "--free-space-ratio", "1.5"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--free-space-ratio" in r.stderr


def test_a_second_mount_with_another_budget_is_refused_naming_both(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "aicache.cli.main"]
    src, m1, m2 = tmp_path / "src", tmp_path / "m1", tmp_path / "m2"
    for d in (src, m1, m2):
        d.mkdir()
    (src / "a.bin").write_bytes(os.urandom(3 * BLOCK))
    base = ["--cache-dir", str(tmp_path / "c"), "--block-size", str(BLOCK)]
    r = subprocess.run([*cli, "mount", str(src), str(m1), *base, "--cache-size", "1GiB"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    try:
        r = subprocess.run([*cli, "mount", str(src), str(m2), *base, "--cache-size", "2GiB"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "2.00 GiB differs from 1.00 GiB" in r.stderr
        assert not os.path.ismount(m2)
        assert (m1 / "a.bin").read_bytes() == (src / "a.bin").read_bytes()  # the first reads on
    finally:
        subprocess.run([*cli, "umount", str(m1)], capture_output=True, timeout=60)
    assert not os.path.ismount(m1)


def test_cache_clear_repairs_a_users_entry_of_the_wrong_type(tmp_path: Path) -> None:
    d = tmp_path / "c"
    BlockStore(d, MiB, BLOCK).close()
    (d / "users").unlink()
    (d / "users").mkdir()  # a directory where the budget lock file should be
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "cache", "clear", "--cache-dir",
                        str(d), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert str(d / "users") in r.stdout
    with BlockStore(d, MiB, BLOCK) as st:
        assert st.capacity == MiB
