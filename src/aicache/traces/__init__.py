"""Trace formats (readers/writers, auto-detection) and workload generators.

``FORMATS`` maps a format name to its reader/writer module. Block/object formats:
``lcs-csv``, ``lcs-txt``, ``oracle-general``, ``block-csv``. KV formats: ``mooncake``,
``bailian``, ``kv-jsonl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aicache.registry import Registry
from aicache.traces.base import KVRequest, Phase, RequestBatch

if TYPE_CHECKING:
    from aicache.traces.formats._common import TraceSource

#: name -> source class (``cls(path, skip_bad=...)``), see :func:`aicache.traces.io.open_trace`
FORMATS: Registry[type[TraceSource]] = Registry("trace format")
_F = "aicache.traces.formats"
FORMATS.register("lcs-csv", f"{_F}.lcs_csv:LcsCsvSource", "libCacheSim csv with a header naming columns")
FORMATS.register("lcs-txt", f"{_F}.lcs_txt:LcsTxtSource", "one object id per line (size 1)")
FORMATS.register("oracle-general", f"{_F}.oracle_general:OracleGeneralSource",
                 "libCacheSim binary <u32 ts, u64 id, u32 size, i64 next_access_vtime>")
FORMATS.register("block-csv", f"{_F}.block_csv:BlockCsvSource", "timestamp,unit,obj_id,size[,phase][,op]")
FORMATS.register("mooncake", f"{_F}.mooncake:MooncakeSource", "Mooncake FAST'25 JSONL (ms, 512-token blocks)")
FORMATS.register("bailian", f"{_F}.bailian:BailianSource", "Alibaba qwen-bailian JSONL (s, 16-token blocks)")
FORMATS.register("kv-jsonl", f"{_F}.kv_jsonl:KVJsonlSource", "this project's KV trace (s, sessions, token types)")

#: the KV (prompt) formats; the others are block/object formats
KV_FORMATS = ("mooncake", "bailian", "kv-jsonl")

__all__ = ["FORMATS", "KV_FORMATS", "KVRequest", "Phase", "RequestBatch"]
