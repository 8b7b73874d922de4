"""``block-csv``: this project's block trace, ``timestamp,unit,obj_id,size[,phase][,op]``.

A header line names the columns (any order; ``phase`` and ``op`` optional). ``unit`` is the
file or dataset a block belongs to; it is mapped to an int code in first-seen order and the
code → name list is ``source.units`` (stable across passes, so codes agree between a
pre-pass and the real pass). ``obj_id`` is the cache key: a uint64 block id, unique across
units, consecutive within a unit (so stride prefetchers can name neighbours). ``timestamp``
is seconds. ``phase`` is the true pattern label (``sequential``/``random``/``skewed`` or
empty); ``op`` is ``read``/``write`` (or ``r``/``w``/``0``/``1``; empty = read).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import IO

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import Phase, RequestBatch
from aicache.traces.formats._common import (DEFAULT_BATCH, FloatColumn, IntColumn, TraceSource, csv_rows,
                                            first_seen_codes, fmt_time,
                                            line_chunks, make_batch, open_text, read_header,
                                            split_columns, u64_column)

NAME = "block-csv"
HEADER = ("timestamp", "unit", "obj_id", "size", "phase", "op")
REQUIRED = ("timestamp", "unit", "obj_id", "size")

_PHASES = {"": -1, "unknown": -1, "sequential": 0, "random": 1, "skewed": 2}
_OPS = {"": 0, "read": 0, "r": 0, "get": 0, "0": 0, "write": 1, "w": 1, "put": 1, "1": 1}
_PHASE_LABEL = {-1: "", 0: "sequential", 1: "random", 2: "skewed"}
_OP_LABEL = {0: "read", 1: "write"}


def looks_like(header: list[str]) -> bool:
    """True when a csv header names block-csv's required columns."""
    names = {h.strip().lower() for h in header}
    return all(c in names for c in REQUIRED)


class BlockCsvSource(TraceSource):
    """Streams a block-csv file as :class:`RequestBatch` chunks (unit/phase/op columns set)."""

    format = NAME

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        self._start()
        codes: dict[str, int] = {}
        names: list[str] = []
        self.units = names
        with open_text(self.path) as f:
            hline, raw = read_header(f, self.path)
            if raw is None:
                self._finish()
                return
            header = [c.strip().lower() for c in raw]
            if not looks_like(header):
                raise BadInput(
                    f"{self.path}: record {hline}: block-csv needs a header naming "
                    f"{','.join(REQUIRED)}[,phase][,op]; got {','.join(header)!r}"
                )
            cols = _Columns(header)
            for first, lines in line_chunks(f, hline + 1, batch_size):
                split = split_columns(lines, len(header))
                out = None if split is None else cols.fast(split, codes, names)
                if out is None:
                    out = cols.slow(self, first, lines, codes, names)
                if len(out[0]):
                    ts, ids, ss, uu, ph, op = out
                    yield make_batch(ts, ids, ss, unit=uu, phase=ph, op=op)
        self._finish()


#: a parsed chunk: timestamps, ids, sizes, unit codes, phases, ops
_Parsed = tuple[FloatColumn, IntColumn, IntColumn, list[int], list[int], list[int]]


