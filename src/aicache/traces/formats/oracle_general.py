"""``oracle-general``: libCacheSim's binary trace, 24-byte little-endian records
``<uint32 timestamp, uint64 obj_id, uint32 obj_size, int64 next_access_vtime>``.

Read in chunks: by the compiled parser into typed arrays for the simulator's slot pre-pass,\nelse with numpy (a ``frombuffer`` view per chunk, no per-record Python work).
``next_access_vtime`` is normalised to ``-1`` (:data:`NEVER`) for "no next access" whether
the file says ``-1`` or ``INT64_MAX`` (libCacheSim writes either, by tool). A malformed
record is a truncated trailing record or a ``next_access_vtime`` below ``-1``; the record
number is its 1-based index. Requests with ``obj_size`` 0 are skipped and counted in
``zero_size_records``, as libCacheSim's reader does by default (``ignore_size_zero_req``),
so both replay the same requests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from functools import cache
from typing import TYPE_CHECKING

from aicache.errors import BadInput
from aicache.traces.base import NEVER, RequestBatch
from aicache.traces.formats import _fastparse
from aicache.traces.formats._common import (DEFAULT_BATCH, Column, TraceSource, general_id_sizes, open_binary,
                                            read_exact)
from aicache.traces.formats._textchunks import zeros

if TYPE_CHECKING:
    import numpy as np

NAME = "oracle-general"
RECORD_SIZE = 24
#: the record for :mod:`struct` (the same layout as :func:`record_dtype`)
RECORD = struct.Struct("<IQIq")
assert RECORD.size == RECORD_SIZE
_INT64_MAX = (1 << 63) - 1


@cache
def record_dtype() -> np.dtype:
    """The record as a numpy dtype (numpy is imported only where a reader needs it)."""
    import numpy as np

    dt = np.dtype([("timestamp", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"),
                   ("next_access_vtime", "<i8")])
    assert dt.itemsize == RECORD_SIZE
    return dt


def plausible(head: bytes) -> bool:
    """Whether the first records of a binary file look like oracle-general: every
    ``next_access_vtime`` is -1, INT64_MAX or a request index below 2**48 (sizes are not
    judged: size-0 requests are valid records, which the reader skips)."""
    n = min(len(head) // RECORD_SIZE, 4096)
    if n == 0:
        return False
    return all(nxt == -1 or nxt == _INT64_MAX or 0 <= nxt < 1 << 48
               for _, _, _, nxt in RECORD.iter_unpack(head[: n * RECORD_SIZE]))


class OracleGeneralSource(TraceSource):
    """Streams an oracle-general file as :class:`RequestBatch` chunks (with next times)."""

    format = NAME

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        for buf, whole, base in self._buffers(batch_size):
            b = self._batch(buf, whole, base)
            if b is not None:
                yield b

    def id_sizes(self, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[Column, Column, int]]:
        if not _fastparse.compiled:
            yield from super().id_sizes(batch_size)
            return
        for buf, whole, base in self._buffers(batch_size):
            ids = zeros("Q", whole)
            sizes = zeros("q", whole)
            n = _fastparse.parse_oracle(bytearray(buf), whole, ids, sizes)
            if n < 0:  # a bad record: the general path reports it
                b = self._batch(buf, whole, base)
                if b is not None:
                    yield from general_id_sizes(b)
                continue
            self._zero_now += whole - n
            if n:
                yield ids[:n], sizes[:n], int(_fastparse.total(sizes[:n]))

    def _buffers(self, batch_size: int) -> Iterator[tuple[bytes, int, int]]:
        """(bytes, whole records in them, records before them) per chunk of
        ``batch_size`` records; a truncated last record is a bad record."""
        self._start()
        base = 0  # records read so far
        with open_binary(self.path) as f:
            while True:
                buf = read_exact(f, batch_size * RECORD_SIZE)
                if not buf:
                    break
                whole = len(buf) // RECORD_SIZE
                tail = len(buf) - whole * RECORD_SIZE
                yield buf, whole, base
                base += whole
                if tail:
                    self._bad(base + 1, f"truncated record ({tail} of {RECORD_SIZE} bytes)")
                    break
        self._finish()

    def _batch(self, buf: bytes, whole: int, base: int) -> RequestBatch | None:
        """The chunk's requests (None where none is left): bad records reported, size-0
        ones counted and skipped."""
        import numpy as np

        rec = np.frombuffer(buf, dtype=record_dtype(), count=whole)
        nxt = rec["next_access_vtime"].astype(np.int64)
        nxt[nxt == _INT64_MAX] = NEVER
        bad = nxt < NEVER
        zero = rec["obj_size"] == 0
        if bad.any():
            for i in np.flatnonzero(bad).tolist():
                self._bad(base + i + 1, f"next_access_vtime {int(nxt[i])} is below -1")
        if bad.any() or zero.any():
            self._zero_now += int((zero & ~bad).sum())
            keep = ~(bad | zero)
            rec, nxt = rec[keep], nxt[keep]
        if not len(rec):
            return None
        return RequestBatch(
            timestamp=rec["timestamp"].astype(np.float64),
            obj_id=rec["obj_id"].astype(np.uint64),
            obj_size=rec["obj_size"].astype(np.int64),
            next_access_vtime=nxt,
        )


def next_access_times(ids: np.ndarray) -> np.ndarray:
    """For each request, the 0-based index of the next request to the same object (-1 if
    none): a stable argsort groups each object's requests in time order (O(n log n),
    24 bytes per request of temporary memory)."""
    import numpy as np

    n = len(ids)
    nxt = np.full(n, NEVER, dtype=np.int64)
    if n < 2:
        return nxt
    order = np.argsort(ids, kind="stable")
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def write_oracle_general(path: str, batches: Iterable[RequestBatch]) -> int:
    """Write ``batches`` as oracle-general. Next-access times are taken from the batches
    when every batch has them, else computed (which holds the trace's ids in memory)."""
    import numpy as np

    bl = list(batches)
    have = all(b.next_access_vtime is not None for b in bl)
    if not have:
        ids = np.concatenate([b.obj_id for b in bl]) if bl else np.zeros(0, np.uint64)
        allnext = next_access_times(ids)
    n = 0
    try:
        f = open(path, "wb")
    except OSError as exc:
        raise BadInput(f"cannot write trace {path!r}: {exc.strerror or exc}") from None
    with f:
        for b in bl:
            k = len(b)
            rec = np.empty(k, dtype=record_dtype())
            if np.any(b.timestamp < 0) or np.any(b.timestamp >= 2**32):
                raise BadInput(f"cannot write {path!r} as oracle-general: timestamps must fit uint32")
            rec["timestamp"] = b.timestamp.astype(np.uint32)
            rec["obj_id"] = b.obj_id
            rec["obj_size"] = b.obj_size.astype(np.uint32)
            rec["next_access_vtime"] = b.next_access_vtime if have else allnext[n:n + k]
            f.write(rec.tobytes())
            n += k
    return n
