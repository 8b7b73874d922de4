"""Inputs a cache meets in the wild and must survive: file names that are not UTF-8, an
index of another layout, a block file truncated under a reader's mapping, a damaged cache
directory handed to ``aicache cache verify``, an output folder that cannot exist.

Each is checked against the plain file (the bytes ``open`` reads), on real files.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import fsspec
import pytest

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.fs import AICacheFileSystem
from aicache.datacache.mapped import SUPPORTED as MMAP_SUPPORTED
from aicache.datacache.store import BlockKey, BlockStore

BLOCK = 4096
#: a name made of bytes that are not UTF-8 (Latin-1 "café", and a lone 0xff)
RAW_NAMES = [b"caf\xe9.bin", b"\xff\xfe-odd.bin"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def raw_dir(tmp_path) -> tuple[str, dict[str, bytes]]:
    """A folder whose files have names that are not UTF-8, made from bytes."""
    d = tmp_path / "remote"
    d.mkdir()
    truth = {}
    for i, raw in enumerate(RAW_NAMES):
        data = os.urandom(2 * BLOCK + 17 * (i + 1))
        p = os.path.join(os.fsencode(str(d)), raw)
        with open(p, "wb") as f:
            f.write(data)
        truth[os.fsdecode(p)] = data
    return str(d), truth


def test_non_utf8_names_are_read_through_fsspec_and_served_again_from_the_cache(tmp_path,
                                                                              raw_dir) -> None:
    d, truth = raw_dir
    cache = str(tmp_path / "cache")
    for rnd in range(2):  # fetched, then served by a fresh process's view of the cache
        fs = AICacheFileSystem(target_protocol="file", cache_dir=cache, cache_size="64MiB",
                               block_size=BLOCK, policy="lru", skip_instance_cache=True,
                               share_engine=False)
        try:
            listed = sorted(e for e in fs.ls(d, detail=False))
            assert [os.fsencode(p) for p in listed] == sorted(os.fsencode(p) for p in truth)
            for path, data in truth.items():
                assert fs.cat_file(path) == data
                with fs.open(path, "rb") as f:
                    f.seek(BLOCK - 3)
                    assert f.read(10) == data[BLOCK - 3:BLOCK + 7]
            st = fs.engine.stats()
            assert st["misses"] == (0 if rnd else 3 * len(truth)), st
        finally:
            fs.engine.close()
    store = BlockStore.open_existing(cache)
    try:
        assert {k.path for k in store.keys()} == set(truth)  # the index keeps the names
        res = store.verify()
        assert (res.bad, res.misplaced, res.missing) == (0, 0, 0)
    finally:
        store.close()


def _warm(cache: str, path: str, data: bytes) -> None:
    with CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                     params=EngineParams(block_size=BLOCK, max_prefetch=0)) as e:
        assert e.read(path) == data


@pytest.fixture
def one_file(tmp_path) -> tuple[str, bytes]:
    data = os.urandom(3 * BLOCK + 5)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    return str(p), data


def _foreign_index(cache: str) -> None:
    """An index of another layout: every table the store uses, with other columns."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(os.path.join(cache, "index.sqlite" + suffix)):
            os.unlink(os.path.join(cache, "index.sqlite" + suffix))
    db = sqlite3.connect(os.path.join(cache, "index.sqlite"))
    db.executescript("CREATE TABLE blocks (name TEXT, bytes INTEGER);"
                     "CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);"
                     "INSERT INTO meta VALUES('block_size', '4096');")
    db.commit()
    db.close()


