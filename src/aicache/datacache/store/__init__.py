"""BlockStore: a bounded, persistent, checksummed block cache on local disk.

One job per module, :class:`BlockStore` (:mod:`.block_store`) putting them together:

* :mod:`.layout` — the directory's paths and modes, temp files, renames, sweeps;
* :mod:`.index` — ``index.sqlite``: the budget's rows, reservations, eviction order;
* :mod:`.format` — the block header, checksums, :class:`VerifyMode`, what a header's
  :class:`Fault` is;
* :mod:`.reads` — the lock-free hit path: verified reads, mappings, ranges, descriptors;
* :mod:`.charge` — what a block costs in the budget (:func:`stored_size`).

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
  When they are checked on a read is the ``verify`` mode (:class:`VerifyMode`):

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

from aicache.datacache.store.block_store import (
    DEFAULT_RACY_WINDOW_S,
    BlockStore,
    Put,
    StoreStats,
    UncachedStore,
    VerifyResult,
    open_store,
)
from aicache.datacache.store.charge import (
    ALLOC_UNIT,
    INDEX_RESERVE,
    INDEX_ROW,
    block_budget,
    stored_size,
)
from aicache.datacache.store.format import (
    CHECKSUMS,
    DEFAULT_ALGO,
    DEFAULT_VERIFY,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    VERIFY_MODES,
    Fault,
    VerifyMode,
    block_header,
    check_verify_mode,
    decode_block,
    encode_block,
    key_identity,
)
from aicache.datacache.store.layout import (
    DEFAULT_CACHE_MODE,
    CacheDirDamaged,
    StoreFull,
    check_cache_mode,
    dir_mode,
)
from aicache.datacache.store.reads import VERIFIED_MEMO_MAX, BlockReads

__all__ = [
    "ALLOC_UNIT",
    "CHECKSUMS",
    "DEFAULT_ALGO",
    "DEFAULT_CACHE_MODE",
    "DEFAULT_RACY_WINDOW_S",
    "DEFAULT_VERIFY",
    "FORMAT_VERSION",
    "HEADER",
    "HEADER_SIZE",
    "INDEX_RESERVE",
    "INDEX_ROW",
    "MAGIC",
    "VERIFIED_MEMO_MAX",
    "VERIFY_MODES",
    "BlockReads",
    "BlockStore",
    "CacheDirDamaged",
    "Fault",
    "Put",
    "StoreFull",
    "StoreStats",
    "UncachedStore",
    "VerifyMode",
    "VerifyResult",
    "block_budget",
    "block_header",
    "check_cache_mode",
    "check_verify_mode",
    "decode_block",
    "dir_mode",
    "encode_block",
    "key_identity",
    "open_store",
    "stored_size",
]
