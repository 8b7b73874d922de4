"""A cache nobody else can poison: another real local user (made with ``useradd`` here,
removed after) pre-creates the cache directory, owns a folder above it, owns or may write
an entry of it, or links a log to a file of their choosing. Each is refused with one line
naming the entry and the fix (exit 2 from the CLI), before anything is read from or
written to it. A shared cache is a group's: entries of another member are used, a
world-writable mode or entry is refused, and a member's swapped block is a miss.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
import pytest

from aicache.datacache.daemon import spawn_daemon
from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.keys import BlockKey
from aicache.datacache.store import BlockStore, check_cache_mode
from aicache.errors import BadInput

BLOCK = 4096

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="making a second local user needs root and useradd")


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def run(self, *cmd: str) -> None:
        subprocess.run(cmd, check=True, user=self.uid, group=self.gid, extra_groups=[],
                       timeout=60)


@pytest.fixture
def other() -> Iterator[User]:
    """A second real user with a group of its own, removed after the test."""
    name = "aict" + uuid.uuid4().hex[:8]
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/false", name],
                   check=True, timeout=60)
    try:
        import pwd

        pw = pwd.getpwnam(name)
        yield User(name, pw.pw_uid, pw.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, timeout=60)
        try:
            subprocess.run(["groupdel", name], check=False, timeout=60, capture_output=True)
        except OSError:
            pass


@pytest.fixture
def shared_tmp() -> Iterator[str]:
    """A folder like /tmp (sticky, world-writable) where both users may create entries."""
    base = tempfile.mkdtemp(prefix="aicache-trust-")
    os.chmod(base, 0o1777)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def src(tmp_path) -> tuple[str, bytes]:
    data = os.urandom(3 * BLOCK + 5)
    p = tmp_path / "remote" / "f.bin"
    p.parent.mkdir()
    p.write_bytes(data)
    return str(p), data


def engine(cache: str, **kw) -> CacheEngine:
    return CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                       params=EngineParams(block_size=BLOCK, max_prefetch=0, **kw))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def refused(cache: str, src: str, what: str) -> None:
    """Both an engine and the CLI refuse ``cache``, naming ``what``, and write nothing there."""
    before = sorted(os.listdir(cache)) if os.path.isdir(cache) else None
    with pytest.raises(BadInput, match="not safe to use") as e:
        engine(cache).close()
    assert what in str(e.value)
    r = cli("warmup", os.path.dirname(src), "--cache-dir", cache, "--cache-size", "1MiB")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and what in r.stderr, r.stderr
    assert (sorted(os.listdir(cache)) if os.path.isdir(cache) else None) == before


def test_a_cache_dir_made_by_another_user_is_refused(other, shared_tmp, src) -> None:
    cache = os.path.join(shared_tmp, "evil", "cache")
    other.run("mkdir", "-p", cache)
    refused(cache, src[0], cache)


def test_a_cache_dir_under_a_folder_of_another_user_is_refused(other, shared_tmp, src) -> None:
    parent = os.path.join(shared_tmp, "evil")
    other.run("mkdir", "-m", "0755", parent)
    cache = os.path.join(parent, "cache")
    os.chmod(parent, 0o777)  # so root can make its dir inside (the owner could rename it away)
    os.mkdir(cache, 0o700)
    os.chmod(parent, 0o755)
    refused(cache, src[0], parent)


@pytest.mark.parametrize("entry", ["blocks", "index.sqlite", "lock"])
def test_an_entry_owned_by_another_user_is_refused(other, tmp_path, src, entry) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    with engine(cache) as e:
        assert e.read(path) == data
    os.chown(os.path.join(cache, entry), other.uid, other.gid)
    refused(cache, path, os.path.join(cache, entry))


@pytest.mark.parametrize("entry", [".", "blocks", "index.sqlite"])
def test_an_entry_others_may_write_is_refused(tmp_path, src, entry) -> None:
    path, data = src
    cache = str(tmp_path / "cache")
    with engine(cache) as e:
        assert e.read(path) == data
    p = os.path.normpath(os.path.join(cache, entry))
    os.chmod(p, 0o777 if os.path.isdir(p) else 0o666)
    refused(cache, path, p)


def test_a_symlinked_daemon_log_is_refused_and_never_written_through(other, tmp_path, src) -> None:
    """Another user's link named ``daemon.log`` must not aim the daemon's log at their
    file: the cache is refused, and a link made after the check is not followed."""
    path, data = src
    cache = str(tmp_path / "cache")
    with engine(cache) as e:
        assert e.read(path) == data
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    os.symlink(victim, os.path.join(cache, "daemon.log"))
    with pytest.raises(BadInput, match="symbolic link"):
        CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="lru",
                    params=EngineParams(block_size=BLOCK), daemon=True).close()
    with pytest.raises(OSError):  # ELOOP: the link planted after the check
        spawn_daemon(cache, 1 << 26, BLOCK, "lru", None, 0)
    assert victim.read_bytes() == b"precious\n"


def test_a_symlinked_mount_log_is_refused(tmp_path, src) -> None:
    path, _data = src
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    os.symlink(victim, cache / "mount.log")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = cli("mount", os.path.dirname(path), str(mnt), "--cache-dir", str(cache),
            "--cache-size", "1MiB")
    assert r.returncode == 2 and "symbolic link" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not os.path.ismount(mnt)
    assert victim.read_bytes() == b"precious\n"


@pytest.mark.parametrize("mode", [0o666, 0o606, 0o602, "0644"])
def test_a_cache_mode_for_other_users_is_refused(tmp_path, mode) -> None:
    with pytest.raises(BadInput, match="cache mode"):
        check_cache_mode(mode)
    r = cli("warmup", str(tmp_path), "--cache-dir", str(tmp_path / "c"), "--cache-size", "1MiB",
            "--cache-mode", f"{mode:o}" if isinstance(mode, int) else mode)
    assert r.returncode == 2 and "cache mode" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_a_group_cache_takes_a_members_entries_and_misses_a_swapped_block(other, shared_tmp,
                                                                          src) -> None:
    """``cache_mode 0o660``: the group's cache. Entries another member of the group made
    (theirs, group-writable) are used; a member swaps one block file for another's: a miss
    (the header names another block), right bytes. A world-writable entry: refused; and a
    private reader refuses the member's entries outright."""
    path, data = src
    cache = os.path.join(shared_tmp, "cache")
    with engine(cache, cache_mode=0o660) as e:
        assert e.read(path) == data
        keys = [BlockKey(path, e.stat(path).version, i) for i in range(2)]
        a, b = (e.store.block_path(k) for k in keys)
    # as if the member had made them: every entry theirs, in their group
    for dirpath, dirnames, filenames in os.walk(cache):
        for n in [dirpath] + [os.path.join(dirpath, f) for f in dirnames + filenames]:
            os.lchown(n, other.uid, other.gid)
    with engine(cache, cache_mode=0o660) as e:
        assert e.read(path) == data  # the member's blocks serve root
        assert e.stats()["misses"] == 0
    other.run("mv", "-f", b, a)  # the member swaps block 0's file for block 1's
    with engine(cache, cache_mode=0o660) as e:
        assert e.read(path) == data
        assert e.stats()["misplaced_blocks"] == 1
    os.chmod(os.path.join(cache, "blocks"), 0o777)
    with pytest.raises(BadInput, match="writable by other users"):
        engine(cache, cache_mode=0o660).close()
    os.chmod(os.path.join(cache, "blocks"), 0o770)
    with pytest.raises(BadInput, match="not by you"):
        engine(cache).close()


def test_a_block_file_replaced_by_a_link_is_a_miss(tmp_path, src) -> None:
    """A link planted where a block file is (after the open's check) is never followed."""
    path, data = src
    cache = str(tmp_path / "cache")
    with engine(cache) as e:
        assert e.read(path) == data
        key = BlockKey(path, e.stat(path).version, 0)
        target = e.store.block_path(BlockKey(path, e.stat(path).version, 1))
        blk = e.store.block_path(key)
    forged = tmp_path / "forged.blk"
    shutil.copyfile(target, forged)
    with engine(cache) as e:
        os.unlink(blk)
        os.symlink(forged, blk)
        assert e.read(path) == data
        assert not os.path.islink(blk)
    assert BlockStore.open_existing(cache).verify().bad == 0