def test_an_index_of_another_layout_is_rebuilt_and_the_cache_serves_again(tmp_path,
                                                                          one_file) -> None:
    path, data = one_file
    cache = str(tmp_path / "cache")
    _warm(cache, path, data)
    _foreign_index(cache)
    with CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                     params=EngineParams(block_size=BLOCK, max_prefetch=0)) as e:
        assert e.read(path) == data
        assert e.store.rebuilt == 4  # every valid block kept from its header
        assert e.stats()["misses"] == 0
    _foreign_index(cache)
    os.rename(os.path.join(cache, "blocks"), os.path.join(cache, "old-blocks"))
    os.mkdir(os.path.join(cache, "blocks"), 0o700)
    with CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                     params=EngineParams(block_size=BLOCK, max_prefetch=0)) as e:
        assert e.read(path) == data
        assert e.read(path) == data
        st = e.stats()
        assert (st["misses"], st["hits"], st["blocks"]) == (4, 4, 4), st  # stored, not uncached


def test_cache_clear_repairs_an_index_of_another_layout(tmp_path, one_file) -> None:
    path, data = one_file
    cache = str(tmp_path / "cache")
    _warm(cache, path, data)
    _foreign_index(cache)
    r = cli("cache", "clear", "--cache-dir", cache, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["removed"] == 4
    r = cli("cache", "verify", "--cache-dir", cache, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["clean"], r.stdout + r.stderr


@pytest.mark.parametrize("damage", ["blocks-a-file", "lock-a-dir", "tmp-a-file"])
def test_cache_verify_of_a_damaged_dir_is_one_line_exit_2(tmp_path, one_file, damage) -> None:
    path, data = one_file
    cache = str(tmp_path / "cache")
    _warm(cache, path, data)
    name = damage.split("-")[0]
    p = os.path.join(cache, name)
    if os.path.isdir(p):
        os.rename(p, p + ".old")
        open(p, "wb").close()
    else:
        os.unlink(p)
        os.mkdir(p)
    r = cli("cache", "verify", "--cache-dir", cache)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and name in r.stderr
    assert "aicache cache clear" in r.stderr
    r = cli("cache", "clear", "--cache-dir", cache)  # the fix the message names works
    assert r.returncode == 0, r.stderr
    r = cli("cache", "verify", "--cache-dir", cache)
    assert r.returncode == 0, r.stderr


def test_experiment_run_to_an_impossible_out_is_one_line_exit_2() -> None:
    r = cli("experiment", "run", "cache-policies", "--quick", "--out", "/dev/null/x")
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(r.stderr.strip().splitlines()) == 1 and "/dev/null/x" in r.stderr


TRUNCATING_READER = textwrap.dedent("""
    import os, sys
    from aicache.datacache.store import BlockKey, BlockStore
    cache, path, version, truth_path = sys.argv[1:5]
    truth = open(truth_path, "rb").read()
    B = 4096
    store = BlockStore(cache, 1 << 26, B, racy_window_s=0.0)
    key = BlockKey(path, version, 0)
    want = truth[:B]
    for _ in range(3):  # verified, then mapped on the second read
        assert store.get(key) == want
    assert len(store.mapped) == 1, "the block was not mapped"
    blk = store.block_path(key)
    # another process truncates the block file just after a read's stat check passed:
    # the check is made to see the file as it was, the copy meets the truncated file
    before, stat = os.stat(blk), os.stat
    os.stat = lambda p, *a, **k: before if p == blk else stat(p, *a, **k)
    os.truncate(blk, 100)
    got = store.get(key)
    os.stat = stat
    print("miss" if got is None else ("right" if got == want else "WRONG"), flush=True)
    store.close()
""")


@pytest.mark.skipif(not MMAP_SUPPORTED, reason="blocks are mapped only on CPython/Linux")
def test_a_block_truncated_under_a_mapping_is_a_miss_not_sigbus(tmp_path, one_file) -> None:
    path, data = one_file
    cache = str(tmp_path / "cache")
    _warm(cache, path, data)
    version = CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                          params=EngineParams(block_size=BLOCK)).stat(path).version
    r = subprocess.run([sys.executable, "-c", TRUNCATING_READER, cache, path, version, path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])  # -7 would be SIGBUS
    assert r.stdout.strip() in ("miss", "right"), r.stdout
    with CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                     params=EngineParams(block_size=BLOCK)) as e:
        assert e.read(path) == data  # refetched, right bytes
