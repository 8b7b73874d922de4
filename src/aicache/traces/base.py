"""Trace data types shared by every reader, writer, generator and simulator.

Block/object traces stream as :class:`RequestBatch` chunks of numpy columns: constant
memory in the trace length, and no per-request Python object on the simulator's hot path.
KV (prompt) traces stream as :class:`KVRequest` records, one per LLM request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class Phase(IntEnum):
    """True access-pattern label of a block-csv record (``-1`` = unknown)."""

    UNKNOWN = -1
    SEQUENTIAL = 0
    RANDOM = 1
    SKEWED = 2

    @classmethod
    def parse(cls, text: str) -> Phase:
        t = text.strip().lower()
        if not t:
            return cls.UNKNOWN
        return cls[t.upper()]

    @property
    def label(self) -> str:
        return "" if self is Phase.UNKNOWN else self.name.lower()


NEVER = -1  #: next_access_vtime of a request whose object is never requested again


@dataclass(slots=True)
class RequestBatch:
    """A chunk of consecutive requests, column-wise.

    ``obj_id`` is uint64; ``obj_size`` int64 bytes; ``timestamp`` float64 (the trace's unit:
    seconds for block-csv, whatever the source used for libCacheSim formats);
    ``next_access_vtime`` int64 request index of the next request to the same object
    (``NEVER`` = -1) when the format carries it, else None. ``unit`` holds int32 codes into
    :attr:`Trace.units`; ``phase`` int8 :class:`Phase` values; ``op`` int8 (0 read, 1 write).
    """

    timestamp: np.ndarray
    obj_id: np.ndarray
    obj_size: np.ndarray
    next_access_vtime: np.ndarray | None = None
    unit: np.ndarray | None = None
    phase: np.ndarray | None = None
    op: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.obj_id.shape[0])


@dataclass(slots=True)
class KVRequest:
    """One LLM request of a KV trace (mooncake / bailian / kv-jsonl).

    ``hash_ids`` are the prefix-block ids (``block_tokens`` tokens each, the last block may
    be partial). Session fields are None when the format lacks them (mooncake).
    ``timestamp`` is in seconds whatever the source unit.
    """

    timestamp: float
    input_length: int
    output_length: int
    hash_ids: list[int]
    block_tokens: int
    session_id: str | None = None
    turn: int | None = None
    session_type: str | None = None
    block_types: list[str] | None = None
    parent_chat_id: str | None = None
    request_type: str | None = None
    extra: dict[str, object] = field(default_factory=dict)
