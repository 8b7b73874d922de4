"""An open file of the mount and the pieces of its last two blocks (see :class:`Handle`).

The fsspec file (:class:`aicache.datacache.fs.AICacheFile`) keeps its own, simpler memo of
one block: it is read by one thread at a time, and a whole-block read is handed to its
caller rather than kept, so neither the lock nor the second block nor the range reads of
a verified block (which bypass the engine's memory-mapped hits) would earn their cost there.
"""

from __future__ import annotations

import threading
from typing import Protocol, TypeVar

from aicache.datacache.engine.reader import BlockReader, LocalBlock
from aicache.datacache.engine.sparse import ReadStream
from aicache.datacache.keys import FileMeta

T_co = TypeVar("T_co", covariant=True)


class Piece(Protocol[T_co]):
    """How a handle hands over the piece ``[s, s + n)`` of a block: read by range from a
    local block (None when its file is not the verified version any more), or sliced
    from a block held whole."""

    @property
    def n(self) -> int:
        """The piece's length (what a hit adds to ``hit_bytes``)."""

    def ranged(self, block: LocalBlock, s: int) -> T_co | None: ...

    def sliced(self, blk: bytes, s: int) -> T_co: ...


class AsBytes:
    """The piece as bytes."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def ranged(self, block: LocalBlock, s: int) -> bytes | None:
        return block.get_range(s, s + self.n)

    def sliced(self, blk: bytes, s: int) -> bytes:
        e = s + self.n
        return blk if (s == 0 and e >= len(blk)) else blk[s:e]


class IntoBuffer:
    """The piece written into ``buf`` (a FUSE reply buffer); how many bytes."""

    __slots__ = ("n", "buf")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.n = len(buf)

    def ranged(self, block: LocalBlock, s: int) -> int | None:
        return block.get_range_into(s, self.buf)

    def sliced(self, blk: bytes, s: int) -> int:
        piece = memoryview(blk)[s:s + self.n]
        self.buf[:len(piece)] = piece
        return len(piece)


#: a piece of a reply as a block file's ``(fd, file offset, length)``, or as bytes
Segment = tuple[int, int, int] | bytes


class AsDescriptor:
    """The piece as ``(fd, file offset, length)`` of a local block's file (the caller
    closes ``fd``), or as bytes from a block held whole."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def ranged(self, block: LocalBlock, s: int) -> Segment | None:
        return block.range_fd(s, s + self.n)

    def sliced(self, blk: bytes, s: int) -> Segment:
        e = s + self.n
        return blk if (s == 0 and e >= len(blk)) else blk[s:e]


T = TypeVar("T")


