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
from collections.abc import Iterator

import numpy as np

from aicache.traces.formats import _fastparse
from aicache.traces.formats._common import FIELD_LIMIT, open_binary, read_exact

#: bytes read per chunk (a chunk holds whole lines, so a line longer than this is read
#: into one chunk with it)
CHUNK = 1 << 20
_BOM = b"\xef\xbb\xbf"


def byte_chunks(path: str, first: bytes = b"") -> Iterator[tuple[bytearray, int]]:
    """``(buffer, end)`` per chunk: ``buffer[:end]`` is whole lines, each ending in LF but
    the file's last, and the chunks in order are the file's bytes without a leading BOM.
    ``first``: bytes already read from the start of the (decompressed) file."""
    with open_binary(path) as f:
        rest = bytearray(first)
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


def fast_ids(buf: bytearray, end: int) -> np.ndarray | None:
    """The chunk's ids (uint64) when every line is one plain decimal id below 2**64 and the
    parser is compiled; None sends the chunk to the general path."""
    if not _fastparse.compiled:
        return None
    ids = np.empty(buf.count(b"\n", 0, end) + 1, dtype=np.uint64)
    n = _fastparse.parse_ids(buf, end, ids)
    return ids[:n] if n >= 0 else None


#: a chunk's columns: timestamps, ids, sizes, next-access times (None without that column)
Columns = tuple[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]


def fast_columns(buf: bytearray, end: int, width: int, id_col: int, t_col: int, s_col: int,
                 n_col: int, vt: int) -> Columns | None:
    """The chunk's columns when every line is ``width`` plain fields (see
    :func:`aicache.traces.formats._fastparse.parse_columns`; a missing column is -1,
    ``vt`` the time of the first record without a time column) and the parser is
    compiled; None sends the chunk to the general path."""
    if not _fastparse.compiled:
        return None
    rows = buf.count(b"\n", 0, end) + 1
    ts = np.empty(rows, dtype=np.float64)
    ids = np.empty(rows, dtype=np.uint64)
    sizes = np.empty(rows, dtype=np.int64)
    nxt = np.empty(rows if n_col >= 0 else 0, dtype=np.int64)
    n = _fastparse.parse_columns(buf, end, width, id_col, t_col, s_col, n_col, FIELD_LIMIT, vt,
                                 ts, ids, sizes, nxt)
    if n < 0:
        return None
    return ts[:n], ids[:n], sizes[:n], (nxt[:n] if n_col >= 0 else None)
