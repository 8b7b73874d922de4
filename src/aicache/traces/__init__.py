"""Trace formats (readers/writers, auto-detection) and workload generators.

``FORMATS`` maps a format name to its reader/writer module. Block/object formats:
``lcs-csv``, ``lcs-txt``, ``oracle-general``, ``block-csv``. KV formats: ``mooncake``,
``bailian``, ``kv-jsonl``.
"""

from __future__ import annotations

from aicache.registry import Registry
from aicache.traces.base import KVRequest, Phase, RequestBatch

FORMATS: Registry[object] = Registry("trace format")

__all__ = ["FORMATS", "KVRequest", "Phase", "RequestBatch"]
