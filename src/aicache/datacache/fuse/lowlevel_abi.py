"""libfuse 3's low-level C interface as ctypes sees it: the structures, the operation table
and the functions :mod:`.lowlevel` calls.

Structures are libfuse 3.x's as of 3.14 (``fuse_lowlevel_ops`` is passed with its size, so
later appended operations stay unset); 3.17 changed ``fuse_file_info``/``fuse_conn_info``,
so :func:`supported` limits the low-level driver to 3.x before 3.17.
"""

from __future__ import annotations

import ctypes
from typing import Any

from aicache.datacache.fuse.binding import FUSE, LIBFUSE_MAJOR, LIBFUSE_MINOR
from aicache.datacache.fuse.binding import binding as binding  # re-exported to .lowlevel

c_req = ctypes.c_void_p
c_ino = ctypes.c_uint64
c_off = ctypes.c_int64
P = ctypes.POINTER


class FileInfo(ctypes.Structure):
    """``struct fuse_file_info`` (libfuse 3.0–3.16)."""

    _fields_ = [("flags", ctypes.c_int),
                ("writepage", ctypes.c_uint, 1), ("direct_io", ctypes.c_uint, 1),
                ("keep_cache", ctypes.c_uint, 1), ("flush", ctypes.c_uint, 1),
                ("nonseekable", ctypes.c_uint, 1), ("flock_release", ctypes.c_uint, 1),
                ("cache_readdir", ctypes.c_uint, 1), ("noflush", ctypes.c_uint, 1),
                ("padding", ctypes.c_uint, 24), ("padding2", ctypes.c_uint, 32),
                ("fh", ctypes.c_uint64), ("lock_owner", ctypes.c_uint64),
                ("poll_events", ctypes.c_uint32)]


class ConnInfo(ctypes.Structure):
    """``struct fuse_conn_info`` (libfuse 3.0–3.16)."""

    _fields_ = [(n, ctypes.c_uint) for n in (
        "proto_major", "proto_minor", "max_write", "max_read", "max_readahead", "capable",
        "want", "max_background", "congestion_threshold", "time_gran")] + [
        ("reserved", ctypes.c_uint * 22)]


class ForgetData(ctypes.Structure):
    _fields_ = [("ino", ctypes.c_uint64), ("nlookup", ctypes.c_uint64)]


class Args(ctypes.Structure):
    _fields_ = [("argc", ctypes.c_int), ("argv", P(ctypes.c_char_p)), ("allocated", ctypes.c_int)]


_CB = ctypes.CFUNCTYPE
_FI = P(FileInfo)
CALLBACK_TYPES: dict[str, Any] = {
    "init": _CB(None, ctypes.c_void_p, P(ConnInfo)),
    "destroy": _CB(None, ctypes.c_void_p),
    "lookup": _CB(None, c_req, c_ino, ctypes.c_char_p),
    "forget": _CB(None, c_req, c_ino, ctypes.c_uint64),
    "getattr": _CB(None, c_req, c_ino, _FI),
    "open": _CB(None, c_req, c_ino, _FI),
    "read": _CB(None, c_req, c_ino, ctypes.c_size_t, c_off, _FI),
    "release": _CB(None, c_req, c_ino, _FI),
    "opendir": _CB(None, c_req, c_ino, _FI),
    "readdir": _CB(None, c_req, c_ino, ctypes.c_size_t, c_off, _FI),
    "releasedir": _CB(None, c_req, c_ino, _FI),
    "statfs": _CB(None, c_req, c_ino),
    "forget_multi": _CB(None, c_req, ctypes.c_size_t, P(ForgetData)),
}
#: ``struct fuse_lowlevel_ops`` in declaration order (3.14); unset ones stay NULL (ENOSYS)
_OPS_ORDER = (
    "init", "destroy", "lookup", "forget", "getattr", "setattr", "readlink", "mknod", "mkdir",
    "unlink", "rmdir", "symlink", "rename", "link", "open", "read", "write", "flush", "release",
    "fsync", "opendir", "readdir", "releasedir", "fsyncdir", "statfs", "setxattr", "getxattr",
    "listxattr", "removexattr", "access", "create", "getlk", "setlk", "bmap", "ioctl", "poll",
    "write_buf", "retrieve_reply", "forget_multi", "flock", "fallocate", "readdirplus",
    "copy_file_range", "lseek")


