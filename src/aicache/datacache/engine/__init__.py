"""The data cache's engine: block-cached reads of a remote filesystem, one job per module.

* :mod:`.core` — :class:`CacheEngine`, the read path applying the SystemDriver's answers
  (demand reads, admission and victims applied to the store, metrics, lifecycle);
* :mod:`.meta` — the metadata cache (file size/version for reads, ``info``/``ls`` for FUSE);
* :mod:`.blockmap` — stable block ids per file and the unit a file is reported under;
* :mod:`.fetch` — single-flight fetches and the bounded prefetch pool;
* :mod:`.remote` — the remote client: retries, timeouts, version-pinned fetches;
* :mod:`.params` — :class:`EngineParams` and :class:`DaemonMode`.
"""

from aicache.datacache.engine.core import CacheEngine
from aicache.datacache.engine.meta import file_meta
from aicache.datacache.engine.params import (
    DEFAULT_BLOCK_SIZE,
    DaemonMode,
    EngineParams,
    default_cache_dir,
)
from aicache.datacache.engine.remote import RemoteReadError
from aicache.datacache.policy.driver import make_engine_system

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "CacheEngine",
    "DaemonMode",
    "EngineParams",
    "RemoteReadError",
    "default_cache_dir",
    "file_meta",
    "make_engine_system",
]
