"""``aicache trace convert``: rewrite a trace in another format.

A KV trace converts to every format (to a block format through its prefix-block expansion,
:meth:`~aicache.traces.formats._common.KVSource.batches`); a block trace converts to the
block formats only (it has no prompts to write as KV records). What a target cannot hold is
dropped, and :data:`DROPS` says what, so the CLI can say it: ``lcs-txt`` keeps only the ids,
``lcs-csv``/``oracle-general`` drop block-csv's unit/phase/op columns, ``mooncake`` drops
the session fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from aicache.errors import BadInput
from aicache.traces import FORMATS, KV_FORMATS
from aicache.traces.formats._common import TraceSource
from aicache.traces.io import write_trace

#: what each target format cannot carry
DROPS = {
    "lcs-txt": "timestamps and sizes (one id per line)",
    "lcs-csv": "block-csv's unit, phase and op columns",
    "oracle-general": "block-csv's unit, phase and op columns; timestamps become whole uint32s",
    "mooncake": "the session fields (session_id, turn, types)",
}


def convert(src: TraceSource, out: str, to: str) -> int:
    """Write ``src`` to ``out`` in format ``to``; the number of records written."""
    FORMATS.get(to)  # an unknown name lists the valid ones
    if to in KV_FORMATS:
        if src.kind != "kv":
            raise BadInput(f"trace {src.path!r} is a {src.format} block trace; it converts to the "
                           f"block formats only ({', '.join(n for n in FORMATS.names() if n not in KV_FORMATS)})")
        return write_trace(out, to, src.requests())
    if to == "block-csv":
        from aicache.traces.formats.block_csv import write_block_csv

        units: Sequence[str] = _LiveUnits(src) if src.format == "block-csv" else ["data"]
        return write_block_csv(out, src.batches(), units)
    return write_trace(out, to, src.batches())


class _LiveUnits(Sequence[str]):
    """The source's unit names as they are at each read: a block-csv source learns them
    while its batches are read, so a snapshot taken before would be empty."""

    def __init__(self, src: TraceSource) -> None:
        self._src = src

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self._src.units[i]

    def __len__(self) -> int:
        return len(self._src.units)
