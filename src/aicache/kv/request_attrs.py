"""What a request says about the blocks it stores, below both the index and its admission.

:class:`~aicache.kv.saria.KVIndex` copies these onto new nodes and hands them to the SSD
admission policies (:mod:`aicache.kv.admission` and its siblings); living here, neither of
the two needs to import the other for the type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class RequestAttrs:
    """Per-request metadata copied onto new nodes (what semantic eviction policies read);
    ``output_tokens`` (the tokens the request generated, −1 unknown) is seen by the
    admission policy's ``on_store``."""

    session: str | None = None
    turn: int = -1
    block_types: Sequence[str] | None = None
    output_tokens: int = -1
