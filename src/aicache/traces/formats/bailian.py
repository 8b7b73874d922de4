"""``bailian``: Alibaba's qwen-bailian usage traces, JSON lines with the Mooncake fields
plus ``chat_id``, ``parent_chat_id`` (-1 = the first turn of a conversation), ``turn`` and
``type`` (text/search/image/file); ``timestamp`` in seconds; 16-token blocks.

A :class:`KVRequest`'s ``session_id`` is the conversation: the root ``chat_id`` found by
following ``parent_chat_id`` links (a parent not seen in the trace is taken as the root, so
a trace cut mid-conversation still groups its turns). That needs one int per request seen
(the chat → root map), the only state that grows with the trace. The request's own
``chat_id`` is kept in ``extra["chat_id"]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast

from aicache.errors import BadInput
from aicache.traces.base import KVRequest
from aicache.traces.formats._common import KVSource
from aicache.traces.formats._jsonl import base_fields, dump_lines, iter_objects

NAME = "bailian"
BLOCK_TOKENS = 16
#: keys whose presence (beyond mooncake's) marks a bailian line
MARKER_KEYS = ("chat_id", "parent_chat_id")
_KNOWN = {"timestamp", "input_length", "output_length", "hash_ids", "chat_id",
          "parent_chat_id", "turn", "type"}


class BailianSource(KVSource):
    """Streams a Bailian JSONL trace as :class:`KVRequest` records."""

    format = NAME

    def requests(self) -> Iterator[KVRequest]:
        self._start()
        root: dict[int, int] = {}
        for no, d in iter_objects(self):
            base = base_fields(self, no, d)
            if base is None:
                continue
            t, il, ol, h = base
            chat = d.get("chat_id")
            parent = d.get("parent_chat_id", -1)
            turn = d.get("turn")
            rtype = d.get("type")
            if type(chat) is not int or type(parent) is not int:
                self._bad(no, "chat_id and parent_chat_id must be integers (-1 = no parent)")
                continue
            if turn is not None and type(turn) is not int:
                self._bad(no, "turn must be an integer")
                continue
            r = chat if parent == -1 else root.get(parent, parent)
            root[chat] = r
            extra: dict[str, object] = {"chat_id": chat}
            extra.update((k, v) for k, v in d.items() if k not in _KNOWN)
            yield KVRequest(
                timestamp=t, input_length=il, output_length=ol, hash_ids=h,
                block_tokens=BLOCK_TOKENS, session_id=str(r), turn=turn,
                parent_chat_id=None if parent == -1 else str(parent),
                request_type=None if rtype is None else str(rtype), extra=extra,
            )
        self._finish()


def write_bailian(path: str, requests: Iterable[KVRequest]) -> int:
    """Write Bailian JSONL. ``chat_id`` comes from ``extra["chat_id"]`` or is the request's
    index; ``parent_chat_id`` from the request, else the previous request of the same
    session, else -1; ``turn`` from the request, else its position in the session (1-based);
    ``type`` defaults to ``text``."""

    def objs() -> Iterator[dict[str, Any]]:
        last: dict[str, int] = {}
        turns: dict[str, int] = {}
        for i, r in enumerate(requests):
            if r.block_tokens != BLOCK_TOKENS:
                raise BadInput(f"cannot write {path!r} as bailian: its blocks are {BLOCK_TOKENS} "
                               f"tokens, this trace's are {r.block_tokens}; use kv-jsonl")
            # a bailian source stores its chat ids as ints; another source may name them by string
            chat = cast("int | str", r.extra.get("chat_id", i))
            if r.parent_chat_id is not None:
                parent = int(r.parent_chat_id)
            elif r.session_id is not None and r.session_id in last:
                parent = last[r.session_id]
            else:
                parent = -1
            turn = r.turn
            if r.session_id is not None:
                last[r.session_id] = int(chat)
                turns[r.session_id] = turns.get(r.session_id, 0) + 1
                if turn is None:
                    turn = turns[r.session_id]
            yield {"chat_id": chat, "parent_chat_id": parent, "timestamp": r.timestamp,
                   "input_length": r.input_length, "output_length": r.output_length,
                   "type": r.request_type or "text", "turn": 1 if turn is None else turn,
                   "hash_ids": list(r.hash_ids)}

    return dump_lines(str(path), objs())
