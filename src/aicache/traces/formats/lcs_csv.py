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

import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import NEVER, RequestBatch
from aicache.traces.formats._common import (DEFAULT_BATCH, FloatColumn, IntColumn, TraceSource, fmt_time, line_chunks,
                                            csv_rows, make_batch, open_text, parse_id, read_header,
                                            split_columns, u64_column)

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


class LcsCsvSource(TraceSource):
    """Streams a libCacheSim csv file as :class:`RequestBatch` chunks."""

    format = NAME

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        self._start()
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
                split = split_columns(lines, cols.width)
                out = None if split is None else cols.fast(split)
                if out is None:
                    out = cols.slow(self, no, lines)
                if len(out[1]):
                    cols.vt += len(out[1])
                    yield make_batch(*out)
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

    def fast(self, cols: list[list[str]]) -> _Parsed | None:
        """Column-wise conversion of a clean chunk of decimal ids; None sends the chunk to
        :meth:`slow` (hashed ids, bad values)."""
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
            except ValueError as exc:
                bad(no, f"bad field ({exc})")
                continue
            if s < 0:
                bad(no, f"negative size {s}")
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
    bl = batches if isinstance(batches, list) else list(batches)
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
            if with_next:
                cols.append(b.next_access_vtime.tolist())  # type: ignore[union-attr]
            w.writerows(zip(*cols))
            n += len(b)
    return n
