"""``oracle-general``: libCacheSim's binary trace, 24-byte little-endian records
``<uint32 timestamp, uint64 obj_id, uint32 obj_size, int64 next_access_vtime>``.

Read with numpy in chunks (a ``frombuffer`` view per chunk, no per-record Python work).
``next_access_vtime`` is normalised to ``-1`` (:data:`NEVER`) for "no next access" whether
the file says ``-1`` or ``INT64_MAX`` (libCacheSim writes either, by tool). A malformed
record is a truncated trailing record or a ``next_access_vtime`` below ``-1``; the record
number is its 1-based index. Requests with ``obj_size`` 0 are skipped and counted in
``zero_size_records``, as libCacheSim's reader does by default (``ignore_size_zero_req``),
so both replay the same requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import NEVER, RequestBatch
from aicache.traces.formats._common import DEFAULT_BATCH, TraceSource, open_binary, read_exact

NAME = "oracle-general"
DTYPE = np.dtype([("timestamp", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"),
                  ("next_access_vtime", "<i8")])
RECORD_SIZE = DTYPE.itemsize  # 24
assert RECORD_SIZE == 24
_INT64_MAX = np.iinfo(np.int64).max


def plausible(head: bytes) -> bool:
    """Whether the first records of a binary file look like oracle-general: every
    ``next_access_vtime`` is -1, INT64_MAX or a request index below 2**48 (sizes are not
    judged: size-0 requests are valid records, which the reader skips)."""
    n = min(len(head) // RECORD_SIZE, 4096)
    if n == 0:
        return False
    rec = np.frombuffer(head[: n * RECORD_SIZE], dtype=DTYPE)
    nxt = rec["next_access_vtime"]
    ok_next = (nxt == -1) | (nxt == _INT64_MAX) | ((nxt >= 0) & (nxt < 1 << 48))
    return bool(ok_next.all())


class OracleGeneralSource(TraceSource):
    """Streams an oracle-general file as :class:`RequestBatch` chunks (with next times)."""

    format = NAME

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        self._start()
        base = 0  # records read so far
        with open_binary(self.path) as f:
            while True:
                buf = read_exact(f, batch_size * RECORD_SIZE)
                if not buf:
                    break
                whole = len(buf) // RECORD_SIZE
                tail = len(buf) - whole * RECORD_SIZE
                rec = np.frombuffer(buf, dtype=DTYPE, count=whole)
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
                if len(rec):
                    yield RequestBatch(
                        timestamp=rec["timestamp"].astype(np.float64),
                        obj_id=rec["obj_id"].astype(np.uint64),
                        obj_size=rec["obj_size"].astype(np.int64),
                        next_access_vtime=nxt,
                    )
                base += whole
                if tail:
                    self._bad(base + 1, f"truncated record ({tail} of {RECORD_SIZE} bytes)")
                    break
        self._finish()


def next_access_times(ids: np.ndarray) -> np.ndarray:
    """For each request, the 0-based index of the next request to the same object (-1 if
    none): a stable argsort groups each object's requests in time order (O(n log n),
    24 bytes per request of temporary memory)."""
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
            rec = np.empty(k, dtype=DTYPE)
            if np.any(b.timestamp < 0) or np.any(b.timestamp >= 2**32):
                raise BadInput(f"cannot write {path!r} as oracle-general: timestamps must fit uint32")
            rec["timestamp"] = b.timestamp.astype(np.uint32)
            rec["obj_id"] = b.obj_id
            rec["obj_size"] = b.obj_size.astype(np.uint32)
            rec["next_access_vtime"] = b.next_access_vtime if have else allnext[n:n + k]
            f.write(rec.tobytes())
            n += k
    return n
