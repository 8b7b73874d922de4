"""The engine's knobs and its policy-ownership mode (:class:`EngineParams`, :class:`DaemonMode`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from aicache.datacache.budget import DEFAULT_FREE_SPACE_RATIO
from aicache.datacache.mapped import DEFAULT_MMAP_BYTES
from aicache.datacache.store import DEFAULT_CACHE_MODE
from aicache.errors import BadInput
from aicache.units import DEFAULT_BLOCK_SIZE as DEFAULT_BLOCK_SIZE  # re-exported: the engine's API

#: what a remote request without ``request_timeout_s`` is assumed to take at most, for the
#: bound on waiting for another reader's fetch (:meth:`EngineParams.flight_wait_bound`)
UNTIMED_REQUEST_S = 30.0


@dataclass(slots=True)
class EngineParams:
    """Knobs of the engine (policy knobs live in the system)."""

    block_size: int = DEFAULT_BLOCK_SIZE
    max_prefetch: int = 8
    max_prefetch_bytes: int = 256 * 1024 * 1024
    retries: int = 3
    backoff_s: float = 0.05
    request_timeout_s: float | None = None
    metadata_ttl_s: float = 60.0
    seed: int = 0
    #: when hits re-check the block checksum: "full" (every read), "stat" (once per
    #: content version of the block file), "none" — see :mod:`aicache.datacache.store`
    verify: str = "stat"
    #: bytes of verified block files kept memory-mapped for faster hits (0: off) — see
    #: :mod:`aicache.datacache.mapped`
    mmap_bytes: int = DEFAULT_MMAP_BYTES
    #: mode of the cache's files (directories get ``x`` where it has ``r``): owner-only by
    #: default; e.g. 0o640 for a cache shared with a group — see :mod:`aicache.datacache.store`
    cache_mode: int = DEFAULT_CACHE_MODE
    #: list the whole dataset root once (``find``) on first access, so block ids follow
    #: the sorted path order across folders; off (the default), each folder is listed
    #: (not recursively) on the first read in it, and ids follow the order folders are met:
    #: a mount of a bucket's root listed the whole bucket before its first byte
    list_root: bool = False
    #: longest wait for one answer of the policy daemon (``daemon=True``); past it the
    #: process decides locally and reconnects later — see :mod:`aicache.datacache.daemon`
    daemon_timeout_s: float = 1.0
    #: how often this engine's counters are written under the cache dir (and at close) for
    #: ``aicache cache stats``; 0: only at close — see :mod:`aicache.datacache.counters`
    stats_interval_s: float = 1.0
    #: share of the cache's disk kept free: a larger budget is capped at open, with a
    #: warning — see :mod:`aicache.datacache.budget`
    free_space_ratio: float = DEFAULT_FREE_SPACE_RATIO
    #: deterministic mode (replays, tests; one reading thread): a read fetches and stores
    #: the prefetches it asked for before it returns, in the order the system named them,
    #: after its own block — with an injected clock the engine then makes exactly the
    #: simulator's decisions (``tests/datacache/engine/test_engine_vs_sim.py``)
    sync_prefetch: bool = False
    #: store fetched blocks on a writer thread after the reader has its bytes (see
    #: :mod:`aicache.datacache.engine.core`); off in ``sync_prefetch`` mode and under the
    #: policy daemon (``daemon=True``)
    write_behind: bool = True
    #: bytes of fetched blocks that may wait for the writer; past it readers store their
    #: own blocks (back-pressure instead of unbounded memory)
    max_write_behind_bytes: int = 256 * 1024 * 1024
    #: longest wait of a reader on another reader's fetch of the same block; None: derived
    #: from ``request_timeout_s``, ``retries`` and ``backoff_s`` (:meth:`flight_wait_bound`)
    flight_wait_s: float | None = None
    #: bytes of a *page*, the granule of sparse reads (a divisor of ``block_size``; 0:
    #: whole blocks only) — see :mod:`aicache.datacache.engine.sparse`
    page_size: int = 16 * 1024
    #: a reader whose earlier reads form a contiguous run this long gets whole blocks (and
    #: the policy's readahead); a shorter or jumping one gets the pages it reads
    sparse_run: int = 1024 * 1024
    #: the client of S3 block reads: "auto" (obstore where it can take the target's settings
    #: over exactly and is installed, else s3fs), "s3fs" (the target's own) or "obstore" (a
    #: Rust client outside the interpreter; metadata stays on s3fs) — see
    #: :mod:`aicache.datacache.native_s3`
    s3_client: str = "auto"

    def flight_wait_bound(self) -> float:
        """How long a reader waits on a fetch in flight before fetching itself: twice what
        the fetch may take by the retry rules (every attempt timing out, every backoff
        slept); without a request timeout each attempt is taken as
        :data:`UNTIMED_REQUEST_S`."""
        if self.flight_wait_s is not None:
            return self.flight_wait_s
        per = self.request_timeout_s or UNTIMED_REQUEST_S
        backoff = sum(self.backoff_s * float(2 ** a) for a in range(self.retries))
        return 2.0 * ((self.retries + 1) * per + backoff)


class DaemonMode(Enum):
    """Who owns the policy of an engine."""

    #: this process (one reader, or readers that need not share decisions)
    LOCAL = "local"
    #: the cache directory's policy daemon, started if missing
    SHARED = "auto"
    #: the cache directory's policy daemon, which must be running
    CONNECT = "connect"

    @classmethod
    def of(cls, value: DaemonMode | bool | str) -> DaemonMode:
        """The mode a user's ``daemon=`` value names (a bool or a string from a URL or
        a config: ``True``/``"auto"``/``"true"``, ``False``/``"false"``, ``"connect"``)."""
        if isinstance(value, DaemonMode):
            return value
        if isinstance(value, bool):
            return cls.SHARED if value else cls.LOCAL
        v = str(value).strip().lower()
        if v in ("auto", "true", "1", "yes", "shared"):
            return cls.SHARED
        if v in ("", "false", "0", "no", "local"):
            return cls.LOCAL
        if v == "connect":
            return cls.CONNECT
        raise BadInput(f"daemon={value!r} is not a daemon mode; give true, false or connect")


def default_cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "aicache")
