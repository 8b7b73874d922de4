"""``lcs-csv``: libCacheSim's csv trace, columns named by a header line.

Recognised column names (case-insensitive, surrounding spaces/quotes and a leading ``#``
ignored), as in libCacheSim's sample traces and csv reader options:

* time: ``timestamp``, ``time``, ``ts``, ``clock_time``, ``real_time``
* id: ``obj_id``, ``id``, ``key``, ``object_id``, ``obj``, ``objid``, ``lbn``, ``lba``,
  ``block`` (libCacheSim's ``data/trace.csv`` is ``version,time,op,size,lbn``)
* size: ``obj_size``, ``size``, ``object_size``, ``req_size``
* next access: ``next_access_vtime``, ``next_access``, ``next_vtime``

Other columns are ignored. Only the id column is required (size defaults to 1, time to the
request index). A file whose first line is all numbers has no header and is read as
``timestamp,obj_id[,obj_size[,next_access_vtime]]`` (libCacheSim's default order). Ids that
are not decimal uint64 are hashed to a stable uint64 (blake2b-8). A present
``next_access_vtime`` is carried in the batch (``-1``/``INT64_MAX`` = never).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator

from aicache.errors import BadInput
from aicache.traces.base import NEVER
from aicache.traces.base import RequestBatch
from aicache.traces.formats._common import (FloatColumn, IntColumn, TraceSource, csv_rows, fmt_time,
                                            line_chunks, make_batch, open_text, parse_header, parse_id,
                                            read_header, split_columns, u64_column)
from aicache.traces.formats._textchunks import ChunkedTextSource, FastChunk, byte_chunks, fast_columns, text_lines

NAME = "lcs-csv"
ALIASES = {
    "timestamp": ("timestamp", "time", "ts", "clock_time", "real_time"),
    "obj_id": ("obj_id", "id", "key", "object_id", "obj", "objid", "lbn", "lba", "block"),
    "obj_size": ("obj_size", "size", "object_size", "req_size"),
    "next_access_vtime": ("next_access_vtime", "next_access", "next_vtime"),
}
_INT64_MAX = (1 << 63) - 1


def _norm(name: str) -> str:
    return name.strip().strip("\"'").lstrip("#").strip().lower()


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def columns(first_row: list[str]) -> tuple[dict[str, int], bool]:
    """Column positions from the first row, and whether that row is a header."""
    if first_row and all(_is_number(c) for c in first_row):
        order = ("timestamp", "obj_id", "obj_size", "next_access_vtime")
        return {k: i for i, k in enumerate(order[: len(first_row)])}, False
    names = [_norm(c) for c in first_row]
    pos: dict[str, int] = {}
    for key, aliases in ALIASES.items():
        for a in aliases:
            if a in names:
                pos[key] = names.index(a)
                break
    return pos, True


class LcsCsvSource(ChunkedTextSource):
    """Streams a libCacheSim csv file as :class:`RequestBatch` chunks."""

    format = NAME

    def _chunks(self, batch_size: int) -> Iterator[FastChunk | RequestBatch]:
        """The file's requests: a chunk the compiled parser read whole, or the general
        path's batches of the chunk it refused."""
        self._start()
        cols: _Columns | None = None
        no = 0  # lines before the chunk
        for buf, end in byte_chunks(self.path):
            if cols is None:  # the header is in the first chunk holding a non-blank line
                found = self._header(buf, end, no)
                if found is None:  # a lone CR before the header: read it all as text
                    yield from self._text_batches(batch_size)
                    return
                cols, start, no = found
                if cols is None:
                    continue
                del buf[:start]
                end -= start
            fast = fast_columns(buf, end, cols.width, cols.id, cols.t, cols.s, cols.n, cols.vt)
            if fast is not None:
                cols.vt += len(fast)
                no += len(fast)
                yield fast
                continue
            lines = text_lines(buf, end)
            for s in range(0, len(lines), batch_size):
                yield from cols.batch(self, no + s + 1, lines[s:s + batch_size])
            no += len(lines)
        self._finish()

    def _header(self, buf: bytearray, end: int, no: int) -> tuple[_Columns | None, int, int] | None:
        """The columns named by the chunk's first non-blank line (None where the chunk is
        blank), the offset where the records start (the header's next line, or the line
        itself where it is a record) and the lines before that offset; None where a lone CR
        ends a line (which only the text reader splits as it does)."""
        pos = 0
        while pos < end:
            nl = buf.find(b"\n", pos, end)
            stop = end if nl < 0 else nl + 1
            raw = bytes(buf[pos:stop])
            body = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
            if b"\r" in body:
                return None
            no += 1
            line = body.decode("utf-8", errors="replace") + ("\n" if nl >= 0 else "")
            if line.strip():
                first = parse_header(line, self.path, no)
                pos_, has_header = columns(first)
                if "obj_id" not in pos_:
                    raise BadInput(
                        f"{self.path}: record {no}: lcs-csv header {','.join(first)!r} names "
                        "no object id column; name one obj_id, id or key"
                    )
                if has_header:
                    return _Columns(pos_, len(first)), stop, no
                return _Columns(pos_, len(first)), pos, no - 1
            pos = stop
        return None, end, no

    def _text_batches(self, batch_size: int) -> Iterator[RequestBatch]:
        """The whole file through the text reader (universal newlines) and the general path."""
        with open_text(self.path) as f:
            hline, first = read_header(f, self.path)
            if first is None:
                self._finish()
                return
            pos, has_header = columns(first)
            if "obj_id" not in pos:
                raise BadInput(
                    f"{self.path}: record {hline}: lcs-csv header {','.join(first)!r} names "
                    "no object id column; name one obj_id, id or key"
                )
            cols = _Columns(pos, len(first))
            chunks = line_chunks(f, hline + 1, batch_size)
            if not has_header:  # the first line is a record
                chunks = _prepend((hline, [",".join(first)]), chunks)
            for no, lines in chunks:
                yield from cols.batch(self, no, lines)
        self._finish()


