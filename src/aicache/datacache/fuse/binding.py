"""The FUSE library binding: which libfuse is loaded, and the C structures the drivers share.

mfusepy (the maintained fork of fusepy: the same pure-Python ctypes API, no compiler, no
headers) on **libfuse 3** when it is installed, else on libfuse 2. Why libfuse 3: it
negotiates ``max_pages`` with the kernel, so a read of a large file reaches us as 1 MiB
requests instead of libfuse 2's fixed 128 KiB — 8x fewer Python callbacks per 4 MiB
block, which is where a Python FUSE server spends its time. pyfuse3 would be faster per
call still, but needs trio, a C build and libfuse3 headers.

Also here: libc's ``malloc``/``free`` and libfuse 3's ``fuse_buf``/``fuse_bufvec``, through
which a reply hands libfuse block-file descriptors to splice (:mod:`.ops` builds them for
the high-level ``read_buf``, :mod:`.lowlevel` for ``fuse_reply_data``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable
from typing import Any


def _import_binding() -> Any:
    """mfusepy on libfuse 3 when both are here (unless ``FUSE_LIBRARY_PATH``/``_NAME`` pick
    a library), else mfusepy or fusepy on whatever libfuse they find."""
    from ctypes.util import find_library

    pick = ("FUSE_LIBRARY_PATH" not in os.environ and "FUSE_LIBRARY_NAME" not in os.environ
            and find_library("fuse3") is not None)
    if pick:
        os.environ["FUSE_LIBRARY_NAME"] = "fuse3"  # read once, at mfusepy's import
    try:
        import mfusepy as mod
    except ImportError:
        import fuse as mod  # fusepy: libfuse 2 only
    finally:
        if pick:
            os.environ.pop("FUSE_LIBRARY_NAME", None)
    return mod


#: the loaded binding module (mfusepy or fusepy; None without one): its ``c_stat``,
#: ``c_statvfs`` and ``_libfuse`` serve the low-level driver too
binding: Any
try:
    binding = _import_binding()
    FUSE, FuseOSError, Operations = binding.FUSE, binding.FuseOSError, binding.Operations
    #: libfuse major version in use (3: 1 MiB requests; 2: 128 KiB)
    LIBFUSE_MAJOR = int(getattr(binding, "fuse_version_major", 2))
    LIBFUSE_MINOR = int(getattr(binding, "fuse_version_minor", 0))
except (ImportError, OSError, AttributeError) as _exc:  # binding missing, or no libfuse
    FUSE = None
    binding = None
    _FUSE_ERROR: Exception | None = _exc

    class Operations:  # type: ignore[no-redef]  # the stand-in when no binding loads
        pass

    class FuseOSError(OSError):  # type: ignore[no-redef]  # the stand-in, as above
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


#: fuse_common.h's capability bit: reply data may be spliced into /dev/fuse. (Not
#: FUSE_CAP_SPLICE_MOVE: moving would take whole pages out of the block files' page cache,
#: so the next hit on that block would go to disk.)
FUSE_CAP_SPLICE_WRITE = 1 << 7
FUSE_BUF_IS_FD = 1 << 1
FUSE_BUF_FD_SEEK = 1 << 2


def splice_supported() -> bool:
    """Whether replies can be spliced: libfuse 3 with the ``fuse_buf`` layout known here
    (3.17 added a field)."""
    return FUSE is not None and LIBFUSE_MAJOR == 3 and LIBFUSE_MINOR < 17



class _FuseBuf(ctypes.Structure):
    """libfuse 3 (< 3.17) ``struct fuse_buf``."""

    _fields_ = [("size", ctypes.c_size_t), ("flags", ctypes.c_int), ("mem", ctypes.c_void_p),
                ("fd", ctypes.c_int), ("pos", ctypes.c_int64)]


@functools.lru_cache(maxsize=8)
def bufvec_type(n: int) -> type[ctypes.Structure]:
    """``struct fuse_bufvec`` with room for ``n`` buffers (C's trailing ``buf[1]`` array)."""
    return type(f"_FuseBufVec{n}", (ctypes.Structure,), {"_fields_": [
        ("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t),
        ("buf", _FuseBuf * n)]})


libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.restype = None
libc.free.argtypes = [ctypes.c_void_p]


def fill_bufvec(bv: Any, segments: list[tuple[int, int, int] | bytes],
                memory: Callable[[bytes], int]) -> None:
    """Fill ``bv`` (a ``bufvec_type(n)``, ``n >= len(segments)``) with ``segments`` in
    order: an ``(fd, offset, length)`` piece as a descriptor buffer (libfuse reads or
    splices it at that offset), bytes as a memory buffer at ``memory(segment)``."""
    bv.count, bv.idx, bv.off = max(1, len(segments)), 0, 0
    bv.buf[0].size, bv.buf[0].flags, bv.buf[0].mem = 0, 0, None
    for b, seg in zip(bv.buf, segments):
        if isinstance(seg, tuple):
            b.fd, b.pos, b.size = seg
            b.flags, b.mem = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK, None
        else:
            b.size, b.flags, b.mem, b.fd, b.pos = len(seg), 0, memory(seg), -1, 0


def build_bufvec(segments: list[tuple[int, int, int] | bytes]) -> int:
    """A ``malloc``-ed ``fuse_bufvec`` holding ``segments`` in order, as libfuse's
    ``read_buf`` wants it (libfuse frees it, and the memory of byte buffers, with
    ``free``; it never closes descriptors). Returns its address."""
    T = bufvec_type(max(1, len(segments)))
    p: int = libc.malloc(ctypes.sizeof(T))
    if not p:
        raise MemoryError("fuse_bufvec")
    mems: list[int] = []

    def copy_out(seg: bytes) -> int:  # libfuse frees it after the reply
        m = libc.malloc(max(1, len(seg)))
        if not m:
            raise MemoryError("fuse_buf")
        mems.append(m)
        ctypes.memmove(m, seg, len(seg))
        return int(m)

    try:
        fill_bufvec(T.from_address(p), segments, copy_out)
    except BaseException:
        for m in mems:
            libc.free(m)
        libc.free(p)
        raise
    return p
