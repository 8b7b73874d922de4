"""A damaged or misused cache directory never hands a reader wrong bytes or an error, and
the cache is private by default: blocks that name themselves (issue 15 §2), wrong-type
entries, a damaged index, a full disk at open, mapped blocks, temp files in the budget
(§3), owner-only files and ``--allow-other`` (§7). Real files, a moto S3 server and real
FUSE mounts; every expected byte string is the source's own content."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import struct
import subprocess
import sys
import tempfile

import fsspec
import pytest
import xxhash
from s3fixtures import s3, s3_dataset, s3_mount_options, start_mount, stop_mount  # noqa: F401

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.keys import BlockKey
from aicache.datacache.store import HEADER_SIZE, BlockStore

BLOCK = 64 * 1024
NBLOCKS = 6


@pytest.fixture()
def src(tmp_path):
    """One local file of NBLOCKS full blocks (real bytes; the reference)."""
    d = tmp_path / "src"
    d.mkdir()
    data = random.Random(15).randbytes(NBLOCKS * BLOCK)
    p = d / "shard"
    p.write_bytes(data)
    return str(p), data


def engine(cache: str, **kw) -> CacheEngine:
    return CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                       params=EngineParams(block_size=BLOCK, max_prefetch=1, **kw))


def warm(cache: str, path: str, data: bytes) -> list[BlockKey]:
    """Cache every block of ``path``; returns their keys."""
    with engine(cache) as e:
        assert e.read(path) == data
        version = e.stat(path).version
    return [BlockKey(path, version, i) for i in range(NBLOCKS)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def swap(a: str, b: str) -> None:
    tmp = a + ".swap"
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)


# -- §2: blocks know who they are ------------------------------------------------------------

def test_swapped_valid_blocks_are_neither_served_and_verify_reports_them(tmp_path, src) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    keys = warm(cache, path, data)
    with BlockStore(cache, 1 << 26, BLOCK) as s:
        a, b = s.block_path(keys[1]), s.block_path(keys[4])
    swap(a, b)  # two valid files, each under the other's name (a bad restore)
    r = cli("cache", "verify", "--cache-dir", cache, "--no-clean", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["misplaced"] == 2 and out["bad"] == 0 and not out["clean"]
    with engine(cache) as e:
        for i in (1, 4):
            assert e.read(path, i * BLOCK, BLOCK) == data[i * BLOCK:(i + 1) * BLOCK]
        assert e.metrics.value("misplaced_blocks") == 2
        assert e.metrics.value("remote_bytes") == 2 * BLOCK  # both refetched, nothing else
        assert b"aicache_misplaced_blocks_total 2.0" in e.metrics.text()
        assert e.read(path) == data
    r = cli("cache", "verify", "--cache-dir", cache, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["clean"]


def test_swapped_blocks_are_caught_after_a_verified_read_too(tmp_path, src) -> None:
    """In one long-lived process (``stat`` mode remembers verified files): a swap after
    the first verified read is still a miss, not the other block."""
    path, data = src
    cache = str(tmp_path / "cache")
    with engine(cache) as e:
        assert e.read(path) == data
        e.wait_prefetches()  # stored (the writer stores a block after its reader has it)
        assert e.read(path) == data  # verified and remembered
        v = e.stat(path).version
        swap(e.store.block_path(BlockKey(path, v, 0)), e.store.block_path(BlockKey(path, v, 2)))
        assert e.read(path) == data
        assert e.metrics.value("misplaced_blocks") == 2


def old_format(payload: bytes) -> bytes:
    """A block file as the previous release wrote it: a 24-byte header, no identity."""
    return struct.pack("<4sHHQQ", b"AICB", 1, 1, len(payload),
                       xxhash.xxh3_64_intdigest(payload)) + payload


def test_an_earlier_release_cache_dir_is_emptied_not_an_error(tmp_path, src) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    keys = warm(cache, path, data)
    with BlockStore(cache, 1 << 26, BLOCK) as s:
        files = [s.block_path(k) for k in keys]
    for f, k in zip(files, keys):  # the old release's files and index (no 'format' row)
        with open(f, "wb") as fh:
            fh.write(old_format(data[k.index * BLOCK:(k.index + 1) * BLOCK]))
    import sqlite3

    db = sqlite3.connect(os.path.join(cache, "index.sqlite"))
    db.execute("DELETE FROM meta WHERE k='format'")
    db.commit()
    db.close()
    with engine(cache) as e:
        assert e.store.stats().blocks == 0  # dropped at open
        assert e.read(path) == data
        assert e.metrics.value("remote_bytes") == len(data)


def test_a_stray_old_format_block_is_a_counted_miss(tmp_path, src) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    keys = warm(cache, path, data)
    with BlockStore(cache, 1 << 26, BLOCK) as s:
        f = s.block_path(keys[3])
    with open(f, "wb") as fh:
        fh.write(old_format(data[3 * BLOCK:4 * BLOCK] + b"x" * (HEADER_SIZE - 24)))
    with engine(cache) as e:
        assert e.read(path) == data
        assert e.metrics.value("misplaced_blocks") == 1
        assert e.metrics.value("remote_bytes") == BLOCK


# -- §3: a damaged cache dir degrades to a miss ------------------------------------------------

def damage(cache: str, what: str, key: BlockKey) -> None:
    with BlockStore(cache, 1 << 26, BLOCK) as s:
        blk = s.block_path(key)
    target = {"block": blk, "subdir": os.path.dirname(blk), "blocks": os.path.join(cache, "blocks"),
              "tmp": os.path.join(cache, "tmp"), "lock": os.path.join(cache, "lock")}[what]
    if what in ("block", "lock"):  # a directory where a file should be
        os.unlink(target)
        os.makedirs(os.path.join(target, "junk"))
    else:  # a file where a directory should be
        shutil.rmtree(target)
        with open(target, "wb") as f:
            f.write(b"not a directory")


@pytest.mark.parametrize("what", ["block", "subdir", "blocks", "tmp", "lock"])
def test_wrong_type_entries_are_misses_and_cache_clear_repairs(tmp_path, src, what) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    keys = warm(cache, path, data)
    damage(cache, what, keys[2])
    with engine(cache) as e:
        assert e.read(path) == data
        assert e.read(path) == data
    r = cli("cache", "clear", "--cache-dir", cache, "--json")
    assert r.returncode == 0, r.stderr
    with engine(cache) as e:  # repaired: caching again
        assert e.read(path) == data
        assert e.read(path) == data
        assert e.metrics.value("remote_bytes") == len(data)
        assert e.metrics.value("hits") == NBLOCKS


def test_a_directory_at_a_block_file_is_no_eio_through_fuse(tmp_path, s3_dataset) -> None:
    """A real FUSE mount of a real (moto) S3 bucket: the damaged block reads as a miss."""
    path = max(s3_dataset.files, key=lambda p: len(s3_dataset.files[p]))
    want = s3_dataset.files[path]
    mnt, cache = tmp_path / "mnt", str(tmp_path / "cache")
    mnt.mkdir()
    args = ("--cache-size", "64MiB", "--block-size", str(BLOCK), *s3_mount_options(s3_dataset.server))
    proc = start_mount(f"s3://{s3_dataset.root}", str(mnt), cache, *args)
    try:
        assert (mnt / s3_dataset.rel(path)).read_bytes() == want
    finally:
        assert stop_mount(proc, str(mnt)) == 0
    with BlockStore(cache, 1 << 26, BLOCK) as s:
        victims = [s.block_path(k) for k in s.keys()]
    for v in victims[:2]:
        os.unlink(v)
        os.makedirs(os.path.join(v, "junk"))
    proc = start_mount(f"s3://{s3_dataset.root}", str(mnt), cache, *args)
    try:
        with open(mnt / s3_dataset.rel(path), "rb") as f:  # no kernel cache: the engine reads
            assert f.read() == want
    finally:
        assert stop_mount(proc, str(mnt)) == 0


@pytest.mark.parametrize("damage_index", ["garbage", "truncated", "missing"])
def test_a_damaged_index_is_rebuilt_from_the_block_headers(tmp_path, src, damage_index) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    keys = warm(cache, path, data)
    with BlockStore(cache, 1 << 26, BLOCK) as s:
        bad, swapped = s.block_path(keys[0]), (s.block_path(keys[1]), s.block_path(keys[5]))
    with open(bad, "r+b") as f:  # one corrupt payload
        f.seek(HEADER_SIZE + 7)
        f.write(b"\xff" * 9)
    swap(*swapped)  # two blocks under each other's names
    index = os.path.join(cache, "index.sqlite")
    for suffix in ("-wal", "-shm"):
        if os.path.exists(index + suffix):
            os.unlink(index + suffix)
    if damage_index == "garbage":
        with open(index, "wb") as f:
            f.write(b"this is not an sqlite database " * 512)
    elif damage_index == "truncated":
        os.truncate(index, 100)
    else:
        os.unlink(index)
    r = cli("cache", "stats", "--cache-dir", cache, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["blocks"] == NBLOCKS - 3  # every block that verifies
    with engine(cache) as e:
        assert e.read(path) == data
        assert e.metrics.value("remote_bytes") == 3 * BLOCK  # only the three bad ones
    r = cli("cache", "verify", "--cache-dir", cache, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["clean"], r.stdout
    os.truncate(index, 100)
    r = cli("cache", "clear", "--cache-dir", cache, "--json")
    assert r.returncode == 0, r.stderr
    assert not os.listdir(os.path.join(cache, "blocks")) or all(
        not os.listdir(os.path.join(cache, "blocks", d)) for d in os.listdir(os.path.join(cache, "blocks")))


def test_a_disk_full_at_open_serves_reads_uncached(tmp_path, src) -> None:
    """A real tmpfs, filled to the last byte before the engine opens its cache there."""
    path, data = src
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                       capture_output=True)
    # the suite runs as root (README, CI): a real small disk, not a simulated one
    assert r.returncode == 0, f"cannot mount a tmpfs: {r.stderr.decode().strip()}"
    try:
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        with engine(str(disk / "cache")) as e:
            assert e.read(path) == data
            e.wait_prefetches()  # the writer has failed to store it (write-behind)
            assert e.read(path) == data
            assert e.metrics.value("remote_bytes") == 2 * len(data)  # uncached, not failed
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_the_store_never_invalidates_a_mapped_block_it_serves(tmp_path) -> None:
    """What the cache itself does to a mapped block file — evict it, store the key again,
    clear, verify — unlinks and renames, never truncates: a copy from the old mapping still
    reads the verified bytes (no SIGBUS), and the next read serves the new file."""
    s = BlockStore(tmp_path / "c", 1 << 24, BLOCK, racy_window_s=0.0)
    try:
        k = BlockKey("/f", "v1", 0)
        old, new = b"a" * BLOCK, b"b" * BLOCK
        assert s.put(k, old)
        for _ in range(3):
            assert s.get(k) == old
        assert len(s.mapped) == 1
        m = next(iter(s.mapped._maps.values()))
        m.pins += 1  # a reader in the middle of a copy keeps the mapping alive
        try:
            s.remove(k)  # eviction
            assert s.put(k, new)  # the same name again: a new inode renamed into place
            assert s.get(k) == new
            s.verify()
            s.clear()
            assert s.mapped._copy_out(m) == old  # the unlinked pages are still valid
        finally:
            s.mapped._unpin(m)
    finally:
        s.close()


def test_temp_files_being_written_count_in_the_budget(tmp_path, monkeypatch) -> None:
    cap = 3 * (BLOCK + HEADER_SIZE)
    s = BlockStore(tmp_path / "c", cap, BLOCK)
    seen = []
    real = s.layout.write_tmp

    def write_then_look(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(s.disk_bytes())  # the temp file is on disk, not yet renamed
        return out

    monkeypatch.setattr(s.layout, "write_tmp", write_then_look)
    try:
        for i in range(8):
            assert s.put(BlockKey("/f", "v", i), bytes([i]) * BLOCK)
        assert len(seen) == 8 and max(seen) <= cap, seen
        assert s.disk_bytes() <= cap
    finally:
        s.close()


def test_a_dead_writers_reservation_is_swept_at_open(tmp_path) -> None:
    cap = 3 * (BLOCK + HEADER_SIZE)
    with BlockStore(tmp_path / "c", cap, BLOCK) as s:
        s.index.reserve("999999999-1-1.tmp", cap)  # a writer whose pid is gone
    with BlockStore(tmp_path / "c", cap, BLOCK) as s:
        assert s.used == 0
        assert s.put(BlockKey("/f", "v", 0), b"x" * BLOCK)


# -- §7: who can read the cache --------------------------------------------------------------

def modes(root: str) -> dict[str, int]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if not stat.S_ISSOCK(st.st_mode):
                out[os.path.relpath(p, root)] = stat.S_IMODE(st.st_mode)
    out["."] = stat.S_IMODE(os.stat(root).st_mode)
    return out


def test_the_cache_is_owner_only_by_default(tmp_path, src) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    with engine(cache) as e:
        assert e.read(path) == data
        got = modes(cache)  # while open: index.sqlite-wal/-shm exist too
    assert "index.sqlite-wal" in got and "lock" in got and len(got) > NBLOCKS
    for rel, mode in got.items():
        isdir = os.path.isdir(os.path.join(cache, rel))
        # blocks are read-only, and so is a block file still being written (tmp/*.tmp: the
        # writer thread may not have renamed it into blocks/ yet when the read returns)
        want = 0o700 if isdir else 0o400 if rel.endswith((".blk", ".tmp")) else 0o600
        assert mode == want, (rel, oct(mode))


def test_an_earlier_world_readable_cache_becomes_owner_only(tmp_path, src) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    warm(cache, path, data)
    for rel in modes(cache):
        p = os.path.join(cache, rel)
        os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)  # as the previous release left it
    with engine(cache) as e:
        assert e.read(path) == data
    got = modes(cache)
    for top in (".", "blocks", "tmp", "index.sqlite", "lock"):
        assert got[top] == (0o700 if os.path.isdir(os.path.join(cache, top)) else 0o600), top


def test_a_shared_cache_mode_is_applied_despite_the_umask(tmp_path, src) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    old = os.umask(0o077)
    try:
        with engine(cache, cache_mode=0o640) as e:
            assert e.read(path) == data
    finally:
        os.umask(old)
    for rel, mode in modes(cache).items():
        isdir = os.path.isdir(os.path.join(cache, rel))
        want = 0o750 if isdir else 0o440 if rel.endswith(".blk") else 0o640  # blocks: read-only
        assert mode == want, (rel, oct(mode))


def test_cache_mode_bad_input_is_one_line_exit_2(tmp_path) -> None:
    r = cli("mount", str(tmp_path), str(tmp_path), "--cache-dir", str(tmp_path / "c"),
            "--cache-size", "1MiB", "--cache-mode", "0777")
    assert r.returncode == 2 and "cache mode" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_daemon_socket_is_owner_only(tmp_path, src) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    with CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                     params=EngineParams(block_size=BLOCK), daemon=True) as e:
        assert e.read(path) == data
        st = os.stat(os.path.join(cache, "policy.sock"))
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


def test_the_kv_store_directory_and_meta_are_owner_only(tmp_path) -> None:
    from aicache.kvstore.ssd import SlabStore

    d = tmp_path / "kv"
    t = SlabStore(d, 4096, 1 << 20)
    try:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(d / "meta.json").st_mode) == 0o600
    finally:
        t.close()


NOBODY_READ = "import os, sys; os.setgid(65534); os.setuid(65534); sys.stdout.write(str(len(open(sys.argv[1], 'rb').read())))"


@pytest.mark.parametrize("allow_other", [False, True])
def test_a_mount_is_private_unless_allow_other(src, allow_other) -> None:
    """Another local user (``nobody``) reading a real FUSE mount: refused by the kernel
    unless the mount was made with ``--allow-other``."""
    path, data = src
    base = tempfile.mkdtemp(prefix="aicache-allow-other-")
    try:
        os.chmod(base, 0o755)  # nobody may reach the mount point itself
        mnt = os.path.join(base, "mnt")
        os.mkdir(mnt)
        extra = ["--allow-other"] if allow_other else []
        proc = start_mount(os.path.dirname(path), mnt, os.path.join(base, "cache"),
                           "--cache-size", "64MiB", *extra)
        try:
            r = subprocess.run([sys.executable, "-c", NOBODY_READ, os.path.join(mnt, "shard")],
                               capture_output=True, text=True, timeout=60)
            if allow_other:
                assert r.returncode == 0 and r.stdout == str(len(data)), r.stderr
            else:
                assert r.returncode != 0 and "PermissionError" in r.stderr
            cache_entries = os.path.join(base, "cache")
            assert stat.S_IMODE(os.stat(cache_entries).st_mode) == 0o700
        finally:
            assert stop_mount(proc, mnt) == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)
