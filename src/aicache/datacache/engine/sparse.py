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

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aicache.datacache.engine.blockmap import FileBlocks
from aicache.datacache.engine.fetch import _Flight
from aicache.datacache.engine.meta import FileMeta
from aicache.datacache.engine.params import EngineParams
from aicache.datacache.engine.remote import FETCHED_AHEAD
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.policy.driver import PolicyPort, Source
from aicache.datacache.shared import SharedTier
from aicache.datacache.store import BlockKey, BlockStore
from aicache.datacache.version import VersionScheme

#: separates a version from the page size in a page's key. A version is an ETag, a
#: generation, a VersionId or a decimal stat tuple (:mod:`aicache.datacache.version`): none
#: holds an ASCII record separator, so a page key never equals a block key
PAGE_TAG = "\x1epage"
#: what a file's page id range is registered under in the block map (same reason)
PAGES_SUFFIX = "\x1epages"
#: a piece covering this share of its block is fetched as the whole block
DENSE_SHARE = 0.8


@dataclass(slots=True)
class ReadStream:
    """One reader's position in one open file: the contiguous run its reads form (what
    tells a streaming reader from one that jumps)."""

    #: where the run ends (the next read continues it if it starts here); -1: no read yet
    end: int = -1
    #: bytes of the run before the latest read (0: the latest read began a new run)
    before: int = 0
    #: bytes of the run including the latest read
    length: int = 0
    #: the run began at offset 0 with a read of at least a page (or of the whole file)
    from_start: bool = False

    def note(self, start: int, end: int, page: int, size: int) -> None:
        """Record the read ``[start, end)`` of a file of ``size`` bytes."""
        if start == self.end:
            self.before = self.length
            self.length += end - start
        else:
            self.before = 0
            self.length = end - start
            self.from_start = start == 0 and (end - start >= page or end >= size)
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