class _Columns:
    """Column positions of one file and the two ways to parse a chunk of its lines."""

    __slots__ = ("t", "u", "id", "s", "p", "o", "need")

    def __init__(self, header: list[str]) -> None:
        self.t, self.u, self.id, self.s = (header.index(c) for c in REQUIRED)
        self.p = header.index("phase") if "phase" in header else -1
        self.o = header.index("op") if "op" in header else -1
        self.need = max(self.t, self.u, self.id, self.s, self.p, self.o)

    def fast(self, cols: list[list[str]], codes: dict[str, int], names: list[str]) -> _Parsed | None:
        """Column-wise conversion of a clean chunk; None if any value is off (the chunk is
        then parsed row by row, which finds and reports the bad record)."""
        import numpy as np

        n = len(cols[0])
        try:
            ts = list(map(float, cols[self.t]))
            ids = u64_column(cols[self.id])
            ss = np.asarray(list(map(int, cols[self.s])), dtype=np.int64)
            ph = _mapped(cols[self.p], _PHASES) if self.p >= 0 else [-1] * n
            op = _mapped(cols[self.o], _OPS) if self.o >= 0 else [0] * n
        except (ValueError, OverflowError, KeyError):
            return None
        if len(ss) and int(ss.min()) < 0:
            return None
        return ts, ids, ss, first_seen_codes(cols[self.u], codes, names), ph, op

    def slow(self, src: TraceSource, first: int, lines: list[str], codes: dict[str, int],
             names: list[str]) -> _Parsed:
        """Row by row with the csv module: blank lines skipped, quoting honoured, every bad
        record reported with its line number (or skipped and counted)."""
        ts: list[float] = []
        uu: list[int] = []
        ids: list[int] = []
        ss: list[int] = []
        ph: list[int] = []
        op: list[int] = []
        bad = src._bad
        need = max(self.t, self.u, self.id, self.s)
        for no, row in csv_rows(src, first, lines):
            n = len(row)
            if n <= need:
                if n == 0 or (n == 1 and not row[0].strip()):
                    continue  # blank line
                bad(no, f"expected at least {need + 1} fields, got {n}")
                continue
            try:
                t = float(row[self.t])
                oid = int(row[self.id])
                s = int(row[self.s])
                p = _PHASES[row[self.p].strip().lower()] if 0 <= self.p < n else -1
                o = _OPS[row[self.o].strip().lower()] if 0 <= self.o < n else 0
            except (ValueError, KeyError) as exc:
                bad(no, f"bad field ({exc}); expected timestamp,unit,obj_id,size[,phase][,op]")
                continue
            if oid < 0 or oid >= 1 << 64 or s < 0:
                bad(no, "obj_id must be a uint64 and size non-negative")
                continue
            name = row[self.u]
            code = codes.get(name)
            if code is None:
                code = codes[name] = len(names)
                names.append(name)
            ts.append(t)
            uu.append(code)
            ids.append(oid)
            ss.append(s)
            ph.append(p)
            op.append(o)
        return ts, ids, ss, uu, ph, op


def _mapped(col: list[str], table: dict[str, int]) -> list[int]:
    """Labels → codes through ``table`` (case and spaces ignored); KeyError if unknown."""
    m = {x: table[x.strip().lower()] for x in set(col)}
    return list(map(m.__getitem__, col))


def _phase_label(p: str | int) -> str:
    """The label written for a phase given as a label or a :class:`Phase` code; an unknown
    label is a ValueError here rather than an unreadable trace later."""
    if isinstance(p, str):
        if p.strip().lower() not in _PHASES:
            raise ValueError(f"unknown phase {p!r}; use one of sequential, random, skewed or ''")
        return p
    return _PHASE_LABEL.get(int(p), "")


def _op_label(o: str | int) -> str:
    if isinstance(o, str):
        if o.strip().lower() not in _OPS:
            raise ValueError(f"unknown op {o!r}; use read, write or ''")
        return o
    return _OP_LABEL.get(int(o), "")


class BlockCsvWriter:
    """Streaming block-csv writer (a context manager).

    ``write`` takes one record (unit as a name, phase as a :class:`Phase`, its label or
    ``""``); ``write_batch`` writes a whole :class:`RequestBatch` whose ``unit`` codes index
    ``units``. The header is always the full ``timestamp,unit,obj_id,size,phase,op``.
    """

    def __init__(self, path: str) -> None:
        self.path = str(path)
        try:
            self._f: IO[str] = open(self.path, "w", encoding="utf-8", newline="")
        except OSError as exc:
            raise BadInput(f"cannot write trace {self.path!r}: {exc.strerror or exc}") from None
        self._w = csv.writer(self._f, lineterminator="\n")
        self._w.writerow(HEADER)
        self.records = 0

    def write(self, timestamp: float, unit: str, obj_id: int, size: int,
              phase: Phase | str | int = "", op: str | int = "") -> None:
        p = phase.label if isinstance(phase, Phase) else _phase_label(phase)
        self._w.writerow((fmt_time(timestamp), unit, int(obj_id), int(size), p, _op_label(op)))
        self.records += 1

    def write_batch(self, batch: RequestBatch, units: Sequence[str]) -> None:
        n = len(batch)
        ts = [fmt_time(t) for t in batch.timestamp.tolist()]
        if batch.unit is None:
            un: list[str] = [units[0] if units else ""] * n
        else:
            un = [units[c] for c in batch.unit.tolist()]
        ph = [""] * n if batch.phase is None else [_PHASE_LABEL.get(p, "") for p in batch.phase.tolist()]
        op = [""] * n if batch.op is None else [_OP_LABEL.get(o, "") for o in batch.op.tolist()]
        self._w.writerows(zip(ts, un, batch.obj_id.tolist(), batch.obj_size.tolist(), ph, op))
        self.records += n

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> BlockCsvWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def write_block_csv(path: str, batches: Iterable[RequestBatch], units: Sequence[str] = ()) -> int:
    """Write ``batches`` as block-csv; returns the number of records written."""
    with BlockCsvWriter(path) as w:
        for b in batches:
            w.write_batch(b, units)
        return w.records
