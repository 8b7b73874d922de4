"""JSON-lines plumbing shared by the KV formats (mooncake, bailian, kv-jsonl)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from aicache.errors import BadInput
from aicache.traces.formats._common import TraceSource, open_text

#: keys every KV format has (the Mooncake FAST'25 release's fields)
BASE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
_U64 = 1 << 64


def iter_objects(src: TraceSource) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object is
    a bad record (raised or counted by ``src``)."""
    loads = json.loads
    with open_text(src.path) as f:
        for no, line in enumerate(f, 1):
            s = line.strip()
            if not s:
                continue
            try:
                d = loads(s)
            except json.JSONDecodeError as exc:
                src._bad(no, f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(d, dict):
                src._bad(no, "expected one JSON object per line")
                continue
            yield no, d


def base_fields(src: TraceSource, no: int, d: dict[str, Any]) -> tuple[float, int, int, list[int]] | None:
    """Validated (timestamp as given, input_length, output_length, hash_ids), or None after
    reporting a bad record."""
    try:
        t = d["timestamp"]
        il = d["input_length"]
        ol = d["output_length"]
        h = d["hash_ids"]
    except KeyError as exc:
        src._bad(no, f"missing field {exc.args[0]!r}; need {', '.join(BASE_KEYS)}")
        return None
    if (not isinstance(t, (int, float)) or isinstance(t, bool) or not isinstance(il, int)
            or not isinstance(ol, int) or il < 0 or ol < 0):
        src._bad(no, "timestamp must be a number and input_length/output_length non-negative integers")
        return None
    if not isinstance(h, list) or not all(type(x) is int and 0 <= x < _U64 for x in h):
        src._bad(no, "hash_ids must be a list of integers in [0, 2**64)")
        return None
    return float(t), il, ol, h


def dump_lines(path: str, objs: Iterable[dict[str, Any]]) -> int:
    """Write one compact JSON object per line; returns the count."""
    n = 0
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    try:
        f = open(path, "w", encoding="utf-8", newline="\n")
    except OSError as exc:
        raise BadInput(f"cannot write trace {path!r}: {exc.strerror or exc}") from None
    with f:
        for o in objs:
            f.write(dumps(o))
            f.write("\n")
            n += 1
    return n
