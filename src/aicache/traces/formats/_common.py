"""Shared machinery of the trace readers: sources, id hashing, batch building, bad records.

Every reader is a *source*: a small object that remembers the path and options and can be
iterated any number of times (each call re-opens the file), so a simulator can make a
pre-pass (working set, next-access times) and then the real pass in constant memory.

Record numbers in errors are 1-based: the line number for text formats (header and blank
lines included, so an editor's "go to line" finds it), the record index for binary ones.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice, repeat
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, Union

from aicache.errors import BadInput, TraceFormatError
from aicache.traces.base import KVRequest, RequestBatch

if TYPE_CHECKING:
    import numpy as np

DEFAULT_BATCH = 65536
_U64 = 1 << 64


def stable_id(text: str) -> int:
    """A stable uint64 for a non-numeric object id (blake2b-8, little-endian).

    Stable across runs and machines (unlike ``hash``), so the same trace gives the same
    numbers everywhere.
    """
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def parse_id(text: str) -> int:
    """A uint64 object id: a decimal integer in ``[0, 2**64)`` as is, anything else hashed."""
    try:
        v = int(text)
    except ValueError:
        return stable_id(text.strip())
    if 0 <= v < _U64:
        return v
    return stable_id(text.strip())


_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def compression(head: bytes) -> str | None:
    """``"gzip"``/``"zstd"`` when ``head`` (a file's first bytes) starts with their magic."""
    if head[:2] == _GZIP_MAGIC:
        return "gzip"
    if head[:4] == _ZSTD_MAGIC:
        return "zstd"
    return None


def open_binary(path: str) -> BinaryIO:
    """Open a trace for reading bytes, decompressing gzip or zstd transparently (decided by
    the magic bytes, like libCacheSim's readers; public traces ship as ``.zst``). zstd needs
    the optional ``zstandard`` package (``pip install aicache[zstd]``)."""
    try:
        f = open(path, "rb")
        kind = compression(f.read(4))
        f.seek(0)
    except OSError as exc:
        raise BadInput(f"cannot read trace {path!r}: {exc.strerror or exc}; check the path") from None
    if kind == "gzip":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]  # typeshed: not a BinaryIO
    if kind == "zstd":
        try:
            import zstandard
        except ImportError:
            f.close()
            raise BadInput(f"trace {path!r} is zstd-compressed; pip install zstandard "
                           "(or aicache[zstd]), or decompress it with 'zstd -d'") from None
        return zstandard.ZstdDecompressor().stream_reader(f, closefd=True)
    return f


def read_exact(f: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes, fewer only at end of file (decompressing streams return short
    reads mid-stream)."""
    buf = f.read(n)
    if len(buf) == n or not buf:
        return buf
    parts = [buf]
    got = len(buf)
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def open_text(path: str) -> io.TextIOWrapper:
    """Open a text trace: UTF-8 (a BOM is dropped), universal newlines (CRLF → LF), gzip or
    zstd decompressed transparently."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", errors="replace")


#: the longest field the csv module reads (its default ``field_size_limit``, 128 KiB);
#: no trace field (an id, a unit name) comes near it, so a longer one is a wrong file
FIELD_LIMIT = csv.field_size_limit()
_TOO_LONG = (f"a field longer than {FIELD_LIMIT} bytes ({FIELD_LIMIT // 1024} KiB), the most a "
             "CSV trace field may hold")


def read_header(f: io.TextIOWrapper, path: str) -> tuple[int, list[str] | None]:
    """Skip blank lines; the first non-blank line parsed as csv and its 1-based line number
    (``None`` at end of file)."""
    no = 0
    for line in f:
        no += 1
        if line.strip():
            return no, parse_header(line, path, no)
    return no, None


def parse_header(line: str, path: str, no: int) -> list[str]:
    """Line ``no`` of ``path`` (a csv header, or a first record) parsed as csv."""
    try:
        return next(csv.reader([line]))
    except csv.Error as exc:
        why = _TOO_LONG if "field limit" in str(exc) else str(exc)
        raise TraceFormatError(path, no, why) from None


