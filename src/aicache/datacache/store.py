"""BlockStore: a bounded, persistent, checksummed block cache on local disk.

Why this shape (the problems it must not have):

* fsspec's ``simplecache``/``filecache`` grow without bound and race when two processes
  share a directory; Mountpoint wipes its cache at every mount. Here the byte budget holds
  (checked under an exclusive lock, with eviction, before a block becomes visible), several
  processes may share one directory, and the cache survives restarts.

Layout of ``cache_dir``::

    index.sqlite   the index (SQLite, WAL mode): one row per block + a ``meta`` table
    lock           fcntl lock file: every index *mutation* and eviction holds LOCK_EX
    blocks/ab/<key>.blk   one file per block: a 24-byte header + the block's bytes
    tmp/           blocks being written (``<pid>-<n>.tmp``), renamed into ``blocks/``

Decisions:

* **Index = SQLite in WAL mode** (stdlib, crash-safe transactions, readers never block
  writers). An append-only log would need its own compaction and torn-tail recovery;
  SQLite gives both for free. The index is *not* on the hit path: a block's file name is a
  hash of (remote path, file version, block index), and the header carries the checksum,
  so a reader opens the file directly and verifies it — no query, no lock. A hit costs
  open + fstat + one ``pread`` of exactly the payload + close (no over-allocation, no
  copy after the read); :meth:`BlockStore.get_range` reads a piece of an already verified
  block (a FUSE request). A verified block read a second time is kept *mapped*
  (:mod:`aicache.datacache.mapped`, ``mmap_bytes``, 1 GiB by default): its next hits are
  one ``stat`` (is the file still the verified one?) and a ``memcpy`` without the GIL —
  faster than ``pread`` per byte, not only per call. Mappings are pinned while copied
  and re-checked every second, so evicted blocks' disk space is not held for long.
* **Checksums** (xxh3-64 when ``xxhash`` is installed, else blake2b-64) are in the header.
  When they are checked on a read is the ``verify`` mode (:data:`VERIFY_MODES`):

  - ``full``: every read hashes the whole block (what the store did first; what JuiceFS's
    ``--verify-cache-checksum=full``/``extend`` do: they differ only in how a *partial*
    read of a block is checked, and re-hash on every read).
  - ``stat`` (default): a block is hashed once per *content version*. After a block read
    in this process verified, the file's ``(st_dev, st_ino, st_size, st_mtime_ns,
    st_ctime_ns)`` is remembered (bounded memo); while ``fstat`` of the open file returns
    the same tuple, later reads skip the hash. Any write through the file system — the
    tests' corruption, an editor, ``truncate``, a re-rename of another file into the name —
    sets ``ctime`` to the current time, so it is re-verified and a corrupt block is still
    never served. Racy timestamps (git's "racily clean" problem: a write within the file
    system's timestamp granularity of the verification would keep ``ctime``) are handled
    by remembering a block only once its ``ctime`` is ``racy_window_s`` (2 s) in the past;
    younger blocks are hashed on every read. What ``stat`` does *not* catch: bytes that
    change without any inode update — media bit rot or a controller/firmware fault returning
    other data, writes to the raw block device (``dd`` to ``/dev/sdX``, ``debugfs``), a file
    system or page-cache bug, or a backwards wall-clock jump that lands a later write on the
    exact remembered nanosecond; ``full`` catches all of those on every read, and
    ``aicache cache verify`` re-hashes everything on demand. No JuiceFS mode corresponds to
    it (JuiceFS has none/full/shrink/extend, all per read).
  - ``none``: no hash on reads (only the header's magic/length and the file size are
    checked, so a truncated or foreign file is still refused). Corrupted *payload* bytes are
    served — like JuiceFS's ``none``. ``aicache cache verify`` still finds them.

  A mismatch drops the block, counts it and reports a miss, so the engine refetches it.
* **Atomic writes**: write ``tmp/…`` + fsync, then under the lock: evict until the block
  fits, ``rename`` into place, insert the row, commit. A crash leaves at worst an orphan
  file (no row) or a row without a file; :meth:`recover` (run at every open) fixes both.
* **Budget**: file bytes (header included) of all committed blocks ≤ ``capacity`` at
  every commit. Victims are unlinked *before* the new block is renamed in, so the disk
  never holds more than the budget plus the temp files of fetches in flight.
* Blocks are immutable: a key names a (path, version, index), so a file that changes
  remotely gets new keys and stale blocks age out; a reader that raced an eviction still
  reads a whole file (POSIX unlink semantics) whose checksum it verifies.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aicache.datacache.mapped import DEFAULT_MMAP_BYTES, MappedBlocks

try:  # xxh3 is ~10x faster than blake2b; the algorithm id is stored in every header
    import xxhash

    def _xxh3(data: bytes | memoryview) -> int:
        return xxhash.xxh3_64_intdigest(data)

except ImportError:  # pragma: no cover - xxhash is a core dependency
    xxhash = None
    _xxh3 = None  # type: ignore[assignment]


def _blake2b(data: bytes | memoryview) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


#: algorithm id in the header → checksum function
CHECKSUMS: dict[int, Callable[[bytes | memoryview], int]] = {2: _blake2b}
if _xxh3 is not None:
    CHECKSUMS[1] = _xxh3
DEFAULT_ALGO = 1 if _xxh3 is not None else 2

MAGIC = b"AICB"
HEADER = struct.Struct("<4sHHQQ")  # magic, format version, algo, length, checksum
HEADER_SIZE = HEADER.size  # 24
_LENGTH = struct.Struct("<Q")  # the length field, at offset 8 of the header
FORMAT_VERSION = 1

#: when a block read checks its checksum (see the module docstring)
VERIFY_MODES = ("full", "stat", "none")
DEFAULT_VERIFY = "stat"
#: ``stat`` mode remembers a verified block only once its ctime is this far in the past
#: (covers 1 s timestamp granularity — ext3, HFS+, some NFS servers — and jiffy-coarse
#: kernel clocks with room to spare)
DEFAULT_RACY_WINDOW_S = 2.0
#: bound on the ``stat`` memo (entries are ~200 bytes; evicted oldest-first)
VERIFIED_MEMO_MAX = 1 << 16


class StoreFull(OSError):
    """The local disk is full (ENOSPC): the block was not stored."""


@dataclass(frozen=True, slots=True)
class BlockKey:
    """A block of one version of one remote file. Immutable content ⇒ safe to share."""

    path: str
    version: str
    index: int

    def digest(self, block_size: int) -> str:
        """The file name of this block in a store of ``block_size`` blocks (the block size
        is part of the name: block ``i`` of 1 MiB blocks is not block ``i`` of 4 MiB)."""
        h = hashlib.blake2b(digest_size=16, key=block_size.to_bytes(8, "little"))
        h.update(self.path.encode())
        h.update(b"\0")
        h.update(self.version.encode())
        h.update(b"\0")
        h.update(str(self.index).encode())
        return h.hexdigest()


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
    bad: int
    missing: int
    orphans: int
    removed: int


_SCHEMA = """
CREATE TABLE IF NOT EXISTS blocks (
    key TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    version TEXT NOT NULL,
    idx INTEGER NOT NULL,
    size INTEGER NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS blocks_seq ON blocks(seq);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


class BlockStore:
    """Blocks on local disk under a byte budget; safe for threads and processes.

    ``get`` never takes a lock. ``put``/``remove``/``clear``/``verify(clean=True)`` hold a
    process-local mutex and an exclusive ``fcntl.flock`` on ``cache_dir/lock``.
    """

    def __init__(self, cache_dir: str | os.PathLike[str], capacity: int,
                 block_size: int = 4 * 1024 * 1024, *, recover: bool = True,
                 verify: str = DEFAULT_VERIFY, racy_window_s: float = DEFAULT_RACY_WINDOW_S,
                 mmap_bytes: int = DEFAULT_MMAP_BYTES) -> None:
        if capacity <= 0:
            from aicache.errors import BadInput

            raise BadInput(f"cache size {capacity!r} must be positive; give e.g. 10GiB")
        if block_size <= 0:
            from aicache.errors import BadInput

            raise BadInput(f"block size {block_size!r} must be positive; give e.g. 4MiB")
        if verify not in VERIFY_MODES:
            from aicache.errors import BadInput

            raise BadInput(f"checksum verify mode {verify!r} is unknown; give one of "
                           f"{', '.join(VERIFY_MODES)}")
        self.verify_mode = verify
        #: verified blocks kept mapped (none in ``full`` mode: every read hashes anyway)
        self.mapped = MappedBlocks(mmap_bytes if verify != "full" else 0)
        self._racy_ns = int(racy_window_s * 1e9)
        #: stat mode: key -> (stat signature, payload length) of blocks verified here
        self._verified: dict[BlockKey, tuple[tuple[int, int, int, int, int], int]] = {}
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.capacity = int(capacity)
        self.block_size = int(block_size)
        self._blocks_dir = os.path.join(self.cache_dir, "blocks")
        self._tmp_dir = os.path.join(self.cache_dir, "tmp")
        os.makedirs(self._blocks_dir, exist_ok=True)
        os.makedirs(self._tmp_dir, exist_ok=True)
        self._mutex = threading.RLock()
        self._lock_fd = os.open(os.path.join(self.cache_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        self._db = sqlite3.connect(os.path.join(self.cache_dir, "index.sqlite"),
                                   timeout=60.0, check_same_thread=False, isolation_level=None)
        self._tmp_counter = 0
        self._paths: dict[BlockKey, str] = {}
        self.corrupt_dropped = 0
        #: hooks for the engine's metrics (called outside/inside the lock respectively)
        self.on_corrupt: Callable[[BlockKey], None] | None = None
        self.on_evict: Callable[[], None] | None = None
        self._used = 0
        with self._locked():
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.execute("INSERT OR REPLACE INTO meta VALUES('capacity', ?)", (str(self.capacity),))
            self._db.execute("INSERT OR IGNORE INTO meta VALUES('block_size', ?)", (str(self.block_size),))
            if recover:
                self._recover_locked()
            self._used = self._sum_used()

    @classmethod
    def open_existing(cls, cache_dir: str | os.PathLike[str], *, recover: bool = False) -> BlockStore:
        """Open a cache directory some engine created, with the budget it last used
        (``aicache cache stats|verify|clear``)."""
        from aicache.errors import BadInput

        index = os.path.join(os.fspath(cache_dir), "index.sqlite")
        if not os.path.exists(index):
            raise BadInput(f"--cache-dir {os.fspath(cache_dir)!r} holds no aicache cache "
                           "(no index.sqlite); give the directory a mount or fsspec cache used")
        db = sqlite3.connect(index, timeout=60.0)
        try:
            meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise BadInput(f"--cache-dir {os.fspath(cache_dir)!r}: unreadable index ({exc}); "
                           "run `aicache cache clear` on it or remove the directory") from None
        finally:
            db.close()
        return cls(cache_dir, int(meta.get("capacity", 1 << 62)),
                   int(meta.get("block_size", 4 * 1024 * 1024)), recover=recover)

    # -- paths ----------------------------------------------------------------------------
    def block_path(self, key: BlockKey) -> str:
        p = self._paths.get(key)
        if p is None:
            d = key.digest(self.block_size)
            p = f"{self._blocks_dir}/{d[:2]}/{d}.blk"
            if len(self._paths) >= 1 << 20:  # a memo, not a second index: bounded
                self._paths.clear()
            self._paths[key] = p
        return p

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _sum_used(self) -> int:
        return int(self._db.execute("SELECT COALESCE(SUM(size), 0) FROM blocks").fetchone()[0])

    # -- reads (lock-free) ----------------------------------------------------------------
    def get(self, key: BlockKey) -> bytes | None:
        """The block's bytes, or None when absent or corrupt (a corrupt block is dropped).

        Lock-free: a block kept mapped (:mod:`aicache.datacache.mapped`) is one ``stat``
        and a copy; else open, ``fstat``, read exactly the declared bytes (no
        over-allocation), close. Whether the checksum is computed depends on
        :attr:`verify_mode`."""
        path = self.block_path(key)
        maps = self.mapped
        if maps.max_bytes:
            data = maps.copy(path)  # only ever holds verified files (stat/none modes)
            if data is not None:
                return data
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        data = None
        try:
            st = os.fstat(fd)
            n = st.st_size - HEADER_SIZE
            mode = self.verify_mode
            if mode == "full":
                sig = None
            else:
                sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                if self._verified.get(key) == (sig, n):  # this content version was verified
                    if maps.max_bytes:  # its second read: keep it mapped from now on
                        data = maps.admit(path, fd, sig, HEADER_SIZE, n)
                        if data is not None:
                            return data
                    data = os.pread(fd, n, HEADER_SIZE)
                    if len(data) == n:
                        return data
                    data = None  # shrank under us: fall through to a checked read
            if 0 <= n <= self.block_size:
                head = os.pread(fd, HEADER_SIZE, 0)
                if len(head) == HEADER_SIZE and _LENGTH.unpack_from(head, 8)[0] == n:
                    data = os.pread(fd, n, HEADER_SIZE)
                    if not self._valid(head, data, check=mode != "none"):
                        data = None
                    elif sig is not None and time.time_ns() - st.st_ctime_ns > self._racy_ns:
                        v = self._verified
                        if len(v) >= VERIFIED_MEMO_MAX:
                            try:  # oldest first (dict order); another thread may race us
                                del v[next(iter(v))]
                            except (RuntimeError, KeyError, StopIteration):
                                pass
                        v[key] = (sig, n)
        finally:
            os.close(fd)
        if data is not None:
            return data
        self._verified.pop(key, None)
        self.corrupt_dropped += 1
        if self.on_corrupt is not None:
            self.on_corrupt(key)
        self.remove(key)
        return None

    def get_range(self, key: BlockKey, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (clipped) of a block whose *current* file was verified by
        :meth:`get` in this process (``stat``/``none`` modes: same ``fstat`` signature);
        None otherwise — absent, never verified here, changed since, or mode ``full`` —
        and the caller reads the whole block with :meth:`get`, which checks it. So a range
        is never served from a file version that was not verified."""
        return self._range(key, start, end, None)  # type: ignore[return-value]

    def get_range_into(self, key: BlockKey, start: int, buf: memoryview) -> int | None:
        """:meth:`get_range` of ``[start, start + len(buf))`` read straight into ``buf``
        (a FUSE reply buffer: no intermediate bytes object, one copy). Returns the number
        of bytes written (short at the block's end), or None as :meth:`get_range` would."""
        return self._range(key, start, start + len(buf), buf)  # type: ignore[return-value]

    def serves_ranges(self, key: BlockKey) -> bool:
        """Whether :meth:`get_range` may serve ``key`` (it was verified in this process and
        the mode is not ``full``) — a memo lookup, no I/O; the read itself still checks
        that the file is the verified version."""
        return self.verify_mode != "full" and key in self._verified

    def range_fd(self, key: BlockKey, start: int, end: int) -> tuple[int, int, int] | None:
        """An open descriptor of ``key``'s block file, checked as :meth:`get_range` checks
        it, and where ``[start, end)`` (clipped) lies in it: ``(fd, file offset, length)``.
        The caller owns ``fd`` and closes it once done — for a FUSE reply that libfuse
        splices from the file, that is after the reply went out, not before it returns.
        None when :meth:`get_range` would return None."""
        seen = self._verified.get(key)
        if seen is None or self.verify_mode == "full":
            return None
        try:
            fd = os.open(self.block_path(key), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            sig, n = seen
            end = min(end, n)
            if ((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == sig
                    and 0 <= start <= end):
                return fd, HEADER_SIZE + start, end - start
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        return None

    def _range(self, key: BlockKey, start: int, end: int, buf: memoryview | None
               ) -> bytes | int | None:
        got = self.range_fd(key, start, end)
        if got is None:
            return None
        fd, pos, want = got
        try:
            if buf is not None:
                n = os.preadv(fd, [buf[:want]], pos)
                return n if n == want else None
            data = os.pread(fd, want, pos)
        finally:
            os.close(fd)
        return data if len(data) == want else None

    def contains(self, key: BlockKey) -> bool:
        return os.path.exists(self.block_path(key))

    @staticmethod
    def _valid(head: bytes, data: bytes | memoryview, check: bool = True) -> bool:
        """Header well-formed, length matches, and (``check``) the checksum matches."""
        if len(head) != HEADER_SIZE:
            return False
        magic, fmt, algo, length, checksum = HEADER.unpack(head)
        fn = CHECKSUMS.get(algo)
        return (magic == MAGIC and fmt == FORMAT_VERSION and fn is not None
                and length == len(data) and (not check or fn(data) == checksum))

    # -- writes ---------------------------------------------------------------------------
    def put(self, key: BlockKey, data: bytes, victim: Callable[[], BlockKey | None] | None = None
            ) -> bool:
        """Store ``data`` under ``key`` within the budget. Returns False if it cannot fit.

        While the block does not fit, ``victim()`` (the engine's policy) names a block to
        drop; when it returns None (or names nothing stored), the oldest block in the index
        goes (FIFO across processes, so the budget holds even for blocks no policy in this
        process knows). Raises :class:`StoreFull` on ENOSPC; nothing partial stays behind.
        """
        size = len(data) + HEADER_SIZE
        if size > self.capacity:
            return False
        header = HEADER.pack(MAGIC, FORMAT_VERSION, DEFAULT_ALGO, len(data), CHECKSUMS[DEFAULT_ALGO](data))
        tmp = self._write_tmp(header, data)
        try:
            with self._locked():
                row = self._db.execute("SELECT size FROM blocks WHERE key=?", (key.digest(self.block_size),)).fetchone()
                if row is not None:  # another thread/process stored it meanwhile
                    return True
                used = self._sum_used()
                while used + size > self.capacity:
                    freed = self._evict_one_locked(victim)
                    if freed == 0:
                        return False
                    used -= freed
                final = self.block_path(key)
                os.makedirs(os.path.dirname(final), exist_ok=True)
                try:
                    self._db.execute("BEGIN IMMEDIATE")
                    self._db.execute(
                        "INSERT INTO blocks(key, path, version, idx, size, seq) VALUES(?,?,?,?,?,"
                        "(SELECT COALESCE(MAX(seq), 0) + 1 FROM blocks))",
                        (key.digest(self.block_size), key.path, key.version, key.index, size))
                    os.rename(tmp, final)
                    tmp = ""
                    self._db.execute("COMMIT")
                except sqlite3.OperationalError as exc:
                    self._rollback()
                    if tmp == "":  # renamed but not committed: take the file back out
                        _unlink(final)
                    if "full" in str(exc).lower():
                        raise StoreFull(errno.ENOSPC, f"cache index: {exc}") from exc
                    raise
                self._used = used + size
                return True
        finally:
            if tmp:
                _unlink(tmp)

    def _write_tmp(self, header: bytes, data: bytes) -> str:
        with self._mutex:
            self._tmp_counter += 1
            n = self._tmp_counter
        tmp = os.path.join(self._tmp_dir, f"{os.getpid()}-{threading.get_ident()}-{n}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _write_all(fd, header)
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            _unlink(tmp)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreFull(exc.errno, f"cache disk full writing a block: {exc.strerror}") from exc
            raise
        return tmp

    def _evict_one_locked(self, victim: Callable[[], BlockKey | None] | None) -> int:
        """Drop one block (policy's choice first, else the oldest); bytes freed, 0 if empty."""
        freed = 0
        for _ in range(64):  # a policy may name blocks another process already dropped
            k = victim() if victim is not None else None
            if k is None:
                break
            freed = self._remove_locked(k.digest(self.block_size))
            if freed:
                break
        if not freed:
            row = self._db.execute("SELECT key FROM blocks ORDER BY seq LIMIT 1").fetchone()
            if row is None:
                return 0
            freed = self._remove_locked(row[0])
        if freed and self.on_evict is not None:
            self.on_evict()
        return freed

    def _remove_locked(self, digest: str) -> int:
        row = self._db.execute("SELECT size FROM blocks WHERE key=?", (digest,)).fetchone()
        if row is None:
            return 0
        self._unlink_block(digest)
        self._db.execute("DELETE FROM blocks WHERE key=?", (digest,))
        self._used -= int(row[0])
        return int(row[0])

    def _unlink_block(self, digest: str) -> None:
        path = os.path.join(self._blocks_dir, digest[:2], digest + ".blk")
        _unlink(path)
        self.mapped.drop(path)  # its disk space is freed now, not at the next sweep

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass

    def remove(self, key: BlockKey) -> bool:
        """Drop ``key`` if stored (the engine's corrupt/invalidated blocks)."""
        self._verified.pop(key, None)
        with self._locked():
            return self._remove_locked(key.digest(self.block_size)) > 0

    # -- maintenance ----------------------------------------------------------------------
    def _recover_locked(self) -> None:
        """Make the index and the files agree after a crash (run at every open)."""
        known = {r[0]: r[1] for r in self._db.execute("SELECT key, size FROM blocks")}
        on_disk = set()
        for sub in _listdir(self._blocks_dir):
            subdir = os.path.join(self._blocks_dir, sub)
            for name in _listdir(subdir):
                if not name.endswith(".blk"):
                    continue
                digest = name[:-4]
                if digest not in known:
                    _unlink(os.path.join(subdir, name))  # renamed in, never committed
                else:
                    on_disk.add(digest)
        missing = [k for k in known if k not in on_disk]
        if missing:
            self._db.executemany("DELETE FROM blocks WHERE key=?", [(k,) for k in missing])
        for name in _listdir(self._tmp_dir):
            pid = name.split("-", 1)[0]
            if not pid.isdigit() or not _pid_alive(int(pid)):
                _unlink(os.path.join(self._tmp_dir, name))

    def verify(self, clean: bool = True) -> VerifyResult:
        """Check every block's checksum; with ``clean``, drop bad blocks and fix the index."""
        rows = list(self._db.execute("SELECT key FROM blocks"))
        bad = missing = 0
        bad_keys: list[str] = []
        for (digest,) in rows:
            path = os.path.join(self._blocks_dir, digest[:2], digest + ".blk")
            try:
                with open(path, "rb") as f:
                    head = f.read(HEADER_SIZE)
                    data = f.read()
            except FileNotFoundError:
                missing += 1
                bad_keys.append(digest)
                continue
            if not self._valid(head, data):
                bad += 1
                bad_keys.append(digest)
        orphans = 0
        known = {r[0] for r in rows}
        for sub in _listdir(self._blocks_dir):
            for name in _listdir(os.path.join(self._blocks_dir, sub)):
                if name.endswith(".blk") and name[:-4] not in known:
                    orphans += 1
        removed = 0
        if clean and (bad_keys or orphans):
            with self._locked():
                for digest in bad_keys:
                    self._db.execute("DELETE FROM blocks WHERE key=?", (digest,))
                    self._unlink_block(digest)
                    removed += 1
                self._recover_locked()
                self._used = self._sum_used()
        return VerifyResult(checked=len(rows), bad=bad, missing=missing, orphans=orphans,
                            removed=removed)

    def clear(self) -> int:
        """Drop every block; returns how many."""
        with self._locked():
            rows = list(self._db.execute("SELECT key FROM blocks"))
            for (digest,) in rows:
                self._unlink_block(digest)
            self._db.execute("DELETE FROM blocks")
            self._recover_locked()
            self._used = 0
            return len(rows)

    def keys(self) -> list[BlockKey]:
        return [BlockKey(p, v, i) for p, v, i in
                self._db.execute("SELECT path, version, idx FROM blocks ORDER BY seq")]

    @property
    def used(self) -> int:
        """Bytes stored, as of this process's last index operation (cheap, approximate
        when other processes write; :meth:`stats` reads the index)."""
        return self._used

    def disk_bytes(self) -> int:
        """Apparent bytes of all block and temp files on disk (the budget check's truth)."""
        total = 0
        for root in (self._blocks_dir, self._tmp_dir):
            for dirpath, _dirs, files in os.walk(root):
                for name in files:
                    try:
                        total += os.stat(os.path.join(dirpath, name)).st_size
                    except FileNotFoundError:
                        pass
        return total

    def stats(self) -> StoreStats:
        n, used = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blocks").fetchone()
        algo = {1: "xxh3-64", 2: "blake2b-64"}[DEFAULT_ALGO]
        return StoreStats(blocks=int(n), used_bytes=int(used), capacity_bytes=self.capacity,
                          block_size=self.block_size, checksum=algo, cache_dir=self.cache_dir)

    def close(self) -> None:
        self.mapped.close()
        try:
            self._db.close()
        finally:
            try:
                os.close(self._lock_fd)
            except OSError:
                pass

    def __enter__(self) -> BlockStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
