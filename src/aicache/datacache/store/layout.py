"""Where a cache directory keeps what, and the file operations on it.

Layout of ``cache_dir``::

    index.sqlite   the index (:mod:`.index`)
    lock           fcntl lock file: every index *mutation* and eviction holds LOCK_EX
    users          the budget's users (:mod:`aicache.datacache.budget`)
    blocks/ab/<key>.blk   one file per block (:mod:`.format`)
    tmp/           blocks being written (``<pid>-<thread>-<n>.tmp``), renamed into ``blocks/``

Every entry is owner-only by default (directories 0700, files 0600, block files 0400);
``cache_mode`` (e.g. ``0o640``) makes a deliberately shared cache, directories getting
``x`` wherever the mode has ``r``. Every cache file is opened with ``O_NOFOLLOW``, and an
entry of the wrong type where a block should be is removed (``blocks/`` is the store's own
namespace). :class:`Layout` holds no lock and no index: the store calls it under its lock.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
from collections.abc import Iterator

from aicache.datacache.counters import pid_alive
from aicache.datacache.trust import check_cache_dir_trust

#: default mode of cache files (directories get ``x`` where the mode has ``r``)
DEFAULT_CACHE_MODE = 0o600


class CacheDirDamaged(OSError):
    """An entry of the cache directory has the wrong type (``blocks/`` a file, ``lock`` a
    directory…): the store cannot run there until ``aicache cache clear`` repairs it."""


class StoreFull(OSError):
    """The local disk is full (ENOSPC): the block was not stored."""


def dir_mode(file_mode: int) -> int:
    """The directory mode for a cache ``file_mode``: ``x`` wherever ``r`` is set."""
    return file_mode | ((file_mode & 0o444) >> 2)


def check_cache_mode(mode: int | str) -> int:
    """``cache_mode`` as an int (``0o600``, ``"0640"``, ``"640"``); BadInput unless the
    owner may read and write, no bit beyond ``0o666`` is set and other users get nothing
    (a world-writable cache lets any user rewrite what every reader is served; a shared
    cache is a group's, :mod:`aicache.datacache.trust`)."""
    from aicache.errors import BadInput

    try:
        m = int(mode, 8) if isinstance(mode, str) else int(mode)
    except ValueError:
        m = -1
    if m < 0 or m & ~0o666 or m & 0o600 != 0o600 or m & 0o007:
        raise BadInput(f"cache mode {mode!r} is not an octal file mode the owner can read and "
                       "write, with no x bits and nothing for other users; give e.g. 0600 "
                       "(private, the default) or 0640 / 0660 (shared with the group)")
    return m


class Layout:
    """The paths of one cache directory and the file operations the store does there."""

    def __init__(self, cache_dir: str | os.PathLike[str], file_mode: int) -> None:
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.file_mode = file_mode
        self.dir_mode = dir_mode(file_mode)
        self.blocks_dir = os.path.join(self.cache_dir, "blocks")
        self.tmp_dir = os.path.join(self.cache_dir, "tmp")
        self.index_path = os.path.join(self.cache_dir, "index.sqlite")
        self.lock_path = os.path.join(self.cache_dir, "lock")
        self.users_path = os.path.join(self.cache_dir, "users")
        self._tmp_mutex = threading.Lock()
        self._tmp_counter = 0

    def block_path(self, digest: str) -> str:
        """The file of the block named ``digest`` (:meth:`BlockKey.digest`)."""
        return f"{self.blocks_dir}/{digest[:2]}/{digest}.blk"

    def prepare(self) -> None:
        """Check the directory may be trusted, create it and ``blocks/``, ``tmp/`` with
        their modes; CacheDirDamaged when one of them, or ``lock``, has the wrong type."""
        check_cache_dir_trust(self.cache_dir, self.file_mode)
        created = not os.path.lexists(self.cache_dir)
        os.makedirs(self.cache_dir, mode=self.dir_mode, exist_ok=True)
        if created or os.path.exists(self.index_path):  # ours: never chmod a directory
            own_mode(self.cache_dir, self.dir_mode)      # we were handed
        for d in (self.blocks_dir, self.tmp_dir):
            self._make_dir(d)
        lock = self.lock_path
        if os.path.lexists(lock) and not os.path.isfile(lock):
            raise CacheDirDamaged(errno.EISDIR, f"{lock} is not a regular file; run "
                                  f"`aicache cache clear --cache-dir {self.cache_dir}`")

    def _make_dir(self, d: str) -> None:
        if os.path.lexists(d) and not os.path.isdir(d):
            raise CacheDirDamaged(errno.ENOTDIR, f"{d} is not a directory; run "
                                  f"`aicache cache clear --cache-dir {self.cache_dir}`")
        os.makedirs(d, mode=self.dir_mode, exist_ok=True)
        own_mode(d, self.dir_mode)

    @staticmethod
    def repair(cache_dir: str | os.PathLike[str]) -> list[str]:
        """Remove the cache directory's entries that have the wrong type; the paths
        removed (see :meth:`BlockStore.repair_layout`)."""
        d = os.fspath(cache_dir)
        removed = []
        for name, want_dir in (("blocks", True), ("tmp", True), ("lock", False),
                               ("index.sqlite", False), ("users", False), ("stats", True)):
            p = os.path.join(d, name)
            if not os.path.lexists(p):
                continue
            if (os.path.isdir(p) and not os.path.islink(p)) != want_dir:
                remove_any(p)
                removed.append(p)
        return removed

    # -- writing a block ------------------------------------------------------------------
    def tmp_name(self) -> str:
        """A temp file name no other writer uses (its pid first: :meth:`sweep_tmp`)."""
        with self._tmp_mutex:
            self._tmp_counter += 1
            n = self._tmp_counter
        return os.path.join(self.tmp_dir, f"{os.getpid()}-{threading.get_ident()}-{n}.tmp")

    def write_tmp(self, tmp: str, header: bytes, data: bytes, fsync: bool) -> None:
        """Write a block's file at ``tmp`` (read-only from birth); StoreFull on ENOSPC,
        nothing left behind on any error."""
        try:
            # read-only: a block file is never written in place, and nobody but root can
            # truncate it under a reader's mapping (aicache.datacache.mapped)
            mode = self.file_mode & 0o444
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            try:
                if self.file_mode != DEFAULT_CACHE_MODE:  # the umask may have narrowed it
                    os.fchmod(fd, mode)
                write_all(fd, header)
                write_all(fd, data)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            unlink(tmp)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreFull(exc.errno, f"cache disk full writing a block: {exc.strerror}") from exc
            raise

    def rename_in(self, tmp: str, path: str) -> None:
        """``rename`` a written block into place, first removing what has the wrong type
        there (a directory at the block's name, a file at ``blocks/ab``)."""
        parent = os.path.dirname(path)
        if os.path.lexists(parent) and not os.path.isdir(parent):
            remove_any(parent)
        if not os.path.isdir(parent):
            os.mkdir(parent, self.dir_mode)
            own_mode(parent, self.dir_mode)
        if os.path.lexists(path) and not os.path.isfile(path):
            remove_any(path)
        os.rename(tmp, path)

    # -- what is on disk ------------------------------------------------------------------
    def block_files(self) -> Iterator[tuple[str, str]]:
        """(digest, path) of every ``*.blk`` file under ``blocks/``."""
        for sub in listdir(self.blocks_dir):
            subdir = os.path.join(self.blocks_dir, sub)
            for name in listdir(subdir):
                if name.endswith(".blk"):
                    yield name[:-4], os.path.join(subdir, name)

    def sweep_blocks(self, known: set[str] | dict[str, int]) -> set[str]:
        """Unlink every block file whose digest is not in ``known`` (renamed in, never
        committed) and whatever under ``blocks/`` is not a directory; the digests of
        ``known`` that have a file."""
        on_disk = set()
        for sub in listdir(self.blocks_dir):
            subdir = os.path.join(self.blocks_dir, sub)
            if not os.path.isdir(subdir) or os.path.islink(subdir):
                remove_any(subdir)  # blocks/ holds only the store's own directories
                continue
            for name in listdir(subdir):
                if not name.endswith(".blk"):
                    continue
                digest = name[:-4]
                if digest not in known:
                    unlink(os.path.join(subdir, name))
                else:
                    on_disk.add(digest)
        return on_disk

    def sweep_tmp(self) -> None:
        """Unlink the temp files of processes that are gone."""
        for name in listdir(self.tmp_dir):
            if not live_tmp(name):
                unlink(os.path.join(self.tmp_dir, name))

    def disk_bytes(self) -> int:
        """Apparent bytes of all block and temp files on disk (the budget check's truth)."""
        total = 0
        for root in (self.blocks_dir, self.tmp_dir):
            for dirpath, _dirs, files in os.walk(root):
                for name in files:
                    try:
                        total += os.stat(os.path.join(dirpath, name)).st_size
                    except FileNotFoundError:
                        pass
        return total


def own_mode(path: str, mode: int) -> None:
    """Give ``path`` exactly ``mode`` if this user owns it (an earlier release's
    world-readable entries become owner-only; the umask cannot narrow a shared mode)."""
    st = os.stat(path)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)


def open_file(path: str, flags: int, mode: int) -> int:
    """Open (creating with ``mode``) a cache file, never through a link; give it ``mode``
    if this user owns it."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, mode)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def no_follow(path: str, flags: int) -> int:
    """An ``open`` opener that refuses a symbolic link (ELOOP) instead of following it."""
    return os.open(path, flags | os.O_NOFOLLOW)


def remove_any(path: str) -> None:
    """Remove ``path`` whatever its type (a directory tree, a file, a link)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        unlink(path)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def live_tmp(name: str) -> bool:
    """Whether temp file ``name`` (``<pid>-…``) belongs to a live process."""
    pid = name.split("-", 1)[0]
    return pid.isdigit() and pid_alive(int(pid))