def csv_rows(src: TraceSource, first: int, lines: list[str],
             **fmt: Any) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) per row of ``lines`` (line ``first`` on). A row the csv module
    rejects (a field over :data:`FIELD_LIMIT`, a NUL byte) is a bad record of ``src``:
    raised, or counted and skipped with ``skip_bad``."""
    reader = csv.reader(lines, **fmt)
    no = first
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            src._bad(no, _TOO_LONG if "field limit" in str(exc) else str(exc))
            no += 1
            continue
        yield no, row
        no += 1


def line_chunks(f: io.TextIOWrapper, first_line: int, size: int) -> Iterator[tuple[int, list[str]]]:
    """(line number of the first line, up to ``size`` lines) until end of file."""
    no = first_line
    while True:
        lines = list(islice(f, size))
        if not lines:
            return
        yield no, lines
        no += len(lines)


def split_columns(lines: list[str], width: int) -> list[list[str]] | None:
    """The chunk's columns when a plain comma split is exact: no quotes anywhere and every
    line exactly ``width`` fields (so no blank line). ``None`` sends the chunk to the per-row
    path (csv module, blank lines, per-record errors with line numbers).

    One ``split`` of the whole chunk and strided slices: no per-row list is created, which
    keeps the cyclic garbage collector (triggered by container allocations) out of the
    loop — with per-row lists it costs more than the parsing itself.
    """
    text = "".join(lines)
    if ('"' in text or set(map(str.count, lines, repeat(","))) != {width - 1}
            or max(map(len, lines)) > FIELD_LIMIT):  # the per-row path rejects the long field
        return None
    if text.endswith("\n"):
        text = text[:-1]
    flat = text.replace("\n", ",").split(",")
    return [flat[i::width] for i in range(width)]


def first_seen_codes(col: Iterable[str], codes: dict[str, int], names: list[str]) -> list[int]:
    """Map names to int codes, giving new names the next code in first-seen order."""
    col = list(col)
    for name in dict.fromkeys(col):
        if name not in codes:
            codes[name] = len(names)
            names.append(name)
    return list(map(codes.__getitem__, col))


def u64_column(col: Iterable[str]) -> np.ndarray:
    """Decimal strings → uint64; ValueError/OverflowError on anything else."""
    import numpy as np

    return np.asarray(list(map(int, col)), dtype=np.uint64)


class TraceSource:
    """A re-iterable trace. Subclasses implement :meth:`batches` or :meth:`requests`.

    ``bad_records`` counts records skipped with ``skip_bad=True`` during the *latest*
    complete iteration (a second pass does not double it); ``zero_size_records`` counts
    well-formed requests of size 0 that a format skips as libCacheSim's reader does.
    """

    format: ClassVar[str] = ""
    kind: ClassVar[str] = "block"  # "block" or "kv"

    def __init__(self, path: str, *, skip_bad: bool = False) -> None:
        self.path = str(path)
        self.skip_bad = skip_bad
        self.bad_records = 0
        self._bad_now = 0
        self.zero_size_records = 0
        self._zero_now = 0
        self.units: list[str] = []

    # -- error handling ---------------------------------------------------------------
    def _start(self) -> None:
        self._bad_now = 0
        self._zero_now = 0

    def _finish(self) -> None:
        self.bad_records = self._bad_now
        self.zero_size_records = self._zero_now

    def _bad(self, record: int, why: str) -> None:
        """A malformed record: raise, or count it when skipping."""
        if not self.skip_bad:
            raise TraceFormatError(self.path, record, why)
        self._bad_now += 1

    # -- iteration --------------------------------------------------------------------
    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        raise NotImplementedError

    def id_sizes(self, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[Column, Column, int]]:
        """(ids as uint64, sizes as int64, the sizes' sum) per chunk of requests: all the
        simulator's slot pre-pass reads. Here from :meth:`batches`; a reader with a
        compiled parser gives typed arrays without numpy (which then is not imported)."""
        for b in self.batches(batch_size):
            yield from general_id_sizes(b)

    def requests(self) -> Iterator[KVRequest]:
        raise BadInput(
            f"trace {self.path!r} is a {self.format} block trace, not a KV trace; "
            "use it with 'aicache sim cache' or 'sim datacache'"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


class KVSource(TraceSource):
    """A KV (prompt) trace. :meth:`batches` expands it into block requests so that
    ``aicache sim cache`` can replay it: one request per prefix block, object id = the
    block's hash id, size = the block's tokens (the last block of a prompt may be partial),
    timestamp = the request's (seconds)."""

    kind = "kv"

    def requests(self) -> Iterator[KVRequest]:
        raise NotImplementedError

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        ts: list[float] = []
        ids: list[int] = []
        sizes: list[int] = []
        for r in self.requests():
            n = len(r.hash_ids)
            if not n:
                continue
            bt = r.block_tokens
            last = r.input_length - bt * (n - 1)
            if not 0 < last <= bt:
                last = bt
            ids.extend(r.hash_ids)
            ts.extend([r.timestamp] * n)
            sizes.extend([bt] * (n - 1))
            sizes.append(last)
            if len(ids) >= batch_size:
                while len(ids) >= batch_size:
                    yield make_batch(ts[:batch_size], ids[:batch_size], sizes[:batch_size])
                    del ts[:batch_size], ids[:batch_size], sizes[:batch_size]
        if ids:
            yield make_batch(ts, ids, sizes)


def general_id_sizes(b: RequestBatch) -> Iterator[tuple[Column, Column, int]]:
    """A batch's item of :meth:`TraceSource.id_sizes` (none for an empty batch)."""
    import numpy as np

    if len(b):
        yield (np.ascontiguousarray(b.obj_id, dtype=np.uint64),
               np.ascontiguousarray(b.obj_size, dtype=np.int64), int(b.obj_size.sum()))


#: a column as the readers build it: a Python list or an already-typed numpy array
IntColumn = Union[Sequence[int], "np.ndarray"]
FloatColumn = Union[Sequence[float], "np.ndarray"]
#: a typed column the slot pre-pass reads: a numpy array, or a memoryview of an ``array``
Column = Union["np.ndarray", memoryview]


def make_batch(
    ts: FloatColumn,
    ids: IntColumn,
    sizes: IntColumn,
    nxt: IntColumn | None = None,
    unit: IntColumn | None = None,
    phase: IntColumn | None = None,
    op: IntColumn | None = None,
) -> RequestBatch:
    """Python column lists → a :class:`RequestBatch` with the documented dtypes."""
    import numpy as np

    return RequestBatch(
        timestamp=np.asarray(ts, dtype=np.float64),
        obj_id=np.asarray(ids, dtype=np.uint64),
        obj_size=np.asarray(sizes, dtype=np.int64),
        next_access_vtime=None if nxt is None else np.asarray(nxt, dtype=np.int64),
        unit=None if unit is None else np.asarray(unit, dtype=np.int32),
        phase=None if phase is None else np.asarray(phase, dtype=np.int8),
        op=None if op is None else np.asarray(op, dtype=np.int8),
    )


def fmt_time(t: float) -> str:
    """Shortest text that reads back as the same float (integers without ``.0``)."""
    if t == int(t) and abs(t) < 2**53:
        return str(int(t))
    return repr(float(t))
