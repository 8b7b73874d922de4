"""A read-only FUSE view of a remote fsspec store, read through the cache engine.

Modules, each importing only those listed before it (no cycles):

* :mod:`.binding` — which libfuse is loaded (mfusepy on libfuse 3, else 2), libc, the
  ``fuse_buf``/``fuse_bufvec`` structures of spliced replies;
* :mod:`.kernel` — kernel tuning: the mount's readahead window, the splice request size;
* :mod:`.fdledger` — block-file descriptors handed to libfuse, closed once sent;
* :mod:`.handle` — an open file and the pieces of its last two blocks;
* :mod:`.ops` — the file system operations (:class:`CacheFuse`), shared by both drivers;
* :mod:`.highlevel` — the driver on libfuse's path API and thread pool;
* :mod:`.lowlevel_abi`, :mod:`.lowlevel` — the driver on libfuse 3's low-level API (the
  default where it runs: 3.x before 3.17);
* :mod:`.mounting` — :func:`mount`, which picks the driver.
"""

from aicache.datacache.fuse.binding import FuseOSError, fuse_available
from aicache.datacache.fuse.mounting import FUSE_APIS, mount
from aicache.datacache.fuse.ops import CacheFuse

__all__ = ["FUSE_APIS", "CacheFuse", "FuseOSError", "fuse_available", "mount"]
