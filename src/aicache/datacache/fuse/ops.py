"""The mount's file system operations (:class:`CacheFuse`), served by both drivers.

Read-only: ``getattr``, ``readdir``, ``open``, ``read`` (as bytes, into libfuse's reply
buffer, or as block-file descriptors to splice), ``release``, ``statfs``; anything that
would write is EROFS.

Each open file handle remembers the last two blocks it read (:class:`.handle.Handle`): the
kernel reads a block in several pieces (≤ 1 MiB on libfuse 3, 128 KiB on libfuse 2), and
each block must count as one access and be verified once, not once per piece. On libfuse 3
(before 3.17, whose buffer struct differs) a verified block's piece is not read by Python
at all: ``read_buf`` hands libfuse the block file's descriptor and offset, and libfuse
*splices* the reply from the file into ``/dev/fuse`` (page references through a pipe, as
go-fuse and mergerfs do) — one copy per request less than reading it into the reply
buffer, and no Python-side read.

Metadata (``getattr``/``readdir``) comes from the engine's metadata cache
(:meth:`~aicache.datacache.engine.CacheEngine.info`, :meth:`~aicache.datacache.engine.
CacheEngine.ls`): no answer is older than ``metadata_ttl_s``, and the remote is asked with
the engine's retries and timeout. An open handle reads the version it opened: its range
reads are pinned to that version (:mod:`aicache.datacache.version`), and once the remote
no longer holds it a read fails with ESTALE, never with bytes of another version.

The kernel's page cache is per inode, not per open file, and a file keeps its inode when
its remote object is replaced: pages one open file read would be served to another that
opened another version. So each open is told how to use the page cache
(:class:`PageCacheUse`, the FOPEN_DIRECT_IO / FOPEN_KEEP_CACHE flags of its open reply):
while a handle of another version of the file is open, a new open bypasses the page
cache (direct I/O), so its version's pages never land where the older handle reads; else
it uses the page cache, keeping the pages already there (``kernel_cache``) only if they
are of its own version. Every handle therefore reads one version: its own (or ESTALE).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aicache.datacache.engine import CacheEngine, RemoteReadError
from aicache.datacache.engine.reader import BlockReader
from aicache.datacache.fuse.binding import (FUSE_CAP_SPLICE_WRITE, FuseOSError, Operations,
                                            build_bufvec, splice_supported)
from aicache.datacache.fuse.fdledger import FdLedger
from aicache.datacache.fuse.handle import (AsBytes, AsDescriptor, Handle, IntoBuffer, Piece,
                                           Segment)
from aicache.datacache.fuse.kernel import raise_readahead
from aicache.datacache.version import VersionGone

log = logging.getLogger("aicache.fuse")
#: the kernel's readahead window when the mount sets none (its default, in KiB)
KERNEL_DEFAULT_READAHEAD_KB = 128


@dataclass(frozen=True, slots=True)
class PageCacheUse:
    """How one open file uses its inode's page cache (see the module docstring)."""

    #: bypass the page cache: reads go to this handle, replies straight to the reader
    direct_io: bool
    #: keep the pages already cached for the inode (else the open drops them)
    keep_cache: bool


