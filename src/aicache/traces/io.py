"""Opening traces by path: format auto-detection, the source objects, and the writers.

``open_trace(path)`` returns a re-iterable *source* (``.format``, ``.kind``,
``.batches(batch_size)`` for block/object formats — KV formats expand to block requests —,
``.requests()`` for KV formats, ``.units`` for block-csv, ``.bad_records``).

Auto-detection looks at content, never at the file name: a binary file whose size is a
multiple of 24 with plausible fields is ``oracle-general``; a JSON-lines file is decided by
the keys of its first object (kv-jsonl's session/block keys, else bailian's chat ids, else
mooncake); a csv header naming ``unit`` is ``block-csv``, any other comma-separated file is
``lcs-csv`` when its header names an object-id column (or its first row is all numbers);
a text file is ``lcs-txt`` only when every line of its first 64 KiB is one token (one id per
line). Anything else — a log, a README, a csv without an id column — is refused with one
line naming the file and the formats tried (:data:`TRIED`), so a non-trace never produces
a miss ratio.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable
from typing import cast

from aicache.errors import BadInput
from aicache.traces import FORMATS
from aicache.traces.base import KVRequest, RequestBatch
from aicache.traces.formats._common import TraceSource, compression, open_binary, read_exact
from aicache.traces.formats.block_csv import BlockCsvWriter, write_block_csv
from aicache.traces.formats.kv_jsonl import write_kv_jsonl

_HEAD = 1 << 16
#: the formats detection tries, in order (named in the refusal)
TRIED = ("oracle-general", "kv-jsonl", "bailian", "mooncake", "block-csv", "lcs-csv", "lcs-txt")


def _not_a_trace(path: str, line: str) -> BadInput:
    shown = line if len(line) <= 60 else line[:57] + "..."
    return BadInput(f"{path}: not a trace in any known format (tried {', '.join(TRIED)}); "
                    f"first line {shown!r}; pass --format FMT if it is one")


def _one_id_per_line(head: bytes) -> bool:
    """Every complete line of ``head`` is blank or a single whitespace-free token."""
    lines = head.decode("utf-8", errors="replace").lstrip("\ufeff").split("\n")
    if len(head) >= _HEAD and len(lines) > 1:
        lines = lines[:-1]  # the sample may end mid-line
    return all(len(ln.split()) <= 1 for ln in lines)


def _first_line(head: bytes) -> str:
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _is_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head[: max(0, len(head) - 3)].decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def detect_format(path: str) -> str:
    """The format name of the trace at ``path``, decided by its content."""
    from aicache.traces.formats import oracle_general
    from aicache.traces.formats.bailian import MARKER_KEYS as BAILIAN_KEYS
    from aicache.traces.formats.block_csv import looks_like as is_block_csv
    from aicache.traces.formats.kv_jsonl import MARKER_KEYS as KV_KEYS
    from aicache.traces.formats.lcs_csv import columns as lcs_columns

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as raw:
            compressed = compression(raw.read(4)) is not None
        with open_binary(path) as f:
            head = read_exact(f, _HEAD)
            first_full = head.split(b"\n", 1)[0] if b"\n" in head else head + f.readline()
    except OSError as exc:
        raise BadInput(f"cannot read trace {path!r}: {exc.strerror or exc}; check the path") from None
    except (EOFError, ValueError) as exc:  # gzip.BadGzipFile is an OSError; zstd raises ZstdError
        raise BadInput(f"cannot decompress trace {path!r}: {exc}") from None
    if not head:
        return "lcs-txt"
    if _is_binary(head):
        # The size test needs the decompressed size; for a compressed file the reader
        # reports a truncated last record instead.
        if (compressed or size % oracle_general.RECORD_SIZE == 0) and oracle_general.plausible(head):
            return "oracle-general"
        raise BadInput(
            f"trace {path!r} is binary but not an oracle-general trace (size {size} is not a "
            "multiple of 24 bytes or its fields are implausible); pass --format"
        )
    first = _first_line(first_full if first_full.strip() else head)
    if first.startswith("{"):
        try:
            d = json.loads(first)
        except ValueError:
            raise BadInput(f"{path}: record 1: looks like JSON lines but is not valid JSON; "
                           "fix it or pass --format") from None
        if any(k in d for k in KV_KEYS):
            return "kv-jsonl"
        if any(k in d for k in BAILIAN_KEYS):
            return "bailian"
        if "hash_ids" in d:
            return "mooncake"
        raise BadInput(f"{path}: JSON lines without hash_ids are not a known KV trace format; "
                       "pass --format")
    if "," in first:
        try:
            header = next(csv.reader([first]))
        except csv.Error:  # a field over csv's limit: the reader names the record
            return "lcs-csv"
        if is_block_csv(header):
            return "block-csv"
        if "obj_id" in lcs_columns(header)[0]:
            return "lcs-csv"
        raise _not_a_trace(path, first)
    if _one_id_per_line(head):
        return "lcs-txt"
    raise _not_a_trace(path, first)


def open_trace(path: str | os.PathLike[str], fmt: str = "auto", skip_bad: bool = False) -> TraceSource:
    """A source for the trace at ``path`` (``fmt="auto"`` detects the format).

    A missing or unreadable file is a :class:`BadInput` naming the path; an unknown format
    name lists the valid ones.
    """
    p = os.fspath(path)
    if not os.path.isfile(p) or not os.access(p, os.R_OK):
        why = "no such file" if not os.path.exists(p) else "not a readable file"
        raise BadInput(f"cannot read trace {p!r}: {why}; check the path")
    if fmt in (None, "", "auto"):
        fmt = detect_format(p)
    return FORMATS.get(fmt)(p, skip_bad=skip_bad)


def write_trace(path: str, fmt: str, data: Iterable[RequestBatch] | Iterable[KVRequest],
                units: list[str] | None = None) -> int:
    """Write ``data`` in format ``fmt`` (batches for block formats, requests for KV ones)."""
    # the format says which of the two ``data`` holds (a block format batches, a KV one requests)
    batches = cast("Iterable[RequestBatch]", data)
    requests = cast("Iterable[KVRequest]", data)
    writers: dict[str, Callable[[], int]] = {
        "block-csv": lambda: write_block_csv(path, batches, units or []),
        "kv-jsonl": lambda: write_kv_jsonl(path, requests),
        "lcs-csv": lambda: _lazy("lcs_csv", "write_lcs_csv")(path, data),
        "lcs-txt": lambda: _lazy("lcs_txt", "write_lcs_txt")(path, data),
        "oracle-general": lambda: _lazy("oracle_general", "write_oracle_general")(path, data),
        "mooncake": lambda: _lazy("mooncake", "write_mooncake")(path, data),
        "bailian": lambda: _lazy("bailian", "write_bailian")(path, data),
    }
    if fmt not in writers:
        raise BadInput(f"unknown trace format {fmt!r}; valid: {', '.join(sorted(writers))}")
    return int(writers[fmt]())


def _lazy(module: str, attr: str) -> Callable[..., int]:
    import importlib

    fn: Callable[..., int] = getattr(importlib.import_module(f"aicache.traces.formats.{module}"), attr)
    return fn


__all__ = ["BlockCsvWriter", "detect_format", "open_trace", "write_block_csv", "write_kv_jsonl",
           "write_trace"]
