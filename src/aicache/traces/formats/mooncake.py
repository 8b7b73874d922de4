"""``mooncake``: the Mooncake FAST'25 trace release, one JSON object per line with
``timestamp`` (milliseconds), ``input_length``, ``output_length`` and ``hash_ids``
(prefix-block ids, 512 tokens each). Requests come out with the timestamp in seconds and no
session fields (the release has none).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from aicache.errors import BadInput
from aicache.traces.base import KVRequest
from aicache.traces.formats._common import KVSource
from aicache.traces.formats._jsonl import base_fields, dump_lines, iter_objects

NAME = "mooncake"
BLOCK_TOKENS = 512


class MooncakeSource(KVSource):
    """Streams a Mooncake JSONL trace as :class:`KVRequest` records."""

    format = NAME

    def requests(self) -> Iterator[KVRequest]:
        self._start()
        for no, d in iter_objects(self):
            base = base_fields(self, no, d)
            if base is None:
                continue
            t, il, ol, h = base
            yield KVRequest(timestamp=t / 1000.0, input_length=il, output_length=ol,
                            hash_ids=h, block_tokens=BLOCK_TOKENS)
        self._finish()


def to_ms(t: float) -> int | float:
    """Seconds → the release's milliseconds (an int when it is a whole number of ms)."""
    ms = t * 1000.0
    r = round(ms)
    return int(r) if abs(ms - r) < 1e-6 * max(1.0, abs(ms)) and r / 1000.0 == t else ms


def write_mooncake(path: str, requests: Iterable[KVRequest]) -> int:
    """Write Mooncake JSONL (session fields are dropped; blocks must be 512 tokens)."""

    def objs() -> Iterator[dict[str, Any]]:
        for r in requests:
            if r.block_tokens != BLOCK_TOKENS:
                raise BadInput(f"cannot write {path!r} as mooncake: its blocks are {BLOCK_TOKENS} "
                               f"tokens, this trace's are {r.block_tokens}; use kv-jsonl")
            yield {"timestamp": to_ms(r.timestamp), "input_length": r.input_length,
                   "output_length": r.output_length, "hash_ids": list(r.hash_ids)}

    return dump_lines(str(path), objs())