#: a parsed chunk: timestamps, ids, sizes, next-access times (None without that column)
_Parsed = tuple[FloatColumn, IntColumn, IntColumn, "IntColumn | None"]


class _Columns:
    """Column positions of one file and the two ways to parse a chunk of its lines."""

    __slots__ = ("id", "t", "s", "n", "need", "width", "vt")

    def __init__(self, pos: dict[str, int], width: int) -> None:
        self.id = pos["obj_id"]
        self.t = pos.get("timestamp", -1)
        self.s = pos.get("obj_size", -1)
        self.n = pos.get("next_access_vtime", -1)
        self.need = max(pos.values())
        self.width = width
        self.vt = 0  # requests so far: the timestamp when the file has no time column

    def batch(self, src: TraceSource, no: int, lines: list[str]) -> Iterator[RequestBatch]:
        """The general path over one chunk of lines, the first being line ``no``."""
        split = split_columns(lines, self.width)
        out = None if split is None else self.fast(split)
        if out is None:
            out = self.slow(src, no, lines)
        if len(out[1]):
            self.vt += len(out[1])
            yield make_batch(*out)

    def fast(self, cols: list[list[str]]) -> _Parsed | None:
        """Column-wise conversion of a clean chunk of decimal ids; None sends the chunk to
        :meth:`slow` (hashed ids, bad values)."""
        import numpy as np

        k = len(cols[0])
        try:
            ids = u64_column(cols[self.id])
            ts = list(map(float, cols[self.t])) if self.t >= 0 else list(range(self.vt, self.vt + k))
            ss = np.asarray(list(map(int, cols[self.s])) if self.s >= 0 else [1] * k, dtype=np.int64)
            nx = None
            if self.n >= 0:
                nx = np.asarray(list(map(int, cols[self.n])), dtype=np.int64)
                nx[nx == _INT64_MAX] = NEVER
                if k and int(nx.min()) < NEVER:
                    return None
        except (ValueError, OverflowError):
            return None
        if k and int(ss.min()) < 0:
            return None
        return ts, ids, ss, nx

    def slow(self, src: TraceSource, first: int, lines: list[str]) -> _Parsed:
        """Row by row with the csv module: blank lines skipped, quoting honoured, ids that
        are not decimal uint64 hashed, every bad record reported with its line number."""
        ts: list[float] = []
        ids: list[int] = []
        ss: list[int] = []
        nx: list[int] | None = [] if self.n >= 0 else None
        bad = src._bad
        vt = self.vt
        v = NEVER
        for no, row in csv_rows(src, first, lines, skipinitialspace=True):
            n = len(row)
            if n <= self.need:
                if n == 0 or (n == 1 and not row[0].strip()):
                    continue
                bad(no, f"expected at least {self.need + 1} fields, got {n}")
                continue
            try:
                t = float(row[self.t]) if self.t >= 0 else float(vt)
                s = int(row[self.s]) if self.s >= 0 else 1
                if nx is not None:
                    v = int(row[self.n])
                    if v == _INT64_MAX:
                        v = NEVER
                    elif v < NEVER:
                        raise ValueError(f"next_access_vtime {v} is below -1")
                    elif v > _INT64_MAX:
                        raise ValueError(f"next_access_vtime {v} is above 2**63 - 1")
            except ValueError as exc:
                bad(no, f"bad field ({exc})")
                continue
            if s < 0:
                bad(no, f"negative size {s}")
                continue
            if s > _INT64_MAX:
                bad(no, f"size {s} is above 2**63 - 1")
                continue
            raw = row[self.id].strip()
            ids.append(int(raw) if raw.isdigit() and len(raw) < 20 else parse_id(raw))
            ts.append(t)
            ss.append(s)
            if nx is not None:
                nx.append(v)
            vt += 1
        return ts, ids, ss, nx


def _prepend(item: tuple[int, list[str]],
             rest: Iterator[tuple[int, list[str]]]) -> Iterator[tuple[int, list[str]]]:
    yield item
    yield from rest


def write_lcs_csv(path: str, batches: Iterable[RequestBatch]) -> int:
    """Write ``timestamp,obj_id,obj_size[,next_access_vtime]`` with a header line (the next
    column only when every batch carries it)."""
    bl: list[RequestBatch] = batches if isinstance(batches, list) else list(batches)
    with_next = bool(bl) and all(b.next_access_vtime is not None for b in bl)
    n = 0
    try:
        f = open(path, "w", encoding="utf-8", newline="")
    except OSError as exc:
        raise BadInput(f"cannot write trace {path!r}: {exc.strerror or exc}") from None
    with f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(("timestamp", "obj_id", "obj_size") + (("next_access_vtime",) if with_next else ()))
        for b in bl:
            cols = [[fmt_time(t) for t in b.timestamp.tolist()], b.obj_id.tolist(), b.obj_size.tolist()]
            if with_next and b.next_access_vtime is not None:  # with_next: never None here
                cols.append(b.next_access_vtime.tolist())
            w.writerows(zip(*cols))
            n += len(b)
    return n
