"""What the front ends read through (:class:`BlockReader`): the fsspec files
(:mod:`aicache.datacache.fs`) and the FUSE handles (:mod:`aicache.datacache.fuse.handle`)
ask it whether a block is local and get its bytes from it; none of them touches the store.

A *local* block (:class:`LocalBlock`) is one the store serves by range: its file was
verified in this process (verify mode not ``full``). :meth:`BlockReader.local` is the one
check; the caller accounts the demand read (:meth:`BlockReader.claim`) and then reads its
pieces, each of which the store still serves only from the verified file version (None
otherwise: the caller then reads the block whole, :meth:`BlockReader.read_block`).
"""

from __future__ import annotations

from typing import Protocol

from aicache.datacache.engine.blockmap import BlockLayout
from aicache.datacache.engine.params import EngineParams
from aicache.datacache.engine.sparse import ReadStream, streaming
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.keys import BlockKey, FileMeta
from aicache.datacache.store import BlockStore


class DemandReads(Protocol):
    """The engine's demand reads (each told to the policy, timed, may prefetch)."""

    def read_block_hit(self, meta: FileMeta, idx: int, served: int | None = None,
                       ahead: bool = True) -> tuple[bytes, bool]: ...

    def read_meta(self, meta: FileMeta, offset: int = 0, length: int | None = None,
                  stream: ReadStream | None = None) -> bytes: ...

    def read_sparse(self, meta: FileMeta, start: int, end: int,
                    stream: ReadStream | None) -> bytes | None: ...

    def claim_local(self, meta: FileMeta, idx: int, served: int | None = None) -> None: ...


class LocalBlock:
    """A block the store serves by range; each read returns None once its file is no
    longer the version verified (evicted, replaced): read the block whole then."""

    __slots__ = ("_store", "key")

    def __init__(self, store: BlockStore, key: BlockKey) -> None:
        self._store = store
        self.key = key

    def get_range(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (clipped at the block's end)."""
        return self._store.get_range(self.key, start, end)

    def get_range_into(self, start: int, buf: memoryview) -> int | None:
        """Bytes from ``start`` into ``buf``; how many (short at the block's end)."""
        return self._store.get_range_into(self.key, start, buf)

    def range_fd(self, start: int, end: int) -> tuple[int, int, int] | None:
        """``(fd, file offset, length)`` of ``[start, end)``; the caller closes ``fd``."""
        return self._store.range_fd(self.key, start, end)


class BlockReader:
    """Reads of one engine's blocks for a front end: ``engine`` makes the demand reads,
    ``store`` and ``layout`` answer which blocks are local."""

    __slots__ = ("_engine", "_store", "_layout", "_metrics", "block_size", "page_size",
                 "_params")

    def __init__(self, engine: DemandReads, store: BlockStore, layout: BlockLayout,
                 metrics: EngineMetrics, params: EngineParams, *, page_size: int) -> None:
        self._engine = engine
        self._store = store
        self._layout = layout
        self._metrics = metrics
        self.block_size = layout.block_size
        self.page_size = page_size
        self._params = params

    def local(self, meta: FileMeta, idx: int) -> LocalBlock | None:
        """Block ``idx`` of ``meta`` when the store serves it by range (no I/O), else None."""
        key = self._layout.file_blocks(meta).key(idx)
        return LocalBlock(self._store, key) if self._store.serves_ranges(key) else None

    def claim(self, meta: FileMeta, idx: int, served: int | None = None) -> None:
        """Account the demand read of block ``idx``, found :meth:`local`, of which the
        caller hands ``served`` bytes (the whole block when None) to its reader."""
        self._engine.claim_local(meta, idx, served)

    def read_block(self, meta: FileMeta, idx: int, served: int | None = None,
                   ahead: bool = True) -> tuple[bytes, bool]:
        """Block ``idx`` whole (fetched, or read and checked) and whether it was a hit."""
        return self._engine.read_block_hit(meta, idx, served, ahead)

    def read_range(self, meta: FileMeta, offset: int, length: int,
                   stream: ReadStream | None) -> bytes:
        """Bytes ``[offset, offset + length)``, across blocks."""
        return self._engine.read_meta(meta, offset, length, stream)

    def read_sparse(self, meta: FileMeta, start: int, end: int,
                    stream: ReadStream | None) -> bytes | None:
        """The piece ``[start, end)`` of one block from pages, when it is sparse and its
        block is not held; None: read the block."""
        return self._engine.read_sparse(meta, start, end, stream)

    def ahead(self, stream: ReadStream) -> bool:
        """Whether the reader of ``stream`` is read ahead for (it streams, or pages are off)."""
        return not self.page_size or streaming(stream, self._params.sparse_run)

    def count_bytes(self, n: int) -> None:
        """``n`` more bytes served from a block whose access was a hit."""
        self._metrics.reads.count_bytes(n)

    @property
    def capacity(self) -> int:
        """Bytes of the cache's budget."""
        return self._store.capacity

    @property
    def used(self) -> int:
        """Bytes the cache holds."""
        return self._store.used
