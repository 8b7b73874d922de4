"""Whether a cache directory can be trusted: nobody else can have written what it serves.

A block file is served as the bytes of a remote object, so whoever can write the cache
directory can answer every read made through it. The store therefore refuses (as ``ssh``
refuses a key file others may write) a cache directory in which another local user could
have put, swapped or linked anything:

* the directory, each entry of it the cache uses (``blocks/`` and its fan-out folders,
  ``tmp/``, the index and its journals, ``lock``, ``users``, ``stats/``, the daemon's and the
  mount's files) must be owned by this user (or root), and none may be writable by other
  users; no entry may be a symbolic link (a link could point a write of ours — a log line —
  at a file of another user's choosing, or a read at another user's file);
* every folder above it must be owned by this user or root and be writable by nobody else,
  unless it is sticky (``/tmp``: others may create there, not rename or remove our entries).

A *shared* cache (``cache_mode`` with group bits, e.g. ``0o640`` or ``0o660``) is a
deliberate choice to trust one group: its entries may belong to other users of the
directory's group and may be group-writable when the mode is; world-writable entries are
refused in every mode (``cache_mode`` itself may not grant other users anything,
:func:`aicache.datacache.store.check_cache_mode`).

Every cache file is also opened with ``O_NOFOLLOW``, so a link created after this check is
refused when it is opened rather than followed.
"""

from __future__ import annotations

import os
import stat

from aicache.errors import BadInput

#: the entries of a cache directory that the cache opens (each checked when present)
ENTRIES = ("blocks", "tmp", "index.sqlite", "index.sqlite-wal", "index.sqlite-shm",
           "index.sqlite-journal", "lock", "users", "stats", "daemon.lock", "daemon.log",
           "mount.log", "policy.sock")


def _fix(cache_dir: str) -> str:
    return (f"give a --cache-dir only you can write (the default is under ~/.cache), or remove "
            f"{cache_dir!r} and let aicache create it")


def _refuse(cache_dir: str, path: str, why: str) -> BadInput:
    return BadInput(f"cache dir {cache_dir!r} is not safe to use: {path} {why}; {_fix(cache_dir)}")


def _trusted_owner(uid: int, me: int) -> bool:
    return uid == me or uid == 0


def check_cache_dir_trust(cache_dir: str, file_mode: int) -> None:
    """BadInput (one line, naming the entry and the fix) unless ``cache_dir`` and its
    entries could only have been written by this user (or, in a shared ``file_mode``, the
    directory's group); see the module docstring. A missing directory is fine (the caller
    creates it), as are missing entries."""
    me = os.geteuid()
    shared = bool(file_mode & 0o070)
    group_write = bool(file_mode & 0o020)
    d = os.path.abspath(cache_dir)
    # the folders above it, as given (a link among them must be ours) and as resolved
    parts = d.split(os.sep)
    for i in range(2, len(parts)):
        p = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):  # made (or refused) later
            break
        if stat.S_ISLNK(st.st_mode) and not _trusted_owner(st.st_uid, me):
            raise _refuse(d, p, f"is a symbolic link owned by uid {st.st_uid}")
    real = os.path.realpath(d)
    p = os.path.dirname(real)
    while True:
        try:
            up: os.stat_result | None = os.stat(p)
        except (FileNotFoundError, NotADirectoryError):  # made (or refused) later
            up = None
        if up is not None:
            st = up
            sticky = bool(st.st_mode & stat.S_ISVTX)
            if not sticky and not shared and not _trusted_owner(st.st_uid, me):
                raise _refuse(d, p, f"(a folder above it) is owned by uid {st.st_uid}, who can "
                                    "replace it")
            w = st.st_mode & (0o002 if shared else 0o022)
            if w and not sticky:
                raise _refuse(d, p, f"(a folder above it) is writable by other users "
                                    f"(mode {stat.S_IMODE(st.st_mode):04o})")
        if p == os.path.dirname(p):
            break
        p = os.path.dirname(p)
    try:
        top = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):  # made (or refused) later
        return
    paths = [real] + [os.path.join(real, n) for n in ENTRIES]
    blocks = os.path.join(real, "blocks")
    if os.path.isdir(blocks) and not os.path.islink(blocks):
        paths += [os.path.join(blocks, n) for n in sorted(os.listdir(blocks))]
    for p in paths:
        try:
            st = top if p == real else os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):  # made (or refused) later
            continue
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(d, p, "is a symbolic link")
        if not _trusted_owner(st.st_uid, me) and not (shared and st.st_gid == top.st_gid):
            raise _refuse(d, p, f"is owned by uid {st.st_uid}, not by you")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o002 or (mode & 0o020 and not group_write):
            raise _refuse(d, p, f"is writable by other users (mode {mode:04o})")
