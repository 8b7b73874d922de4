"""The block index: ``index.sqlite``, one row per block, the temp files' reservations, meta.

SQLite in WAL mode (stdlib, crash-safe transactions, readers never block writers). An
append-only log would need its own compaction and torn-tail recovery; SQLite gives both.
The index is *not* on the hit path (a reader opens the block file by name); it is what the
budget is counted from and the order eviction falls back to (``seq``, oldest first).
Every mutation runs under the store's exclusive lock; this module takes none itself.
"""

from __future__ import annotations

import errno
import os
import sqlite3

from aicache.datacache.keys import BlockKey, raw_bytes
from aicache.datacache.store.layout import StoreFull, open_file, own_mode

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
_NEXT_SEQ = "(SELECT COALESCE(MAX(seq), 0) + 1 FROM blocks)"


class BlockIndex:
    """One connection to a cache directory's index (open until :meth:`close`)."""

    def __init__(self, path: str, file_mode: int) -> None:
        # created owner-only first: SQLite gives its -wal/-shm files the database's mode
        os.close(open_file(path, os.O_RDWR, file_mode))
        for suffix in ("-wal", "-shm"):
            if os.path.exists(path + suffix):
                own_mode(path + suffix, file_mode)
        self.path = path
        self._db: sqlite3.Connection = sqlite3.connect(
            path, timeout=60.0, check_same_thread=False, isolation_level=None)

    @property
    def sql(self) -> sqlite3.Connection:
        return self._db

    def init(self) -> dict[str, str]:
        """Set the journal up, check the file, create the tables; the ``meta`` table.
        Raises sqlite3.DatabaseError when the file is damaged (:func:`is_corrupt`)."""
        db = self.sql
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

    @staticmethod
    def read_meta(path: str) -> dict[str, str]:
        """The ``meta`` table of the index at ``path``, read-only; empty when it is
        missing or damaged."""
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60.0)
            try:
                return dict(db.execute("SELECT k, v FROM meta").fetchall())
            finally:
                db.close()
        except sqlite3.DatabaseError:
            return {}

    def write_meta(self, capacity: int, block_size: int, fmt: int) -> None:
        """Record the budget and format this open uses; the block size only the first
        time (a directory keeps the block size it was made with)."""
        db = self.sql
        db.execute("INSERT OR REPLACE INTO meta VALUES('capacity', ?)", (str(capacity),))
        db.execute("INSERT OR IGNORE INTO meta VALUES('block_size', ?)", (str(block_size),))
        db.execute("INSERT OR REPLACE INTO meta VALUES('format', ?)", (str(fmt),))

    def close(self) -> None:
        """Close the connection (a later query raises sqlite3.ProgrammingError, which
        the store reports as an index failure)."""
        self._db.close()

    # -- transactions ---------------------------------------------------------------------
    def begin(self) -> None:
        self.sql.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.sql.execute("COMMIT")

    def rollback(self) -> None:
        try:
            self.sql.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    # -- queries --------------------------------------------------------------------------
    def used(self) -> int:
        """Bytes of committed blocks plus every process's reserved temp files."""
        return int(self.sql.execute(_USED).fetchone()[0])

    def has(self, digest: str) -> bool:
        return self.sql.execute("SELECT 1 FROM blocks WHERE key=?", (digest,)).fetchone() is not None

    def oldest(self) -> tuple[str, BlockKey] | None:
        """The digest and key of the block stored first (``seq`` order), if any."""
        row = self.sql.execute(
            "SELECT key, path, version, idx FROM blocks ORDER BY seq LIMIT 1").fetchone()
        if row is None:
            return None
        return row[0], BlockKey(row[1], row[2], int(row[3]))

    def size_of(self, digest: str) -> int | None:
        row = self.sql.execute("SELECT size FROM blocks WHERE key=?", (digest,)).fetchone()
        return None if row is None else int(row[0])

    def sizes(self) -> dict[str, int]:
        """Every block's digest and charged size."""
        return {r[0]: r[1] for r in self.sql.execute("SELECT key, size FROM blocks")}

    def rows(self) -> list[tuple[str, BlockKey]]:
        """Every block's digest and key, in no particular order."""
        return [(d, BlockKey(from_db(p), from_db(v), i)) for d, p, v, i in
                self.sql.execute("SELECT key, path, version, idx FROM blocks")]

    def keys(self) -> list[BlockKey]:
        """The blocks' keys, oldest first."""
        return [BlockKey(from_db(p), from_db(v), i) for p, v, i in
                self.sql.execute("SELECT path, version, idx FROM blocks ORDER BY seq")]

    def digests(self) -> list[str]:
        return [d for (d,) in self.sql.execute("SELECT key FROM blocks")]

    def count_and_bytes(self) -> tuple[int, int]:
        n, used = self.sql.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blocks").fetchone()
        return int(n), int(used)

    def reservations(self) -> list[str]:
        """The temp file names holding a reservation."""
        return [n for (n,) in self.sql.execute("SELECT tmp FROM reserved")]

    # -- mutations (under the store's lock) -----------------------------------------------
    def insert(self, digest: str, key: BlockKey, size: int) -> None:
        """Add a block as the newest."""
        self.sql.execute(
            "INSERT INTO blocks(key, path, version, idx, size, seq) VALUES(?,?,?,?,?,"
            f"{_NEXT_SEQ})", (digest, to_db(key.path), to_db(key.version), key.index, size))

    def insert_found(self, digest: str, idx: int, size: int) -> None:
        """Add a block found on disk by a rebuild (its path and version unknown: the
        header holds only their hashes) as the newest, unless indexed already."""
        self.sql.execute(
            "INSERT OR IGNORE INTO blocks(key, path, version, idx, size, seq) "
            f"VALUES(?, '', '', ?, ?, {_NEXT_SEQ})", (digest, idx, size))

    def delete(self, digest: str) -> None:
        self.sql.execute("DELETE FROM blocks WHERE key=?", (digest,))

    def delete_many(self, digests: list[str]) -> None:
        self.sql.executemany("DELETE FROM blocks WHERE key=?", [(d,) for d in digests])

    def delete_all(self) -> None:
        self.sql.execute("DELETE FROM blocks")

    def reserve(self, name: str, size: int) -> None:
        self.sql.execute("INSERT INTO reserved VALUES(?, ?)", (name, size))

    def release(self, name: str) -> None:
        self.sql.execute("DELETE FROM reserved WHERE tmp=?", (name,))

    def release_many(self, names: list[str]) -> None:
        self.sql.executemany("DELETE FROM reserved WHERE tmp=?", [(n,) for n in names])


def to_db(s: str) -> str | bytes:
    """``s`` for the index: text, or (a name that is not UTF-8) its raw bytes as a blob."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return raw_bytes(s)
    return s


def from_db(v: str | bytes) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v


def as_oserror(exc: sqlite3.Error) -> OSError:
    """An index failure as the OSError the engine handles (the read goes on uncached)."""
    if "full" in str(exc).lower():
        return StoreFull(errno.ENOSPC, f"cache index: {exc}")
    return OSError(errno.EIO, f"cache index: {exc}")


def is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """Whether ``exc`` says the index file is damaged (not locked, not a full disk)."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT"):
        return True
    return not name and type(exc) is sqlite3.DatabaseError