class PageReader:
    """:class:`~aicache.datacache.engine.CacheEngine`'s sparse reads (a mixin: the state
    lives on the engine; page id ranges in ``_page_ids``, guarded by its ``_lock``)."""

    params: EngineParams
    policy: PolicyPort
    store: BlockStore
    metrics: EngineMetrics
    block_size: int
    page_size: int
    shared: SharedTier | None
    target: Any
    versions: VersionScheme
    _lock: threading.Lock
    _inflight: dict[BlockKey, _Flight]
    _page_ids: dict[str, tuple[int, int]]
    _record: Callable[[float, str, int, int], None] | None
    _now: Callable[[], float]
    _file_blocks: Callable[[FileMeta], FileBlocks]
    _fetch_range: Callable[[FileMeta, int, int], bytes]
    _remote: Callable[..., Any]
    _insert: Callable[..., bool]
    _end_flight: Callable[[BlockKey, _Flight], None]
    _policy_error: Callable[[Exception], None]

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
        fb = self._file_blocks(meta)
        key = fb.key(idx)
        if key in self._inflight or self.store.contains(key):
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
        from those bytes in this thread (:data:`~.remote.FETCHED_AHEAD`); a piece whose
        fetch turns out to lie outside them (another reader stored or fetched something
        meanwhile) fetches as before. Not with a shared tier: a block it holds is read
        from there."""
        runs = [] if self.shared is not None else joined_runs(
            self._piece_ranges(meta, start, end, stream))
        if not runs:
            yield
            return
        FETCHED_AHEAD.spans = tuple((self, meta, s, self._fetch_range(meta, s, e)) for s, e in runs)
        try:
            yield
        finally:
            FETCHED_AHEAD.spans = ()

    def _piece_ranges(self, meta: FileMeta, start: int, end: int,
                      stream: ReadStream | None) -> list[tuple[int, int]]:
        """The byte range each piece of the read ``[start, end)`` would fetch, in order
        (none for a piece held or being fetched)."""
        B, P = self.block_size, self.page_size
        fb = self._file_blocks(meta)
        out: list[tuple[int, int]] = []
        for i in range(start // B, (end - 1) // B + 1):
            b0, b1 = i * B, min((i + 1) * B, meta.size)
            s, e = max(start, b0), min(end, b1)
            key = fb.key(i)
            if key in self._inflight or self.store.contains(key):
                continue
            if (s == b0 and e == b1) or dense(s, e, b0, b1, stream, P, self.params.sparse_run):
                out.append((b0, b1))
                continue
            first, last = page_range(s, e, P)
            held = frozenset(j for j in range(first, last + 1)
                             if self._page_key(meta, j) in self._inflight
                             or self.store.contains(self._page_key(meta, j)))
            span = fetch_span(first, last, held)
            if span is not None:
                out.append((span[0] * P, min(meta.size, (span[1] + 1) * P)))
        return out

    def _read_first_page(self, path: str) -> tuple[dict[str, Any], bytes] | None:
        """``path``'s ``info`` and first page from one request, where the target's version
        scheme can (:meth:`~aicache.datacache.version.VersionScheme.read_first`); None:
        it cannot (nothing was asked then), or the answer did not tell (ask ``info``)."""
        if not self.page_size or not self.versions.reads_carry_info:
            return None
        P = self.page_size

        def get_first_page(_what: str) -> tuple[dict[str, Any], bytes] | None:
            return self.versions.read_first(self.target, path, P)

        got: tuple[dict[str, Any], bytes] | None = self._remote(get_first_page, path)
        if got is not None:
            self.metrics.remote_bytes.inc(len(got[1]))
        return got

    def keep_first_page(self, meta: FileMeta, data: bytes) -> None:
        """Store ``data``, the first bytes of ``meta``'s version fetched with its metadata
        by an open (:meth:`_read_first_page`), as a read of them would have: as block 0 when
        it is the whole file, else as page 0. Admitted as a prefetch (no reader has asked
        for it yet), single-flight as any fetch: until written, its bytes are served from
        its flight. Nothing is stored when the store holds it already or it is short."""
        P = self.page_size
        if not P or len(data) != min(P, meta.size):
            return
        fb = self._file_blocks(meta)
        if meta.size <= P:
            key, bid = fb.key(0), fb.base
        else:
            key, bid = self._page_key(meta, 0), self._page_base(meta)
        if self.store.contains(key):
            return
        with self._lock:
            if key in self._inflight:
                return
            flight = self._inflight[key] = _Flight(0, claimed=True)
        flight.future.set_result(data)
        self.metrics.prefetch_issued.inc()
        deferred = False
        try:
            deferred = self._insert(fb.unit, bid, key, data, True, flight)
        finally:
            if not deferred:
                self._end_flight(key, flight)

    def _page_key(self, meta: FileMeta, j: int) -> BlockKey:
        return BlockKey(meta.path, f"{meta.version}{PAGE_TAG}{self.page_size}", j)

    def _page_base(self, meta: FileMeta) -> int:
        """The first block id of ``meta``'s pages (registered on first use; anew when the
        file grew past its range)."""
        n = max(1, -(-meta.size // self.page_size))
        have = self._page_ids.get(meta.path)
        if have is not None and have[1] >= n:
            return have[0]
        # the block map gives ceil(size / block_size) ids: ask for n blocks' worth
        got = self.policy.register([(meta.path + PAGES_SUFFIX, n * self.block_size)])
        base, count = got[meta.path + PAGES_SUFFIX]
        with self._lock:
            if len(self._page_ids) >= 1 << 16:
                self._page_ids.clear()
            self._page_ids[meta.path] = (base, count)
        return base

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
        mine: dict[int, _Flight] = {}
        theirs: dict[int, _Flight] = {}
        if len(pages) <= last - first:
            with self._lock:
                for j in range(first, last + 1):
                    if j in pages:
                        continue
                    k = self._page_key(meta, j)
                    flight = self._inflight.get(k)
                    if flight is None:
                        flight = mine[j] = _Flight(0, claimed=True)
                        self._inflight[k] = flight
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
                self._end_flight(k, flight)
        if mine:
            span = fetch_span(min(mine), max(mine), frozenset(j for j in pages if j not in mine))
            assert span is not None
            lo, hi = span
            try:
                blob = self._fetch_range(meta, lo * P, min(meta.size, (hi + 1) * P))
            except BaseException as exc:
                for j, flight in mine.items():  # a flight always resolves
                    flight.future.set_exception(exc)
                    self._end_flight(self._page_key(meta, j), flight)
                raise
            for j, flight in mine.items():
                pages[j] = blob[(j - lo) * P:(j - lo + 1) * P]
                flight.future.set_result(pages[j])  # its waiters have the bytes now
        for j, flight in theirs.items():
            try:
                pages[j] = flight.future.result(timeout=self.params.flight_wait_bound())
            except Exception:  # noqa: BLE001 - that fetch failed or is stuck: fetch it here
                pages[j] = self._fetch_range(meta, j * P, min(meta.size, (j + 1) * P))
        base = self._page_base(meta)
        unit = fb.unit
        now = self._now()
        for j in range(first, last + 1):  # each page one access, in file order
            k = self._page_key(meta, j)
            size = len(pages[j])
            source = Source.REMOTE if j in mine else Source.FLIGHT if j in theirs else Source.STORE
            try:  # a page's prefetch answer is not followed: sparse reads are not read ahead
                self.policy.read(unit, base + j, k, size, source, now)
            except Exception as exc:  # noqa: BLE001 - a policy bug must not fail a read
                self._policy_error(exc)
            if self._record is not None:
                self._record(now, unit, base + j, size)
            if j in mine:
                self._store_page(unit, base + j, k, pages[j], mine[j])
        if mine or theirs:
            self.metrics.misses.inc()
        else:
            self.metrics.reads.count_hit(end - start)
        out = b"".join(pages[j] for j in range(first, last + 1))
        s = start - first * P
        return out[s:s + (end - start)]

    def _store_page(self, unit: str, bid: int, key: BlockKey, data: bytes, flight: _Flight) -> None:
        """A fetched page through admission and the store; ``flight`` (registered by its
        reader) ends once it is written (write-behind) or refused, so until then readers
        of the page take its bytes from the flight."""
        deferred = False
        try:
            deferred = self._insert(unit, bid, key, data, False, flight)
        finally:
            if not deferred:
                self._end_flight(key, flight)
