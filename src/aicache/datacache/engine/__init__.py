"""The data cache's engine: block-cached reads of a remote filesystem, a composition root
over parts that own their state (each built with its collaborators, testable alone):

* :mod:`.core` — :class:`CacheEngine`, the read path applying the SystemDriver's answers
  (demand reads, admission and victims applied to the store, write-behind, metrics,
  lifecycle), wiring the parts below;
* :mod:`.remote` — :class:`~.remote.RemoteClient`: every request to the target (retries,
  timeouts, version-pinned ranges);
* :mod:`.meta` — :class:`~.meta.MetadataCache`: file size/version for reads and the
  target's ``info``/``ls``/``find`` for every front end (fsspec, FUSE);
* :mod:`.blockmap` — :class:`~.blockmap.BlockLayout`: stable block ids per file and the
  unit a file is reported under;
* :mod:`.fetch` — :class:`~.fetch.Flights`: single-flight fetches and the prefetch pool;
* :mod:`.sparse` — :class:`~.sparse.PageReader`: sparse reads by page;
* :mod:`.reader` — :class:`~.reader.BlockReader`: what the front ends read through (is a
  block local, its bytes);
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
