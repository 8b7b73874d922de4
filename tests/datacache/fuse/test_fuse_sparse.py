"""Sparse reads through the FUSE mount: a read that jumps into a large file fetches the
pages around it, not its 4 MiB block (the engine side: ``tests/datacache/engine/test_engine_sparse.py``)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from tests.s3fixtures import mounted_file


def _remote_bytes(cache: Path) -> float:
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "cache", "stats", "--cache-dir",
                        str(cache), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return float(json.loads(r.stdout)["remote_bytes"])


def test_a_jumping_reader_of_the_mount_fetches_pages_and_reads_exact_bytes(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "the FUSE tests run as root (see README)"
    data = random.Random(11).randbytes(24 * 1024 * 1024)
    offsets = [9_000_123, 17_500_000, 3_333_333]
    with mounted_file(tmp_path, "big.bin", data, "--policy", "lru") as (mnt, _):
        with open(mnt / "big.bin", "rb", buffering=0) as f:
            for off in offsets:
                f.seek(off)
                assert f.read(100) == data[off:off + 100]
    fetched = _remote_bytes(tmp_path / "cache")
    # whole blocks would be 3 x 4 MiB (and their readahead); the kernel asks for at least
    # its page-sized requests, the engine rounds them out to 16 KiB pages
    assert 0 < fetched <= 3 * 256 * 1024, fetched  # here: 3 pages, 48 KiB
