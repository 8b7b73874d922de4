"""Bytes through the cache equal the remote's, for any (offset, length): across block
boundaries, at and past EOF, with evictions and prefetches going on. Reference = the bytes
uploaded to moto S3 (a plain slice), read back through ``aicache::s3://`` (fsspec) and
through a real FUSE mount of the same bucket."""

from __future__ import annotations

import os
import tempfile

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from s3fixtures import BLOCK, Dataset, s3, s3_dataset, s3_mount_options, start_mount, stop_mount  # noqa: F401

from aicache.datacache.fs import AICacheFileSystem
from aicache.datacache.store import HEADER_SIZE

POLICIES = ["chiron", "alluxio", "juicefs", "lru+stride"]


@pytest.fixture(scope="module", params=POLICIES)
def cached_fs(request: pytest.FixtureRequest, s3_dataset: Dataset):  # noqa: F811
    with tempfile.TemporaryDirectory() as d:
        # a budget of 6 blocks < the dataset (≈ 15 blocks): hits, misses and evictions mix
        fs = AICacheFileSystem(target_protocol="s3", target_options=s3_dataset.server.storage_options,
                               cache_dir=d, cache_size=6 * (BLOCK + HEADER_SIZE), block_size=BLOCK,
                               policy=request.param, skip_instance_cache=True)
        yield fs
        fs.engine.wait_prefetches()
        assert fs.engine.store.used <= fs.engine.store.capacity
        assert fs.engine.store.verify().bad == 0
        fs.close()


reads = st.tuples(st.integers(0, 7), st.integers(0, 6 * BLOCK), st.integers(0, 3 * BLOCK + 3))


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(reads, min_size=1, max_size=8))
def test_cat_file_ranges_match_remote(cached_fs: AICacheFileSystem, s3_dataset: Dataset, ops) -> None:  # noqa: F811
    paths = sorted(s3_dataset.files)
    for i, off, n in ops:
        path = paths[i]
        ref = s3_dataset.files[path]
        assert cached_fs.cat_file(path, off, off + n) == ref[off:off + n]


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(reads, min_size=1, max_size=8))
def test_open_seek_read_matches_remote(cached_fs: AICacheFileSystem, s3_dataset: Dataset, ops) -> None:  # noqa: F811
    paths = sorted(s3_dataset.files)
    for i, off, n in ops:
        path = paths[i]
        ref = s3_dataset.files[path]
        with cached_fs.open(path, "rb") as f:
            f.seek(min(off, len(ref)))
            assert f.read(n) == ref[min(off, len(ref)):min(off, len(ref)) + n]
            assert f.read(7) == ref[min(off, len(ref)) + n:min(off, len(ref)) + n + 7]


def test_url_chaining_and_metadata_behave_as_target(s3_dataset: Dataset, tmp_path) -> None:  # noqa: F811
    opts = s3_dataset.server.storage_options
    aic = {"cache_dir": str(tmp_path), "cache_size": "1MiB", "block_size": BLOCK, "policy": "juicefs"}
    path = sorted(s3_dataset.files)[-1]
    with fsspec.open(f"aicache::s3://{path}", "rb", s3=opts, aicache=aic) as f:
        assert f.read() == s3_dataset.files[path]
    fs = AICacheFileSystem(target_protocol="s3", target_options=opts, skip_instance_cache=True, **aic)
    s3fs = s3_dataset.server.filesystem()
    assert fs.ls(s3_dataset.root, detail=False) == s3fs.ls(s3_dataset.root, detail=False)
    assert fs.find(s3_dataset.bucket) == s3fs.find(s3_dataset.bucket)
    assert fs.info(path)["size"] == len(s3_dataset.files[path])
    assert fs.exists(path) and not fs.exists(path + ".nope")
    assert fs.cat(sorted(s3_dataset.files)[:2]) == {p: s3_dataset.files[p] for p in sorted(s3_dataset.files)[:2]}
    with pytest.raises(PermissionError):
        fs.open(path, "wb")
    # the file fits the budget: once read, a re-read is served from the cache alone
    assert fs.cat_file(path) == s3_dataset.files[path]
    fs.engine.wait_prefetches()
    before = fs.engine.metrics.value("remote_bytes")
    hits = fs.engine.metrics.value("hits")
    assert fs.cat_file(path) == s3_dataset.files[path]
    assert fs.engine.metrics.value("remote_bytes") == before
    assert fs.engine.metrics.value("hits") == hits + 6  # 5 full blocks + a 17-byte tail
    fs.close()


