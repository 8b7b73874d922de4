"""``--endpoint-url``, ``--region`` and ``--log-level`` on ``mount`` and ``record`` (a
non-AWS S3 store without ``-o``), their bad input, and the README's ``aicache record``
line run exactly as written (against moto, named by ``AWS_ENDPOINT_URL`` as for any
S3-compatible store)."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from s3fixtures import BLOCK, Dataset, s3, s3_dataset, start_mount, stop_mount  # noqa: F401

CLI = [sys.executable, "-m", "aicache.cli.main"]


def test_mount_reaches_a_non_aws_store_by_endpoint_and_region(s3_dataset: Dataset, tmp_path: Path) -> None:  # noqa: F811
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = start_mount(f"s3://{s3_dataset.root}", str(mnt), str(tmp_path / "cache"),
                       "--cache-size", "16MiB", "--block-size", str(BLOCK),
                       "--endpoint-url", s3_dataset.server.endpoint_url, "--region", "us-east-1",
                       "--log-level", "info")
    try:
        for path, data in s3_dataset.files.items():
            assert (mnt / s3_dataset.rel(path)).read_bytes() == data
    finally:
        assert stop_mount(proc, str(mnt)) == 0
    assert "INFO aicache.fuse" in proc.stderr.read().decode()  # --log-level info, on stderr


def test_without_log_level_a_foreground_mount_logs_only_warnings(tmp_path: Path) -> None:
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "x").write_bytes(b"x" * 1000)
    for level, shown in ((None, False), ("error", False), ("debug", True)):
        proc = start_mount(str(src), str(mnt), str(tmp_path / "cache"), "--cache-size", "16MiB",
                           *(["--log-level", level] if level else []))
        try:
            assert (mnt / "x").read_bytes() == b"x" * 1000
        finally:
            assert stop_mount(proc, str(mnt)) == 0
        assert ("INFO aicache.fuse" in proc.stderr.read().decode()) is shown, level


@pytest.mark.parametrize("flags, says", [
    (["--endpoint-url", "ftp://host:21"], "--endpoint-url 'ftp://host:21' is not an http(s) URL"),
    (["--endpoint-url", "127.0.0.1:9000"], "is not an http(s) URL"),
    (["--region", "us east"], "--region 'us east' is not a region name"),
    (["--endpoint-url", "http://a:1", "-o", "endpoint_url=http://b:2"], "disagree; give one"),
])
def test_bad_s3_flags_are_one_line_errors(tmp_path: Path, flags: list[str], says: str) -> None:
    (tmp_path / "mnt").mkdir()
    r = subprocess.run([*CLI, "mount", "s3://bucket/data", str(tmp_path / "mnt"), "--cache-dir",
                        str(tmp_path / "c"), "--cache-size", "1GiB", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_s3_flags_on_a_non_s3_remote_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    r = subprocess.run([*CLI, "mount", str(tmp_path), str(tmp_path / "mnt"), "--cache-dir",
                        str(tmp_path / "c"), "--cache-size", "1GiB", "--region", "eu-west-1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "apply to s3:// remotes" in r.stderr and "-o KEY=VALUE" in r.stderr


TRAIN = """
import os
root = os.environ["AICACHE_MOUNT"]
for name in sorted(os.listdir(root)):
    with open(os.path.join(root, name), "rb") as f:
        while f.read(1 << 16):
            pass
print("trained")
"""


def test_the_readme_record_line_runs_as_written(s3, tmp_path: Path) -> None:  # noqa: F811
    """``aicache record s3://bucket/dataset --out job.csv -- python train.py``: no cache
    flags (defaults under $XDG_CACHE_HOME), the endpoint from the environment."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("aicache record "))
    argv = line.split("#")[0].split()
    assert argv[:2] == ["aicache", "record"]
    fs = s3.filesystem()
    if not fs.exists("bucket"):
        fs.mkdir("bucket")
    files = {f"bucket/dataset/f{i}.bin": os.urandom(n) for i, n in enumerate((1, 5 << 20, 9 << 20))}
    fs.pipe(files)
    (tmp_path / "train.py").write_text(TRAIN)
    env = dict(os.environ, AWS_ENDPOINT_URL=s3.endpoint_url, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    r = subprocess.run([*CLI, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "trained" in r.stdout
    with open(tmp_path / "job.csv") as f:
        rows = list(csv.DictReader(f))
    block = 4 << 20  # the default block size
    per_file = {p.rsplit("/", 1)[1]: math.ceil(len(d) / block) for p, d in files.items()}
    seen: dict[str, set[str]] = {}
    for row in rows:
        seen.setdefault(row["unit"].lstrip("./"), set()).add(row["obj_id"])
    assert {u: len(ids) for u, ids in seen.items()} == per_file  # every block of every file read
    assert (tmp_path / "xdg" / "aicache").is_dir()  # the default cache dir
