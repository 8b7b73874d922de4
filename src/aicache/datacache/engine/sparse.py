"""Sparse reads: fetches sized to the read, cached as small *pages* beside the blocks.

A remote file is cached in blocks of ``block_size`` (4 MiB by default): the unit of
fetch, storage, eviction and the policy's block ids. A reader that jumps (a Parquet
footer then one column's chunks, a slice of a ``.npy``, one tensor of a safetensors file)
reads a few hundred KiB out of such a block; fetching the whole block for it multiplied
the bytes a job pays for by up to ``block_size / read``.

The rule (:func:`dense`): a piece of a read that falls in block ``i`` is fetched as the
whole block when it covers at least :data:`DENSE_SHARE` (4/5) of that block (clipped at the
file's end: the whole block then costs at most 1.25× the piece), or when its reader is
*streaming* — the reads of the open file before this one form a contiguous run of at
least ``sparse_run`` bytes (1 MiB by default), or the run started at offset 0 with a read
of at least one page (a sequential scan, a whole-file read, the kernel's readahead of a
FUSE mount). Any other piece of a block the cache does not hold is *sparse*: only the
pages (``page_size``, 16 KiB by default, a divisor of the block size) covering it are
fetched, with one ranged GET from the first missing page to the last
(:func:`fetch_span`), and each page is stored as a block of its own. A large read that
jumps is therefore fetched exactly (to the page): what a reader will read next is only
guessed from what it has read before, never from the size of one read.

Pages are a second key space of the same store: page ``j`` of version ``v`` of ``path``
is ``BlockKey(path, v + PAGE_TAG + page_size, j)`` (the tag cannot occur in a version,
see :data:`PAGE_TAG`), so pages are checksummed, pinned to the version and shared between
processes exactly as blocks are. A read is served locally when its block is stored, or
when every page covering it is. The policy sees each page as a block: a file's pages get
their own id range in the block map (registered under ``path + PAGES_SUFFIX``, sized so
that it holds one id per page), are reported under the file's unit, and are admitted,
charged (payload + header, as blocks) and evicted by the policy like any block, so the
budget holds. A prefetch the policy names in a page range is skipped (no metadata is
known under that name): sparse reads are not read ahead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from aicache.datacache.engine.blockmap import PAGE_TAG, PAGES_SUFFIX, BlockLayout, FileBlocks
from aicache.datacache.engine.fetch import Flight, Flights
from aicache.datacache.engine.params import EngineParams
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.policy.driver import Source
from aicache.datacache.keys import BlockKey, FileMeta
from aicache.datacache.store import BlockStore

__all__ = ["DENSE_SHARE", "PAGES_SUFFIX", "PAGE_TAG", "PageReader", "ReadStream", "check_page_size",
           "dense", "fetch_span", "joined_runs", "page_range", "streaming"]

#: a piece covering this share of its block is fetched as the whole block
DENSE_SHARE = 0.8


@dataclass(slots=True)
class ReadStream:
    """One reader's position in one open file: the contiguous run its reads form (what
    tells a streaming reader from one that jumps).

    ``slack``: how far out of order a read may arrive and still continue the run. 0 (an
    fsspec file: one thread's reads, in order) — only a read starting where the run ends
    continues it. A FUSE handle sets the kernel's readahead window: the kernel sends a
    window's readahead requests at once and the driver's threads may hand them over in
    any order, so a read within the window before or after the run is the same stream
    (and a handle's first read within the window of offset 0 is its start)."""

    #: where the run ends (the furthest byte its reads reached); -1: no read yet
    end: int = -1
    #: where the run begins (its lowest byte)
    lo: int = 0
    #: bytes of the run before the latest read (0: the latest read began a new run)
    before: int = 0
    #: bytes of the run including the latest read
    length: int = 0
    #: the run began at offset 0 with a read of at least a page (or of the whole file)
    from_start: bool = False
    #: reorder window in bytes (see the class docstring)
    slack: int = 0

    def note(self, start: int, end: int, page: int, size: int) -> None:
        """Record the read ``[start, end)`` of a file of ``size`` bytes."""
        slack = self.slack
        if start == self.end or (slack and self.end >= 0 and self.lo - slack <= start <= self.end + slack):
            self.before = self.length
            if start < self.lo:
                self.lo = start
            if end > self.end:
                self.end = end
            self.length = self.end - self.lo
            if slack and self.lo == 0 and self.length >= page:
                self.from_start = True  # its first requests arrived after later ones
            return
        self.before = 0
        self.lo = start
        self.length = end - start
        self.from_start = (start == 0 or (slack > 0 and self.end < 0 and start < slack)) and (
            end - start >= page or end >= size)
        self.end = end


def streaming(stream: ReadStream, sparse_run: int) -> bool:
    """Whether a reader's earlier reads show it streaming: its run began at offset 0 with a
    read of a page or more (or of the whole file: a small file read whole), or held
    ``sparse_run`` bytes before its latest read."""
    return stream.from_start or stream.before >= sparse_run


def dense(piece_start: int, piece_end: int, block_start: int, block_end: int,
          stream: ReadStream | None, page: int, sparse_run: int) -> bool:
    """Whether the piece ``[piece_start, piece_end)`` of the block ``[block_start,
    block_end)`` (clipped at the file's end) is fetched as the whole block. ``stream``:
    the reader's run, this read noted in it (None: the read is judged alone, as a
    ``cat_file`` of a range). Pages off (``page`` 0): always."""
    if page <= 0 or piece_end - piece_start >= DENSE_SHARE * (block_end - block_start):
        return True
    return stream is not None and streaming(stream, sparse_run)


def page_range(start: int, end: int, page: int) -> tuple[int, int]:
    """The first and last page index covering the bytes ``[start, end)`` (``end > start``)."""
    return start // page, (end - 1) // page


def fetch_span(first: int, last: int, present: set[int] | frozenset[int]) -> tuple[int, int] | None:
    """The pages one GET fetches for a read covering pages ``first..last`` of which
    ``present`` are stored: from the first missing page to the last (the stored ones in
    between come along: one request rather than one per gap). None: nothing missing."""
    lo = next((j for j in range(first, last + 1) if j not in present), None)
    if lo is None:
        return None
    hi = next(j for j in range(last, first - 1, -1) if j not in present)
    return lo, hi


def joined_runs(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The unions of the runs of two or more adjacent ranges (each ``(start, end)``, in
    order, ``start`` ≥ the previous ``end``): what one request each can fetch instead of
    one per range. A range alone is left out (its own fetch is already one request)."""
    out: list[tuple[int, int]] = []
    run_start, run_end, n = -1, -1, 0
    for s, e in ranges + [(-1, -1)]:
        if n and s == run_end:
            run_end, n = e, n + 1
            continue
        if n >= 2:
            out.append((run_start, run_end))
        run_start, run_end, n = s, e, 1
    return out


def check_page_size(page: int, block_size: int) -> int:
    """``page`` if it is a usable page size for blocks of ``block_size`` (a divisor,
    smaller than the block), else 0 (pages off)."""
    if page <= 0 or page >= block_size or block_size % page:
        return 0
    return page


class PageSink(Protocol):
    """What a page reader hands back to the engine: each page read is a demand access
    (told to the policy, recorded), each page fetched goes through admission and the
    store, and fetches go to the remote (the engine's, which knows about versions gone)."""

    def now(self) -> float: ...

    def access(self, unit: str, bid: int, key: BlockKey, size: int, source: Source,
               now: float) -> None:
        """A demand read told to the policy (its prefetch answer is not followed)."""

    def keep(self, unit: str, bid: int, key: BlockKey, data: bytes, flight: Flight,
             prefetched: bool = False) -> bool:
        """A fetched page through admission and the store; True: ``flight`` ends later."""

    def fetch_range(self, meta: FileMeta, start: int, end: int) -> bytes: ...

    def fetched_ahead(self, meta: FileMeta,
                      spans: tuple[tuple[int, bytes], ...]) -> AbstractContextManager[None]:
        """While inside, this thread's :meth:`fetch_range` of ``meta`` slices ranges lying
        in ``spans`` (start, bytes) instead of asking for them."""


class PageReader:
    """Sparse reads of ``page_size`` pages (see the module docstring): pages of the
    ``store`` are read, missing ones fetched single-flight through ``flights`` (a wait on
    another reader's is bounded by :meth:`EngineParams.flight_wait_bound`), their ids from
    ``layout``; accesses, admission and fetches go through ``sink``. ``join_pieces``:
    fetch the adjacent pieces of a read that jumps together (:meth:`pieces_fetched_together`;
    off with a shared tier, whose blocks are read from there)."""

    def __init__(self, store: BlockStore, flights: Flights, layout: BlockLayout, sink: PageSink,
                 metrics: EngineMetrics, params: EngineParams, *, page_size: int,
                 join_pieces: bool = True) -> None:
        self.store = store
        self.flights = flights
        self.layout = layout
        self.sink = sink
        self.metrics = metrics
        #: ``block_size``, ``sparse_run`` and the bound on waits read as they are now
        self.params = params
        self.block_size = params.block_size
        self.page_size = page_size
        self.join_pieces = join_pieces

    def read_sparse(self, meta: FileMeta, start: int, end: int,
                    stream: ReadStream | None) -> bytes | None:
        """The bytes ``[start, end)`` (inside one block, ``end`` ≤ the file's size) served
        from pages — fetching the missing ones — when the read is sparse (:func:`dense`)
        and the store holds no whole block for it (stored or being fetched); None when the
        caller reads the block (nothing was accounted then)."""
        P = self.page_size
        B = self.block_size
        idx = start // B
        b0 = idx * B
        if dense(start, end, b0, min(b0 + B, meta.size), stream, P, self.params.sparse_run):
            return None
        fb = self.layout.file_blocks(meta)
        key = fb.key(idx)
        if self.flights.busy(key) or self.store.contains(key):
            return None
        return self._read_pages(meta, fb, start, end)

    @contextmanager
    def pieces_fetched_together(self, meta: FileMeta, start: int, end: int,
                                stream: ReadStream | None) -> Iterator[None]:
        """Around the piece-by-piece reading of ``[start, end)`` (spanning blocks) by a
        reader that jumps: the ranges its pieces will fetch (a whole block, or the pages of
        a sparse piece, decided as :meth:`read_sparse` decides) are fetched with one GET per
        run of adjacent ones, not one each (a tensor that ends just past a block boundary:
        its block and the tail's pages together). The pieces' own fetches are then sliced
        from those bytes in this thread (:meth:`PageSink.fetched_ahead`); a piece whose
        fetch turns out to lie outside them (another reader stored or fetched something
        meanwhile) fetches as before."""
        runs = joined_runs(self._piece_ranges(meta, start, end, stream)) if self.join_pieces else []
        if not runs:
            yield
            return
        spans = tuple((s, self.sink.fetch_range(meta, s, e)) for s, e in runs)
        with self.sink.fetched_ahead(meta, spans):
            yield

    def _piece_ranges(self, meta: FileMeta, start: int, end: int,
                      stream: ReadStream | None) -> list[tuple[int, int]]:
        """The byte range each piece of the read ``[start, end)`` would fetch, in order
        (none for a piece held or being fetched)."""
        B, P = self.block_size, self.page_size
        fb = self.layout.file_blocks(meta)
        busy, stored = self.flights.busy, self.store.contains
        out: list[tuple[int, int]] = []
        for i in range(start // B, (end - 1) // B + 1):
            b0, b1 = i * B, min((i + 1) * B, meta.size)
            s, e = max(start, b0), min(end, b1)
            key = fb.key(i)
            if busy(key) or stored(key):
                continue
            if (s == b0 and e == b1) or dense(s, e, b0, b1, stream, P, self.params.sparse_run):
                out.append((b0, b1))
                continue
            first, last = page_range(s, e, P)
            held = frozenset(j for j in range(first, last + 1)
                             if busy(self._page_key(meta, j)) or stored(self._page_key(meta, j)))
            span = fetch_span(first, last, held)
            if span is not None:
                out.append((span[0] * P, min(meta.size, (span[1] + 1) * P)))
        return out

    def keep_first_page(self, meta: FileMeta, data: bytes) -> None:
        """Store ``data``, the first bytes of ``meta``'s version fetched with its metadata
        by an open, as a read of them would have: as block 0 when it is the whole file,
        else as page 0. Admitted as a prefetch (no reader has asked for it yet),
        single-flight as any fetch: until written, its bytes are served from its flight.
        Nothing is stored when the store holds it already or it is short."""
        P = self.page_size
        if not P or len(data) != min(P, meta.size):
            return
        fb = self.layout.file_blocks(meta)
        if meta.size <= P:
            key, bid = fb.key(0), fb.base
        else:
            key, bid = self._page_key(meta, 0), self.layout.page_base(meta, P)
        if self.store.contains(key):
            return
        flight = self.flights.register(key)
        if flight is None:  # being fetched already
            return
        flight.future.set_result(data)
        self.metrics.prefetch_issued.inc()
        deferred = False
        try:
            deferred = self.sink.keep(fb.unit, bid, key, data, flight, True)
        finally:
            if not deferred:
                self.flights.end(key, flight)

    def _page_key(self, meta: FileMeta, j: int) -> BlockKey:
        return BlockKey(meta.path, f"{meta.version}{PAGE_TAG}{self.page_size}", j)

    def _read_pages(self, meta: FileMeta, fb: FileBlocks, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` from their pages: stored ones read, missing ones
        fetched single-flight (one GET for the pages this reader fetches; a page another
        reader is fetching is waited for, boundedly, as blocks are), each page then one
        access told to the policy, in file order."""
        P = self.page_size
        first, last = page_range(start, end, P)
        pages: dict[int, bytes] = {}
        for j in range(first, last + 1):
            data = self.store.get(self._page_key(meta, j))
            if data is not None:
                pages[j] = data
        mine: dict[int, Flight] = {}
        theirs: dict[int, Flight] = {}
        if len(pages) <= last - first:
            for j in range(first, last + 1):
                if j in pages:
                    continue
                flight, leader, _ = self.flights.join(self._page_key(meta, j))
                if leader:
                    mine[j] = flight
                else:
                    theirs[j] = flight
        for j in list(mine):
            # write-behind: the writer may have stored the page (and ended its flight)
            # between the store lookup above and this flight: read it, do not refetch
            k = self._page_key(meta, j)
            data = self.store.get(k)
            if data is not None:
                flight = mine.pop(j)
                pages[j] = data
                flight.future.set_result(data)
                self.flights.end(k, flight)
        if mine:
            span = fetch_span(min(mine), max(mine), frozenset(j for j in pages if j not in mine))
            assert span is not None
            lo, hi = span
            try:
                blob = self.sink.fetch_range(meta, lo * P, min(meta.size, (hi + 1) * P))
            except BaseException as exc:
                for j, flight in mine.items():  # a flight always resolves
                    self.flights.fail(self._page_key(meta, j), flight, exc)
                raise
            for j, flight in mine.items():
                pages[j] = blob[(j - lo) * P:(j - lo + 1) * P]
                flight.future.set_result(pages[j])  # its waiters have the bytes now
        for j, flight in theirs.items():
            try:
                pages[j] = flight.future.result(timeout=self.params.flight_wait_bound())
            except Exception:  # noqa: BLE001 - that fetch failed or is stuck: fetch it here
                pages[j] = self.sink.fetch_range(meta, j * P, min(meta.size, (j + 1) * P))
        base = self.layout.page_base(meta, P)
        unit = fb.unit
        sink = self.sink
        now = sink.now()
        for j in range(first, last + 1):  # each page one access, in file order
            k = self._page_key(meta, j)
            source = Source.REMOTE if j in mine else Source.FLIGHT if j in theirs else Source.STORE
            # a page's prefetch answer is not followed: sparse reads are not read ahead
            sink.access(unit, base + j, k, len(pages[j]), source, now)
            if j in mine:
                self._store_page(unit, base + j, k, pages[j], mine[j])
        if mine or theirs:
            self.metrics.misses.inc()
        else:
            self.metrics.reads.count_hit(end - start)
        out = b"".join(pages[j] for j in range(first, last + 1))
        s = start - first * P
        return out[s:s + (end - start)]

    def _store_page(self, unit: str, bid: int, key: BlockKey, data: bytes, flight: Flight) -> None:
        """A fetched page through admission and the store; ``flight`` (registered by its
        reader) ends once it is written (write-behind) or refused, so until then readers
        of the page take its bytes from the flight."""
        deferred = False
        try:
            deferred = self.sink.keep(unit, bid, key, data, flight)
        finally:
            if not deferred:
                self.flights.end(key, flight)