@pytest.fixture(scope="module")
def fuse_mount(s3_dataset: Dataset):  # noqa: F811
    with tempfile.TemporaryDirectory() as mnt, tempfile.TemporaryDirectory() as cache:
        proc = start_mount(f"s3://{s3_dataset.root}", mnt, cache, "--cache-size", str(6 * (BLOCK + HEADER_SIZE)),
                           "--block-size", str(BLOCK), "--policy", "chiron",
                           *s3_mount_options(s3_dataset.server))
        try:
            yield mnt
        finally:
            rc = stop_mount(proc, mnt)
            assert not os.path.ismount(mnt)
            assert rc == 0, proc.stderr.read().decode() if proc.stderr else rc


def test_fuse_listing_matches_remote(fuse_mount: str, s3_dataset: Dataset) -> None:  # noqa: F811
    names = sorted(os.listdir(fuse_mount))
    assert names == sorted(s3_dataset.rel(p) for p in s3_dataset.files)
    for p, data in s3_dataset.files.items():
        assert os.stat(os.path.join(fuse_mount, s3_dataset.rel(p))).st_size == len(data)


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(reads, min_size=1, max_size=8))
def test_fuse_pread_matches_remote(fuse_mount: str, s3_dataset: Dataset, ops) -> None:  # noqa: F811
    paths = sorted(s3_dataset.files)
    for i, off, n in ops:
        ref = s3_dataset.files[paths[i]]
        fd = os.open(os.path.join(fuse_mount, s3_dataset.rel(paths[i])), os.O_RDONLY)
        try:
            assert os.pread(fd, n, off) == ref[off:off + n]
        finally:
            os.close(fd)


def test_fuse_is_read_only(fuse_mount: str, s3_dataset: Dataset) -> None:  # noqa: F811
    path = os.path.join(fuse_mount, s3_dataset.rel(sorted(s3_dataset.files)[3]))
    with pytest.raises(OSError):
        open(path, "wb").close()
    with pytest.raises(OSError):
        os.unlink(path)


def test_a_background_mount_over_s3_serves_the_remote_and_unmounts(s3_dataset: Dataset,  # noqa: F811
                                                                   tmp_path) -> None:
    """``aicache mount`` without ``--foreground`` (the README's form) returns once the mount
    is up and keeps serving from a detached process. It used to detach with libfuse's
    C-level fork, after which the S3 client still pointed at the parent's event-loop
    thread and every read failed with EIO."""
    import subprocess
    import sys
    import time

    mnt, cache = tmp_path / "mnt", tmp_path / "cache"
    mnt.mkdir()
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "mount", f"s3://{s3_dataset.root}",
                        str(mnt), "--cache-dir", str(cache), "--cache-size", "16MiB",
                        "--block-size", str(BLOCK), *s3_mount_options(s3_dataset.server)],
                       capture_output=True, timeout=60)
    try:
        assert r.returncode == 0, r.stderr.decode()
        assert os.path.ismount(mnt)  # up when the command returned
        log = cache / "mount.log"  # a detached daemon logs to a file, and says where
        assert str(log) in r.stdout.decode()
        for p, data in s3_dataset.files.items():
            with open(mnt / s3_dataset.rel(p), "rb") as f:
                assert f.read() == data
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-f", f"mount s3://{s3_dataset.root} {mnt}"], capture_output=True).returncode == 0:
        time.sleep(0.1)
    assert not os.path.ismount(mnt)
    assert subprocess.run(["pgrep", "-f", f"mount s3://{s3_dataset.root} {mnt}"],
                          capture_output=True).returncode == 1  # the daemon exited
    assert "aicache.fuse" in log.read_text()  # its start-up lines were logged there
