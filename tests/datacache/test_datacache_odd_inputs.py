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
import tempfile
import textwrap

import fsspec
import pytest

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.fs import AICacheFileSystem
from aicache.datacache.keys import BlockKey
from aicache.datacache.mapped import SUPPORTED as MMAP_SUPPORTED
from aicache.datacache.store import BlockStore

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
        e.wait_prefetches()  # the writer has stored them (write-behind)
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


# A reader of one block, mapped if the store maps it. Between its stat check and its copy
# (the window a racing truncation hits: the check is made to see the file as it was), the
# test truncates the block file from another process; the reader then prints what it got.
TRUNCATED_READER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[4])
    from aicache.datacache.keys import BlockKey
    from aicache.datacache.store import BlockStore
    cache, mode, put = sys.argv[1], int(sys.argv[2], 8), sys.argv[3] == "put"
    B = 4096
    want = bytes(range(256)) * (B // 256)
    store = BlockStore(cache, 1 << 26, B, racy_window_s=0.0, cache_mode=mode)
    key = BlockKey("/remote/f.bin", "v1", 0)
    if put:
        assert store.put(key, want)
    for _ in range(3):  # verified, then mapped on its second read where it may be
        assert store.get(key) == want
    blk = store.block_path(key)
    print(len(store.mapped), blk, flush=True)
    before, stat = os.stat(blk), os.stat
    os.stat = lambda p, *a, **k: before if p == blk else stat(p, *a, **k)
    sys.stdin.readline()  # the test truncates the file now
    got = store.get(key)
    os.stat = stat
    print("miss" if got is None else ("right" if got == want else "WRONG"), flush=True)
    store.close()
""")


def _python_for(user: int) -> str | None:
    """A Python interpreter ``user`` may run (this one may live under root's home)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        try:
            r = subprocess.run([exe, "-c", "pass"], user=user, capture_output=True, timeout=60)
        except OSError:  # not reachable for that user
            continue
        if r.returncode == 0:
            return exe
    return None


@pytest.fixture
def other_user():  # type: ignore[no-untyped-def]
    import pwd
    import shutil
    import uuid

    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("making a second local user needs root and useradd")
    name = "aict" + uuid.uuid4().hex[:8]
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/false", name],
                   check=True, timeout=60)
    base = tempfile.mkdtemp(prefix="aicache-truncate-")
    os.chmod(base, 0o1777)
    try:
        yield pwd.getpwnam(name), base
    finally:
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run(["userdel", name], check=False, timeout=60)
        subprocess.run(["groupdel", name], check=False, timeout=60, capture_output=True)


def _read_across_truncation(reader: subprocess.Popen[str], truncate: list[str],
                            as_user: int) -> tuple[int, str, subprocess.CompletedProcess[str]]:
    assert reader.stdout is not None and reader.stdin is not None
    mapped, blk = reader.stdout.readline().split()
    t = subprocess.run([a.replace("BLK", blk) for a in truncate], user=as_user,
                       capture_output=True, text=True, timeout=60)
    out, err = reader.communicate("go\n", timeout=120)
    assert reader.returncode == 0, (reader.returncode, err[-2000:])  # -7 would be SIGBUS
    return int(mapped), out.strip(), t


@pytest.mark.skipif(not MMAP_SUPPORTED, reason="blocks are mapped only on CPython/Linux")
def test_a_mapped_block_cannot_be_truncated_by_another_process_of_its_user(other_user) -> None:
    """The user's own other process (``truncate``) cannot cut a block file under the
    reader's mapping: block files are read-only; the reader keeps reading right bytes."""
    pw, base = other_user
    exe = _python_for(pw.pw_uid)
    if exe is None:
        pytest.skip("no Python the second user may run")
    import aicache

    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(aicache.__file__)))
    reader = subprocess.Popen([exe, "-c", TRUNCATED_READER, os.path.join(base, "c"), "600", "put",
                               pkg_root], user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    mapped, got, t = _read_across_truncation(reader, ["truncate", "-s", "100", "BLK"], pw.pw_uid)
    assert mapped == 1
    assert t.returncode != 0 and "Permission denied" in t.stderr
    assert got == "right"


@pytest.mark.skipif(not MMAP_SUPPORTED, reason="blocks are mapped only on CPython/Linux")
def test_a_block_of_another_user_is_not_mapped_and_its_truncation_is_a_miss(other_user) -> None:
    """A shared cache: a member wrote the block, so the reader does not map it; the member
    truncating it (after making it writable) costs the reader a miss, not SIGBUS."""
    pw, base = other_user
    exe = _python_for(pw.pw_uid)
    if exe is None:
        pytest.skip("no Python the second user may run")
    import aicache

    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(aicache.__file__)))
    cache = os.path.join(base, "c")
    w = subprocess.Popen([exe, "-c", TRUNCATED_READER, cache, "660", "put", pkg_root],
                         user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert w.communicate("go\n", timeout=120)[0].split("\n")[1] == "right"  # the member's block
    reader = subprocess.Popen([sys.executable, "-c", TRUNCATED_READER, cache, "660", "read",
                               pkg_root], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    mapped, got, t = _read_across_truncation(
        reader, ["sh", "-c", "chmod u+w BLK && truncate -s 100 BLK"], pw.pw_uid)
    assert t.returncode == 0, t.stderr
    assert mapped == 0
    assert got == "miss"
