"""``kv-jsonl``: this project's KV trace, one LLM request per JSON line.

Fields: the Mooncake ones (``timestamp``, ``input_length``, ``output_length``,
``hash_ids``) plus ``session_id``, ``turn``, ``session_type`` (``single``/``chat``/
``agentic``), ``block_types`` (one token type per block), ``block_tokens``, and — to stay
a lossless superset of mooncake and bailian — ``parent_chat_id`` and ``type`` when known.

Decisions: ``timestamp`` is in **seconds** (float), like bailian and like
:class:`KVRequest`, so a kv-jsonl trace needs no unit conversion; ``block_tokens`` defaults
to 16 when absent (bailian's block size); any other key is kept in ``KVRequest.extra``
and written back, so converting through kv-jsonl loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from aicache.traces.base import KVRequest
from aicache.traces.formats._common import KVSource
from aicache.traces.formats._jsonl import base_fields, dump_lines, iter_objects

NAME = "kv-jsonl"
DEFAULT_BLOCK_TOKENS = 16
#: keys whose presence (beyond mooncake's) marks a kv-jsonl line
MARKER_KEYS = ("session_id", "session_type", "block_types", "block_tokens")
_KNOWN = {"timestamp", "input_length", "output_length", "hash_ids", "session_id", "turn",
          "session_type", "block_types", "block_tokens", "parent_chat_id", "type"}


class KVJsonlSource(KVSource):
    """Streams a kv-jsonl file as :class:`KVRequest` records."""

    format = NAME

    def requests(self) -> Iterator[KVRequest]:
        self._start()
        for no, d in iter_objects(self):
            base = base_fields(self, no, d)
            if base is None:
                continue
            t, il, ol, h = base
            bt = d.get("block_tokens", DEFAULT_BLOCK_TOKENS)
            sid = d.get("session_id")
            turn = d.get("turn")
            stype = d.get("session_type")
            btypes = d.get("block_types")
            parent = d.get("parent_chat_id")
            rtype = d.get("type")
            if type(bt) is not int or bt <= 0:
                self._bad(no, "block_tokens must be a positive integer")
                continue
            if turn is not None and type(turn) is not int:
                self._bad(no, "turn must be an integer")
                continue
            if btypes is not None and (not isinstance(btypes, list) or len(btypes) != len(h)
                                       or not all(isinstance(x, str) for x in btypes)):
                self._bad(no, "block_types must be a list of strings, one per hash id")
                continue
            extra = {k: v for k, v in d.items() if k not in _KNOWN}
            yield KVRequest(
                timestamp=t, input_length=il, output_length=ol, hash_ids=h, block_tokens=bt,
                session_id=None if sid is None else str(sid), turn=turn,
                session_type=None if stype is None else str(stype), block_types=btypes,
                parent_chat_id=None if parent is None else str(parent),
                request_type=None if rtype is None else str(rtype), extra=extra,
            )
        self._finish()


def to_object(r: KVRequest) -> dict[str, Any]:
    """The kv-jsonl line of a request (None fields are left out)."""
    d: dict[str, Any] = {"timestamp": r.timestamp, "input_length": r.input_length,
                         "output_length": r.output_length, "hash_ids": list(r.hash_ids),
                         "block_tokens": r.block_tokens}
    if r.session_id is not None:
        d["session_id"] = r.session_id
    if r.turn is not None:
        d["turn"] = r.turn
    if r.session_type is not None:
        d["session_type"] = r.session_type
    if r.block_types is not None:
        d["block_types"] = list(r.block_types)
    if r.parent_chat_id is not None:
        d["parent_chat_id"] = r.parent_chat_id
    if r.request_type is not None:
        d["type"] = r.request_type
    for k, v in r.extra.items():
        d.setdefault(k, v)
    return d


def write_kv_jsonl(path: str, requests: Iterable[KVRequest]) -> int:
    """Write ``requests`` as kv-jsonl (streaming); returns the number written."""
    return dump_lines(str(path), (to_object(r) for r in requests))
