"""``lcs-txt``: one object id per line (libCacheSim's plain-text trace).

Every request has size 1 (so use it in objects mode) and timestamp = its 0-based request
index. A decimal id in ``[0, 2**64)`` is used as is; any other text is hashed to a stable
uint64 (blake2b-8). Blank lines are skipped; surrounding whitespace and CR are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import RequestBatch
from aicache.traces.formats._common import (DEFAULT_BATCH, TraceSource, line_chunks, make_batch,
                                            open_text, parse_id, u64_column)

NAME = "lcs-txt"


class LcsTxtSource(TraceSource):
    """Streams an id-per-line file as :class:`RequestBatch` chunks."""

    format = NAME

    def batches(self, batch_size: int = DEFAULT_BATCH) -> Iterator[RequestBatch]:
        self._start()
        vt = 0
        with open_text(self.path) as f:
            for _, lines in line_chunks(f, 1, batch_size):
                ids: np.ndarray | list[int] | None = _decimal_ids(lines)
                if ids is None:  # blank lines, spaces inside an id, non-decimal ids
                    ids = [parse_id(s) for s in map(str.strip, lines) if s]
                    if not ids:
                        continue
                k = len(ids)
                yield make_batch(list(range(vt, vt + k)), ids, [1] * k)
                vt += k
        self._finish()


def _decimal_ids(lines: list[str]) -> np.ndarray | None:
    """The chunk as uint64 when every line is one decimal id (one ``split`` for the chunk)."""
    toks = "".join(lines).split()
    if len(toks) != len(lines):
        return None
    try:
        return u64_column(toks)
    except (ValueError, OverflowError):
        return None


def write_lcs_txt(path: str, batches: Iterable[RequestBatch]) -> int:
    """Write the object ids of ``batches``, one per line (sizes and times are dropped)."""
    n = 0
    try:
        f = open(path, "w", encoding="utf-8", newline="\n")
    except OSError as exc:
        raise BadInput(f"cannot write trace {path!r}: {exc.strerror or exc}") from None
    with f:
        for b in batches:
            if not len(b):
                continue
            f.write("\n".join(map(str, b.obj_id.tolist())))
            f.write("\n")
            n += len(b)
    return n