class Handle:
    """An open file: its metadata and the last two blocks it read (the kernel's readahead
    runs concurrent reads on both sides of a block boundary).

    Each block counts as *one* demand access per handle, whatever the number of kernel
    requests (≤ 1 MiB on libfuse 3, 128 KiB on libfuse 2) it takes (:meth:`serve`). The
    first request of a block makes the access under the handle's lock: for a verified
    local block (:meth:`BlockReader.local`) it only accounts it (:meth:`BlockReader.claim`)
    and reads its own range after
    releasing the lock, so the kernel's concurrent requests for the other pieces are not
    queued behind it; otherwise it reads the whole block (``read_block``: fetch or
    verify) and keeps it. Later requests of a block this handle already accounted read
    just their range (lock-free, served only from a file version verified in this
    process), or slice the block kept whole (verify mode ``full``, a block not verified
    yet). ``cur``/``prev`` are ``(idx, bytes or None, LocalBlock or None, hit)`` tuples, swapped
    atomically, so lock-free readers always see a consistent record.

    ``hit_bytes`` counts every piece served from a block whose access was a hit (the
    first piece with the access, the later ones as they are read), never the whole
    block: a 1-byte read counts one byte.

    A request that jumps (not continuing the handle's run of reads, ``stream``) into a
    block the cache does not hold reads only the pages covering it
    (:meth:`BlockReader.read_sparse`); the handle then holds no block for it."""

    __slots__ = ("meta", "cur", "prev", "lock", "stream", "checked")

    def __init__(self, meta: FileMeta, reorder_window: int = 0) -> None:
        self.meta = meta
        self.cur: tuple[int, bytes | None, LocalBlock | None, bool] = (-1, None, None, False)
        self.prev: tuple[int, bytes | None, LocalBlock | None, bool] = (-1, None, None, False)
        self.lock = threading.Lock()
        self.stream = ReadStream()
        self.stream.slack = reorder_window
        #: the block a driver's "is this read local?" found local, for the read that follows
        #: (:meth:`is_local`): the read then asks the store nothing more
        self.checked: tuple[int, LocalBlock] | None = None

    def holds(self, idx: int) -> bool:
        """Whether this handle has accounted block ``idx`` (its pieces need no access)."""
        return idx == self.cur[0] or idx == self.prev[0]

    def is_local(self, reader: BlockReader, idx: int) -> bool:
        """Whether block ``idx`` is held here or served by range from a local file; a local
        one is kept for the read that follows, which then does not ask again."""
        if self.holds(idx):
            return True
        block = reader.local(self.meta, idx)
        if block is None:
            return False
        self.checked = (idx, block)
        return True

    def serve(self, reader: BlockReader, idx: int, s: int, out: Piece[T]) -> T:
        """The piece ``[s, s + out.n)`` of block ``idx`` as ``out`` hands it over
        (:class:`AsBytes`, :class:`IntoBuffer`, :class:`AsDescriptor`); one demand access
        per block."""
        n = out.n
        b0 = idx * reader.block_size
        self.stream.note(b0 + s, b0 + s + n, reader.page_size, self.meta.size)
        got = self._held(reader, idx, s, out)
        if got is not None:
            return got
        with self.lock:
            got = self._held(reader, idx, s, out)
            if got is not None:
                return got
            checked = self.checked
            if checked is not None and checked[0] == idx:
                self.checked = None
                block: LocalBlock | None = checked[1]
            else:
                block = reader.local(self.meta, idx)
            if block is None:  # a miss, or a block not verified here yet: read it whole
                if reader.page_size:  # ... unless the read is sparse: then its pages
                    end = min(b0 + s + n, self.meta.size)
                    piece = reader.read_sparse(self.meta, b0 + s, end, self.stream)
                    if piece is not None:
                        return out.sliced(piece, 0)
                return self._load(reader, idx, s, out)
            reader.claim(self.meta, idx, n)
            self._moved_to(idx, None, block, True)
        # a verified local block, already accounted: read outside the lock, so that the
        # other pieces of this block are not queued behind this one
        got = out.ranged(block, s)
        if got is not None:
            return got
        with self.lock:  # the file changed since it was verified: read (and check) it whole
            return self._load(reader, idx, s, out)

    def _held(self, reader: BlockReader, idx: int, s: int, out: Piece[T]) -> T | None:
        """The piece when this handle has accounted block ``idx``, else None (also when
        its file changed since it was verified)."""
        for i, blk, block, hit in (self.cur, self.prev):
            if i == idx:
                got = out.sliced(blk, s) if blk is not None else (
                    out.ranged(block, s) if block is not None else None)
                if hit and got is not None:
                    reader.count_bytes(out.n)
                return got
        return None

    def _load(self, reader: BlockReader, idx: int, s: int, out: Piece[T]) -> T:
        """Under the lock: one demand access of block ``idx`` that reads (fetches or
        verifies) it whole; the handle moves to it and keeps it."""
        blk, hit = reader.read_block(self.meta, idx, out.n, reader.ahead(self.stream))
        self._moved_to(idx, blk, None, hit)
        return out.sliced(blk, s)

    def _moved_to(self, idx: int, blk: bytes | None, block: LocalBlock | None, hit: bool) -> None:
        """Under the lock: block ``idx`` (kept whole as ``blk``, or read by range from
        ``block``; ``hit``: its access was a hit) is now the handle's current block, the
        old one its previous."""
        self.prev, self.cur = self.cur, (idx, blk, block, hit)
