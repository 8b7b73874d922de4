"""The hit path: a block's bytes, a range of them, or a descriptor to splice from — lock-free.

A hit costs open + fstat + one ``pread`` of exactly the payload + close (no
over-allocation, no copy after the read). A verified block read a second time is kept
*mapped* (:mod:`aicache.datacache.mapped`): its next hits are one ``stat`` and a ``memcpy``
without the GIL. In ``stat`` mode a block is hashed once per content version: after a read
verified it, the file's ``fstat`` signature is remembered (once its ``ctime`` is
``racy_window_s`` old) and later reads of the same signature skip the hash; a range
(:meth:`BlockReads.range_fd`) is only ever served from a file version verified here.

:class:`BlockReads` never changes the index or unlinks a file: a refused block is reported
as a :class:`~aicache.datacache.store.format.Fault` and the store drops it under its lock.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from aicache.datacache.keys import BlockKey
from aicache.datacache.mapped import MappedBlocks
from aicache.datacache.store.format import (HEADER_SIZE, Fault, VerifyMode, checksum_ok,
                                            header_fault, key_identity)

#: bound on the ``stat`` memo (entries are ~200 bytes; evicted oldest-first)
VERIFIED_MEMO_MAX = 1 << 16
#: bound on the key → (path, identity) memo
_PATHS_MAX = 1 << 20

#: ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` of a block file
Sig = tuple[int, int, int, int, int]


class BlockReads:
    """Reads of one store's block files, with the memos that make repeated hits cheap."""

    def __init__(self, blocks_dir: str, block_size: int, verify: VerifyMode,
                 racy_window_s: float, mapped: MappedBlocks) -> None:
        self.blocks_dir = blocks_dir
        self.block_size = block_size
        self._mode = verify
        # the mode as two flags: an enum member lookup costs more than the test on a hit
        self._full = verify is VerifyMode.FULL
        self._hashes = verify is not VerifyMode.NONE
        #: verified blocks kept mapped (none in ``full`` mode: every read hashes anyway)
        self.mapped = mapped
        #: ``stat`` mode remembers a block only once its ctime is this old (nanoseconds)
        self.racy_ns = int(racy_window_s * 1e9)
        #: stat mode: key -> (stat signature, payload length) of blocks verified here
        self._verified: dict[BlockKey, tuple[Sig, int]] = {}
        #: key -> (file path, expected header identity): a memo, not a second index
        self._paths: dict[BlockKey, tuple[str, bytes]] = {}

    @property
    def verify_mode(self) -> VerifyMode:
        """When a read hashes the block (fixed for the reader's life)."""
        return self._mode

    def where(self, key: BlockKey) -> tuple[str, bytes]:
        """(file path, expected header identity) of ``key`` — memoised, bounded."""
        w = self._paths.get(key)
        if w is None:
            d = key.digest(self.block_size)
            w = (f"{self.blocks_dir}/{d[:2]}/{d}.blk", key_identity(key, self.block_size))
            if len(self._paths) >= _PATHS_MAX:
                self._paths.clear()
            self._paths[key] = w
        return w

    def forget(self, key: BlockKey) -> None:
        """Stop trusting ``key``'s verified file version (it is being dropped)."""
        self._verified.pop(key, None)

    def get(self, key: BlockKey) -> bytes | Fault | None:
        """The block's bytes; None when absent; a Fault when the file at its name must
        be dropped (CORRUPT, MISPLACED, or WRONG_TYPE: not a regular file).

        Whether the checksum is computed depends on :attr:`verify_mode`; the header's
        identity is compared on every read that is not of an already verified file
        version."""
        path, ident = self.where(key)
        maps = self.mapped
        if maps.max_bytes:
            data = maps.copy(path)  # only ever holds verified files (stat/none modes)
            if data is not None:
                return data
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a miss; ``blocks/ab`` a file or a link loop is also removed
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                return Fault.WRONG_TYPE
            return None
        data = None
        fault = Fault.CORRUPT
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a directory where the block should be
                return Fault.WRONG_TYPE
            n = st.st_size - HEADER_SIZE
            sig: Sig | None
            if self._full:
                sig = None
            else:
                sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                if self._verified.get(key) == (sig, n):  # this content version was verified
                    if maps.max_bytes:  # its second read: keep it mapped from now on
                        data = maps.admit(path, fd, sig, HEADER_SIZE, n)
                        if data is not None:
                            return data
                    data = os.pread(fd, n, HEADER_SIZE)
                    if len(data) == n:
                        return data
                    data = None  # shrank under us: fall through to a checked read
            if 0 <= n <= self.block_size:
                head = os.pread(fd, HEADER_SIZE, 0)
                fault = header_fault(head, ident, n)
                if fault is Fault.OK:
                    data = os.pread(fd, n, HEADER_SIZE)
                    if len(data) != n or (self._hashes and not checksum_ok(head, data)):
                        data, fault = None, Fault.CORRUPT
                    elif sig is not None and time.time_ns() - st.st_ctime_ns > self.racy_ns:
                        v = self._verified
                        if len(v) >= VERIFIED_MEMO_MAX:
                            try:  # oldest first (dict order); another thread may race us
                                del v[next(iter(v))]
                            except (RuntimeError, KeyError, StopIteration):
                                pass
                        v[key] = (sig, n)
        finally:
            os.close(fd)
        if data is not None:
            return data
        self._verified.pop(key, None)
        return fault

    def serves_ranges(self, key: BlockKey) -> bool:
        """Whether :meth:`range_fd` may serve ``key`` (it was verified in this process and
        the mode is not ``full``) — a memo lookup, no I/O."""
        return not self._full and key in self._verified

    def range_fd(self, key: BlockKey, start: int, end: int) -> tuple[int, int, int] | None:
        """An open descriptor of ``key``'s block file if its current version was verified
        here, and where ``[start, end)`` (clipped) lies in it: ``(fd, file offset,
        length)``; the caller closes ``fd``. None otherwise."""
        seen = self._verified.get(key)
        if seen is None or self._full:
            return None
        try:
            fd = os.open(self.where(key)[0], os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            sig, n = seen
            end = min(end, n)
            if ((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == sig
                    and 0 <= start <= end):
                return fd, HEADER_SIZE + start, end - start
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        return None

    def get_range(self, key: BlockKey, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (clipped) of a verified file version (:meth:`range_fd`)."""
        got = self.range_fd(key, start, end)
        if got is None:
            return None
        fd, pos, want = got
        try:
            data = os.pread(fd, want, pos)
        finally:
            os.close(fd)
        return data if len(data) == want else None

    def get_range_into(self, key: BlockKey, start: int, buf: memoryview) -> int | None:
        """:meth:`get_range` of ``[start, start + len(buf))`` read straight into ``buf``;
        the bytes written (short at the block's end), or None."""
        got = self.range_fd(key, start, start + len(buf))
        if got is None:
            return None
        fd, pos, want = got
        try:
            n = os.preadv(fd, [buf[:want]], pos)
        finally:
            os.close(fd)
        return n if n == want else None
