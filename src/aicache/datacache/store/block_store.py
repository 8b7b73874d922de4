""":class:`BlockStore`: the parts of a cache directory put together under one lock.

The layout (:mod:`.layout`) makes the directory and writes files, the index (:mod:`.index`)
counts the budget, the format (:mod:`.format`) judges bytes, the reads (:mod:`.reads`) serve
hits without a lock. This module holds what needs several of them at once: the write
protocol (reserve, write, rename, commit), eviction, crash recovery, the index rebuild,
``verify`` and ``clear`` — each index mutation under the process mutex and an exclusive
``flock`` on ``cache_dir/lock``.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aicache.datacache.budget import (DEFAULT_FREE_SPACE_RATIO, check_free_space_ratio,
                                      disk_capped, join_users, settle_budget)
from aicache.datacache.keys import BlockKey
from aicache.datacache.mapped import DEFAULT_MMAP_BYTES, MappedBlocks
from aicache.datacache.store.charge import block_budget, stored_size
from aicache.datacache.store.format import (CHECKSUM_NAME, DEFAULT_VERIFY, FORMAT_VERSION,
                                            HEADER_SIZE, Fault, VerifyMode, block_header,
                                            check_verify_mode, file_fault, header_block_index)
from aicache.datacache.store.index import BlockIndex, as_oserror, is_corrupt
from aicache.datacache.store.layout import (DEFAULT_CACHE_MODE, Layout, StoreFull,
                                            check_cache_mode, listdir, live_tmp, no_follow,
                                            open_file, remove_any, unlink)
from aicache.datacache.store.reads import BlockReads
from aicache.units import DEFAULT_BLOCK_SIZE

log = logging.getLogger("aicache.datacache.store")

#: ``stat`` mode remembers a verified block only once its ctime is this far in the past
#: (covers 1 s timestamp granularity — ext3, HFS+, some NFS servers — and jiffy-coarse
#: kernel clocks with room to spare)
DEFAULT_RACY_WINDOW_S = 2.0


@dataclass(frozen=True, slots=True)
class Put:
    """What :meth:`BlockStore.put_evicting` did: whether the block is stored, and the
    blocks it dropped on its own (oldest first) beyond the victims it was given."""

    stored: bool
    dropped: Sequence[BlockKey] = ()


@dataclass(slots=True)
class StoreStats:
    blocks: int
    used_bytes: int
    capacity_bytes: int
    block_size: int
    checksum: str
    cache_dir: str


@dataclass(slots=True)
class VerifyResult:
    checked: int
    bad: int  #: checksum, length or header damaged
    missing: int
    orphans: int
    removed: int
    #: valid blocks whose header names another block (or an earlier format without identity)
    misplaced: int = 0


class BlockStore:
    """Blocks on local disk under a byte budget; safe for threads and processes.

    ``get`` never takes a lock. ``put``/``remove``/``clear``/``verify(clean=True)`` hold a
    process-local mutex and an exclusive ``fcntl.flock`` on ``cache_dir/lock``.
    """

    def __init__(self, cache_dir: str | os.PathLike[str], capacity: int,
                 block_size: int = DEFAULT_BLOCK_SIZE, *, recover: bool = True,
                 verify: str = DEFAULT_VERIFY, racy_window_s: float = DEFAULT_RACY_WINDOW_S,
                 mmap_bytes: int = DEFAULT_MMAP_BYTES,
                 cache_mode: int = DEFAULT_CACHE_MODE,
                 free_space_ratio: float = DEFAULT_FREE_SPACE_RATIO) -> None:
        from aicache.errors import BadInput

        if capacity <= 0:
            raise BadInput(f"cache size {capacity!r} must be positive; give e.g. 10GiB")
        if block_size <= 0:
            raise BadInput(f"block size {block_size!r} must be positive; give e.g. 4MiB")
        mode = check_verify_mode(verify)
        self._free_ratio = check_free_space_ratio(free_space_ratio)
        self._setup(cache_dir, capacity, block_size, mode, check_cache_mode(cache_mode),
                    MappedBlocks(mmap_bytes if mode is not VerifyMode.FULL else 0),
                    racy_window_s)
        try:
            self._open(recover)
        except BaseException:
            self.close()
            raise

    def _setup(self, cache_dir: str | os.PathLike[str], capacity: int, block_size: int,
               verify: VerifyMode, file_mode: int, mapped: MappedBlocks,
               racy_window_s: float) -> None:
        """The fields of a store not yet opened (shared with :class:`UncachedStore`)."""
        self.layout = Layout(cache_dir, file_mode)
        self.cache_dir = self.layout.cache_dir
        self.file_mode = file_mode
        self.dir_mode = self.layout.dir_mode
        self.verify_mode = verify
        self.capacity = int(capacity)
        #: what the blocks may take of ``capacity`` (the rest is the index's)
        self.block_capacity = block_budget(self.capacity)
        self.block_size = int(block_size)
        self.reads = BlockReads(self.layout.blocks_dir, self.block_size, verify,
                                racy_window_s, mapped)
        #: verified blocks kept mapped (none in ``full`` mode: every read hashes anyway)
        self.mapped = mapped
        self._mutex = threading.RLock()
        self.corrupt_dropped = 0
        self.misplaced_dropped = 0
        #: hooks for the engine's metrics (called outside the lock, except on_evict)
        self.on_corrupt: Callable[[BlockKey], None] | None = None
        self.on_misplaced: Callable[[BlockKey], None] | None = None
        self.on_evict: Callable[[], None] | None = None
        self._used = 0
        #: what open found and did (``rebuilt``: the index was rebuilt from the headers)
        self.rebuilt: int | None = None
        self._lock_fd = -1
        self._users_fd = -1
        self._index: BlockIndex | None = None

    def _open(self, recover: bool) -> None:
        lay = self.layout
        lay.prepare()
        self._lock_fd = open_file(lay.lock_path, os.O_RDWR, self.file_mode)
        with self._locked():
            index = lay.index_path
            fresh = not os.path.exists(index)
            self._index = BlockIndex(index, self.file_mode)
            try:
                meta = self._index.init()
            except sqlite3.DatabaseError as exc:
                if not is_corrupt(exc):
                    raise
                log.warning("aicache: %s is damaged (%s); rebuilding it from the block headers",
                            index, exc)
                self._index.close()
                for suffix in ("", "-wal", "-shm", "-journal"):
                    unlink(index + suffix)
                self._index = BlockIndex(index, self.file_mode)
                meta = self._index.init()
                fresh = True
            if "format" not in meta:
                if "block_size" in meta and not fresh:
                    self._drop_all_locked()  # an earlier release's blocks name nobody
                elif listdir(lay.blocks_dir):
                    self.rebuilt = self._rebuild_locked()
            # the budget rules of aicache.datacache.budget: one budget per directory at a time
            self._users_fd = open_file(lay.users_path, os.O_RDWR, self.file_mode)
            settle_budget(self.cache_dir, self.capacity, meta.get("capacity"),
                          join_users(self._users_fd))
            self._index.write_meta(self.capacity, self.block_size, FORMAT_VERSION)
            if recover:
                self._recover_locked()
            self._used = self._index.used()
        self.capacity = disk_capped(self.cache_dir, self.capacity, self._used, self._free_ratio,
                                    self.block_size)
        self.block_capacity = block_budget(self.capacity)

    @property
    def index(self) -> BlockIndex:
        """The index (open from ``__init__`` to :meth:`close`)."""
        index = self._index
        if index is None:
            raise OSError(f"the block store of {self.cache_dir} is closed")
        return index

    @classmethod
    def open_existing(cls, cache_dir: str | os.PathLike[str], *, recover: bool = False) -> BlockStore:
        """Open a cache directory some engine created, with the budget and mode it last
        used (``aicache cache stats|verify|clear``). A damaged index is rebuilt."""
        from aicache.errors import BadInput

        d = os.fspath(cache_dir)
        index = os.path.join(d, "index.sqlite")
        if not os.path.exists(index) and not os.path.isdir(os.path.join(d, "blocks")):
            raise BadInput(f"--cache-dir {d!r} holds no aicache cache "
                           "(no index.sqlite); give the directory a mount or fsspec cache used")
        # missing or damaged: empty, and the store rebuilds it from the block headers
        meta = BlockIndex.read_meta(index)
        try:
            mode = stat.S_IMODE(os.stat(os.path.join(d, "lock")).st_mode)
            mode = check_cache_mode(mode)
        except (OSError, ValueError):
            mode = DEFAULT_CACHE_MODE
        return cls(cache_dir, int(meta.get("capacity", 1 << 62)),
                   int(meta.get("block_size", DEFAULT_BLOCK_SIZE)), recover=recover,
                   cache_mode=mode)

    @staticmethod
    def repair_layout(cache_dir: str | os.PathLike[str]) -> list[str]:
        """Remove the cache directory's entries that have the wrong type (``blocks/``,
        ``tmp/`` not directories, ``lock`` not a regular file, ``index.sqlite`` a
        directory, ``users`` not a file, ``stats/`` not a directory): what ``aicache cache
        clear`` does first, so that it always works.
        Returns the paths removed."""
        return Layout.repair(cache_dir)

    def block_path(self, key: BlockKey) -> str:
        return self.reads.where(key)[0]

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- reads (lock-free, see aicache.datacache.store.reads) -----------------------------
    def get(self, key: BlockKey) -> bytes | None:
        """The block's bytes, or None when absent, corrupt or another block's (such a
        file is dropped and counted)."""
        got = self.reads.get(key)
        if not isinstance(got, Fault):
            return got
        if got is Fault.WRONG_TYPE:
            self._wrong_type(key, self.reads.where(key)[0])
            return None
        if got is Fault.MISPLACED:
            self.misplaced_dropped += 1
            if self.on_misplaced is not None:
                self.on_misplaced(key)
        else:
            self.corrupt_dropped += 1
            if self.on_corrupt is not None:
                self.on_corrupt(key)
        try:
            self.remove(key)
        except (OSError, sqlite3.Error) as exc:  # a damaged index: the read still goes on
            log.warning("aicache: could not drop a bad block of %s: %s", key.path, exc)
        return None

    def _wrong_type(self, key: BlockKey, path: str) -> None:
        """Something that is not a block file sits at ``path``: remove it (``blocks/`` is
        the store's own namespace), so the block can be stored again."""
        self.reads.forget(key)
        self.corrupt_dropped += 1
        if self.on_corrupt is not None:
            self.on_corrupt(key)
        try:
            with self._locked():
                self._remove_locked(key.digest(self.block_size))
                remove_any(path)
                parent = os.path.dirname(path)
                if os.path.lexists(parent) and not os.path.isdir(parent):
                    remove_any(parent)
        except (OSError, sqlite3.Error) as exc:
            log.warning("aicache: could not remove %s (not a block file): %s", path, exc)

    def get_range(self, key: BlockKey, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (clipped) of a block whose *current* file was verified by
        :meth:`get` in this process (``stat``/``none`` modes: same ``fstat`` signature);
        None otherwise — absent, never verified here, changed since, or mode ``full`` —
        and the caller reads the whole block with :meth:`get`, which checks it. So a range
        is never served from a file version that was not verified."""
        return self.reads.get_range(key, start, end)

    def get_range_into(self, key: BlockKey, start: int, buf: memoryview) -> int | None:
        """:meth:`get_range` of ``[start, start + len(buf))`` read straight into ``buf``
        (a FUSE reply buffer: no intermediate bytes object, one copy). Returns the number
        of bytes written (short at the block's end), or None as :meth:`get_range` would."""
        return self.reads.get_range_into(key, start, buf)

    def serves_ranges(self, key: BlockKey) -> bool:
        """Whether :meth:`get_range` may serve ``key`` (it was verified in this process and
        the mode is not ``full``) — a memo lookup, no I/O; the read itself still checks
        that the file is the verified version."""
        return self.reads.serves_ranges(key)

    def range_fd(self, key: BlockKey, start: int, end: int) -> tuple[int, int, int] | None:
        """An open descriptor of ``key``'s block file, checked as :meth:`get_range` checks
        it, and where ``[start, end)`` (clipped) lies in it: ``(fd, file offset, length)``.
        The caller owns ``fd`` and closes it once done — for a FUSE reply that libfuse
        splices from the file, that is after the reply went out, not before it returns.
        None when :meth:`get_range` would return None."""
        return self.reads.range_fd(key, start, end)

    def contains(self, key: BlockKey) -> bool:
        return os.path.isfile(self.block_path(key))

    # -- writes ---------------------------------------------------------------------------
    def put(self, key: BlockKey, data: bytes) -> bool:
        """:meth:`put_evicting` with no victims named: whether ``data`` is stored."""
        return self.put_evicting(key, data, ()).stored

    def put_evicting(self, key: BlockKey, data: bytes, evict: Sequence[BlockKey]) -> Put:
        """Store ``data`` under ``key`` within the budget, dropping ``evict`` first.

        ``evict`` is the policy's choice of victims (the engine asks it before calling:
        the store never calls back up). While the block (and the temp files other writers
        reserved) still does not fit, the oldest block in the index goes (FIFO across
        processes, so the budget holds even for blocks no policy in this process knows);
        those are returned in :attr:`Put.dropped`. The bytes are reserved before the temp
        file is written, so temp files count in the budget. Raises :class:`StoreFull` on
        ENOSPC; nothing partial stays behind.
        """
        size = stored_size(len(data))
        if size > self.block_capacity:
            return Put(False)
        digest = key.digest(self.block_size)
        tmp = self.layout.tmp_name()
        name = os.path.basename(tmp)
        dropped: list[BlockKey] = []
        try:
            with self._locked():
                idx = self.index
                for k in evict:
                    self._evict_locked(k.digest(self.block_size))
                if idx.has(digest):
                    return Put(True)  # another thread/process stored it meanwhile
                used = idx.used()
                while used + size > self.block_capacity:
                    oldest = idx.oldest()
                    freed = 0 if oldest is None else self._evict_locked(oldest[0])
                    if oldest is None or freed == 0:
                        return Put(False, dropped)
                    dropped.append(oldest[1])
                    used -= freed
                idx.reserve(name, size)
                self._used = used + size
        except sqlite3.Error as exc:
            raise as_oserror(exc) from exc
        reserved = True
        try:
            path, ident = self.reads.where(key)
            header = block_header(ident, data)
            # nothing else would catch a power loss's torn block when reads trust the bytes
            self.layout.write_tmp(tmp, header, data, fsync=self.verify_mode is VerifyMode.NONE)
            with self._locked():
                idx = self.index
                idx.begin()
                try:
                    idx.release(name)
                    reserved = False
                    if idx.has(digest):
                        idx.commit()
                        self._used -= size
                        return Put(True, dropped)
                    idx.insert(digest, key, size)
                    self.layout.rename_in(tmp, path)
                    tmp = ""
                    idx.commit()
                except BaseException as exc:
                    idx.rollback()
                    reserved = True  # the rollback restored the reservation's row
                    if tmp == "":  # renamed but not committed: take the file back out
                        unlink(path)
                    if isinstance(exc, sqlite3.Error):
                        raise as_oserror(exc) from exc
                    raise
                return Put(True, dropped)
        finally:
            if tmp:
                unlink(tmp)
            if reserved:
                self._unreserve(name, size)

    def _unreserve(self, name: str, size: int) -> None:
        try:
            with self._locked():
                self.index.release(name)
                self._used -= size
        except sqlite3.Error as exc:  # the dead-process sweep at the next open drops it
            log.warning("aicache: could not release a temp file's reservation: %s", exc)

    def evict(self, keys: Sequence[BlockKey]) -> None:
        """Drop ``keys`` (a policy's victims) where stored, each counted as an eviction."""
        if not keys:
            return
        try:
            with self._locked():
                for k in keys:
                    self._evict_locked(k.digest(self.block_size))
        except sqlite3.Error as exc:
            raise as_oserror(exc) from exc

    def _evict_locked(self, digest: str) -> int:
        """Evict one block; bytes freed (0: not stored, e.g. another process dropped it)."""
        freed = self._remove_locked(digest)
        if freed and self.on_evict is not None:
            self.on_evict()
        return freed

    def _remove_locked(self, digest: str) -> int:
        size = self.index.size_of(digest)
        if size is None:
            return 0
        self._unlink_block(digest)
        self.index.delete(digest)
        self._used -= size
        return size

    def _unlink_block(self, digest: str) -> None:
        path = self.layout.block_path(digest)
        remove_any(path)
        self.mapped.drop(path)  # its disk space is freed now, not at the next sweep

    def remove(self, key: BlockKey) -> bool:
        """Drop ``key`` if stored (the engine's corrupt/invalidated blocks)."""
        self.reads.forget(key)
        with self._locked():
            return self._remove_locked(key.digest(self.block_size)) > 0

    # -- maintenance ----------------------------------------------------------------------
    def _recover_locked(self) -> None:
        """Make the index and the files agree after a crash (run at every open): a block
        file with no row (renamed in, never committed) is unlinked, a row with no file is
        deleted, and dead processes' temp files and reservations go."""
        idx = self.index
        known = idx.sizes()
        on_disk = self.layout.sweep_blocks(known)
        missing = [k for k in known if k not in on_disk]
        if missing:
            idx.delete_many(missing)
        self.layout.sweep_tmp()
        dead = [n for n in idx.reservations() if not live_tmp(n)]
        if dead:  # reservations of writers that died before they wrote or renamed
            idx.release_many(dead)

    def _check_file(self, digest: str, path: str, key: BlockKey | None) -> Fault:
        """Read and judge one block file (:func:`~.format.file_fault`); raises
        FileNotFoundError when it is gone."""
        with open(path, "rb", opener=no_follow) as f:
            head = f.read(HEADER_SIZE)
            data = f.read()
        return file_fault(digest, head, data, key)

    def _rebuild_locked(self) -> int:
        """Index every block file whose header names it and whose checksum verifies
        (oldest first, within the budget); unlink the rest. The rows' remote path and
        version stay empty (the header holds only their hashes): the engine finds blocks
        by file name and never needs them. Returns the blocks kept."""
        found = []
        dropped = 0
        for digest, path in self.layout.block_files():
            try:
                ok = self._check_file(digest, path, None) is Fault.OK
                st = os.stat(path)
            except OSError:
                ok = False
            if not ok:
                remove_any(path)
                dropped += 1
                continue
            with open(path, "rb", opener=no_follow) as f:
                bid = header_block_index(f.read(HEADER_SIZE))
            found.append((st.st_mtime_ns, digest, bid, stored_size(st.st_size - HEADER_SIZE), path))
        found.sort()
        idx = self.index
        used = idx.used()
        kept = 0
        idx.begin()
        try:
            for _mtime, digest, bid, size, path in found:
                if used + size > self.block_capacity:
                    unlink(path)
                    dropped += 1
                    continue
                idx.insert_found(digest, bid, size)
                used += size
                kept += 1
            idx.commit()
        except BaseException:
            idx.rollback()
            raise
        log.warning("aicache: rebuilt the index of %s from the block headers: %d blocks kept, "
                    "%d dropped", self.cache_dir, kept, dropped)
        return kept

    def _drop_all_locked(self) -> None:
        """Empty the store (an index and blocks an earlier format wrote)."""
        for digest, _path in list(self.layout.block_files()):
            self._unlink_block(digest)
        self.index.delete_all()

    def verify(self, clean: bool = True) -> VerifyResult:
        """Check every block's checksum and identity (its header names its file and the
        index row's block); with ``clean``, drop bad blocks and fix the index."""
        idx = self.index
        rows = idx.rows()
        bad = missing = misplaced = 0
        bad_keys: list[str] = []
        for digest, key in rows:
            path = self.layout.block_path(digest)
            try:
                fault = self._check_file(digest, path, key)
            except FileNotFoundError:
                missing += 1
                bad_keys.append(digest)
                continue
            except OSError:  # a directory where the block file should be
                fault = Fault.CORRUPT
            if fault is not Fault.OK:
                bad_keys.append(digest)
                if fault is Fault.MISPLACED:
                    misplaced += 1
                else:
                    bad += 1
        orphans = 0
        known = {digest for digest, _key in rows}
        for digest, _path in self.layout.block_files():
            if digest not in known:
                orphans += 1
        removed = 0
        if clean and (bad_keys or orphans):
            with self._locked():
                for digest in bad_keys:
                    idx.delete(digest)
                    self._unlink_block(digest)
                    removed += 1
                self._recover_locked()
                self._used = idx.used()
        return VerifyResult(checked=len(rows), bad=bad, missing=missing, orphans=orphans,
                            removed=removed, misplaced=misplaced)

    def clear(self) -> int:
        """Drop every block; returns how many."""
        with self._locked():
            idx = self.index
            digests = idx.digests()
            for digest in digests:
                self._unlink_block(digest)
            idx.delete_all()
            self._recover_locked()
            self._used = idx.used()
            return len(digests)

    def keys(self) -> list[BlockKey]:
        """The stored blocks' keys, oldest first (a block kept by an index rebuild has an
        empty path and version: its header holds only their hashes)."""
        return self.index.keys()

    @property
    def used(self) -> int:
        """Bytes stored, as of this process's last index operation (cheap, approximate
        when other processes write; :meth:`stats` reads the index)."""
        return self._used

    def disk_bytes(self) -> int:
        """Apparent bytes of all block and temp files on disk (the budget check's truth)."""
        return self.layout.disk_bytes()

    def stats(self) -> StoreStats:
        n, used = self.index.count_and_bytes()
        return StoreStats(blocks=n, used_bytes=used, capacity_bytes=self.capacity,
                          block_size=self.block_size, checksum=CHECKSUM_NAME,
                          cache_dir=self.cache_dir)

    def close(self) -> None:
        self.mapped.close()
        try:
            if self._index is not None:
                self._index.close()
        finally:
            for fd in (self._lock_fd, self._users_fd):
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self._lock_fd = self._users_fd = -1

    def __enter__(self) -> BlockStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class UncachedStore(BlockStore):
    """A store that holds nothing: what :func:`open_store` gives when the cache directory
    cannot be used (disk full at open, a wrong-type entry, no permission). Every read is
    a miss (the engine reads the remote), every ``put`` declines."""

    def __init__(self, cache_dir: str | os.PathLike[str], capacity: int, block_size: int,
                 *, verify: str = DEFAULT_VERIFY, reason: str = "") -> None:
        self._setup(cache_dir, capacity, block_size, check_verify_mode(verify),
                    DEFAULT_CACHE_MODE, MappedBlocks(0), 0.0)
        #: why the cache directory is not used
        self.reason = reason

    def get(self, key: BlockKey) -> bytes | None:
        return None

    def get_range(self, key: BlockKey, start: int, end: int) -> bytes | None:
        return None

    def get_range_into(self, key: BlockKey, start: int, buf: memoryview) -> int | None:
        return None

    def range_fd(self, key: BlockKey, start: int, end: int) -> tuple[int, int, int] | None:
        return None

    def serves_ranges(self, key: BlockKey) -> bool:
        return False

    def contains(self, key: BlockKey) -> bool:
        return False

    def put_evicting(self, key: BlockKey, data: bytes, evict: Sequence[BlockKey]) -> Put:
        return Put(False)

    def evict(self, keys: Sequence[BlockKey]) -> None:
        pass

    def remove(self, key: BlockKey) -> bool:
        return False

    def verify(self, clean: bool = True) -> VerifyResult:
        return VerifyResult(checked=0, bad=0, missing=0, orphans=0, removed=0)

    def clear(self) -> int:
        return 0

    def keys(self) -> list[BlockKey]:
        return []

    def disk_bytes(self) -> int:
        return 0

    def stats(self) -> StoreStats:
        return StoreStats(blocks=0, used_bytes=0, capacity_bytes=self.capacity,
                          block_size=self.block_size, checksum=CHECKSUM_NAME,
                          cache_dir=self.cache_dir)


def open_store(cache_dir: str | os.PathLike[str], capacity: int, block_size: int, *,
               verify: str = DEFAULT_VERIFY, mmap_bytes: int = DEFAULT_MMAP_BYTES,
               cache_mode: int = DEFAULT_CACHE_MODE,
               free_space_ratio: float = DEFAULT_FREE_SPACE_RATIO) -> BlockStore:
    """A :class:`BlockStore` on ``cache_dir``, or an :class:`UncachedStore` (with a
    warning naming the cause and the fix) when the directory cannot be used: a disk full
    at open, a wrong-type entry, a permission error inside it. Bad arguments still raise
    BadInput, and a ``cache_dir`` that is not a directory and cannot be made one (a path
    under a file) raises: that is a wrong setting, not a damaged cache."""
    try:
        return BlockStore(cache_dir, capacity, block_size, verify=verify, mmap_bytes=mmap_bytes,
                          cache_mode=cache_mode, free_space_ratio=free_space_ratio)
    except (OSError, sqlite3.Error) as exc:
        full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
        if not full and not os.path.isdir(cache_dir):
            raise
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("aicache: cache directory %s unusable (%s); serving reads uncached. "
                    "Free space, or repair it with `aicache cache clear --cache-dir %s`",
                    os.fspath(cache_dir), reason, os.fspath(cache_dir))
        return UncachedStore(cache_dir, capacity, block_size, verify=verify, reason=reason)
