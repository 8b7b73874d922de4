"""The mount on libfuse 3's *low-level* API: one session thread serves every request whose
answer is local at once, and hands the rest (remote fetches, listings) to worker threads
that reply when their answer arrives.

Why not libfuse's high-level API with its thread pool (:mod:`.highlevel`, still used on
libfuse 2 and ≥ 3.17): its callbacks must return the answer, so a request waiting on the
remote holds a thread, and serving hits in parallel needs many threads — which all take
the GIL for their Python part, so on a warm cache they mostly hand the GIL to each other.
One thread that replies inline does not, and the split — inline when local, a worker
otherwise — keeps that safe: a miss does not stall the hits of other readers behind it
(``benchmarks/datacache_speed.py`` compares the drivers). The low-level API also drops the
path bookkeeping of the high-level library (an inode table is kept here instead), and a
reply is sent *inside* ``fuse_reply_data``, so the block files' descriptors handed to it
for splicing are closed right after it returns (no ledger, as the high-level ``read_buf``
needs).

Every *version* of a file is its own inode (as Mountpoint does): a lookup names the
inode of the version an open would read now, and a path whose remote object was replaced
gets a new inode while the old one lives on for the handles that read it. The kernel's
page cache is per inode, so the pages of one inode are always of one version, whichever
open filled them, and an open may keep them (``keep_cache``) with no risk of mixing
versions. An open of an inode whose version is gone is refused with ESTALE; the kernel
then looks the path up again (``LOOKUP_REVAL``) and opens the new version's inode. An old
inode's attributes are those of its version (a snapshot), never the new object's size.

The file system itself (attributes, listings, the open handles and their block pieces)
is :class:`.ops.CacheFuse`, shared with the high-level driver; this module only
translates inode requests to its path calls, over the C interface of :mod:`.lowlevel_abi`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import errno
import logging
import os
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from typing import Any

from aicache.datacache.fuse.binding import FUSE_CAP_SPLICE_WRITE, FuseOSError, bufvec_type, fill_bufvec
from aicache.datacache.fuse.lowlevel_abi import (CALLBACK_TYPES, Args, FileInfo, LowLevelOps,
                                                 address_of, binding, entry_type, lib)
from aicache.datacache.fuse.ops import CacheFuse

log = logging.getLogger("aicache.fuse")

#: kernel attribute/entry cache timeout when the mount has no metadata TTL to follow
DEFAULT_TIMEOUT_S = 1.0
#: worker threads for requests that wait on the remote. A reader's requests inside the
#: kernel's readahead window (four or five of ~1 MiB for a 4 MiB block) all wait on the
#: same block's fetch, so 8 held two readers' windows and queued a third reader's first
#: request behind them; a waiting thread costs a stack, not a fetch
DEFAULT_WORKERS = 32
#: the signals that unmount (as libfuse's own handlers take them)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _ignore_signal(signum: int, frame: Any) -> None:
    """The Python-level part of a stop signal: nothing (the wakeup pipe carries it)."""



class _Reply(Exception):
    """Raised by a handler to answer its request with an error number."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class LowLevelSession:
    """Serves a :class:`~.ops.CacheFuse` at a mount point through a
    libfuse 3 low-level session (see the module docstring). :meth:`run` mounts, serves
    until SIGINT/SIGTERM/SIGHUP or ``fusermount3 -u``, and unmounts."""

    def __init__(self, ops: CacheFuse, mountpoint: str, *, foreground: bool = True,
                 kernel_cache: bool = False, direct_io: bool = False, max_read: int = 0,
                 workers: int = DEFAULT_WORKERS, timeout_s: float | None = None,
                 debug: bool = False, allow_other: bool = False) -> None:
        self.ops = ops
        self.allow_other = allow_other
        self.mountpoint = mountpoint
        self.foreground = foreground
        self.kernel_cache = kernel_cache
        self.direct_io = direct_io
        self.max_read = max_read
        self.timeout = float(timeout_s if timeout_s is not None else DEFAULT_TIMEOUT_S)
        self.debug = debug
        self._nworkers = workers
        self._pool: cf.ThreadPoolExecutor | None = None
        self._lib = lib()
        self._lock = threading.Lock()
        self._paths: dict[int, str] = {1: "/"}
        #: path -> the inode of its newest version seen (older ones stay in ``_paths``)
        self._inos: dict[str, int] = {"/": 1}
        #: inode of a file -> (its version, its attributes then); directories have none
        self._versions: dict[int, tuple[str, dict[str, Any]]] = {}
        self._lookups: dict[int, int] = {}
        self._next_ino = 2
        self._dirs: dict[int, list[tuple[bytes, int]] | None] = {}
        self._next_dir = 1
        self._cbs: dict[str, Any] = {}
        self._se: int | None = None
        #: why the file system could not start (raised by :meth:`run` after unmounting)
        self.init_error: BaseException | None = None
        #: requests answered inline / by a worker (tests, logs)
        self.inline = 0
        self.deferred = 0

    # -- the inode table --------------------------------------------------------------
    def _path(self, ino: int) -> str:
        p = self._paths.get(ino)
        if p is None:
            raise _Reply(errno.ESTALE)
        return p

    def _remember(self, path: str, version: tuple[str, dict[str, Any]] | None) -> int:
        """The inode of ``path`` at ``version`` (None: a directory) with one more kernel
        lookup reference: a new inode when the path's newest one is of another version."""
        with self._lock:
            ino = self._inos.get(path)
            if ino is not None and version is not None:
                known = self._versions.get(ino)
                if known is None or known[0] != version[0]:
                    ino = None  # replaced: the old inode keeps serving its own handles
            if ino is None:
                ino = self._next_ino
                self._next_ino += 1
                self._inos[path] = ino
                self._paths[ino] = path
                if version is not None:
                    self._versions[ino] = version
            self._lookups[ino] = self._lookups.get(ino, 0) + 1
        return ino

    def _forget(self, ino: int, n: int) -> None:
        with self._lock:
            left = self._lookups.get(ino, 0) - n
            if left > 0 or ino == 1:
                self._lookups[ino] = max(left, 0)
                return
            self._lookups.pop(ino, None)
            self._versions.pop(ino, None)
            path = self._paths.pop(ino, None)
            if path is not None and self._inos.get(path) == ino:
                del self._inos[path]

    def known_inodes(self) -> int:
        return len(self._paths)

    # -- plumbing ---------------------------------------------------------------------
    def _call(self, req: int, fn: Callable[..., None], *args: Any) -> None:
        """Run a handler, answering its request with the error it raises (once)."""
        try:
            fn(req, *args)
        except _Reply as r:
            self._lib.fuse_reply_err(req, r.code)
        except FuseOSError as exc:
            self._lib.fuse_reply_err(req, exc.errno or errno.EIO)
        except BaseException as exc:  # noqa: BLE001 - never let an exception into libfuse
            log.error("fuse %s: %r", getattr(fn, "__name__", fn), exc)
            self._lib.fuse_reply_err(req, errno.EIO)

    def _serve(self, req: int, local: bool, fn: Callable[..., None], *args: Any) -> None:
        """Answer inline when ``local`` (nothing to wait for), else from a worker."""
        engine = self.ops.engine
        if local or self._pool is None:
            self.inline += 1
            if engine is not None:
                engine.metrics.fuse_inline.inc()
            self._call(req, fn, *args)
            return
        self.deferred += 1
        if engine is not None:
            engine.metrics.fuse_deferred.inc()
        try:
            self._pool.submit(self._call, req, fn, *args)
        except RuntimeError:  # shutting down
            self._lib.fuse_reply_err(req, errno.EIO)

    def _stat_struct(self, attrs: dict[str, Any], ino: int) -> Any:
        st = binding.c_stat()
        for k, v in attrs.items():
            if k in ("st_atime", "st_mtime", "st_ctime"):
                ts = getattr(st, k + "spec")
                ts.tv_sec, ts.tv_nsec = divmod(int(v), 10**9)  # CacheFuse gives ns
            elif hasattr(st, k):
                setattr(st, k, v)
        st.st_ino = ino
        return st

    # -- operations ---------------------------------------------------------------------
    def _init(self, userdata: Any, conn: Any) -> None:
        try:
            c = conn.contents
            if self.max_read:
                c.want |= c.capable & FUSE_CAP_SPLICE_WRITE
                c.max_read = self.max_read  # must equal the max_read mount option
            self.ops.init("/")
        except BaseException as exc:  # noqa: BLE001 - raised again by run(), after unmounting
            self.init_error = exc
            if self._se:
                self._lib.fuse_session_exit(self._se)

    def _destroy(self, userdata: Any) -> None:
        try:
            self.ops.destroy("/")
        except BaseException as exc:  # noqa: BLE001
            log.error("fuse destroy: %r", exc)

    def _lookup(self, req: int, parent: int, name: bytes) -> None:
        path = self._path(parent).rstrip("/") + "/" + name.decode("utf-8", "surrogateescape")
        self._serve(req, self.ops.attr_fresh(path), self._do_lookup, path)

    def _do_lookup(self, req: int, path: str) -> None:
        attrs = self.ops.getattr(path)
        version: tuple[str, dict[str, Any]] | None = None
        if stat.S_ISREG(attrs["st_mode"]):
            v, size = self.ops.version_of(path)  # the version an open would read now
            attrs = dict(attrs, st_size=size, st_blocks=(size + 511) // 512)
            version = (v, attrs)
        ino = self._remember(path, version)
        e = entry_type()(ino, 0, self._stat_struct(attrs, ino), self.timeout, self.timeout)
        if self._lib.fuse_reply_entry(req, ctypes.byref(e)) == -errno.ENOENT:
            self._forget(ino, 1)  # the lookup was interrupted: the kernel holds no reference

    def _forget_one(self, req: int, ino: int, nlookup: int) -> None:
        self._forget(ino, nlookup)
        self._lib.fuse_reply_none(req)

    def _forget_multi(self, req: int, count: int, forgets: Any) -> None:
        for i in range(count):
            self._forget(forgets[i].ino, forgets[i].nlookup)
        self._lib.fuse_reply_none(req)

    def _getattr(self, req: int, ino: int, fi: Any) -> None:
        path = self._path(ino)
        known = self._versions.get(ino)
        if known is not None:  # one version's attributes never change
            st = self._stat_struct(known[1], ino)
            self._lib.fuse_reply_attr(req, ctypes.byref(st), self.timeout)
            return
        self._serve(req, path == "/" or self.ops.attr_fresh(path), self._do_getattr, path, ino)

    def _do_getattr(self, req: int, path: str, ino: int) -> None:
        st = self._stat_struct(self.ops.getattr(path), ino)
        self._lib.fuse_reply_attr(req, ctypes.byref(st), self.timeout)

    def _open(self, req: int, ino: int, fi: Any) -> None:
        path = self._path(ino)
        flags = fi.contents.flags
        self._serve(req, self.ops.meta_fresh(path), self._do_open, path, flags, ino)

    def _do_open(self, req: int, path: str, flags: int, ino: int) -> None:
        fh = self.ops.open(path, flags)
        known = self._versions.get(ino)
        if known is not None and self.ops.handle_version(fh) != known[0]:
            # the inode's version is gone: the kernel looks the path up again (LOOKUP_REVAL)
            self.ops.release(None, fh)
            raise _Reply(errno.ESTALE)
        fi = FileInfo()
        fi.flags, fi.fh = flags, fh
        # the inode's pages are all of the version this handle reads (see the module
        # docstring): keep them unless the mount bypasses the page cache
        fi.keep_cache = 1 if self.kernel_cache and not self.direct_io else 0
        fi.direct_io = 1 if self.direct_io else 0
        if self._lib.fuse_reply_open(req, ctypes.byref(fi)) == -errno.ENOENT:
            self.ops.release(None, fh)  # interrupted: no release will come for it

    def _read(self, req: int, ino: int, size: int, off: int, fi: Any) -> None:
        fh = fi.contents.fh
        self._serve(req, self.ops.read_is_local(fh, off, size), self._do_read, fh, size, off)

    def _do_read(self, req: int, fh: int, size: int, off: int) -> None:
        segs = self.ops.read_segments(None, size, off, fh)
        try:
            bv = bufvec_type(max(1, len(segs)))()
            # bytes are read in place: the reply is sent before fuse_reply_data returns
            fill_bufvec(bv, segs, address_of)
            self._lib.fuse_reply_data(req, ctypes.byref(bv), 0)  # sent before it returns
        finally:
            for seg in segs:
                if isinstance(seg, tuple):
                    os.close(seg[0])

    def _release(self, req: int, ino: int, fi: Any) -> None:
        self.ops.release(None, fi.contents.fh)
        self._lib.fuse_reply_err(req, 0)

    def _opendir(self, req: int, ino: int, fi: Any) -> None:
        path = self._path(ino)
        attrs = self.ops.getattr(path) if path != "/" and self.ops.attr_fresh(path) else None
        if attrs is not None and not stat.S_ISDIR(attrs["st_mode"]):
            raise _Reply(errno.ENOTDIR)
        with self._lock:
            fh = self._next_dir
            self._next_dir += 1
            self._dirs[fh] = None
        out = FileInfo()
        out.fh = fh
        self._lib.fuse_reply_open(req, ctypes.byref(out))

    def _readdir(self, req: int, ino: int, size: int, off: int, fi: Any) -> None:
        fh = fi.contents.fh
        listed = self._dirs.get(fh)
        self._serve(req, listed is not None, self._do_readdir, ino, fh, size, off)

    def _do_readdir(self, req: int, ino: int, fh: int, size: int, off: int) -> None:
        entries = self._dirs.get(fh)
        if entries is None:  # the first readdir of this open: list once, then page through
            path = self._path(ino)
            base = path.rstrip("/")
            entries = []
            for name in self.ops.readdir(path, fh):
                if name in (".", ".."):
                    entries.append((name.encode("ascii"), stat.S_IFDIR))
                    continue
                st = self.ops.cached_attr(f"{base}/{name}")
                mode = st["st_mode"] if st else stat.S_IFREG
                entries.append((name.encode("utf-8", "surrogateescape"), mode))
            self._dirs[fh] = entries
        buf = ctypes.create_string_buffer(size)
        pos = 0
        entry = binding.c_stat()
        for i in range(int(off), len(entries)):
            encoded, mode = entries[i]
            entry.st_ino, entry.st_mode = i + 2, mode  # only the type bits are used
            need = self._lib.fuse_add_direntry(req, ctypes.addressof(buf) + pos, size - pos,
                                               encoded, ctypes.byref(entry), i + 1)
            if need > size - pos:
                break
            pos += need
        self._lib.fuse_reply_buf(req, ctypes.addressof(buf), pos)

    def _releasedir(self, req: int, ino: int, fi: Any) -> None:
        self._dirs.pop(fi.contents.fh, None)
        self._lib.fuse_reply_err(req, 0)

    def _statfs(self, req: int, ino: int) -> None:
        sv = binding.c_statvfs()
        for k, v in self.ops.statfs("/").items():
            if hasattr(sv, k):
                setattr(sv, k, v)
        self._lib.fuse_reply_statfs(req, ctypes.byref(sv))

    # -- the session --------------------------------------------------------------------
    def _callbacks(self) -> LowLevelOps:
        def req_cb(fn: Callable[..., None]) -> Callable[..., None]:
            def cb(req: int, *args: Any) -> None:
                self._call(req, fn, *args)
            cb.__name__ = fn.__name__
            return cb

        handlers: dict[str, Callable[..., None]] = {
            "init": self._init, "destroy": self._destroy,
            "lookup": req_cb(self._lookup), "forget": req_cb(self._forget_one),
            "getattr": req_cb(self._getattr), "open": req_cb(self._open),
            "read": req_cb(self._read), "release": req_cb(self._release),
            "opendir": req_cb(self._opendir), "readdir": req_cb(self._readdir),
            "releasedir": req_cb(self._releasedir), "statfs": req_cb(self._statfs),
            "forget_multi": req_cb(self._forget_multi)}
        ops = LowLevelOps()
        for name, fn in handlers.items():
            self._cbs[name] = cb = CALLBACK_TYPES[name](fn)  # kept alive for the session
            setattr(ops, name, cb)
        self._ops_struct = ops
        return ops

    def mount_options(self) -> str:
        opts = ["ro", "default_permissions", "fsname=aicache", "subtype=aicache"]
        if self.max_read:
            opts.append(f"max_read={self.max_read}")
        if self.allow_other:  # else the kernel lets only the mounting user in
            opts.append("allow_other")
        return ",".join(opts)

    @contextlib.contextmanager
    def _stop_on_signals(self, se: int) -> Iterator[None]:
        """SIGINT, SIGTERM and SIGHUP end the session loop (which then unmounts).

        libfuse's own handlers cannot do it here: they only replace handlers left at
        ``SIG_DFL`` (Python's SIGINT handler is not), and they stop the loop only when the
        signal interrupts the loop's ``read`` of ``/dev/fuse`` — a signal that lands in
        any other thread (the remote's event loop, a worker) sets the exit flag while
        the loop sleeps on until the next request. So Python handlers write the signal to a
        wakeup pipe (from whichever thread took it); a watcher thread sets the exit flag
        and signals the loop's own thread until the loop has returned (a signal sent just
        before its ``read`` blocks is not lost: the next one interrupts it). Outside the
        main thread (Python's handlers live there) this does nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        r, w = os.pipe()
        os.set_blocking(w, False)
        loop_thread = threading.get_ident()
        returned = threading.Event()
        old = {sig: signal.signal(sig, _ignore_signal) for sig in STOP_SIGNALS}
        old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)

        def watch() -> None:
            got = os.read(r, 1)
            if not got or returned.is_set():
                return
            log.info("%s: unmounting %s", signal.Signals(got[0]).name, self.mountpoint)
            self._lib.fuse_session_exit(se)
            while not returned.wait(0.05):
                signal.pthread_kill(loop_thread, got[0])

        watcher = threading.Thread(target=watch, name="aicache-fuse-signals", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            returned.set()
            signal.set_wakeup_fd(old_fd)
            os.close(w)  # a watcher still waiting reads EOF
            watcher.join()
            os.close(r)
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def run(self) -> int:
        """Mount, serve, unmount. Returns libfuse's loop status (0: unmounted cleanly)."""
        lib = self._lib
        argv_py = [b"aicache", b"-o", self.mount_options().encode()] + ([b"-d"] if self.debug else [])
        argv = (ctypes.c_char_p * (len(argv_py) + 1))(*argv_py, None)
        args = Args(len(argv_py), argv, 0)
        ops = self._callbacks()
        se = lib.fuse_session_new(ctypes.byref(args), ctypes.byref(ops), ctypes.sizeof(ops), None)
        if not se:
            raise OSError(errno.EINVAL, f"fuse_session_new failed (options {self.mount_options()})")
        self._se = se
        rc = -1
        try:
            if lib.fuse_set_signal_handlers(se) != 0:
                raise OSError(errno.EINVAL, "fuse_set_signal_handlers failed")
            try:
                if lib.fuse_session_mount(se, os.fsencode(self.mountpoint)) != 0:
                    raise OSError(errno.EIO, f"could not mount at {self.mountpoint} "
                                             "(see the message above; is /dev/fuse usable?)")
                # before any thread exists (it forks): the engine is built in init
                lib.fuse_daemonize(1 if self.foreground else 0)
                with self._stop_on_signals(se):  # a second signal while unmounting: ignored
                    self._pool = cf.ThreadPoolExecutor(self._nworkers, thread_name_prefix="aicache-fuse")
                    try:
                        rc = lib.fuse_session_loop(se)  # the GIL is released while it waits
                    finally:
                        self._pool.shutdown(wait=True, cancel_futures=True)  # queued: unmounting
                        lib.fuse_session_unmount(se)
            finally:
                lib.fuse_remove_signal_handlers(se)
        finally:
            lib.fuse_session_destroy(se)  # calls destroy (the engine closes)
            self._se = None
        if self.init_error is not None:
            raise self.init_error
        return rc
