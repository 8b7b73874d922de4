"""An open file of the mount and the pieces of its last two blocks (see :class:`Handle`).

The fsspec file (:class:`aicache.datacache.fs.AICacheFile`) keeps its own, simpler memo of
one block: it is read by one thread at a time, and a whole-block read is handed to its
caller rather than kept, so neither the lock nor the second block nor the range reads of
a verified block (which bypass the engine's memory-mapped hits) would earn their cost there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from aicache.datacache.engine import CacheEngine
from aicache.datacache.engine.sparse import ReadStream, streaming
from aicache.datacache.keys import BlockKey, FileMeta
from aicache.datacache.store import BlockStore


def _slice(blk: bytes, s: int, e: int) -> bytes:
    return blk if (s == 0 and e >= len(blk)) else blk[s:e]


def _slice_into(blk: bytes, s: int, buf: memoryview) -> int:
    piece = memoryview(blk)[s:s + len(buf)]
    buf[:len(piece)] = piece
    return len(piece)


#: How a handle hands over the piece ``[s, …)`` of a block, as (read it from a verified
#: block file — None when that file is not the verified version —, slice it from a block
#: held whole); ``x`` is the piece's end offset, or the reply buffer to fill.
AS_BYTES = (BlockStore.get_range, _slice)
INTO_BUFFER = (BlockStore.get_range_into, _slice_into)
AS_DESCRIPTOR = (BlockStore.range_fd, _slice)  # (fd, offset, length); the caller closes fd


class Handle:
    """An open file: its metadata and the last two blocks it read (the kernel's readahead
    runs concurrent reads on both sides of a block boundary).

    Each block counts as *one* demand access per handle, whatever the number of kernel
    requests (≤ 1 MiB on libfuse 3, 128 KiB on libfuse 2) it takes (:meth:`serve`). The
    first request of a block makes the access under the handle's lock: for a verified
    local block it only accounts it (``claim_range_hit``) and reads its own range after
    releasing the lock, so the kernel's concurrent requests for the other pieces are not
    queued behind it; otherwise it reads the whole block (``read_block``: fetch or
    verify) and keeps it. Later requests of a block this handle already accounted read
    just their range (lock-free, served only from a file version verified in this
    process), or slice the block kept whole (verify mode ``full``, a block not verified
    yet). ``cur``/``prev`` are ``(idx, block or None, key, hit)`` tuples, swapped
    atomically, so lock-free readers always see a consistent record.

    ``hit_bytes`` counts every piece served from a block whose access was a hit (the
    first piece with the access, the later ones as they are read), never the whole
    block: a 1-byte read counts one byte.

    A request that jumps (not continuing the handle's run of reads, ``stream``) into a
    block the cache does not hold reads only the pages covering it
    (:meth:`CacheEngine.read_sparse`); the handle then holds no block for it."""

    __slots__ = ("meta", "cur", "prev", "lock", "stream")

    def __init__(self, meta: FileMeta) -> None:
        self.meta = meta
        self.cur: tuple[int, bytes | None, BlockKey | None, bool] = (-1, None, None, False)
        self.prev: tuple[int, bytes | None, BlockKey | None, bool] = (-1, None, None, False)
        self.lock = threading.Lock()
        self.stream = ReadStream()

    def serve(self, engine: CacheEngine, idx: int, s: int, x: Any,
              how: tuple[Callable[..., Any], Callable[..., Any]]) -> Any:
        """The piece ``[s, …)`` of block ``idx`` handed over ``how`` (:data:`AS_BYTES`,
        :data:`INTO_BUFFER`, :data:`AS_DESCRIPTOR`); one demand access per block."""
        ranged, sliced = how
        n = x - s if isinstance(x, int) else len(x)  # the piece's length, for hit_bytes
        b0 = idx * engine.block_size
        self.stream.note(b0 + s, b0 + s + n, engine.page_size, self.meta.size)
        got = self._held(engine, idx, s, x, n, ranged, sliced)
        if got is not None:
            return got
        with self.lock:
            got = self._held(engine, idx, s, x, n, ranged, sliced)
            if got is not None:
                return got
            key = engine.claim_range_hit(self.meta, idx, n)
            if key is None:  # a miss, or a block not verified here yet: read it whole
                if engine.page_size:  # ... unless the read is sparse: then its pages
                    end = min(b0 + s + n, self.meta.size)
                    piece = engine.read_sparse(self.meta, b0 + s, end, self.stream)
                    if piece is not None:
                        return sliced(piece, 0, x - s if isinstance(x, int) else x)
                return self._load(engine, idx, s, x, n, sliced)
            self._moved_to(idx, None, True)
        # a verified local block, already accounted: read outside the lock, so that the
        # other pieces of this block are not queued behind this one
        got = ranged(engine.store, key, s, x)
        if got is not None:
            return got
        with self.lock:  # the file changed since it was verified: read (and check) it whole
            return self._load(engine, idx, s, x, n, sliced)

    def _held(self, engine: CacheEngine, idx: int, s: int, x: Any, n: int,
              ranged: Callable[..., Any], sliced: Callable[..., Any]) -> Any:
        """The piece (of ``n`` bytes) when this handle has accounted block ``idx``, else
        None (also when its file changed since it was verified)."""
        for i, blk, key, hit in (self.cur, self.prev):
            if i == idx:
                got = sliced(blk, s, x) if blk is not None else ranged(engine.store, key, s, x)
                if hit and got is not None:
                    engine.metrics.reads.count_bytes(n)
                return got
        return None

    def _load(self, engine: CacheEngine, idx: int, s: int, x: Any, n: int,
              sliced: Callable[..., Any]) -> Any:
        """Under the lock: one demand access of block ``idx`` that reads (fetches or
        verifies) it whole; the handle moves to it and keeps it."""
        ahead = not engine.page_size or streaming(self.stream, engine.params.sparse_run)
        blk, hit = engine.read_block_hit(self.meta, idx, n, ahead)
        self._moved_to(idx, blk, hit)
        return sliced(blk, s, x)

    def _moved_to(self, idx: int, blk: bytes | None, hit: bool) -> None:
        """Under the lock: block ``idx`` (kept whole as ``blk``, or read by range; ``hit``:
        its access was a hit) is now the handle's current block, the old one its previous."""
        m = self.meta
        self.prev, self.cur = self.cur, (idx, blk, BlockKey(m.path, m.version, idx), hit)
