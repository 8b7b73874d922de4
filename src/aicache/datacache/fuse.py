"""A read-only FUSE view of a remote fsspec store, read through the cache engine.

Binding: mfusepy (the maintained fork of fusepy: the same pure-Python ctypes API, no
compiler, no headers) on **libfuse 3** when it is installed, else on libfuse 2. Why
libfuse 3: it negotiates ``max_pages`` with the kernel, so a read of a large file reaches
us as 1 MiB requests instead of libfuse 2's fixed 128 KiB — 8x fewer Python callbacks per
4 MiB block, which is where a Python FUSE server spends its time. The kernel only sends
requests as large as its readahead window, so after mounting we raise the mount's
``read_ahead_kb`` (``/sys/class/bdi/MAJ:MIN``, root only, best effort) to the block size
(``readahead_kb``), as gcsfuse and s3fs users are told to do by hand. pyfuse3 would be
faster per call still, but needs trio, a C build and libfuse3 headers.

Two drivers serve the same operations (:class:`CacheFuse`). On libfuse 3 before 3.17 the
mount runs on libfuse's *low-level* API (:mod:`aicache.datacache.fuse_ll`, the default):
one session thread answers every request whose answer is local — cached attributes,
verified blocks spliced from their files — inline, and hands requests that wait on the
remote to worker threads, which reply when the bytes arrive; ~1.2–1.3x the large-read
throughput of the high-level driver on a warm cache, and a miss never holds up other
readers' hits. Elsewhere (libfuse 2, ≥ 3.17) — or with ``fuse_api="highlevel"`` — the
high-level path API runs with libfuse's own pool of worker threads, so concurrent readers
(DataLoader workers) are served in parallel by the engine's thread-safe read path.

The mount is one process by construction, so it is the single owner of the policy state
for its cache directory (ARCHITECTURE.md, "One controller per cache unit"): DataLoader
workers reading through the mount are seen as one access stream.

Each open file handle remembers the last two blocks it read: the kernel reads a block in
several pieces (≤ 1 MiB on libfuse 3, 128 KiB on libfuse 2), and each block must count as
one access and be verified once, not once per piece. Pieces of a block whose file was
verified in this process are read as ranges straight from the block file (no 4 MiB load
in the request's path); otherwise the handle keeps the whole verified block and slices it
(see :class:`_Handle`).
On libfuse 3 (before 3.17, whose buffer struct differs) a verified block's piece is not
read by Python at all: ``read_buf`` hands libfuse the block file's descriptor and offset,
and libfuse *splices* the reply from the file into ``/dev/fuse`` (page references through a
pipe, as go-fuse and mergerfs do) — one copy per request less than reading it into the
reply buffer, and no Python-side read. libfuse splices only replies that fit one pipe,
which cannot grow beyond ``fs.pipe-max-size`` (1 MiB by default) without privileges a
container's root often lacks, so requests are capped a few pages below it
(:func:`splice_request_bytes`); a reply that does not fit is copied, still correct.

Metadata (``ls``/``info``) is cached for ``metadata_ttl`` seconds, and no answer is older
than that (the target's own listing cache is bypassed past it; the kernel's attribute and
entry caches time out within it). An open handle reads the version it opened: its range
reads are pinned to that version (:mod:`aicache.datacache.version`), and once the remote no
longer holds it a read fails with ESTALE, never with bytes of another version.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

from aicache.datacache.engine import CacheEngine, EngineParams, FileMeta, RemoteReadError
from aicache.datacache.store import BlockKey, BlockStore
from aicache.datacache.version import VersionGone

log = logging.getLogger("aicache.fuse")


def _import_binding() -> Any:
    """mfusepy on libfuse 3 when both are here (unless ``FUSE_LIBRARY_PATH``/``_NAME`` pick
    a library), else mfusepy or fusepy on whatever libfuse they find."""
    from ctypes.util import find_library

    pick = ("FUSE_LIBRARY_PATH" not in os.environ and "FUSE_LIBRARY_NAME" not in os.environ
            and find_library("fuse3") is not None)
    if pick:
        os.environ["FUSE_LIBRARY_NAME"] = "fuse3"  # read once, at mfusepy's import
    try:
        import mfusepy as binding
    except ImportError:
        import fuse as binding  # fusepy: libfuse 2 only
    finally:
        if pick:
            os.environ.pop("FUSE_LIBRARY_NAME", None)
    return binding


try:
    _binding = _import_binding()
    FUSE, FuseOSError, Operations = _binding.FUSE, _binding.FuseOSError, _binding.Operations
    #: libfuse major version in use (3: 1 MiB requests; 2: 128 KiB)
    LIBFUSE_MAJOR = int(getattr(_binding, "fuse_version_major", 2))
    LIBFUSE_MINOR = int(getattr(_binding, "fuse_version_minor", 0))
except (ImportError, OSError, AttributeError) as _exc:  # binding missing, or no libfuse
    FUSE = None
    _binding = None
    _FUSE_ERROR: Exception | None = _exc

    class Operations:  # type: ignore[no-redef]
        pass

    class FuseOSError(OSError):  # type: ignore[no-redef]
        def __init__(self, code: int) -> None:
            super().__init__(code, os.strerror(code))
    LIBFUSE_MAJOR = LIBFUSE_MINOR = 0
else:
    _FUSE_ERROR = None


def fuse_available() -> str | None:
    """None when FUSE mounts can work here, else why not (one line, with the fix)."""
    if FUSE is None:
        return (f"FUSE is unavailable ({_FUSE_ERROR}); install it: pip install mfusepy and "
                "apt-get install fuse3")
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing; load the fuse module or run with --device /dev/fuse"
    return None


_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


def mount_device(mountpoint: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """``MAJ:MIN`` of the filesystem mounted at ``mountpoint`` (an absolute path with no
    symlinks; the last, i.e. topmost, mount there), read from ``mountinfo`` — no ``stat``
    of the mount point, which from inside the FUSE server would wait on its own reply."""
    want = mountpoint
    dev = None
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                parts = line.split(" ", 5)
                if len(parts) > 4:
                    path = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), parts[4])
                    if path == want:
                        dev = parts[2]
    except OSError:
        return None
    return dev


def raise_readahead(mountpoint: str, kb: int, sysfs: str = "/sys/class/bdi") -> int | None:
    """Raise the mount's kernel readahead window to at least ``kb`` KiB (never lowers it).

    Returns the window now in force, or None when it cannot be read or set (not root, no
    sysfs, mount not found): then the kernel keeps its default and reads still work."""
    dev = mount_device(mountpoint)
    if dev is None:
        return None
    path = os.path.join(sysfs, dev, "read_ahead_kb")
    try:
        with open(path) as f:
            cur = int(f.read().strip())
        if cur >= kb:
            return cur
        with open(path, "w") as f:
            f.write(str(kb))
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError) as exc:
        log.info("could not raise readahead of %s to %d KiB: %s", mountpoint, kb, exc)
        return None


MiB = 1024 * 1024
#: fuse_common.h's capability bit: reply data may be spliced into /dev/fuse. (Not
#: FUSE_CAP_SPLICE_MOVE: moving would take whole pages out of the block files' page cache,
#: so the next hit on that block would go to disk.)
FUSE_CAP_SPLICE_WRITE = 1 << 7
_FUSE_BUF_IS_FD = 1 << 1
_FUSE_BUF_FD_SEEK = 1 << 2
#: pages a spliced reply needs beyond its data: libfuse sizes the pipe as one page per
#: header iovec and per buffer, plus one, plus the bytes; one more for a block file's data
#: starting mid-page (its 24-byte header), for up to two buffers (a request across a block
#: boundary)
_SPLICE_SLACK_PAGES = 5


def splice_supported() -> bool:
    """Whether replies can be spliced: libfuse 3 with the ``fuse_buf`` layout known here
    (3.17 added a field)."""
    return FUSE is not None and LIBFUSE_MAJOR == 3 and LIBFUSE_MINOR < 17


def splice_request_bytes(want: int = MiB, pipe_max: str = "/proc/sys/fs/pipe-max-size") -> int:
    """The largest read request (whole pages, at most ``want``) whose reply libfuse can
    splice: header, data and slack must fit one pipe, and this process can grow a pipe to
    ``want`` plus slack only with CAP_SYS_RESOURCE or a raised ``fs.pipe-max-size``.
    0 when no useful size fits (then replies are copied)."""
    page = os.sysconf("SC_PAGE_SIZE")
    slack = _SPLICE_SLACK_PAGES * page
    r, w = os.pipe()
    try:
        if fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, want + slack) >= want + slack:
            return want
    except (OSError, OverflowError):
        pass
    finally:
        os.close(r)
        os.close(w)
    try:
        with open(pipe_max) as f:
            cap = int(f.read().strip())
    except (OSError, ValueError):
        return 0
    n = (cap - slack) // page * page
    return min(want, n) if n >= 32 * page else 0


class _FuseBuf(ctypes.Structure):
    """libfuse 3 (< 3.17) ``struct fuse_buf``."""

    _fields_ = [("size", ctypes.c_size_t), ("flags", ctypes.c_int), ("mem", ctypes.c_void_p),
                ("fd", ctypes.c_int), ("pos", ctypes.c_int64)]


@functools.lru_cache(maxsize=8)
def _bufvec_type(n: int) -> type[ctypes.Structure]:
    """``struct fuse_bufvec`` with room for ``n`` buffers (C's trailing ``buf[1]`` array)."""
    return type(f"_FuseBufVec{n}", (ctypes.Structure,), {"_fields_": [
        ("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t),
        ("buf", _FuseBuf * n)]})


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.restype = None
_libc.free.argtypes = [ctypes.c_void_p]


def fill_bufvec(bv: Any, segments: list[tuple[int, int, int] | bytes],
                memory: Callable[[bytes], int]) -> None:
    """Fill ``bv`` (a ``_bufvec_type(n)``, ``n >= len(segments)``) with ``segments`` in
    order: an ``(fd, offset, length)`` piece as a descriptor buffer (libfuse reads or
    splices it at that offset), bytes as a memory buffer at ``memory(segment)``."""
    bv.count, bv.idx, bv.off = max(1, len(segments)), 0, 0
    bv.buf[0].size, bv.buf[0].flags, bv.buf[0].mem = 0, 0, None
    for b, seg in zip(bv.buf, segments):
        if isinstance(seg, tuple):
            b.fd, b.pos, b.size = seg
            b.flags, b.mem = _FUSE_BUF_IS_FD | _FUSE_BUF_FD_SEEK, None
        else:
            b.size, b.flags, b.mem, b.fd, b.pos = len(seg), 0, memory(seg), -1, 0


def build_bufvec(segments: list[tuple[int, int, int] | bytes]) -> int:
    """A ``malloc``-ed ``fuse_bufvec`` holding ``segments`` in order, as libfuse's
    ``read_buf`` wants it (libfuse frees it, and the memory of byte buffers, with
    ``free``; it never closes descriptors). Returns its address."""
    T = _bufvec_type(max(1, len(segments)))
    p = _libc.malloc(ctypes.sizeof(T))
    if not p:
        raise MemoryError("fuse_bufvec")
    mems: list[int] = []

    def copy_out(seg: bytes) -> int:  # libfuse frees it after the reply
        m = _libc.malloc(max(1, len(seg)))
        if not m:
            raise MemoryError("fuse_buf")
        mems.append(m)
        ctypes.memmove(m, seg, len(seg))
        return int(m)

    try:
        fill_bufvec(T.from_address(p), segments, copy_out)
    except BaseException:
        for m in mems:
            _libc.free(m)
        _libc.free(p)
        raise
    return p


def _live_thread_ids() -> set[int] | None:
    """Native ids of this process's threads, or None when ``/proc`` cannot say."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return None


class _FdLedger:
    """Block-file descriptors handed to libfuse for spliced replies, closed once sent.

    libfuse sends a reply on the thread whose ``read_buf`` made it, right after that call
    returns, and a worker thread serves one request at a time: so when a thread calls in
    again, its previous reply is out and the descriptors it handed over can be closed.
    Threads that libfuse retires (it stops surplus idle workers) never call again; their
    descriptors are closed by a sweep over the live threads once more than ``sweep_at``
    threads hold some. ``close``, ``current_thread`` and ``live_threads`` are injected so
    the rules can be checked without depending on which descriptor numbers or thread ids
    the process reuses."""

    __slots__ = ("_held", "sweep_at", "_close", "_current", "_live")

    def __init__(self, sweep_at: int = 32, *,
                 close: Callable[[int], None] = os.close,
                 current_thread: Callable[[], int] = threading.get_native_id,
                 live_threads: Callable[[], set[int] | None] = _live_thread_ids) -> None:
        self._held: dict[int, list[int]] = {}
        self.sweep_at = sweep_at
        self._close = close
        self._current = current_thread
        self._live = live_threads

    def settle(self) -> int:
        """Close what this thread handed over before; returns its id for :meth:`hold`."""
        tid = self._current()
        for fd in self._held.pop(tid, ()):
            self._close(fd)
        return tid

    def hold(self, tid: int, fds: list[int]) -> None:
        if fds:
            self._held[tid] = fds
            if len(self._held) > self.sweep_at:
                self._sweep()

    def _sweep(self) -> None:
        alive = self._live()
        if alive is None:
            return
        for tid in [t for t in list(self._held) if t not in alive]:
            for fd in self._held.pop(tid, ()):
                self._close(fd)

    def open_count(self) -> int:
        return sum(len(v) for v in list(self._held.values()))

    def close_all(self) -> None:
        while self._held:
            for fd in self._held.popitem()[1]:
                self._close(fd)


def _slice(blk: bytes, s: int, e: int) -> bytes:
    return blk if (s == 0 and e >= len(blk)) else blk[s:e]


def _slice_into(blk: bytes, s: int, buf: memoryview) -> int:
    piece = memoryview(blk)[s:s + len(buf)]
    buf[:len(piece)] = piece
    return len(piece)


#: How a handle hands over the piece ``[s, …)`` of a block, as (read it from a verified
#: block file — None when that file is not the verified version —, slice it from a block
#: held whole); ``x`` is the piece's end offset, or the reply buffer to fill.
AS_BYTES = (BlockStore.get_range, _slice)
INTO_BUFFER = (BlockStore.get_range_into, _slice_into)
AS_DESCRIPTOR = (BlockStore.range_fd, _slice)  # (fd, offset, length); the caller closes fd


class _Handle:
    """An open file: its metadata and the last two blocks it read (the kernel's readahead
    runs concurrent reads on both sides of a block boundary).

    Each block counts as *one* demand access per handle, whatever the number of kernel
    requests (≤ 1 MiB on libfuse 3, 128 KiB on libfuse 2) it takes (:meth:`serve`). The
    first request of a block makes the access under the handle's lock: for a verified
    local block it only accounts it (``claim_range_hit``) and reads its own range after
    releasing the lock, so the kernel's concurrent requests for the other pieces are not
    queued behind it; otherwise it reads the whole block (``read_block``: fetch or
    verify) and keeps it. Later requests of a block this handle already accounted read
    just their range (lock-free, served only from a file version verified in this
    process), or slice the block kept whole (verify mode ``full``, a block not verified
    yet). ``cur``/``prev`` are ``(idx, block or None, key)`` tuples, swapped atomically,
    so lock-free readers always see a consistent triple."""

    __slots__ = ("meta", "cur", "prev", "lock")

    def __init__(self, meta: FileMeta) -> None:
        self.meta = meta
        self.cur: tuple[int, bytes | None, BlockKey | None] = (-1, None, None)
        self.prev: tuple[int, bytes | None, BlockKey | None] = (-1, None, None)
        self.lock = threading.Lock()

    def serve(self, engine: CacheEngine, idx: int, s: int, x: Any,
              how: tuple[Callable[..., Any], Callable[..., Any]]) -> Any:
        """The piece ``[s, …)`` of block ``idx`` handed over ``how`` (:data:`AS_BYTES`,
        :data:`INTO_BUFFER`, :data:`AS_DESCRIPTOR`); one demand access per block."""
        ranged, sliced = how
        got = self._held(engine, idx, s, x, ranged, sliced)
        if got is not None:
            return got
        with self.lock:
            got = self._held(engine, idx, s, x, ranged, sliced)
            if got is not None:
                return got
            key = engine.claim_range_hit(self.meta, idx)
            if key is None:  # a miss, or a block not verified here yet: read it whole
                return self._load(engine, idx, s, x, sliced)
            self._moved_to(idx, None)
        # a verified local block, already accounted: read outside the lock, so that the
        # other pieces of this block are not queued behind this one
        got = ranged(engine.store, key, s, x)
        if got is not None:
            return got
        with self.lock:  # the file changed since it was verified: read (and check) it whole
            return self._load(engine, idx, s, x, sliced)

    def _held(self, engine: CacheEngine, idx: int, s: int, x: Any,
              ranged: Callable[..., Any], sliced: Callable[..., Any]) -> Any:
        """The piece when this handle has accounted block ``idx``, else None (also when
        its file changed since it was verified)."""
        for i, blk, key in (self.cur, self.prev):
            if i == idx:
                return sliced(blk, s, x) if blk is not None else ranged(engine.store, key, s, x)
        return None

    def _load(self, engine: CacheEngine, idx: int, s: int, x: Any,
              sliced: Callable[..., Any]) -> Any:
        """Under the lock: one demand access of block ``idx`` that reads (fetches or
        verifies) it whole; the handle moves to it and keeps it."""
        blk = engine.read_block(self.meta, idx)
        self._moved_to(idx, blk)
        return sliced(blk, s, x)

    def _moved_to(self, idx: int, blk: bytes | None) -> None:
        """Under the lock: block ``idx`` (kept whole as ``blk``, or read by range) is now
        the handle's current block, the old one its previous."""
        m = self.meta
        self.prev, self.cur = self.cur, (idx, blk, BlockKey(m.path, m.version, idx))


class CacheFuse(Operations):  # type: ignore[misc]
    """mfusepy operations: getattr, readdir, open, read, release, statfs (read-only)."""

    use_ns = True  # nanosecond times (and no deprecation warning)

    def __init__(self, engine_factory: Callable[[], CacheEngine], root: str, *,
                 on_init: Callable[[CacheEngine], None] | None = None,
                 mountpoint: str | None = None, readahead_kb: int = 0,
                 splice_bytes: int = 0) -> None:
        self._factory = engine_factory
        #: the read request cap when replies are spliced (``read_buf``); 0: no splicing
        self.splice_bytes = splice_bytes if splice_supported() else 0
        self._fds = _FdLedger()
        if not self.splice_bytes:
            # the binding registers only the callbacks that exist
            self.read_buf = None  # type: ignore[method-assign]
        self._mountpoint = mountpoint
        self._readahead_kb = readahead_kb
        #: the kernel readahead window set after mounting (None: not set / not possible)
        self.readahead_kb: int | None = None
        self._on_init = on_init
        self.engine: CacheEngine | None = None
        self.root = root.rstrip("/")
        self._handles: dict[int, _Handle] = {}
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

    # the engine is built in init(), i.e. after libfuse has daemonized (threads don't fork)
    def init(self, path: str) -> None:
        self.engine = self._factory()
        if self._on_init is not None:
            self._on_init(self.engine)
        if self._mountpoint and self._readahead_kb > 0:
            threading.Thread(target=self._set_readahead, name="aicache-readahead", daemon=True).start()

    def _set_readahead(self) -> None:
        """After the INIT reply (the kernel sets the window from it, overwriting anything
        set earlier): set it, and check once more that it stuck."""
        for _ in range(20):
            time.sleep(0.25)
            got = raise_readahead(self._mountpoint, self._readahead_kb)  # type: ignore[arg-type]
            if got is None:
                return
            time.sleep(0.25)
            again = raise_readahead(self._mountpoint, self._readahead_kb)  # type: ignore[arg-type]
            if again is not None and again >= self._readahead_kb:
                self.readahead_kb = again
                log.info("kernel readahead of %s: %d KiB", self._mountpoint, again)
                return

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
        verification."""
        h = self._handles.get(fh)
        engine = self.engine
        if h is None or engine is None:
            return True  # answered at once (EBADF)
        B = engine.block_size
        end = min(offset + size, h.meta.size)
        store = engine.store
        m = h.meta
        for idx in range(offset // B, (end - 1) // B + 1 if end > offset else offset // B):
            if idx == h.cur[0] or idx == h.prev[0]:
                continue
            if not store.serves_ranges(BlockKey(m.path, m.version, idx)):
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
                "st_ctime": ns, "st_atime": ns, "st_uid": os.getuid(), "st_gid": os.getgid(),
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
        info = self.engine.cached_info(self._remote_path(path))
        if info is not None and int(info.get("size") or 0) != meta.size:
            self.engine.forget_info(self._remote_path(path))  # they predate this version
        with self._lock:
            fh = self._next_fh
            self._next_fh += 1
            self._handles[fh] = _Handle(meta)
        return fh

    def _piece(self, fh: int, offset: int, size: int) -> tuple[_Handle, CacheEngine, int, int]:
        """The handle and engine of ``fh`` and the clipped request ``[offset, end)``."""
        h = self._handles.get(fh)
        if h is None:
            raise FuseOSError(errno.EBADF)
        engine = self.engine
        assert engine is not None
        return h, engine, offset, min(offset + size, h.meta.size)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        h, engine, offset, end = self._piece(fh, offset, size)
        if end <= offset:
            return b""
        B = engine.block_size
        try:
            idx = offset // B
            if (end - 1) // B != idx:
                return engine.read_meta(h.meta, offset, end - offset)
            s = offset - idx * B
            return h.serve(engine, idx, s, s + (end - offset), AS_BYTES)
        except RemoteReadError as exc:
            log.error("read %s: %s", path, exc)
            raise FuseOSError(errno.EIO) from exc
        except VersionGone as exc:
            log.warning("read %s: %s", path, exc)
            raise FuseOSError(errno.ESTALE) from exc

    def read_into(self, path: str, buf: memoryview, offset: int, fh: int) -> int:
        """:meth:`read` into the kernel reply buffer ``buf`` (see :class:`_ZeroCopyFUSE`):
        a piece of one block goes straight from the block file into ``buf``."""
        h, engine, offset, end = self._piece(fh, offset, len(buf))
        B = engine.block_size
        if end <= offset or (end - 1) // B == offset // B:
            try:
                if end <= offset:
                    return 0
                idx = offset // B
                return h.serve(engine, idx, offset - idx * B, buf[:end - offset], INTO_BUFFER)
            except RemoteReadError as exc:
                log.error("read %s: %s", path, exc)
                raise FuseOSError(errno.EIO) from exc
            except VersionGone as exc:
                log.warning("read %s: %s", path, exc)
                raise FuseOSError(errno.ESTALE) from exc
        data = self.read(path, end - offset, offset, fh)  # spans blocks: assembled by the engine
        buf[:len(data)] = data
        return len(data)

    def read_segments(self, path: str, size: int, offset: int, fh: int
                      ) -> list[tuple[int, int, int] | bytes]:
        """The reply to a read of ``size`` bytes at ``offset``, block by block: a verified
        block's range as an open ``(fd, offset, length)`` of its file (the caller closes
        each fd), anything else as bytes. Each block counts as one access per handle, as
        with :meth:`read_into`."""
        h, engine, offset, end = self._piece(fh, offset, size)
        B = engine.block_size
        out: list[tuple[int, int, int] | bytes] = []
        try:
            pos = offset
            while pos < end:
                idx = pos // B
                stop = min(end, (idx + 1) * B)
                s = pos - idx * B
                out.append(h.serve(engine, idx, s, s + (stop - pos), AS_DESCRIPTOR))
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

    def read_buf(self, path: str, bufpp: Any, size: int, offset: int, fh: int) -> int:
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

    def release(self, path: str, fh: int) -> int:
        with self._lock:
            self._handles.pop(fh, None)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        B = 4096
        cap = self.engine.store.capacity if self.engine else 0
        used = self.engine.store.used if self.engine else 0
        return {"f_bsize": B, "f_frsize": B, "f_blocks": cap // B,
                "f_bfree": max(0, cap - used) // B, "f_bavail": 0, "f_namemax": 255}

    # read-only: everything that would write
    def _rofs(self, *args: Any) -> Any:
        raise FuseOSError(errno.EROFS)

    chmod = chown = create = mkdir = rename = rmdir = symlink = truncate = unlink = write = _rofs


#: the FUSE drivers :func:`mount` offers (``auto``: low-level where supported)
FUSE_APIS = ("auto", "lowlevel", "highlevel")

#: libfuse's worker threads (a fixed pool: as many may idle as may run, so none is retired)
FUSE_THREADS = 10
_callback_thread = threading.local()


def keep_thread_state() -> None:
    """Keep this foreign (libfuse) thread's Python thread state across callbacks.

    A ctypes callback on a thread Python did not create makes a fresh thread state on
    entry and destroys it on return (``PyGILState_Ensure``/``Release``): per FUSE request,
    on every worker thread. One extra ``Ensure`` that is never released keeps the state,
    so later callbacks on this thread only take the GIL: ~35% less time per small file
    through the mount (open + read + release). The state lives as long as the thread;
    the mount keeps a fixed pool of worker threads (:data:`FUSE_THREADS`), so none
    accumulate."""
    if not getattr(_callback_thread, "kept", False):
        ctypes.pythonapi.PyGILState_Ensure()
        _callback_thread.kept = True


if FUSE is not None:
    class _ZeroCopyFUSE(FUSE):  # type: ignore[misc, valid-type]
        """The binding's FUSE with its ``read`` callback handing our operations libfuse's
        reply buffer: the block file is read straight into it (``preadv``), instead of
        into a new bytes object that the binding then copies (``memmove``) — one copy and
        one 1 MiB allocation less per request. Operations without ``read_into`` get the
        binding's own ``read``. Every callback first keeps its thread's Python state
        (:func:`keep_thread_state`)."""

        def _wrapper(self, func: Any, *args: Any, **kwargs: Any) -> Any:
            keep_thread_state()
            return super()._wrapper(func, *args, **kwargs)

        def read(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
            ops = self.operations
            into = getattr(ops, "read_into", None)
            if into is None or self.raw_fi:
                return super().read(path, buf, size, offset, fip)
            addr = ctypes.cast(buf, ctypes.c_void_p).value
            view = memoryview((ctypes.c_char * size).from_address(addr)).cast("B")  # type: ignore[operator]
            return into(None if path is None else path.decode(self.encoding, self.errors),
                        view, offset, fip.contents.fh)
else:
    _ZeroCopyFUSE = None


def mount(target: Any, root: str, mountpoint: str, *, cache_dir: str, cache_size: int,
          policy: Any = "chiron", advisor: Any = None, params: EngineParams | None = None,
          foreground: bool = True, metrics_port: int | None = None,
          record: Callable[[float, str, int, int], None] | None = None,
          kernel_cache: bool = False, readahead_kb: int | None = None,
          direct_io: bool = False, fuse_api: str = "auto", allow_other: bool = False) -> None:
    """Mount ``target:root`` read-only at ``mountpoint``; returns after unmount (SIGINT/
    SIGTERM/SIGHUP or ``fusermount3 -u``; the low-level driver's own handlers wake its
    loop, see :meth:`aicache.datacache.fuse_ll.LowLevelSession._stop_on_signals`)).

    ``kernel_cache``: let the kernel keep file pages across opens. Re-reads then run at
    page-cache speed, but they no longer reach the engine, so the policy does not see
    them (and ``record`` does not trace them); off by default.

    ``direct_io``: every open bypasses the kernel's page cache — a read goes to the daemon
    as requests whose replies the kernel copies straight into the reader's buffer, one copy
    instead of two (the page cache's), so large sequential reads run ~1.5x faster; but
    ``mmap`` of a file fails (ENODEV) and small reads get no kernel readahead (each is a
    request). A reader that opens with ``O_DIRECT`` gets this path without the option.

    ``readahead_kb``: the kernel readahead window to set after mounting (None: the block
    size, up to 16 MiB; 0: leave the kernel's default). It bounds the size of the read
    requests the kernel sends (see the module docstring).

    ``fuse_api``: ``lowlevel`` (:mod:`aicache.datacache.fuse_ll`: one thread answers
    local requests inline, workers the rest), ``highlevel`` (libfuse's path API and
    thread pool), or ``auto`` (low-level where supported: libfuse 3 before 3.17)."""
    from aicache.datacache import fuse_ll

    why = fuse_available()
    if why:
        raise OSError(errno.ENODEV, why)
    if fuse_api not in FUSE_APIS:
        raise ValueError(f"fuse_api {fuse_api!r}: give one of {', '.join(FUSE_APIS)}")
    lowlevel = fuse_api == "lowlevel" or (fuse_api == "auto" and fuse_ll.supported())
    if lowlevel and not fuse_ll.supported():
        raise OSError(errno.ENOTSUP, "the low-level FUSE driver needs libfuse 3 before 3.17; "
                                     "use fuse_api='highlevel'")
    servers: list[Any] = []

    def factory() -> CacheEngine:
        return CacheEngine(target, cache_dir, cache_size, policy=policy, advisor=advisor,
                           params=params, record=record, root=root)

    def on_init(engine: CacheEngine) -> None:
        if metrics_port is not None:
            servers.append(engine.metrics.serve(metrics_port))

    if readahead_kb is None:
        bs = params.block_size if params is not None else EngineParams().block_size
        readahead_kb = min(16384, max(128, bs // 1024))
    splice_bytes = splice_request_bytes() if splice_supported() else 0
    ttl = params.metadata_ttl_s if params else EngineParams().metadata_ttl_s
    # the kernel's attribute/entry caches must not outlive the metadata TTL
    kernel_ttl = min(fuse_ll.DEFAULT_TIMEOUT_S, ttl)
    ops = CacheFuse(factory, root, on_init=on_init, mountpoint=os.path.realpath(mountpoint),
                    readahead_kb=readahead_kb, splice_bytes=splice_bytes)
    try:
        if kernel_cache and direct_io:
            raise ValueError("kernel_cache and direct_io exclude each other")
        opts: dict[str, Any] = {"kernel_cache": True} if kernel_cache else {}
        if allow_other:  # else the kernel lets only the mounting user in
            opts["allow_other"] = True
        if direct_io:
            opts["direct_io"] = True
        if ops.splice_bytes:
            opts["max_read"] = ops.splice_bytes
            log.info("replies spliced from block files; read requests up to %d KiB",
                     ops.splice_bytes // 1024)
        else:
            log.info("replies copied (splicing needs libfuse 3 before 3.17 and a pipe of "
                     "%d KiB or more)", 32 * os.sysconf("SC_PAGE_SIZE") // 1024)
        if lowlevel:
            fuse_ll.LowLevelSession(ops, mountpoint, foreground=foreground,
                                    kernel_cache=kernel_cache, direct_io=direct_io,
                                    max_read=ops.splice_bytes, timeout_s=kernel_ttl,
                                    allow_other=allow_other).run()
            return
        opts.update(attr_timeout=kernel_ttl, entry_timeout=kernel_ttl, negative_timeout=0)
        if LIBFUSE_MAJOR >= 3:
            # a fixed pool: threads are never retired (see keep_thread_state); setting
            # max_idle_threads also silences libfuse 3.14's warning about its unset default
            opts["max_threads"] = opts["max_idle_threads"] = FUSE_THREADS
        try:
            _ZeroCopyFUSE(ops, mountpoint, foreground=foreground, ro=True, nothreads=False,
                          fsname="aicache", default_permissions=True, **opts)
        except RuntimeError as exc:
            # libfuse 3's fuse_main returns 8 when its loop ended on a signal (SIGINT/SIGTERM,
            # after unmounting): the clean way to stop a mount, not a failure
            if not (LIBFUSE_MAJOR >= 3 and exc.args == (8,) and not os.path.ismount(mountpoint)):
                raise
    finally:
        for s in servers:
            s.shutdown()
        if ops.engine is not None and not ops.engine._closed:
            ops.engine.close()