class LowLevelOps(ctypes.Structure):
    _fields_ = [(n, CALLBACK_TYPES.get(n, ctypes.c_void_p)) for n in _OPS_ORDER]


def supported() -> bool:
    """libfuse 3 before 3.17 (the structure layouts above), loaded by the binding."""
    return FUSE is not None and LIBFUSE_MAJOR == 3 and LIBFUSE_MINOR < 17 and lib() is not None


def libfuse_version() -> str:
    return f"libfuse {LIBFUSE_MAJOR}.{LIBFUSE_MINOR}" if FUSE is not None else "no libfuse"


def lib() -> Any:
    """libfuse with the low-level functions' signatures declared (None: no libfuse)."""
    libfuse = getattr(binding, "_libfuse", None) if FUSE is not None else None
    if libfuse is None or getattr(lib, "done", False):
        return libfuse
    for name, res, args in (
            ("fuse_session_new", ctypes.c_void_p, [P(Args), P(LowLevelOps), ctypes.c_size_t, ctypes.c_void_p]),
            ("fuse_session_mount", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
            ("fuse_session_unmount", None, [ctypes.c_void_p]),
            ("fuse_session_destroy", None, [ctypes.c_void_p]),
            ("fuse_session_loop", ctypes.c_int, [ctypes.c_void_p]),
            ("fuse_session_exit", None, [ctypes.c_void_p]),
            ("fuse_set_signal_handlers", ctypes.c_int, [ctypes.c_void_p]),
            ("fuse_remove_signal_handlers", None, [ctypes.c_void_p]),
            ("fuse_daemonize", ctypes.c_int, [ctypes.c_int]),
            ("fuse_reply_err", ctypes.c_int, [c_req, ctypes.c_int]),
            ("fuse_reply_none", None, [c_req]),
            ("fuse_reply_entry", ctypes.c_int, [c_req, ctypes.c_void_p]),
            ("fuse_reply_attr", ctypes.c_int, [c_req, ctypes.c_void_p, ctypes.c_double]),
            ("fuse_reply_open", ctypes.c_int, [c_req, _FI]),
            ("fuse_reply_data", ctypes.c_int, [c_req, ctypes.c_void_p, ctypes.c_int]),
            ("fuse_reply_buf", ctypes.c_int, [c_req, ctypes.c_void_p, ctypes.c_size_t]),
            ("fuse_reply_statfs", ctypes.c_int, [c_req, ctypes.c_void_p]),
            ("fuse_add_direntry", ctypes.c_size_t,
             [c_req, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p, c_off])):
        fn = getattr(libfuse, name)
        fn.restype, fn.argtypes = res, args
    lib.done = True  # type: ignore[attr-defined]  # a set-up-once flag on the function
    return libfuse


def address_of(data: bytes) -> int:
    """Where ``data``'s bytes are (valid while ``data`` lives; never written)."""
    return int(ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0)


_ENTRY: list[Any] = []


def entry_type() -> Any:
    """``struct fuse_entry_param`` (built once: it embeds the binding's ``struct stat``)."""
    if not _ENTRY:
        class EntryParam(ctypes.Structure):
            _fields_ = [("ino", c_ino), ("generation", ctypes.c_uint64), ("attr", binding.c_stat),
                        ("attr_timeout", ctypes.c_double), ("entry_timeout", ctypes.c_double)]

        _ENTRY.append(EntryParam)
    return _ENTRY[0]
