"""The real tiered KV store: DRAM slot pool + SSD slab files driven by SARIA policies.

``TieredKVStore`` (store.py) drives the same :class:`aicache.kv.saria.KVIndex` the
simulator replays; ``DramPool`` (dram.py) and ``SlabStore`` (ssd.py) hold the bytes.
Names are imported lazily so ``import aicache.kvstore`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DramPool", "LoadResult", "SSDWrite", "SlabStore", "StoreOutcome", "TieredKVStore",
           "TieredKVStoreParams"]

_WHERE = {"DramPool": "dram", "SlabStore": "ssd", "LoadResult": "store", "SSDWrite": "store",
          "StoreOutcome": "store", "TieredKVStore": "store", "TieredKVStoreParams": "store"}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'aicache.kvstore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"aicache.kvstore.{mod}"), name)
