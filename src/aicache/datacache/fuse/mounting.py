"""``mount()``: a read-only FUSE view of ``target:root`` through a cache engine, on the
driver chosen for the libfuse in use."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.fuse import highlevel, lowlevel_abi
from aicache.datacache.fuse.binding import fuse_available, splice_supported
from aicache.datacache.fuse.kernel import splice_request_bytes
from aicache.datacache.fuse.lowlevel import DEFAULT_TIMEOUT_S, LowLevelSession
from aicache.datacache.fuse.ops import CacheFuse
from aicache.datacache.shared import SharedTierSpec

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec
    from aicache.policies.system import DataCacheSystem

log = logging.getLogger("aicache.fuse")

#: the FUSE drivers :func:`mount` offers (``auto``: low-level where supported)
FUSE_APIS = ("auto", "lowlevel", "highlevel")


def mount(target: Any, root: str, mountpoint: str, *, cache_dir: str, cache_size: int,
          policy: str | DataCacheSystem = "chiron", advisor: AdvisorSpec | None = None,
          params: EngineParams | None = None,
          foreground: bool = True, metrics_port: int | None = None,
          record: Callable[[float, str, int, int], None] | None = None,
          kernel_cache: bool = False, readahead_kb: int | None = None,
          direct_io: bool = False, fuse_api: str = "auto", allow_other: bool = False,
          uid: int | None = None, gid: int | None = None,
          shared: SharedTierSpec | None = None) -> None:
    """Mount ``target:root`` read-only at ``mountpoint``; returns after unmount (SIGINT/
    SIGTERM/SIGHUP or ``fusermount3 -u``; the low-level driver's own handlers wake its
    loop, see :meth:`.lowlevel.LowLevelSession._stop_on_signals`).

    The mount is one process by construction, so it is the single owner of the policy
    state for its cache directory: DataLoader workers reading through the mount are seen
    as one access stream.

    ``kernel_cache``: let the kernel keep file pages across opens. Re-reads then run at
    page-cache speed, but they no longer reach the engine, so the policy does not see
    them (and ``record`` does not trace them). Only with the low-level driver, which
    gives each version of a file its own inode (so pages of two versions never share
    one); the high-level one names inodes by path and refuses it.

    ``direct_io``: every open bypasses the kernel's page cache — a read goes to the daemon
    as requests whose replies the kernel copies straight into the reader's buffer, one copy
    instead of two (the page cache's); but ``mmap`` of a file fails (ENODEV) and small
    reads get no kernel readahead (each is a request). A reader that opens with
    ``O_DIRECT`` gets this path without the option.

    ``readahead_kb``: the kernel readahead window to set after mounting (None: the block
    size, up to 16 MiB; 0: leave the kernel's default). It bounds the size of the read
    requests the kernel sends (see :mod:`.kernel`).

    ``uid``/``gid``: the owner of every file and directory in the mount (default: the
    mounting user, as Mountpoint's ``--uid``/``--gid``); modes stay 0444/0555, so other
    users can read only with ``allow_other``.

    ``shared``: the shared tier under the local cache (:mod:`aicache.datacache.shared`).

    ``fuse_api``: ``lowlevel`` (:mod:`.lowlevel`: one thread answers local requests
    inline, workers the rest), ``highlevel`` (:mod:`.highlevel`: libfuse's path API and
    thread pool), or ``auto`` (low-level where supported: libfuse 3 before 3.17)."""
    why = fuse_available()
    if why:
        raise OSError(errno.ENODEV, why)
    if fuse_api not in FUSE_APIS:
        raise ValueError(f"fuse_api {fuse_api!r}: give one of {', '.join(FUSE_APIS)}")
    if kernel_cache and direct_io:
        raise ValueError("kernel_cache and direct_io exclude each other")
    supported = lowlevel_abi.supported()
    lowlevel = fuse_api == "lowlevel" or (fuse_api == "auto" and supported)
    if lowlevel and not supported:
        raise OSError(errno.ENOTSUP, "the low-level FUSE driver needs libfuse 3 before 3.17; "
                                     "use fuse_api='highlevel'")
    if kernel_cache and not lowlevel:
        raise ValueError("kernel_cache needs the low-level driver (an inode per version)")
    servers: list[Any] = []

    def factory() -> CacheEngine:
        return CacheEngine(target, cache_dir, cache_size, policy=policy, advisor=advisor,
                           params=params, record=record, root=root, shared=shared)

    def on_init(engine: CacheEngine) -> None:
        if metrics_port is not None:
            servers.append(engine.metrics.serve(metrics_port))

    p = params if params is not None else EngineParams()
    if readahead_kb is None:
        readahead_kb = min(16384, max(128, p.block_size // 1024))
    splice_bytes = splice_request_bytes() if splice_supported() else 0
    # the kernel's attribute/entry caches must not outlive the metadata TTL
    kernel_ttl = min(DEFAULT_TIMEOUT_S, p.metadata_ttl_s)
    ops = CacheFuse(factory, root, on_init=on_init, mountpoint=os.path.realpath(mountpoint),
                    readahead_kb=readahead_kb, splice_bytes=splice_bytes, uid=uid, gid=gid,
                    kernel_cache=kernel_cache, direct_io=direct_io)
    if ops.splice_bytes:
        log.info("replies spliced from block files; read requests up to %d KiB",
                 ops.splice_bytes // 1024)
    else:
        log.info("replies copied (splicing needs libfuse 3 before 3.17 and a pipe of "
                 "%d KiB or more)", 32 * os.sysconf("SC_PAGE_SIZE") // 1024)
    try:
        if lowlevel:
            LowLevelSession(ops, mountpoint, foreground=foreground, kernel_cache=kernel_cache,
                            direct_io=direct_io, max_read=ops.splice_bytes,
                            timeout_s=kernel_ttl, allow_other=allow_other).run()
        else:
            highlevel.serve(ops, mountpoint, foreground=foreground, kernel_cache=kernel_cache,
                            direct_io=direct_io, max_read=ops.splice_bytes,
                            timeout_s=kernel_ttl, allow_other=allow_other)
    finally:
        for s in servers:
            s.shutdown()
        if ops.engine is not None and not ops.engine._closed:
            ops.engine.close()
