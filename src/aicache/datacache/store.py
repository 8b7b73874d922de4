"""BlockStore: a bounded, persistent, checksummed block cache on local disk.

Why this shape (the problems it must not have):

* fsspec's ``simplecache``/``filecache`` grow without bound and race when two processes
  share a directory; Mountpoint wipes its cache at every mount. Here the byte budget holds
  (checked under an exclusive lock, with eviction, before a block becomes visible), several
  processes may share one directory, and the cache survives restarts.

Layout of ``cache_dir``::

    index.sqlite   the index (SQLite, WAL mode): one row per block, the temp files'
                   reservations, a ``meta`` table
    lock           fcntl lock file: every index *mutation* and eviction holds LOCK_EX
    blocks/ab/<key>.blk   one file per block: a 72-byte header + the block's bytes
    tmp/           blocks being written (``<pid>-<n>.tmp``), renamed into ``blocks/``

Every entry is owner-only by default (directories 0700, files 0600, block files 0400 —
read-only, see :mod:`aicache.datacache.mapped` —: cached copies of private objects, and
the index lists their remote paths); ``cache_mode`` (e.g. ``0o640``)
makes a deliberately shared cache, directories getting ``x`` wherever the mode has ``r``.
A directory, or an entry of it, that another user could have written (not theirs, or
writable by others, or a link) is refused at open (:mod:`aicache.datacache.trust`), and
every cache file is opened with ``O_NOFOLLOW``.

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
* **Blocks know who they are.** The header names its block: block size, block index, the
  16-byte digest that is also its file name (of remote path, version, index, keyed by the
  block size), and 8-byte hashes of the path and of the version. A read compares them with
  the key it asked for (one 48-byte comparison against a per-key memo) before it trusts
  the checksum, so a valid block under another block's name (a misdirected write, a bad
  restore, a swap) is a miss, dropped and counted (``on_misplaced``), never served; a
  block file of an earlier format (no identity) is treated the same way, and an index
  written by an earlier release is emptied at open. ``verify`` checks the same.
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
* **Atomic writes**: under the lock, evict until the block fits and *reserve* its bytes
  (a row in ``reserved``); write ``tmp/…`` outside the lock; then under the lock
  ``rename`` into place, turn the reservation into the block's row, commit. A crash leaves
  at worst an orphan file (no row), a row without a file, or a dead process's
  reservation; :meth:`recover` (run at every open) fixes all three. The temp file is not
  fsynced (a cache can refetch what a power loss takes, and the fsync cost a miss ~5 ms
  here): a block a power loss tore still has its header's checksum, and every process
  hashes a block on its first read (``stat`` and ``full``), so it is dropped and
  refetched, never served. Only ``none``, which trusts the bytes, fsyncs each block.
* **Budget**: file bytes (header included) of all committed blocks *plus the temp files
  being written* (every process's reservations) ≤ ``capacity`` at every commit. The
  index beside them stays small: ~100 bytes a block, and its WAL is checkpointed every
  16 pages and cut back to 64 KiB (SQLite's default lets it reach ~4 MB, which a small
  budget would not see coming). Victims
  are unlinked before a temp file is written, so the disk never holds more than the
  budget — prefetches in flight included.
* Blocks are immutable: a key names a (path, version, index), so a file that changes
  remotely gets new keys and stale blocks age out; a reader that raced an eviction still
  reads a whole file (POSIX unlink semantics) whose checksum it verifies. The store never
  truncates or writes a block file in place (only temp files are written, then renamed
  over nothing; removal is ``unlink``), so a mapped block's pages stay valid for every
  change the cache itself makes (:mod:`aicache.datacache.mapped`).
* **A damaged directory degrades, never fails a read.** A wrong-type entry where a block
  file should be (a directory, a file where ``blocks/ab`` should be) is a miss and is
  removed; ``blocks/``, ``tmp/`` or ``lock`` of the wrong type, a disk full at open or an
  unreadable directory make :func:`open_store` return an :class:`UncachedStore` (reads
  go to the remote; a warning names the entry and the fix, ``aicache cache clear``, which
  repairs the layout). A corrupt index (not a database, malformed) is set aside and
  rebuilt from the block headers at open: every block whose header names its file and
  whose checksum verifies is kept, the rest unlinked; a missing index is rebuilt the same
  way.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import shutil
import sqlite3
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aicache.datacache.budget import (DEFAULT_FREE_SPACE_RATIO, check_free_space_ratio,
                                      disk_capped, join_users, settle_budget)
from aicache.datacache.counters import pid_alive
from aicache.datacache.keys import BlockKey, raw_bytes
from aicache.datacache.mapped import DEFAULT_MMAP_BYTES, MappedBlocks
from aicache.datacache.trust import check_cache_dir_trust

log = logging.getLogger(__name__)

try:  # xxh3 is much faster than blake2b; the algorithm id is stored in every header
    import xxhash

    def _xxh3(data: bytes | memoryview) -> int:
        return xxhash.xxh3_64_intdigest(data)

except ImportError:  # pragma: no cover - xxhash is a core dependency
    xxhash = None  # type: ignore[assignment]  # None marks xxhash missing
    _xxh3 = None  # type: ignore[assignment]  # None: no xxh3 checksum (checked below)


def _blake2b(data: bytes | memoryview) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


#: algorithm id in the header → checksum function
CHECKSUMS: dict[int, Callable[[bytes | memoryview], int]] = {2: _blake2b}
if _xxh3 is not None:
    CHECKSUMS[1] = _xxh3
DEFAULT_ALGO = 1 if _xxh3 is not None else 2

MAGIC = b"AICB"
#: magic, format version, algo, length, checksum | identity: block size, block index,
#: name digest (16 bytes), path hash (8), version hash (8)
HEADER = struct.Struct("<4sHHQQQQ16s8s8s")
HEADER_SIZE = HEADER.size  # 72
#: the unit a file system allocates in: a block file takes its size rounded up to it on
#: disk (4 KiB pages on ext4, xfs, tmpfs, overlayfs), and the budget counts what the disk
#: holds, so a cache of many small blocks stays within it too
ALLOC_UNIT = 4096
#: what one block's row takes in ``index.sqlite`` (key digest, path, version, index,
#: size, sequence and their b-tree entries, rounded up): counted with the block
INDEX_ROW = 256
#: the index's fixed part (schema pages, the WAL the store checkpoints back to 64 KiB,
#: the lock and users files), held back from the blocks' budget of a cache of at least
#: ``16 * INDEX_RESERVE`` (a smaller one, a test's or a toy's, keeps its whole budget)
INDEX_RESERVE = 128 * 1024


def stored_size(payload: int) -> int:
    """What a block of ``payload`` bytes costs in the budget: its file (header included)
    rounded up to :data:`ALLOC_UNIT`, plus its index row."""
    return -(-(payload + HEADER_SIZE) // ALLOC_UNIT) * ALLOC_UNIT + INDEX_ROW


def block_budget(capacity: int) -> int:
    """The part of a cache directory's ``capacity`` its blocks may take (see
    :data:`INDEX_RESERVE`): with the blocks' :func:`stored_size`, the directory's disk
    usage stays within ``capacity``."""
    return capacity - INDEX_RESERVE if capacity >= 16 * INDEX_RESERVE else capacity
_IDENT_AT = 24  # the identity's offset in the header (it runs to the header's end)
_IDENT = struct.Struct("<QQ16s8s8s")
_LENGTH = struct.Struct("<Q")  # the length field, at offset 8 of the header
#: 1: no identity in the header (a 24-byte header); 2: the block's identity in it
FORMAT_VERSION = 2
_FMT = struct.Struct("<H")  # the format field, at offset 4

#: default mode of cache files (directories get ``x`` where the mode has ``r``)
DEFAULT_CACHE_MODE = 0o600

#: when a block read checks its checksum (see the module docstring)
VERIFY_MODES = ("full", "stat", "none")
DEFAULT_VERIFY = "stat"
#: ``stat`` mode remembers a verified block only once its ctime is this far in the past
#: (covers 1 s timestamp granularity — ext3, HFS+, some NFS servers — and jiffy-coarse
#: kernel clocks with room to spare)
DEFAULT_RACY_WINDOW_S = 2.0
#: bound on the ``stat`` memo (entries are ~200 bytes; evicted oldest-first)
VERIFIED_MEMO_MAX = 1 << 16


@dataclass(frozen=True, slots=True)
class Put:
    """What :meth:`BlockStore.put_evicting` did: whether the block is stored, and the
    blocks it dropped on its own (oldest first) beyond the victims it was given."""

    stored: bool
    dropped: Sequence[BlockKey] = ()


class StoreFull(OSError):
    """The local disk is full (ENOSPC): the block was not stored."""


class CacheDirDamaged(OSError):
    """An entry of the cache directory has the wrong type (``blocks/`` a file, ``lock`` a
    directory…): the store cannot run there until ``aicache cache clear`` repairs it."""


def dir_mode(file_mode: int) -> int:
    """The directory mode for a cache ``file_mode``: ``x`` wherever ``r`` is set."""
    return file_mode | ((file_mode & 0o444) >> 2)


def check_cache_mode(mode: int | str) -> int:
    """``cache_mode`` as an int (``0o600``, ``"0640"``, ``"640"``); BadInput unless the
    owner may read and write, no bit beyond ``0o666`` is set and other users get nothing
    (a world-writable cache lets any user rewrite what every reader is served; a shared
    cache is a group's, :mod:`aicache.datacache.trust`)."""
    from aicache.errors import BadInput

    try:
        m = int(mode, 8) if isinstance(mode, str) else int(mode)
    except ValueError:
        m = -1
    if m < 0 or m & ~0o666 or m & 0o600 != 0o600 or m & 0o007:
        raise BadInput(f"cache mode {mode!r} is not an octal file mode the owner can read and "
                       "write, with no x bits and nothing for other users; give e.g. 0600 "
                       "(private, the default) or 0640 / 0660 (shared with the group)")
    return m


def key_identity(key: BlockKey, block_size: int) -> bytes:
    """The identity part of ``key``'s block header in a store of ``block_size`` blocks
    (see :data:`HEADER`): what a read compares before it trusts a block file."""
    return _IDENT.pack(block_size, key.index, bytes.fromhex(key.digest(block_size)),
                       _hash8(key.path), _hash8(key.version))


def _to_db(s: str) -> str | bytes:
    """``s`` for the index: text, or (a name that is not UTF-8) its raw bytes as a blob."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return raw_bytes(s)
    return s


def _from_db(v: str | bytes) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v


def _hash8(s: str) -> bytes:
    return hashlib.blake2b(raw_bytes(s), digest_size=8).digest()


def block_header(ident: bytes, data: bytes | memoryview) -> bytes:
    """The header of a block file holding ``data`` for the block whose identity is
    ``ident`` (:func:`key_identity`)."""
    return HEADER.pack(MAGIC, FORMAT_VERSION, DEFAULT_ALGO, len(data),
                       CHECKSUMS[DEFAULT_ALGO](data), *_IDENT.unpack(ident))


def encode_block(key: BlockKey, data: bytes, block_size: int) -> bytes:
    """A block file's bytes (header, then payload) exactly as the store writes them: the
    format any other tier that keeps blocks (the shared tier) writes too."""
    return block_header(key_identity(key, block_size), data) + data


def decode_block(key: BlockKey, blob: bytes, block_size: int) -> bytes | None:
    """The payload of ``blob`` when it is a whole, intact block file of ``key`` (magic,
    format, length, identity and checksum all agree); None for anything else — a torn or
    truncated copy, garbage, another block's file, another version's, an earlier format."""
    n = len(blob) - HEADER_SIZE
    if n < 0 or n > block_size:
        return None
    head = blob[:HEADER_SIZE]
    if BlockStore._fault(head, key_identity(key, block_size), n) != _OK:
        return None
    data = blob[HEADER_SIZE:]
    return data if BlockStore._valid(head, data) else None


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


#: why a block file was refused (:meth:`BlockStore._fault`)
_OK, _CORRUPT, _MISPLACED = 0, 1, 2


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
CREATE TABLE IF NOT EXISTS reserved (tmp TEXT PRIMARY KEY, size INTEGER NOT NULL);
"""
#: the index's WAL: checkpointed every this many pages, and cut back to this size after
_WAL_PAGES = 16
_WAL_LIMIT = 64 * 1024
#: the columns of each table of :data:`_SCHEMA`, in order
_COLUMNS = {"blocks": ("key", "path", "version", "idx", "size", "seq"), "meta": ("k", "v"),
            "reserved": ("tmp", "size")}
_USED = ("SELECT (SELECT COALESCE(SUM(size), 0) FROM blocks)"
         " + (SELECT COALESCE(SUM(size), 0) FROM reserved)")


class BlockStore:
    """Blocks on local disk under a byte budget; safe for threads and processes.

    ``get`` never takes a lock. ``put``/``remove``/``clear``/``verify(clean=True)`` hold a
    process-local mutex and an exclusive ``fcntl.flock`` on ``cache_dir/lock``.
    """

    def __init__(self, cache_dir: str | os.PathLike[str], capacity: int,
                 block_size: int = 4 * 1024 * 1024, *, recover: bool = True,
                 verify: str = DEFAULT_VERIFY, racy_window_s: float = DEFAULT_RACY_WINDOW_S,
                 mmap_bytes: int = DEFAULT_MMAP_BYTES,
                 cache_mode: int = DEFAULT_CACHE_MODE,
                 free_space_ratio: float = DEFAULT_FREE_SPACE_RATIO) -> None:
        from aicache.errors import BadInput

        if capacity <= 0:
            raise BadInput(f"cache size {capacity!r} must be positive; give e.g. 10GiB")
        if block_size <= 0:
            raise BadInput(f"block size {block_size!r} must be positive; give e.g. 4MiB")
        if verify not in VERIFY_MODES:
            raise BadInput(f"checksum verify mode {verify!r} is unknown; give one of "
                           f"{', '.join(VERIFY_MODES)}")
        self.verify_mode = verify
        self._free_ratio = check_free_space_ratio(free_space_ratio)
        self.file_mode = check_cache_mode(cache_mode)
        self.dir_mode = dir_mode(self.file_mode)
        #: verified blocks kept mapped (none in ``full`` mode: every read hashes anyway)
        self.mapped = MappedBlocks(mmap_bytes if verify != "full" else 0)
        self._racy_ns = int(racy_window_s * 1e9)
        #: stat mode: key -> (stat signature, payload length) of blocks verified here
        self._verified: dict[BlockKey, tuple[tuple[int, int, int, int, int], int]] = {}
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.capacity = int(capacity)
        #: what the blocks may take of ``capacity`` (the rest is the index's)
        self.block_capacity = block_budget(self.capacity)
        self.block_size = int(block_size)
        self._blocks_dir = os.path.join(self.cache_dir, "blocks")
        self._tmp_dir = os.path.join(self.cache_dir, "tmp")
        self._mutex = threading.RLock()
        self._tmp_counter = 0
        #: key -> (file path, expected header identity): a memo, not a second index
        self._paths: dict[BlockKey, tuple[str, bytes]] = {}
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
        self._db: sqlite3.Connection | None = None
        try:
            self._open(recover)
        except BaseException:
            self.close()
            raise

    def _open(self, recover: bool) -> None:
        check_cache_dir_trust(self.cache_dir, self.file_mode)
        created = not os.path.lexists(self.cache_dir)
        os.makedirs(self.cache_dir, mode=self.dir_mode, exist_ok=True)
        index = os.path.join(self.cache_dir, "index.sqlite")
        if created or os.path.exists(index):  # ours: never chmod a directory we were handed
            self._own_mode(self.cache_dir, self.dir_mode)
        for d in (self._blocks_dir, self._tmp_dir):
            self._make_dir(d)
        lock = os.path.join(self.cache_dir, "lock")
        if os.path.lexists(lock) and not os.path.isfile(lock):
            raise CacheDirDamaged(errno.EISDIR, f"{lock} is not a regular file; run "
                                  f"`aicache cache clear --cache-dir {self.cache_dir}`")
        self._lock_fd = _open_file(lock, os.O_RDWR, self.file_mode)
        with self._locked():
            fresh = not os.path.exists(index)
            self._db = self._connect(index)
            try:
                meta = self._init_index()
            except sqlite3.DatabaseError as exc:
                if not _is_corrupt(exc):
                    raise
                log.warning("aicache: %s is damaged (%s); rebuilding it from the block headers",
                            index, exc)
                self._sql.close()
                for suffix in ("", "-wal", "-shm", "-journal"):
                    _unlink(index + suffix)
                self._db = self._connect(index)
                meta = self._init_index()
                fresh = True
            if "format" not in meta:
                if "block_size" in meta and not fresh:
                    self._drop_all_locked()  # an earlier release's blocks name nobody
                elif _listdir(self._blocks_dir):
                    self.rebuilt = self._rebuild_locked()
            db = self._db
            # the budget rules of aicache.datacache.budget: one budget per directory at a time
            self._users_fd = _open_file(os.path.join(self.cache_dir, "users"), os.O_RDWR,
                                        self.file_mode)
            settle_budget(self.cache_dir, self.capacity, meta.get("capacity"),
                          join_users(self._users_fd))
            db.execute("INSERT OR REPLACE INTO meta VALUES('capacity', ?)", (str(self.capacity),))
            db.execute("INSERT OR IGNORE INTO meta VALUES('block_size', ?)", (str(self.block_size),))
            db.execute("INSERT OR REPLACE INTO meta VALUES('format', ?)", (str(FORMAT_VERSION),))
            if recover:
                self._recover_locked()
            self._used = self._sum_used()
        self.capacity = disk_capped(self.cache_dir, self.capacity, self._used, self._free_ratio,
                                    self.block_size)
        self.block_capacity = block_budget(self.capacity)

    @property
    def _sql(self) -> sqlite3.Connection:
        """The index connection (open from ``__init__`` to :meth:`close`)."""
        db = self._db
        if db is None:
            raise OSError(f"the block store of {self.cache_dir} is closed")
        return db

    def _connect(self, index: str) -> sqlite3.Connection:
        """The index, created owner-only first (SQLite gives its -wal/-shm files the
        database file's mode)."""
        os.close(_open_file(index, os.O_RDWR, self.file_mode))
        for suffix in ("-wal", "-shm"):
            if os.path.exists(index + suffix):
                self._own_mode(index + suffix, self.file_mode)
        return sqlite3.connect(index, timeout=60.0, check_same_thread=False, isolation_level=None)

    def _init_index(self) -> dict[str, str]:
        db = self._db
        assert db is not None
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        # keep the WAL small (SQLite's default lets it grow to ~4 MB before a checkpoint,
        # and keeps that size): the directory should stay near its budget
        db.execute(f"PRAGMA wal_autocheckpoint={_WAL_PAGES}")
        db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
        ok = db.execute("PRAGMA quick_check(1)").fetchone()
        if ok is None or ok[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {ok[0] if ok else 'no answer'}")
        for table, want in _COLUMNS.items():  # a table of another layout (which CREATE …
            # IF NOT EXISTS would keep) fails every write: the index is damaged, rebuilt
            have = tuple(r[1] for r in db.execute(f"PRAGMA table_info({table})"))
            if have and have != want:
                raise sqlite3.DatabaseError(f"table {table} has columns {have}, not {want}")
        db.executescript(_SCHEMA)
        return dict(db.execute("SELECT k, v FROM meta").fetchall())

    def _make_dir(self, d: str) -> None:
        if os.path.lexists(d) and not os.path.isdir(d):
            raise CacheDirDamaged(errno.ENOTDIR, f"{d} is not a directory; run "
                                  f"`aicache cache clear --cache-dir {self.cache_dir}`")
        os.makedirs(d, mode=self.dir_mode, exist_ok=True)
        self._own_mode(d, self.dir_mode)

    @staticmethod
    def _own_mode(path: str, mode: int) -> None:
        """Give ``path`` exactly ``mode`` if this user owns it (an earlier release's
        world-readable entries become owner-only; the umask cannot narrow a shared mode)."""
        st = os.stat(path)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode)

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
        meta: dict[str, str] = {}
        try:
            db = sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=60.0)
            try:
                meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
            finally:
                db.close()
        except sqlite3.DatabaseError:
            pass  # missing or damaged: the store rebuilds it from the block headers
        try:
            mode = stat.S_IMODE(os.stat(os.path.join(d, "lock")).st_mode)
            mode = check_cache_mode(mode)
        except (OSError, ValueError):
            mode = DEFAULT_CACHE_MODE
        return cls(cache_dir, int(meta.get("capacity", 1 << 62)),
                   int(meta.get("block_size", 4 * 1024 * 1024)), recover=recover,
                   cache_mode=mode)

    @staticmethod
    def repair_layout(cache_dir: str | os.PathLike[str]) -> list[str]:
        """Remove the cache directory's entries that have the wrong type (``blocks/``,
        ``tmp/`` not directories, ``lock`` not a regular file, ``index.sqlite`` a
        directory, ``users`` not a file, ``stats/`` not a directory): what ``aicache cache
        clear`` does first, so that it always works.
        Returns the paths removed."""
        d = os.fspath(cache_dir)
        removed = []
        for name, want_dir in (("blocks", True), ("tmp", True), ("lock", False),
                               ("index.sqlite", False), ("users", False), ("stats", True)):
            p = os.path.join(d, name)
            if not os.path.lexists(p):
                continue
            if (os.path.isdir(p) and not os.path.islink(p)) != want_dir:
                _remove_any(p)
                removed.append(p)
        return removed

    # -- paths ----------------------------------------------------------------------------
    def block_path(self, key: BlockKey) -> str:
        return self._where(key)[0]

    def _where(self, key: BlockKey) -> tuple[str, bytes]:
        """(file path, expected header identity) of ``key`` — memoised, bounded."""
        w = self._paths.get(key)
        if w is None:
            d = key.digest(self.block_size)
            w = (f"{self._blocks_dir}/{d[:2]}/{d}.blk", key_identity(key, self.block_size))
            if len(self._paths) >= 1 << 20:
                self._paths.clear()
            self._paths[key] = w
        return w

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _sum_used(self) -> int:
        """Bytes of committed blocks plus every process's reserved temp files."""
        return int(self._sql.execute(_USED).fetchone()[0])

    # -- reads (lock-free) ----------------------------------------------------------------
    def get(self, key: BlockKey) -> bytes | None:
        """The block's bytes, or None when absent, corrupt or another block's (such a
        file is dropped and counted).

        Lock-free: a block kept mapped (:mod:`aicache.datacache.mapped`) is one ``stat``
        and a copy; else open, ``fstat``, read exactly the declared bytes (no
        over-allocation), close. Whether the checksum is computed depends on
        :attr:`verify_mode`; the header's identity is compared on every read that is not
        of an already verified file version."""
        path, ident = self._where(key)
        maps = self.mapped
        if maps.max_bytes:
            data = maps.copy(path)  # only ever holds verified files (stat/none modes)
            if data is not None:
                return data
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a miss; ``blocks/ab`` a file or a link loop is also removed
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                self._wrong_type(key, path)
            return None
        data = None
        fault = _CORRUPT
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a directory where the block should be
                os.close(fd)
                fd = -1
                self._wrong_type(key, path)
                return None
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
                fault = self._fault(head, ident, n)
                if fault == _OK:
                    data = os.pread(fd, n, HEADER_SIZE)
                    if len(data) != n or (mode != "none" and not self._valid(head, data)):
                        data, fault = None, _CORRUPT
                    elif sig is not None and time.time_ns() - st.st_ctime_ns > self._racy_ns:
                        v = self._verified
                        if len(v) >= VERIFIED_MEMO_MAX:
                            try:  # oldest first (dict order); another thread may race us
                                del v[next(iter(v))]
                            except (RuntimeError, KeyError, StopIteration):
                                pass
                        v[key] = (sig, n)
        finally:
            if fd >= 0:
                os.close(fd)
        if data is not None:
            return data
        self._verified.pop(key, None)
        if fault == _MISPLACED:
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
        self._verified.pop(key, None)
        self.corrupt_dropped += 1
        if self.on_corrupt is not None:
            self.on_corrupt(key)
        try:
            with self._locked():
                self._remove_locked(key.digest(self.block_size))
                _remove_any(path)
                parent = os.path.dirname(path)
                if os.path.lexists(parent) and not os.path.isdir(parent):
                    _remove_any(parent)
        except (OSError, sqlite3.Error) as exc:
            log.warning("aicache: could not remove %s (not a block file): %s", path, exc)

    def get_range(self, key: BlockKey, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (clipped) of a block whose *current* file was verified by
        :meth:`get` in this process (``stat``/``none`` modes: same ``fstat`` signature);
        None otherwise — absent, never verified here, changed since, or mode ``full`` —
        and the caller reads the whole block with :meth:`get`, which checks it. So a range
        is never served from a file version that was not verified."""
        return self._range(key, start, end, None)  # type: ignore[return-value]  # bytes without a buf

    def get_range_into(self, key: BlockKey, start: int, buf: memoryview) -> int | None:
        """:meth:`get_range` of ``[start, start + len(buf))`` read straight into ``buf``
        (a FUSE reply buffer: no intermediate bytes object, one copy). Returns the number
        of bytes written (short at the block's end), or None as :meth:`get_range` would."""
        return self._range(key, start, start + len(buf), buf)  # type: ignore[return-value]  # int with a buf

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
            fd = os.open(self.block_path(key), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
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
        return os.path.isfile(self.block_path(key))

    @staticmethod
    def _fault(head: bytes, ident: bytes, n: int) -> int:
        """What is wrong with a block file's header, for a payload of ``n`` bytes and the
        expected identity ``ident``: ``_OK``, ``_CORRUPT`` (damaged, truncated, foreign) or
        ``_MISPLACED`` (a well-formed header naming another block, or an earlier format
        that names none)."""
        if len(head) < _IDENT_AT or head[:4] != MAGIC:
            return _CORRUPT
        if _FMT.unpack_from(head, 4)[0] != FORMAT_VERSION:
            return _MISPLACED
        if len(head) != HEADER_SIZE or _LENGTH.unpack_from(head, 8)[0] != n:
            return _CORRUPT
        return _OK if head[_IDENT_AT:] == ident else _MISPLACED

    @staticmethod
    def _valid(head: bytes, data: bytes | memoryview) -> bool:
        """The checksum algorithm is known and the checksum matches ``data``."""
        _magic, _fmt, algo, _length, checksum = HEADER.unpack(head)[:5]
        fn = CHECKSUMS.get(algo)
        return fn is not None and fn(data) == checksum

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
        tmp = self._tmp_name()
        name = os.path.basename(tmp)
        dropped: list[BlockKey] = []
        try:
            with self._locked():
                for k in evict:
                    self._evict_locked(k.digest(self.block_size))
                if self._sql.execute("SELECT 1 FROM blocks WHERE key=?", (digest,)).fetchone():
                    return Put(True)  # another thread/process stored it meanwhile
                used = self._sum_used()
                while used + size > self.block_capacity:
                    row = self._sql.execute(
                        "SELECT key, path, version, idx FROM blocks ORDER BY seq LIMIT 1").fetchone()
                    freed = 0 if row is None else self._evict_locked(row[0])
                    if freed == 0:
                        return Put(False, dropped)
                    dropped.append(BlockKey(row[1], row[2], int(row[3])))
                    used -= freed
                self._sql.execute("INSERT INTO reserved VALUES(?, ?)", (name, size))
                self._used = used + size
        except sqlite3.Error as exc:
            raise _as_oserror(exc) from exc
        reserved = True
        try:
            path, ident = self._where(key)
            header = block_header(ident, data)
            self._write_tmp(tmp, header, data)
            with self._locked():
                self._sql.execute("BEGIN IMMEDIATE")
                try:
                    self._sql.execute("DELETE FROM reserved WHERE tmp=?", (name,))
                    reserved = False
                    if self._sql.execute("SELECT 1 FROM blocks WHERE key=?", (digest,)).fetchone():
                        self._sql.execute("COMMIT")
                        self._used -= size
                        return Put(True, dropped)
                    self._sql.execute(
                        "INSERT INTO blocks(key, path, version, idx, size, seq) VALUES(?,?,?,?,?,"
                        "(SELECT COALESCE(MAX(seq), 0) + 1 FROM blocks))",
                        (digest, _to_db(key.path), _to_db(key.version), key.index, size))
                    self._rename_in(tmp, path)
                    tmp = ""
                    self._sql.execute("COMMIT")
                except BaseException as exc:
                    self._rollback()
                    reserved = True  # the rollback restored the reservation's row
                    if tmp == "":  # renamed but not committed: take the file back out
                        _unlink(path)
                    if isinstance(exc, sqlite3.Error):
                        raise _as_oserror(exc) from exc
                    raise
                return Put(True, dropped)
        finally:
            if tmp:
                _unlink(tmp)
            if reserved:
                self._unreserve(name, size)

    def _unreserve(self, name: str, size: int) -> None:
        try:
            with self._locked():
                self._sql.execute("DELETE FROM reserved WHERE tmp=?", (name,))
                self._used -= size
        except sqlite3.Error as exc:  # the dead-process sweep at the next open drops it
            log.warning("aicache: could not release a temp file's reservation: %s", exc)

    def _rename_in(self, tmp: str, path: str) -> None:
        """``rename`` a written block into place, first removing what has the wrong type
        there (a directory at the block's name, a file at ``blocks/ab``)."""
        parent = os.path.dirname(path)
        if os.path.lexists(parent) and not os.path.isdir(parent):
            _remove_any(parent)
        if not os.path.isdir(parent):
            os.mkdir(parent, self.dir_mode)
            self._own_mode(parent, self.dir_mode)
        if os.path.lexists(path) and not os.path.isfile(path):
            _remove_any(path)
        os.rename(tmp, path)

    def _tmp_name(self) -> str:
        with self._mutex:
            self._tmp_counter += 1
            n = self._tmp_counter
        return os.path.join(self._tmp_dir, f"{os.getpid()}-{threading.get_ident()}-{n}.tmp")

    def _write_tmp(self, tmp: str, header: bytes, data: bytes) -> None:
        try:
            # read-only: a block file is never written in place, and nobody but root can
            # truncate it under a reader's mapping (aicache.datacache.mapped)
            mode = self.file_mode & 0o444
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            try:
                if self.file_mode != DEFAULT_CACHE_MODE:  # the umask may have narrowed it
                    os.fchmod(fd, mode)
                _write_all(fd, header)
                _write_all(fd, data)
                if self.verify_mode == "none":  # nothing else would catch a power loss's torn block
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            _unlink(tmp)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreFull(exc.errno, f"cache disk full writing a block: {exc.strerror}") from exc
            raise

    def evict(self, keys: Sequence[BlockKey]) -> None:
        """Drop ``keys`` (a policy's victims) where stored, each counted as an eviction."""
        if not keys:
            return
        try:
            with self._locked():
                for k in keys:
                    self._evict_locked(k.digest(self.block_size))
        except sqlite3.Error as exc:
            raise _as_oserror(exc) from exc

    def _evict_locked(self, digest: str) -> int:
        """Evict one block; bytes freed (0: not stored, e.g. another process dropped it)."""
        freed = self._remove_locked(digest)
        if freed and self.on_evict is not None:
            self.on_evict()
        return freed

    def _remove_locked(self, digest: str) -> int:
        row = self._sql.execute("SELECT size FROM blocks WHERE key=?", (digest,)).fetchone()
        if row is None:
            return 0
        self._unlink_block(digest)
        self._sql.execute("DELETE FROM blocks WHERE key=?", (digest,))
        self._used -= int(row[0])
        return int(row[0])

    def _unlink_block(self, digest: str) -> None:
        path = os.path.join(self._blocks_dir, digest[:2], digest + ".blk")
        _remove_any(path)
        self.mapped.drop(path)  # its disk space is freed now, not at the next sweep

    def _rollback(self) -> None:
        try:
            self._sql.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def remove(self, key: BlockKey) -> bool:
        """Drop ``key`` if stored (the engine's corrupt/invalidated blocks)."""
        self._verified.pop(key, None)
        with self._locked():
            return self._remove_locked(key.digest(self.block_size)) > 0

    # -- maintenance ----------------------------------------------------------------------
    def _recover_locked(self) -> None:
        """Make the index and the files agree after a crash (run at every open)."""
        known = {r[0]: r[1] for r in self._sql.execute("SELECT key, size FROM blocks")}
        on_disk = set()
        for sub in _listdir(self._blocks_dir):
            subdir = os.path.join(self._blocks_dir, sub)
            if not os.path.isdir(subdir) or os.path.islink(subdir):
                _remove_any(subdir)  # blocks/ holds only the store's own directories
                continue
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
            self._sql.executemany("DELETE FROM blocks WHERE key=?", [(k,) for k in missing])
        for name in _listdir(self._tmp_dir):
            if not _live_tmp(name):
                _unlink(os.path.join(self._tmp_dir, name))
        dead = [(n,) for (n,) in self._sql.execute("SELECT tmp FROM reserved") if not _live_tmp(n)]
        if dead:  # reservations of writers that died before they wrote or renamed
            self._sql.executemany("DELETE FROM reserved WHERE tmp=?", dead)

    def _block_files(self) -> Iterator[tuple[str, str]]:
        """(digest, path) of every ``*.blk`` file under ``blocks/``."""
        for sub in _listdir(self._blocks_dir):
            subdir = os.path.join(self._blocks_dir, sub)
            for name in _listdir(subdir):
                if name.endswith(".blk"):
                    yield name[:-4], os.path.join(subdir, name)

    def _check_file(self, digest: str, path: str, key: BlockKey | None) -> int:
        """Read and check one block file: ``_OK``, ``_CORRUPT`` or ``_MISPLACED`` (its
        header names another file, or, given the index row's ``key``, another block);
        raises FileNotFoundError when it is gone."""
        with open(path, "rb", opener=_no_follow) as f:
            head = f.read(HEADER_SIZE)
            data = f.read()
        if len(head) < _IDENT_AT or head[:4] != MAGIC:
            return _CORRUPT
        if _FMT.unpack_from(head, 4)[0] != FORMAT_VERSION:
            return _MISPLACED
        if len(head) != HEADER_SIZE:
            return _CORRUPT
        bs, idx, name, _ph, _vh = _IDENT.unpack_from(head, _IDENT_AT)
        if name.hex() != digest:
            return _MISPLACED
        if key is not None and key.path and head[_IDENT_AT:] != key_identity(key, bs):
            return _MISPLACED
        if _LENGTH.unpack_from(head, 8)[0] != len(data) or len(data) > bs \
                or not self._valid(head, data):
            return _CORRUPT
        return _OK

    def _rebuild_locked(self) -> int:
        """Index every block file whose header names it and whose checksum verifies
        (oldest first, within the budget); unlink the rest. The rows' remote path and
        version stay empty (the header holds only their hashes): the engine finds blocks
        by file name and never needs them. Returns the blocks kept."""
        found = []
        dropped = 0
        for digest, path in self._block_files():
            try:
                ok = self._check_file(digest, path, None) == _OK
                st = os.stat(path)
            except OSError:
                ok = False
            if not ok:
                _remove_any(path)
                dropped += 1
                continue
            with open(path, "rb", opener=_no_follow) as f:
                idx = _IDENT.unpack_from(f.read(HEADER_SIZE), _IDENT_AT)[1]
            found.append((st.st_mtime_ns, digest, idx, stored_size(st.st_size - HEADER_SIZE), path))
        found.sort()
        used = self._sum_used()
        kept = 0
        self._sql.execute("BEGIN IMMEDIATE")
        try:
            for _mtime, digest, idx, size, path in found:
                if used + size > self.block_capacity:
                    _unlink(path)
                    dropped += 1
                    continue
                self._sql.execute(
                    "INSERT OR IGNORE INTO blocks(key, path, version, idx, size, seq) "
                    "VALUES(?, '', '', ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM blocks))",
                    (digest, idx, size))
                used += size
                kept += 1
            self._sql.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        log.warning("aicache: rebuilt the index of %s from the block headers: %d blocks kept, "
                    "%d dropped", self.cache_dir, kept, dropped)
        return kept

    def _drop_all_locked(self) -> None:
        """Empty the store (an index and blocks an earlier format wrote)."""
        for digest, _path in list(self._block_files()):
            self._unlink_block(digest)
        self._sql.execute("DELETE FROM blocks")

    def verify(self, clean: bool = True) -> VerifyResult:
        """Check every block's checksum and identity (its header names its file and the
        index row's block); with ``clean``, drop bad blocks and fix the index."""
        rows = list(self._sql.execute("SELECT key, path, version, idx FROM blocks"))
        bad = missing = misplaced = 0
        bad_keys: list[str] = []
        for digest, path_, version, idx in rows:
            path = os.path.join(self._blocks_dir, digest[:2], digest + ".blk")
            try:
                fault = self._check_file(digest, path,
                                         BlockKey(_from_db(path_), _from_db(version), idx))
            except FileNotFoundError:
                missing += 1
                bad_keys.append(digest)
                continue
            except OSError:  # a directory where the block file should be
                fault = _CORRUPT
            if fault != _OK:
                bad_keys.append(digest)
                if fault == _MISPLACED:
                    misplaced += 1
                else:
                    bad += 1
        orphans = 0
        known = {r[0] for r in rows}
        for digest, _path in self._block_files():
            if digest not in known:
                orphans += 1
        removed = 0
        if clean and (bad_keys or orphans):
            with self._locked():
                for digest in bad_keys:
                    self._sql.execute("DELETE FROM blocks WHERE key=?", (digest,))
                    self._unlink_block(digest)
                    removed += 1
                self._recover_locked()
                self._used = self._sum_used()
        return VerifyResult(checked=len(rows), bad=bad, missing=missing, orphans=orphans,
                            removed=removed, misplaced=misplaced)

    def clear(self) -> int:
        """Drop every block; returns how many."""
        with self._locked():
            rows = list(self._sql.execute("SELECT key FROM blocks"))
            for (digest,) in rows:
                self._unlink_block(digest)
            self._sql.execute("DELETE FROM blocks")
            self._recover_locked()
            self._used = self._sum_used()
            return len(rows)

    def keys(self) -> list[BlockKey]:
        """The stored blocks' keys, oldest first (a block kept by an index rebuild has an
        empty path and version: its header holds only their hashes)."""
        return [BlockKey(_from_db(p), _from_db(v), i) for p, v, i in
                self._sql.execute("SELECT path, version, idx FROM blocks ORDER BY seq")]

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
        n, used = self._sql.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blocks").fetchone()
        algo = {1: "xxh3-64", 2: "blake2b-64"}[DEFAULT_ALGO]
        return StoreStats(blocks=int(n), used_bytes=int(used), capacity_bytes=self.capacity,
                          block_size=self.block_size, checksum=algo, cache_dir=self.cache_dir)

    def close(self) -> None:
        self.mapped.close()
        try:
            if self._db is not None:
                self._sql.close()
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
        self.verify_mode = verify
        self.file_mode, self.dir_mode = DEFAULT_CACHE_MODE, dir_mode(DEFAULT_CACHE_MODE)
        self.mapped = MappedBlocks(0)
        self._racy_ns = 0
        self._verified = {}
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.capacity, self.block_size = int(capacity), int(block_size)
        self.block_capacity = block_budget(self.capacity)
        self._blocks_dir = os.path.join(self.cache_dir, "blocks")
        self._tmp_dir = os.path.join(self.cache_dir, "tmp")
        self._mutex = threading.RLock()
        self._tmp_counter = 0
        self._paths = {}
        self.corrupt_dropped = self.misplaced_dropped = 0
        self.on_corrupt = self.on_misplaced = None
        self.on_evict = None
        self._used = 0
        self.rebuilt = None
        self._lock_fd = self._users_fd = -1
        self._db = None
        #: why the cache directory is not used
        self.reason = reason

    def get(self, key: BlockKey) -> bytes | None:
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
        """The stored blocks' keys, oldest first (a block kept by an index rebuild has an
        empty path and version: its header holds only their hashes)."""
        return []

    def disk_bytes(self) -> int:
        return 0

    def stats(self) -> StoreStats:
        algo = {1: "xxh3-64", 2: "blake2b-64"}[DEFAULT_ALGO]
        return StoreStats(blocks=0, used_bytes=0, capacity_bytes=self.capacity,
                          block_size=self.block_size, checksum=algo, cache_dir=self.cache_dir)


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


def _as_oserror(exc: sqlite3.Error) -> OSError:
    """An index failure as the OSError the engine handles (the read goes on uncached)."""
    if "full" in str(exc).lower():
        return StoreFull(errno.ENOSPC, f"cache index: {exc}")
    return OSError(errno.EIO, f"cache index: {exc}")


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """Whether ``exc`` says the index file is damaged (not locked, not a full disk)."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT"):
        return True
    return not name and type(exc) is sqlite3.DatabaseError


def _open_file(path: str, flags: int, mode: int) -> int:
    """Open (creating with ``mode``) a cache file, never through a link; give it ``mode``
    if this user owns it."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, mode)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _no_follow(path: str, flags: int) -> int:
    """An ``open`` opener that refuses a symbolic link (ELOOP) instead of following it."""
    return os.open(path, flags | os.O_NOFOLLOW)


def _remove_any(path: str) -> None:
    """Remove ``path`` whatever its type (a directory tree, a file, a link)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        _unlink(path)


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
    except (FileNotFoundError, NotADirectoryError):
        return []


def _live_tmp(name: str) -> bool:
    """Whether temp file ``name`` (``<pid>-…``) belongs to a live process."""
    pid = name.split("-", 1)[0]
    return pid.isdigit() and pid_alive(int(pid))
