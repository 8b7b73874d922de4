"""A text trace read as byte chunks of whole lines, for the byte-level parsers.

The text readers (``lcs-txt``, ``lcs-csv``) read the file as bytes in chunks of about
:data:`CHUNK` bytes cut after a line feed, and hand each chunk to the compiled parser of
:mod:`aicache.traces.formats._fastparse`; a chunk it refuses (or every chunk, where that
module is not compiled) is decoded as the text reader always did — UTF-8 with bad bytes
replaced, universal newlines — and read line by line by the format's general path. The
two give the same requests: a cut after an LF byte never splits a UTF-8 character nor a
CRLF, and a byte-order mark is dropped at the start of the file only, as ``utf-8-sig``
does. gzip and zstd files are decompressed as they are read (:func:`open_binary`).
"""

from __future__ import annotations

import io
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aicache.traces.formats import _fastparse
from aicache.traces.formats._common import (DEFAULT_BATCH, FIELD_LIMIT, Column, TraceSource,
                                             general_id_sizes, open_binary, read_exact)

if TYPE_CHECKING:
    from aicache.traces.base import RequestBatch

#: bytes read per chunk (a chunk holds whole lines, so a line longer than this is read
#: into one chunk with it)
CHUNK = 1 << 20
_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class FastChunk:
    """A chunk the compiled parser read: typed columns (memoryviews of ``array``s, no
    numpy needed), ``ts`` None for times ``vt, vt + 1, …`` and ``sizes`` None for all 1."""

    ids: memoryview
    ts: memoryview | None
    sizes: memoryview | None
    nxt: memoryview | None
    vt: int

    def __len__(self) -> int:
        return len(self.ids)

    def batches(self, batch_size: int) -> Iterator[RequestBatch]:
        """The chunk as :class:`RequestBatch` pieces of at most ``batch_size`` requests."""
        import numpy as np

        from aicache.traces.base import RequestBatch

        n = len(self.ids)
        ids = np.frombuffer(self.ids, dtype=np.uint64)
        ts = (np.arange(self.vt, self.vt + n, dtype=np.float64) if self.ts is None
              else np.frombuffer(self.ts, dtype=np.float64))
        sizes = np.ones(n, dtype=np.int64) if self.sizes is None else np.frombuffer(self.sizes, dtype=np.int64)
        nxt = None if self.nxt is None else np.frombuffer(self.nxt, dtype=np.int64)
        for s in range(0, n, batch_size):
            e = s + batch_size
            yield RequestBatch(timestamp=ts[s:e], obj_id=ids[s:e], obj_size=sizes[s:e],
                               next_access_vtime=None if nxt is None else nxt[s:e])

    def id_sizes(self) -> tuple[memoryview, memoryview, int]:
        """(ids, sizes, the sizes' sum): what the simulator's slot pre-pass reads."""
        if self.sizes is None:
            n = len(self.ids)
            return self.ids, memoryview(array("q", [1]) * n), n
        return self.ids, self.sizes, int(_fastparse.total(self.sizes))


class ChunkedTextSource(TraceSource):
    """A text trace read in byte chunks: each one the compiled parser read whole (a
    :class:`FastChunk`) or the general path's batches of a chunk it refused. Subclasses
    give :meth:`_chunks`; the batches and the simulator's id/size columns come from it."""

    def _chunks(self, batch_size: int) -> Iterator[FastChunk | RequestBatch]:
        raise NotImplementedError

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        for chunk in self._chunks(batch_size):
            if isinstance(chunk, FastChunk):
                yield from chunk.batches(batch_size)
            else:
                yield chunk

    def id_sizes(self, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[Column, Column, int]]:
        if not _fastparse.compiled:
            yield from super().id_sizes(batch_size)
            return
        for chunk in self._chunks(batch_size):
            if isinstance(chunk, FastChunk):
                if len(chunk):
                    yield chunk.id_sizes()
            else:
                yield from general_id_sizes(chunk)


def zeros(code: str, n: int) -> memoryview:
    """A zeroed typed column: ``n`` items of the ``array`` type ``code``."""
    return memoryview(array(code, [0]) * n)


def byte_chunks(path: str) -> Iterator[tuple[bytearray, int]]:
    """``(buffer, end)`` per chunk: ``buffer[:end]`` is whole lines, each ending in LF but
    the file's last, and the chunks in order are the file's bytes without a leading BOM."""
    with open_binary(path) as f:
        rest = bytearray()
        at_start = True
        while True:
            data = read_exact(f, CHUNK)
            rest += data
            if at_start and (len(rest) >= len(_BOM) or not data):
                if rest.startswith(_BOM):
                    del rest[:len(_BOM)]
                at_start = False
            if not data:
                if rest:
                    yield rest, len(rest)
                return
            if at_start:
                continue
            cut = rest.rfind(b"\n") + 1
            if cut == 0:  # no line ends here yet: read on
                continue
            buf, rest = rest, rest[cut:]
            yield buf, cut


def text_lines(buf: bytearray, end: int) -> list[str]:
    """``buf[:end]`` as the text reader reads it: lines with universal newlines (CR, LF
    and CRLF each end a line, read as ``"\\n"``), bad UTF-8 replaced."""
    return io.StringIO(bytes(buf[:end]).decode("utf-8", errors="replace"), newline=None).readlines()


def fast_ids(buf: bytearray, end: int, vt: int) -> FastChunk | None:
    """The chunk's ids (requests from time ``vt`` on) when every line is one plain
    decimal id below 2**64 and the parser is compiled; None sends the chunk to the general
    path."""
    if not _fastparse.compiled:
        return None
    ids = zeros("Q", buf.count(b"\n", 0, end) + 1)
    n = _fastparse.parse_ids(buf, end, ids)
    return FastChunk(ids[:n], None, None, None, vt) if n >= 0 else None


def fast_columns(buf: bytearray, end: int, width: int, id_col: int, t_col: int, s_col: int,
                 n_col: int, vt: int) -> FastChunk | None:
    """The chunk's columns when every line is ``width`` plain fields (see
    :func:`aicache.traces.formats._fastparse.parse_columns`; a missing column is -1,
    ``vt`` the time of the first record without a time column) and the parser is
    compiled; None sends the chunk to the general path."""
    if not _fastparse.compiled:
        return None
    rows = buf.count(b"\n", 0, end) + 1
    ts = zeros("d", rows)
    ids = zeros("Q", rows)
    sizes = zeros("q", rows)
    nxt = zeros("q", rows if n_col >= 0 else 0)
    n = _fastparse.parse_columns(buf, end, width, id_col, t_col, s_col, n_col, FIELD_LIMIT, vt,
                                 ts, ids, sizes, nxt)
    if n < 0:
        return None
    return FastChunk(ids[:n], ts[:n], sizes[:n], nxt[:n] if n_col >= 0 else None, vt)