class CacheFuse(Operations):  # type: ignore[misc]  # the binding's Operations is Any
    """mfusepy operations: getattr, readdir, open, read, release, statfs (read-only)."""

    use_ns = True  # nanosecond times (and no deprecation warning)

    def __init__(self, engine_factory: Callable[[], CacheEngine], root: str, *,
                 on_init: Callable[[CacheEngine], None] | None = None,
                 mountpoint: str | None = None, readahead_kb: int = 0,
                 splice_bytes: int = 0, uid: int | None = None, gid: int | None = None,
                 kernel_cache: bool = False, direct_io: bool = False) -> None:
        self._factory = engine_factory
        #: the mount's page-cache options: keep pages across opens / never use them
        self.kernel_cache = kernel_cache
        self.direct_io = direct_io
        #: remote path -> version -> open handles of it
        self._open_versions: dict[str, dict[str, int]] = {}
        #: remote path -> the version whose pages the kernel may hold for its inode
        self._page_version: dict[str, str] = {}
        #: open handle -> how it uses the page cache (read by the drivers' open replies)
        self._use: dict[int, PageCacheUse] = {}
        #: the owner of every file and directory in the mount (default: the mounting user)
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        #: the read request cap when replies are spliced (``read_buf``); 0: no splicing
        self.splice_bytes = splice_bytes if splice_supported() else 0
        self._fds = FdLedger()
        if not self.splice_bytes:
            # the binding registers only the callbacks that exist
            self.read_buf = None  # type: ignore[method-assign, assignment]  # see above
        self._mountpoint = mountpoint
        self._readahead_kb = readahead_kb
        #: the kernel readahead window set after mounting (None: not set / not possible)
        self.readahead_kb: int | None = None
        self._ra_tried = False  # an open tried to set it (once: a failure is not retried)
        self._on_init = on_init
        self.engine: CacheEngine | None = None
        self.root = root.rstrip("/")
        self._handles: dict[int, Handle] = {}
        self._next_fh = 1
        self._lock = threading.Lock()
        self._t0 = time.time()

    def init_with_config(self, conn: Any, config: Any) -> None:
        """libfuse 3's init: ask for spliced replies (when the kernel offers them) with
        requests capped at :attr:`splice_bytes`, then :meth:`init`."""
        if conn is not None and self.splice_bytes:
            conn.want |= conn.capable & FUSE_CAP_SPLICE_WRITE
            conn.max_read = self.splice_bytes  # must equal the max_read mount option
        self.init("/")

    def _reorder_window(self) -> int:
        """How far out of order a handle's reads may arrive: the kernel's readahead window
        (the one set on the mount, else the kernel's default of 128 KiB), whose requests
        the kernel sends together and the driver's threads serve in any order."""
        kb = self.readahead_kb or self._readahead_kb or 0
        return max(kb, KERNEL_DEFAULT_READAHEAD_KB) * 1024

    # the engine is built in init(), i.e. after libfuse has daemonized (threads don't fork)
    def init(self, path: str) -> None:
        self.engine = self._factory()
        if self._on_init is not None:
            self._on_init(self.engine)
        # before the INIT reply: the kernel holds the job's first lookup until it is sent
        self.engine.prepare_root()
        if self._mountpoint and self._readahead_kb > 0:
            threading.Thread(target=self._set_readahead, name="aicache-readahead", daemon=True).start()

    def _set_readahead(self) -> None:
        """After the INIT reply (the kernel sets the window from it, overwriting anything
        set earlier): set it, and check once more that it stuck."""
        for _ in range(20):
            time.sleep(0.25)
            if self.readahead_kb is not None:  # an open set it first
                return
            # started by init() only when there is a mountpoint
            got = raise_readahead(self._mountpoint, self._readahead_kb)  # type: ignore[arg-type]  # see above
            if got is None:
                return
            time.sleep(0.25)
            again = raise_readahead(self._mountpoint, self._readahead_kb)  # type: ignore[arg-type]  # as above
            if again is not None and again >= self._readahead_kb:
                self.readahead_kb = again
                log.info("kernel readahead of %s: %d KiB", self._mountpoint, again)
                return

    def _readahead_before_open(self) -> None:
        """Set the mount's readahead window now if it is not yet. The kernel copies the
        mount's window into a file when its open returns, so files opened before
        :meth:`_set_readahead` ran would read with the kernel's default (128 KiB requests,
        8x the requests per block) for as long as they stay open. By the first open the
        INIT reply has been applied (the kernel holds every request until it is), so a
        window set now sticks."""
        if self.readahead_kb is not None or self._ra_tried or not self._mountpoint:
            return
        if self._readahead_kb <= 0:
            return
        with self._lock:
            if self._ra_tried:
                return
            self._ra_tried = True
        got = raise_readahead(self._mountpoint, self._readahead_kb)
        if got is not None and got >= self._readahead_kb:
            self.readahead_kb = got
            log.info("kernel readahead of %s: %d KiB", self._mountpoint, got)

    def destroy(self, path: str) -> None:
        self._fds.close_all()
        if self.engine is not None:
            self.engine.close()

    def _remote_path(self, path: str) -> str:
        return self.root + path if path != "/" else self.root

    def _attr(self, path: str) -> dict[str, Any] | None:
        """``path``'s attributes (None: no such path), from the engine's metadata cache."""
        engine = self.engine
        assert engine is not None
        try:
            info = engine.info(self._remote_path(path))
        except Exception as exc:  # noqa: BLE001 - a failed remote (retried) reads as EIO
            log.warning("getattr %s: %s", path, exc)
            raise FuseOSError(errno.EIO) from exc
        return self._stat(info) if info is not None else None

    def attr_fresh(self, path: str) -> bool:
        """Whether :meth:`getattr` of ``path`` answers from the metadata cache (no remote)."""
        return self.engine is not None and self.engine.info_is_cached(self._remote_path(path))

    def cached_attr(self, path: str) -> dict[str, Any] | None:
        """``path``'s cached attributes, fresh or not (a listing's entry types)."""
        info = self.engine.cached_info(self._remote_path(path)) if self.engine is not None else None
        return self._stat(info) if info is not None else None

    def meta_fresh(self, path: str) -> bool:
        """Whether :meth:`open` of ``path`` needs nothing from the remote."""
        return self.engine is not None and self.engine.stat_is_cached(self._remote_path(path))

    def read_is_local(self, fh: int, offset: int, size: int) -> bool:
        """Whether a read of ``[offset, offset + size)`` through handle ``fh`` is served
        from local block files without waiting (each block already held by the handle, or
        verified in this process); False when some block may need a fetch or a whole-block
        verification. The handle keeps what it found for the read that follows, which then
        asks the store nothing more (:meth:`Handle.is_local`)."""
        h = self._handles.get(fh)
        engine = self.engine
        if h is None or engine is None:
            return True  # answered at once (EBADF)
        reader = engine.reader
        B = reader.block_size
        end = min(offset + size, h.meta.size)
        for idx in range(offset // B, (end - 1) // B + 1 if end > offset else offset // B):
            if not h.is_local(reader, idx):
                return False
        return True

    def _stat(self, info: dict[str, Any]) -> dict[str, Any]:
        is_dir = info.get("type") == "directory"
        mtime = info.get("mtime", info.get("LastModified", self._t0))
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        try:
            mtime = float(mtime)
        except (TypeError, ValueError):
            mtime = self._t0
        size = 0 if is_dir else int(info.get("size") or 0)
        ns = int(mtime * 1e9)  # use_ns: times in nanoseconds
        return {"st_mode": (stat.S_IFDIR | 0o555) if is_dir else (stat.S_IFREG | 0o444),
                "st_nlink": 2 if is_dir else 1, "st_size": size, "st_mtime": ns,
                "st_ctime": ns, "st_atime": ns, "st_uid": self.uid, "st_gid": self.gid,
                "st_blocks": (size + 511) // 512}

    # -- operations -------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if path == "/":
            return self._stat({"type": "directory"})
        st = self._attr(path)
        if st is None:
            raise FuseOSError(errno.ENOENT)
        return st

    def readdir(self, path: str, fh: int) -> list[str]:
        engine = self.engine
        assert engine is not None
        try:
            entries = engine.ls(self._remote_path(path))
        except FileNotFoundError as exc:
            raise FuseOSError(errno.ENOENT) from exc
        except Exception as exc:  # noqa: BLE001 - a failed remote (retried) reads as EIO
            log.warning("readdir %s: %s", path, exc)
            raise FuseOSError(errno.EIO) from exc
        names = [".", ".."]
        for e in entries:
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if name:
                names.append(name)
        return names

    def open(self, path: str, flags: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC):
            raise FuseOSError(errno.EROFS)
        assert self.engine is not None
        try:
            meta = self.engine.stat(self._remote_path(path))
        except (FileNotFoundError, IsADirectoryError) as exc:
            raise FuseOSError(errno.ENOENT if isinstance(exc, FileNotFoundError) else errno.EISDIR) from exc
        except OSError as exc:
            raise FuseOSError(errno.EIO) from exc
        self.engine.opened(meta)  # re-reads the kernel serves reach the policy as opens
        info = self.engine.cached_info(self._remote_path(path))
        if info is not None and int(info.get("size") or 0) != meta.size:
            self.engine.forget_info(self._remote_path(path))  # they predate this version
        rp, v = meta.path, meta.version
        self._readahead_before_open()
        with self._lock:
            fh = self._next_fh
            self._next_fh += 1
            self._handles[fh] = Handle(meta, self._reorder_window())
            versions = self._open_versions.setdefault(rp, {})
            others = any(n for ver, n in versions.items() if ver != v)
            versions[v] = versions.get(v, 0) + 1
            if others:  # another version is open: stay out of the pages it reads
                use = PageCacheUse(direct_io=True, keep_cache=True)
            elif self.direct_io:
                use = PageCacheUse(direct_io=True, keep_cache=False)
            else:
                use = PageCacheUse(direct_io=False, keep_cache=self.kernel_cache
                                   and self._page_version.get(rp) == v)
                self._page_version[rp] = v
            self._use[fh] = use
        return fh

    def version_of(self, path: str) -> tuple[str, int]:
        """The version and size an :meth:`open` of file ``path`` would read now (the
        engine's ``stat``, as :meth:`open` asks it; within the metadata TTL no remote call):
        the low-level driver gives every version its own inode (:mod:`.lowlevel`)."""
        assert self.engine is not None
        try:
            meta = self.engine.stat(self._remote_path(path))
        except FileNotFoundError as exc:
            raise FuseOSError(errno.ENOENT) from exc
        except IsADirectoryError as exc:
            raise FuseOSError(errno.EISDIR) from exc
        except OSError as exc:
            raise FuseOSError(errno.EIO) from exc
        return meta.version, meta.size

    def handle_version(self, fh: int) -> str | None:
        """The version open handle ``fh`` reads (None: no such handle)."""
        h = self._handles.get(fh)
        return h.meta.version if h is not None else None

    def cache_use(self, fh: int) -> PageCacheUse:
        """How the open file ``fh`` (just opened) uses the page cache: the flags of its
        open reply."""
        use = self._use.get(fh)
        return use if use is not None else PageCacheUse(self.direct_io, False)

    def _piece(self, fh: int, offset: int, size: int) -> tuple[Handle, BlockReader, int, int]:
        """The handle of ``fh``, the engine's reader and the clipped request ``[offset, end)``."""
        h = self._handles.get(fh)
        if h is None:
            raise FuseOSError(errno.EBADF)
        engine = self.engine
        assert engine is not None
        return h, engine.reader, offset, min(offset + size, h.meta.size)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        h, reader, offset, end = self._piece(fh, offset, size)
        if end <= offset:
            return b""
        B = reader.block_size
        try:
            idx = offset // B
            if (end - 1) // B != idx:
                h.stream.note(offset, end, reader.page_size, h.meta.size)
                return reader.read_range(h.meta, offset, end - offset, h.stream)
            return h.serve(reader, idx, offset - idx * B, AsBytes(end - offset))
        except RemoteReadError as exc:
            log.error("read %s: %s", path, exc)
            raise FuseOSError(errno.EIO) from exc
        except VersionGone as exc:
            log.warning("read %s: %s", path, exc)
            raise FuseOSError(errno.ESTALE) from exc

    def read_into(self, path: str | None, buf: memoryview, offset: int, fh: int) -> int:
        """:meth:`read` into the kernel reply buffer ``buf`` (the high-level driver, :mod:`.highlevel`):
        a piece of one block goes straight from the block file into ``buf``."""
        h, reader, offset, end = self._piece(fh, offset, len(buf))
        B = reader.block_size
        if end <= offset or (end - 1) // B == offset // B:
            try:
                if end <= offset:
                    return 0
                idx = offset // B
                return h.serve(reader, idx, offset - idx * B, IntoBuffer(buf[:end - offset]))
            except RemoteReadError as exc:
                log.error("read %s: %s", path, exc)
                raise FuseOSError(errno.EIO) from exc
            except VersionGone as exc:
                log.warning("read %s: %s", path, exc)
                raise FuseOSError(errno.ESTALE) from exc
        data = self.read(path, end - offset, offset, fh)  # spans blocks: assembled by the engine
        buf[:len(data)] = data
        return len(data)

    def read_segments(self, path: str | None, size: int, offset: int, fh: int
                      ) -> list[tuple[int, int, int] | bytes]:
        """The reply to a read of ``size`` bytes at ``offset``, block by block: a verified
        block's range as an open ``(fd, offset, length)`` of its file (the caller closes
        each fd), anything else as bytes. Each block counts as one access per handle, as
        with :meth:`read_into`."""
        h, reader, offset, end = self._piece(fh, offset, size)
        B = reader.block_size
        out: list[tuple[int, int, int] | bytes] = []
        try:
            pos = offset
            while pos < end:
                idx = pos // B
                stop = min(end, (idx + 1) * B)
                s = pos - idx * B
                piece: Piece[Segment] = AsDescriptor(stop - pos)
                out.append(h.serve(reader, idx, s, piece))
                pos = stop
        except BaseException as exc:
            for seg in out:
                if isinstance(seg, tuple):
                    os.close(seg[0])
            if isinstance(exc, RemoteReadError):
                log.error("read %s: %s", path, exc)
                raise FuseOSError(errno.EIO) from exc
            if isinstance(exc, VersionGone):
                log.warning("read %s: %s", path, exc)
                raise FuseOSError(errno.ESTALE) from exc
            raise
        return out

    def read_buf(self, path: str | None, bufpp: Any, size: int, offset: int, fh: int) -> int:
        """libfuse's ``read_buf``: the reply as a ``fuse_bufvec`` of :meth:`read_segments`,
        which libfuse splices from the block files into ``/dev/fuse`` (see the module
        docstring); the descriptors are closed when this thread calls in next."""
        tid = self._fds.settle()
        segs = self.read_segments(path, size, offset, fh)
        fds = [seg[0] for seg in segs if isinstance(seg, tuple)]
        try:
            p = build_bufvec(segs)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self._fds.hold(tid, fds)
        ctypes.cast(bufpp, ctypes.POINTER(ctypes.c_void_p))[0] = p
        return 0

    def release(self, path: str | None, fh: int) -> int:
        with self._lock:
            h = self._handles.pop(fh, None)
            self._use.pop(fh, None)
            if h is not None:
                versions = self._open_versions.get(h.meta.path, {})
                n = versions.get(h.meta.version, 0) - 1
                if n > 0:
                    versions[h.meta.version] = n
                else:
                    versions.pop(h.meta.version, None)
                    if not versions:
                        self._open_versions.pop(h.meta.path, None)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        B = 4096
        cap = self.engine.reader.capacity if self.engine else 0
        used = self.engine.reader.used if self.engine else 0
        return {"f_bsize": B, "f_frsize": B, "f_blocks": cap // B,
                "f_bfree": max(0, cap - used) // B, "f_bavail": 0, "f_namemax": 255}

    # read-only: everything that would write
    def _rofs(self, *args: Any) -> Any:
        raise FuseOSError(errno.EROFS)

    chmod = chown = create = mkdir = rename = rmdir = symlink = truncate = unlink = write = _rofs
