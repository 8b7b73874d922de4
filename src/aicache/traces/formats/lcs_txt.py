"""``lcs-txt``: one object id per line (libCacheSim's plain-text trace).

Every request has size 1 (so use it in objects mode) and timestamp = its 0-based request
index. A decimal id in ``[0, 2**64)`` is used as is; any other text is hashed to a stable
uint64 (blake2b-8). Blank lines are skipped; surrounding whitespace and CR are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from aicache.errors import BadInput
from aicache.traces.base import RequestBatch
from aicache.traces.formats._common import make_batch, parse_id, u64_column
from aicache.traces.formats._textchunks import ChunkedTextSource, FastChunk, byte_chunks, fast_ids, text_lines

if TYPE_CHECKING:
    import numpy as np

NAME = "lcs-txt"


class LcsTxtSource(ChunkedTextSource):
    """Streams an id-per-line file as :class:`RequestBatch` chunks."""

    format = NAME

    def _chunks(self, batch_size: int) -> Iterator[FastChunk | RequestBatch]:
        """The file's requests: a chunk the compiled parser read whole, or the general
        path's batches of the chunk it refused."""
        self._start()
        vt = 0
        for buf, end in byte_chunks(self.path):
            fast = fast_ids(buf, end, vt)
            if fast is not None:
                vt += len(fast)
                yield fast
                continue
            lines = text_lines(buf, end)
            for s in range(0, len(lines), batch_size):
                for batch in self._parse(lines[s:s + batch_size], vt):
                    vt += len(batch)
                    yield batch
        self._finish()

    @staticmethod
    def _parse(lines: list[str], vt: int) -> Iterator[RequestBatch]:
        """The general path over one chunk of lines (requests from ``vt`` on)."""
        ids: np.ndarray | list[int] | None = _decimal_ids(lines)
        if ids is None:  # blank lines, spaces inside an id, non-decimal ids
            ids = [parse_id(s) for s in map(str.strip, lines) if s]
            if not ids:
                return
        k = len(ids)
        yield make_batch(list(range(vt, vt + k)), ids, [1] * k)


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
