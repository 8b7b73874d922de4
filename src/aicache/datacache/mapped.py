"""Memory-mapped hot blocks: a bounded set of block files kept mapped, so a hit is one
``stat`` and a ``memcpy`` instead of open + fstat + pread + close.

Why: a ``pread`` of a page-cached block walks the page cache page by page in the kernel
(``copy_to_user``); a block that stays mapped is copied by one user-space ``memcpy`` from
pages already in the process's page tables — 5–25% more bytes per second per core,
measured here for 128 KiB and 4 MiB blocks (``benchmarks/datacache_speed.py``), and two
syscalls fewer per read. RocksDB (``allow_mmap_reads``) and LMDB read this way.

How, and what it costs:

* **The copy runs without the GIL.** Slicing a Python ``mmap`` copies while holding the
  GIL, so threads reading in parallel would be serialised (two threads read no faster than
  one, where ``pread`` scales). Here the mapping is made with libc's
  ``mmap`` through ctypes, the result is an uninitialised ``bytes`` of the right size
  (``PyBytes_FromStringAndSize(NULL, n)``, as a C extension would make it), and
  ``ctypes.memmove`` — which releases the GIL — fills it before anyone else sees it. This
  relies on CPython's ``bytes`` layout; :data:`SUPPORTED` checks it once at import (and
  that this is CPython on Linux), else the store keeps reading with ``pread``.
* **A mapping is pinned while copied**: dropping one (eviction, a changed file, the
  bound, ``close``) unmaps it only when no thread is copying from it.
* **Never serves a file that is not the verified one.** A mapping remembers the
  ``stat`` signature the store verified (:mod:`aicache.datacache.store`, ``stat`` mode);
  every hit ``stat``-s the block's path and copies only if the file there is still that
  inode with that size, mtime and ctime. A block evicted (unlinked) or rewritten by any
  process fails the check and its mapping is dropped.
* **Admission on the second read**: a block is mapped when it is read again while still
  in a ghost list of recently read blocks bounded like the mapped set (bytes and count).
  A scan over more than the bound never maps anything (each block comes back only after
  its ghost entry is gone), so it pays ``pread`` as before instead of ``mmap`` + ``munmap``
  per read.
* **Disk space.** A mapped file whose block another process evicted keeps its disk space
  until the mapping is dropped. A sweeper thread re-checks every mapping each
  ``sweep_s`` (1 s), so such space is held at most ``max_bytes`` per process for about a
  second; the store's own evictions drop their mappings at once.
* **RSS.** Mapped pages count in the process's resident set as shown by ``ps``/``top``:
  they are the page cache's (shared, file-backed), the same pages a ``pread`` copies from,
  not memory the process owns.
* **Never maps what another process may truncate.** A copy from pages a truncation
  removed faults (SIGBUS), which kills the reader: Python cannot resume after it, and a
  kernel copy that fails cleanly instead (``process_vm_readv``) is slower than ``pread``.
  So only a block file that no process but root can truncate is mapped: one this user
  owns that has no write bit (the store writes block files read-only, ``0o400``/``0o440``:
  they are never written in place — written to a temp file, renamed over nothing, evicted
  by ``unlink``, which keeps mapped pages valid — so ``truncate`` by any other process of
  this user, or of a shared cache's group, fails with EACCES). A block file of another
  user (a shared cache's member wrote it), or one with a write bit (an earlier release's),
  is read with ``pread``: a truncation then is a short read, a miss. Only root, or this
  user after a deliberate ``chmod``, can still truncate a mapped block; ``mmap_bytes=0``
  turns mapping off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap as _mmap
import os
import platform
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

#: default bound on mapped bytes per store (address space and page-table entries only:
#: the pages are the page cache's, shared with every other reader of the file)
DEFAULT_MMAP_BYTES = 1 << 30
#: bound on how many files are mapped (each costs a VMA; the sweeper stats them all)
DEFAULT_MMAP_COUNT = 4096
#: how often mappings are re-checked for files another process evicted
DEFAULT_SWEEP_S = 1.0

_MAP_POPULATE = getattr(_mmap, "MAP_POPULATE", 0x8000)  # Linux; the module has it from 3.10

Sig = tuple[int, int, int, int, int]


def _stat_sig(st: os.stat_result) -> Sig:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _setup() -> tuple[bool, str]:
    """(supported, why not) — CPython on Linux, libc ``mmap`` found, ``bytes`` layout as
    expected (checked by writing through it)."""
    global _libc, _new_bytes, _BYTES_DATA, _MAP_FAILED
    if platform.python_implementation() != "CPython" or not sys.platform.startswith("linux"):
        return False, "mmap reads need CPython on Linux"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        new = ctypes.pythonapi.PyBytes_FromStringAndSize
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
    except (OSError, AttributeError) as exc:
        return False, f"mmap reads unavailable: {exc}"
    off = sys.getsizeof(b"") - 1  # offsetof(PyBytesObject, ob_sval)
    probe = new(None, 8)
    ctypes.memmove(id(probe) + off, b"aicache!", 8)
    if probe != b"aicache!" or ctypes.string_at(id(probe) + off, 8) != b"aicache!":
        return False, "mmap reads unavailable: unexpected bytes layout"
    _libc, _new_bytes, _BYTES_DATA = libc, new, off
    _MAP_FAILED = ctypes.c_void_p(-1).value
    return True, ""


_libc: ctypes.CDLL
#: ``PyBytes_FromStringAndSize(NULL, n)``: a new, uninitialised bytes object of ``n`` bytes
_new_bytes: Callable[[int | None, int], bytes]
_BYTES_DATA = 0
_MAP_FAILED: int | None = None
SUPPORTED, WHY_UNSUPPORTED = _setup()


class _Map:
    __slots__ = ("addr", "length", "sig", "pos", "n", "pins", "dead")

    def __init__(self, addr: int, length: int, sig: Sig, pos: int, n: int) -> None:
        self.addr, self.length, self.sig, self.pos, self.n = addr, length, sig, pos, n
        self.pins = 0
        self.dead = False


class MappedBlocks:
    """Up to ``max_bytes`` of block files kept mapped, keyed by file path (see the
    module docstring). Thread-safe; ``copy``/``admit`` are the read path."""

    def __init__(self, max_bytes: int = DEFAULT_MMAP_BYTES, sweep_s: float = DEFAULT_SWEEP_S,
                 *, max_count: int = DEFAULT_MMAP_COUNT) -> None:
        self.max_bytes = int(max_bytes) if SUPPORTED else 0
        self.max_count = int(max_count)
        self.sweep_s = sweep_s
        self._maps: OrderedDict[str, _Map] = OrderedDict()
        self._ghosts: OrderedDict[str, int] = OrderedDict()  # path -> length
        self._ghost_bytes = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sweeper: threading.Thread | None = None
        self._wake = threading.Event()
        self.mapped_total = 0  # mappings made (tests, stats)
        self.dropped_stale = 0  # mappings dropped because the file changed or went
        _LIVE.add(self)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def mapped_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._maps)

    # -- the read path --------------------------------------------------------------------
    def copy(self, path: str) -> bytes | None:
        """The payload of the block file at ``path`` if it is mapped and the file there is
        still the one mapped; else None (and a stale mapping is dropped)."""
        with self._lock:
            m = self._maps.get(path)
            if m is None:
                return None
            m.pins += 1
            self._maps.move_to_end(path)
        if self._sweeper is None:  # a forked child's inherited mappings need one too
            self._start_sweeper()
        try:
            try:
                st = os.stat(path)
            except OSError:
                st = None
            if st is None or _stat_sig(st) != m.sig:
                self.dropped_stale += 1
                self._drop(path, m)
                return None
            return self._copy_out(m)
        finally:
            self._unpin(m)

    def admit(self, path: str, fd: int, sig: Sig, pos: int, n: int) -> bytes | None:
        """Called on a verified read of the block file open as ``fd`` (whose ``fstat``
        signature is ``sig``; payload ``[pos, pos + n)``): on the block's second read
        within the ghost window, map it and return the payload copied from the mapping;
        otherwise (first read, too big, mapping failed) None — read it as before."""
        length = pos + n
        if not self.max_bytes or n <= 0 or length > self.max_bytes:
            return None
        try:
            st = os.fstat(fd)
        except OSError:
            return None
        if st.st_uid != os.geteuid() or st.st_mode & 0o222:
            return None  # another process could truncate it under the mapping: never map
        with self._lock:
            if self._closed or path in self._maps:
                return None
            seen = self._ghosts.pop(path, None)
            if seen is None:
                g = self._ghosts
                g[path] = length
                self._ghost_bytes += length
                while self._ghost_bytes > self.max_bytes or len(g) > self.max_count:
                    self._ghost_bytes -= g.popitem(last=False)[1]
                return None
            self._ghost_bytes -= seen
        addr = _libc.mmap(None, length, _mmap.PROT_READ, _mmap.MAP_SHARED | _MAP_POPULATE,
                          fd, 0)
        if addr is None or addr == _MAP_FAILED:
            return None
        m = _Map(addr, length, sig, pos, n)
        m.pins = 1
        victims: list[_Map] = []
        with self._lock:
            if self._closed or path in self._maps:  # closed, or another thread mapped it
                m.dead = True
            else:
                self._maps[path] = m
                self._bytes += length
                self.mapped_total += 1
                while self._bytes > self.max_bytes or len(self._maps) > self.max_count:
                    _, v = self._maps.popitem(last=False)
                    self._bytes -= v.length
                    v.dead = True
                    victims.append(v)
        for v in victims:
            self._unpin(v, pinned=False)
        self._start_sweeper()
        try:
            return self._copy_out(m)
        finally:
            self._unpin(m)

    @staticmethod
    def _copy_out(m: _Map) -> bytes:
        out: bytes = _new_bytes(None, m.n)
        ctypes.memmove(id(out) + _BYTES_DATA, m.addr + m.pos, m.n)  # GIL released
        return out

    # -- dropping -------------------------------------------------------------------------
    def _unpin(self, m: _Map, pinned: bool = True) -> None:
        with self._lock:
            if pinned:
                m.pins -= 1
            unmap = m.dead and m.pins == 0 and m.addr != 0
            addr, m.addr = (m.addr, 0) if unmap else (0, m.addr)
        if unmap:
            _libc.munmap(addr, m.length)

    def _drop(self, path: str, m: _Map | None = None) -> None:
        """Forget ``path``'s mapping (only ``m`` if given); unmapped once unpinned."""
        with self._lock:
            cur = self._maps.get(path)
            if cur is None or (m is not None and cur is not m):
                if m is not None:
                    m.dead = True
                cur = None
            else:
                del self._maps[path]
                self._bytes -= cur.length
                cur.dead = True
        if cur is not None:
            self._unpin(cur, pinned=False)
        elif m is not None:
            self._unpin(m, pinned=False)

    def drop(self, path: str) -> None:
        """The store removed the block file at ``path``: release its mapping now."""
        with self._lock:
            length = self._ghosts.pop(path, None)
            if length is not None:
                self._ghost_bytes -= length
        if path in self._maps:
            self._drop(path)

    def sweep(self) -> int:
        """Drop mappings whose file is gone or changed (another process evicted or
        rewrote it); returns how many."""
        with self._lock:
            items = list(self._maps.items())
        stale = 0
        for path, m in items:
            try:
                ok = _stat_sig(os.stat(path)) == m.sig
            except OSError:
                ok = False
            if not ok:
                stale += 1
                self._drop(path, m)
        self.dropped_stale += stale
        return stale

    def _start_sweeper(self) -> None:
        t = self._sweeper
        if (t is None or not t.is_alive()) and not self._closed:
            with self._lock:
                t = self._sweeper
                if t is None or not t.is_alive():
                    t = threading.Thread(target=_sweep_loop, args=(weakref.ref(self), self._wake),
                                         name="aicache-mmap-sweep", daemon=True)
                    self._sweeper = t
                    t.start()


    def close(self) -> None:
        """Unmap everything (mappings being copied from go when their copy ends)."""
        with self._lock:
            self._closed = True
            maps = list(self._maps.values())
            self._maps.clear()
            self._ghosts.clear()
            self._ghost_bytes = 0
            self._bytes = 0
            for m in maps:
                m.dead = True
        self._wake.set()
        for m in maps:
            self._unpin(m, pinned=False)

    def __del__(self) -> None:
        # a set that was never closed: its mappings would outlive it (nothing can be
        # copying from them any more — copies hold a reference to the set)
        try:
            if not self._closed:
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _after_fork(self) -> None:
        # a forked child (a DataLoader worker) inherits the mappings but not the threads
        # that pinned them or the sweeper: fresh lock, no pins, a sweeper on next admit
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._sweeper = None
        for m in self._maps.values():
            m.pins = 0


def _sweep_loop(ref: weakref.ReferenceType[MappedBlocks], wake: threading.Event) -> None:
    """The sweeper: holds its set only weakly, so a set nobody closed is still collected
    (its mappings go with it) and the thread ends."""
    while True:
        mb = ref()
        if mb is None or mb._closed:
            return
        period = mb.sweep_s
        del mb
        if wake.wait(period):
            return
        mb = ref()
        if mb is None:
            return
        try:
            mb.sweep()
        except Exception:  # noqa: BLE001 - a sweep failure only delays freeing space
            pass
        del mb


_LIVE: weakref.WeakSet[MappedBlocks] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for mb in list(_LIVE):
        mb._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
