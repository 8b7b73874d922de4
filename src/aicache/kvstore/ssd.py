"""SSD tier of the real KV store: fixed-slot slab files, asynchronous I/O, checksums,
crash recovery by header scan, write accounting and a byte budget that holds.

Layout. A cache directory holds ``meta.json`` (geometry) and slab files
``slab-NNNNN.bin`` of ``slab_slots`` slots each. A slot is ``HEADER_BYTES`` (4 KiB) of
header followed by the payload area rounded up to 4 KiB, so every payload starts and ends
on a 4 KiB boundary and O_DIRECT can be used. Slab files are created lazily and reserved
with ``posix_fallocate`` (ENOSPC surfaces when a slab is created, not halfway through a
block); the number of slots is ``budget // slot_disk_bytes``, so the files can never
exceed the byte budget.

Why per-slot headers rather than SQLite WAL (the choice the brief left open): the header
is written with the payload by the same I/O thread, so the index and the data cannot
disagree, recovery is one sequential scan with no second file to keep consistent, and the
hot path has no database transaction. The header holds magic, format version, a sequence
number, namespace, block key, the *chain identity* of the block's parent, token count, payload
length, SARIA's E/R counters at write time, an xxh3-64 checksum of the payload and a CRC of
the header itself.

Identity is the whole chain. A block hash names a block only under its prefix (two prompts
may repeat a hash under different parents), so a block is identified by
``chain_id(parent's id, key)`` — a 128-bit BLAKE2b digest chained from ``root_id(namespace)``
— exactly as the radix tree identifies it by its path. Recovery links a block to the block
whose identity is its parent id (never to a block that merely has the parent's key), keeps
the newest copy per identity, and a read checks the slot's identity against the one the
caller expects, so a block is never served under another prefix, in this process or after
a restart.

Open. The directory is locked (one owner process) and every failure of the open releases
the lock. ``meta.json`` holds the geometry; a damaged one is a :class:`BadInput` naming the
file and the fix. The SSD budget is checked against the filesystem's free space at every
open: slab files still to be created (they are created lazily) must fit. A first open
(no slab yet) whose budget does not fit fails with a one-line :class:`BadInput` naming the
budget and the free space; a reopen of a store that holds slabs (a disk another writer
filled since) is not refused — its blocks are intact and worth serving — but opens with
the budget capped to its slabs plus the free space (a warning names both), dropping only
slots past the cap. A slab whose
allocation fails later (another writer filled the disk) is removed again, so no partial slab
is left behind; the store stops SSD admissions instead.

Crash safety. A block is written payload first, header second; a freed slot's header is
invalidated (zeroed magic) *before* the slot can be reused. A process killed between the
two writes leaves either no valid header or an old header whose checksum does not match
the new payload, so recovery drops the slot. Power loss may reorder writes: the payload
checksum catches that too, at recovery and again on every read — a torn block is never
served. Writes are not fsync'ed one by one (like LMCache's local-disk backend);
:meth:`SlabStore.flush` syncs when durability against power loss is wanted.

Threading: one owner thread calls :class:`SlabStore`; reads and writes run in a thread
pool and return futures. A read of a slot whose write is still in flight waits for it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import mmap
import os
import struct
import threading
import time
import warnings
import zlib
from collections.abc import Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from aicache.errors import BadInput

ALIGN = 4096
HEADER_BYTES = 4096
MAGIC = b"AICKVBLK"
FORMAT_VERSION = 2
#: write large payloads in chunks so a crash can land inside a block (tested)
CHUNK_BYTES = 8 << 20

_KEY_BYTES = 32
_NS_BYTES = 64
ID_BYTES = 16
# magic, version, flags, seq, payload_len, tokens, E, R, checksum,
# ns_len, ns, key_tag, key_len, key, parent_id
_HDR = struct.Struct(f"<8sHHQIIIIQB{_NS_BYTES}sBB{_KEY_BYTES}s{ID_BYTES}s")
_HDR_CRC = struct.Struct("<I")  # CRC32 of the packed header, right after it
_TAG_NONE, _TAG_INT, _TAG_BYTES, _TAG_STR = 0, 1, 2, 3


class DiskFull(OSError):
    """The SSD tier ran out of space (ENOSPC/EDQUOT)."""


class CorruptBlock(IOError):
    """A slot's payload does not match its checksum (torn or damaged write)."""


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def encode_key(key: Hashable | None) -> tuple[int, bytes]:
    """A block key as (tag, bytes) for the header. Keys are ints (as vLLM/SGLang hash),
    bytes (≤ 32) or short str; anything else cannot be recovered after a restart."""
    if key is None:
        return _TAG_NONE, b""
    if isinstance(key, bool):
        raise BadInput(f"block hash {key!r}: use int, bytes or str hashes")
    if isinstance(key, int):
        try:
            return _TAG_INT, key.to_bytes(_KEY_BYTES, "little", signed=True)
        except OverflowError:
            raise BadInput(f"block hash {key!r} exceeds 255 bits; hash it to 32 bytes") from None
    if isinstance(key, (bytes, bytearray)):
        if len(key) > _KEY_BYTES:
            raise BadInput(f"block hash of {len(key)} bytes exceeds {_KEY_BYTES}; use a 32-byte digest")
        return _TAG_BYTES, bytes(key)
    if isinstance(key, str):
        b = key.encode()
        if len(b) > _KEY_BYTES:
            raise BadInput(f"block hash {key!r} exceeds {_KEY_BYTES} UTF-8 bytes; use a digest")
        return _TAG_STR, b
    raise BadInput(f"block hash {key!r} of type {type(key).__name__}: use int, bytes or str")


def decode_key(tag: int, raw: bytes) -> Hashable | None:
    if tag == _TAG_NONE:
        return None
    if tag == _TAG_INT:
        return int.from_bytes(raw, "little", signed=True)
    if tag == _TAG_BYTES:
        return bytes(raw)
    if tag == _TAG_STR:
        return raw.decode()
    raise ValueError(f"bad key tag {tag}")


def root_id(namespace: str) -> bytes:
    """The chain identity of a namespace's root (the parent id of a prompt's first block)."""
    return hashlib.blake2b(encode_namespace(namespace), digest_size=ID_BYTES,
                           person=b"aicache-kv-root").digest()


def chain_id(parent_id: bytes, key: Hashable) -> bytes:
    """The identity of block ``key`` under the prefix whose identity is ``parent_id``:
    a digest of the whole chain, so equal keys under different prefixes differ."""
    tag, raw = encode_key(key)
    return hashlib.blake2b(parent_id + bytes((tag, len(raw))) + raw, digest_size=ID_BYTES,
                           person=b"aicache-kv-blk").digest()


def encode_namespace(ns: Hashable) -> bytes:
    if not isinstance(ns, str):
        raise BadInput(f"namespace {ns!r}: use a str such as 'model@adapter'")
    b = ns.encode()
    if len(b) > _NS_BYTES:
        raise BadInput(f"namespace {ns!r} exceeds {_NS_BYTES} UTF-8 bytes")
    return b


@dataclass(frozen=True, slots=True)
class BlockMeta:
    """What a slot header says about its block (persisted with the payload).
    ``parent_id`` is the chain identity of the block's prefix (:func:`root_id` for a
    prompt's first block); the block's own identity is :attr:`ident`."""

    namespace: str
    key: Hashable
    parent_id: bytes
    tokens: int
    length: int
    E: int = 0
    R: int = 0

    @property
    def ident(self) -> bytes:
        return chain_id(self.parent_id, self.key)


@dataclass(slots=True)
class RecoveredBlock:
    slot: int
    seq: int
    meta: BlockMeta
    ident: bytes


@dataclass(slots=True)
class SSDStats:
    """Write/read accounting. ``bytes_written`` counts every byte handed to the device
    (headers, padding and invalidations included) — the endurance cost."""

    blocks_written: int = 0
    payload_bytes_written: int = 0
    bytes_written: int = 0
    blocks_read: int = 0
    payload_bytes_read: int = 0
    checksum_failures: int = 0
    #: reads refused because the slot holds a block of another chain than expected
    identity_mismatches: int = 0
    write_errors: int = 0
    recovered_blocks: int = 0
    recovery_dropped: int = 0
    started: float = field(default_factory=time.monotonic)


def lifetime_days(bytes_written: int, elapsed_s: float, drive_bytes: int, dwpd: float = 1.0,
                  years: float = 5.0) -> float | None:
    """Days until a ``drive_bytes`` drive rated ``dwpd`` drive-writes/day for ``years``
    (endurance ``dwpd · 365 · years · capacity``, i.e. 1,825·C at 1 DWPD over 5 years)
    is worn out at the observed write rate; None before anything was written."""
    if bytes_written <= 0 or elapsed_s <= 0:
        return None
    endurance = dwpd * 365.0 * years * drive_bytes
    return endurance / (bytes_written / (elapsed_s / 86400.0))


def odirect_supported(directory: Path) -> bool:
    """Whether files in ``directory`` accept O_DIRECT (tmpfs and some overlays do not)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    probe = directory / f".odirect-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | flag, 0o600)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, ALIGN)
        try:
            os.pwrite(fd, buf, 0)
        except OSError:
            return False
        finally:
            buf.close()
        return True
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


class SlabStore:
    """Fixed-slot slab files with a free list and an async I/O pool.

    ``slot_bytes`` is the largest payload; ``budget_bytes`` bounds the files' total size.
    ``direct``: ``"auto"`` uses O_DIRECT where the filesystem supports it, ``False``
    never, ``True`` requires it. Opening a directory recovers its valid blocks
    (:attr:`recovered`); the caller decides which to keep (:meth:`free` the rest).
    """

    def __init__(self, directory: str | os.PathLike[str], slot_bytes: int, budget_bytes: int, *,
                 slab_bytes: int = 1 << 30, io_threads: int = 4, direct: bool | str = False,
                 verify_on_recovery: bool = True) -> None:
        self.dir = Path(directory)
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except FileExistsError:
            raise BadInput(f"{self.dir} exists and is not a directory; give the KV store a "
                           f"directory path") from None
        if self.dir.stat().st_uid == os.geteuid():  # KV blocks are users' prompts: owner-only
            os.chmod(self.dir, 0o700)
        self.slot_bytes = int(slot_bytes)
        self.payload_area = _align(self.slot_bytes)
        self.slot_disk_bytes = HEADER_BYTES + self.payload_area
        self.n_slots = max(0, int(budget_bytes) // self.slot_disk_bytes)
        self.budget_bytes = int(budget_bytes)
        self.slab_slots = max(1, int(slab_bytes) // self.slot_disk_bytes)
        self.direct = False
        self._fds: dict[int, int] = {}
        self._sized: set[int] = set()  # slabs whose full size is allocated
        self._read_fds: list[dict[int, int]] = []
        self._fd_lock = threading.Lock()
        self._stat_lock = threading.Lock()
        self._tls = threading.local()
        self._pending: dict[int, Future[Any]] = {}
        self._seq = 1
        self.stats = SSDStats()
        self.recovered: list[RecoveredBlock] = []
        self._free: list[int] = []
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._lock_fd = self._lock_dir()
        try:  # from here on every failure releases what was taken, the lock last
            self._check_meta()
            if direct == "auto":
                self.direct = odirect_supported(self.dir)
            elif direct:
                if not odirect_supported(self.dir):
                    raise BadInput(f"{self.dir}: the filesystem does not support O_DIRECT; "
                                   f"use direct='auto'")
                self.direct = True
            self._fit_budget()
            self._check_space()
            self._pool = ThreadPoolExecutor(max_workers=max(1, io_threads),
                                            thread_name_prefix="aicache-ssd")
            used = self._recover(verify_on_recovery)
        except BaseException:
            self._release()
            raise
        self._free = [s for s in range(self.n_slots - 1, -1, -1) if s not in used]

    # -- geometry / files --------------------------------------------------------------
    def _lock_dir(self) -> int:
        """One owner per directory (an flock, released by the kernel even on kill -9):
        two processes appending to the same slots would corrupt each other."""
        path = self.dir / "lock"
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as e:
            raise BadInput(f"{path} cannot be opened as the KV store's lock file "
                           f"({e.strerror}); remove it") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise BadInput(f"{self.dir} is used by another KV store process; give each "
                           f"process its own directory") from None
        return fd

    def _check_meta(self) -> None:
        """The directory's geometry must be ours; a new directory gets a ``meta.json``.
        A damaged one is refused (never rewritten): the slabs it describes may have
        another geometry, and guessing would read headers at the wrong offsets."""
        meta_path = self.dir / "meta.json"
        want = {"format": FORMAT_VERSION, "slot_bytes": self.slot_bytes,
                "header_bytes": HEADER_BYTES, "slab_slots": self.slab_slots}
        fix = (f"delete {self.dir} (its cached KV blocks are recomputed) or give the store "
               f"another directory")
        try:
            raw = meta_path.read_bytes()
        except FileNotFoundError:
            self._write_meta(meta_path, want)
            return
        except IsADirectoryError:
            raise BadInput(f"{meta_path} is a directory, not the KV store's geometry file; "
                           f"{fix}") from None
        except OSError as e:
            raise BadInput(f"{meta_path} cannot be read ({e.strerror}); {fix}") from None
        try:
            have = json.loads(raw)
        except ValueError:
            what = "empty" if not raw.strip() else "not valid JSON"
            raise BadInput(f"{meta_path} is {what}, not a KV store's geometry; {fix}") from None
        if not isinstance(have, dict) or not isinstance(have.get("format"), int):
            raise BadInput(f"{meta_path} is not a KV store's geometry (no format number); {fix}")
        if have["format"] != FORMAT_VERSION:
            raise BadInput(f"{self.dir} holds a KV store of format {have['format']}; this "
                           f"version reads format {FORMAT_VERSION}: {fix}")
        if have != want:
            raise BadInput(f"{self.dir} holds a KV store with geometry {have}, not {want}; "
                           f"use the same model/block size or another directory")

    def _write_meta(self, meta_path: Path, want: dict[str, int]) -> None:
        """Write ``meta.json`` durably (fsync, rename, fsync the directory): a power loss
        must not leave an empty one that refuses every later open."""
        tmp = meta_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(want).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, meta_path)
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _slab_files(self) -> Iterator[tuple[int, Path]]:
        for p in self.dir.glob("slab-*.bin"):
            try:
                yield int(p.stem.split("-")[1]), p
            except (IndexError, ValueError):
                continue

    def _fit_budget(self) -> None:
        """Reopened with a smaller budget: drop slabs (and slots) beyond it, so the files
        never exceed the budget; the blocks there are simply evicted."""
        n_slabs = -(-self.n_slots // self.slab_slots) if self.n_slots else 0
        for i, p in self._slab_files():
            if not p.is_file() or p.is_symlink():
                raise BadInput(f"{p} is not a regular file (a KV store slab must be one); "
                               f"remove it")
            if i >= n_slabs:
                p.unlink()
            elif p.stat().st_size > self._slab_size(i):
                os.truncate(p, self._slab_size(i))

    def _check_space(self) -> None:
        """The slab space still to be allocated must fit the filesystem's free space
        (slabs are created lazily, so a budget that does not fit would otherwise work until
        the disk fills mid-run)."""
        n_slabs = -(-self.n_slots // self.slab_slots) if self.n_slots else 0
        held = 0
        for i, p in self._slab_files():
            if i < n_slabs:
                held += p.stat().st_size
        need = self.n_slots * self.slot_disk_bytes - held
        st = os.statvfs(self.dir)
        free = st.f_bavail * st.f_frsize
        if need <= free:
            return
        if held:  # a reopen: serve what the slabs hold, within what the disk can give
            fits = (held + free) // self.slot_disk_bytes
            warnings.warn(f"SSD budget of {self.budget_bytes} B does not fit on {self.dir} "
                          f"any more ({free} B free); reopened with {fits} of {self.n_slots} "
                          f"slots ({fits * self.slot_disk_bytes} B) until space is freed",
                          stacklevel=3)
            self.n_slots = fits
            self._fit_budget()
            return
        raise BadInput(f"SSD budget of {self.budget_bytes} B ({self.budget_bytes / 2**20:.1f} "
                       f"MiB) does not fit on {self.dir}: {free} B ({free / 2**20:.1f} MiB) "
                       f"free, {need} B more needed; lower the SSD budget to at most "
                       f"{held + free} B or free disk space")

    def _slab_path(self, i: int) -> Path:
        return self.dir / f"slab-{i:05d}.bin"

    def _slab_size(self, i: int) -> int:
        return min(self.slab_slots, self.n_slots - i * self.slab_slots) * self.slot_disk_bytes

    def _fd(self, slab: int, create: bool) -> int:
        """The slab's read-write descriptor. ``create`` (a write): create the file and
        reserve its full size first. Without it (invalidating a header, recovery) an
        existing file is opened as it is — nothing is allocated, so a reopen of a full
        disk never fails on space it does not need."""
        fd = self._fds.get(slab)
        if fd is not None and (not create or slab in self._sized):
            return fd
        with self._fd_lock:
            fd = self._fds.get(slab)
            path = self._slab_path(slab)
            existed = fd is not None or path.exists()
            if fd is None:
                flags = os.O_RDWR | (os.O_CREAT if create else 0)
                if self.direct:
                    flags |= os.O_DIRECT
                fd = self._fds[slab] = os.open(path, flags, 0o600)
            if create and slab not in self._sized:
                self._reserve(slab, fd, path, existed)
            return fd

    def _reserve(self, slab: int, fd: int, path: Path, existed: bool) -> None:
        """Allocate the slab's full size. On failure no partial slab is left behind: a
        file this call created is removed, an older one is cut back to what it held (its
        blocks stay valid), so the next open sees exactly what was there before."""
        size = self._slab_size(slab)
        had = os.fstat(fd).st_size
        if had < size:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                    os.ftruncate(fd, size)  # no fallocate here: a sparse file of full size
                else:
                    if existed:  # the descriptor stays: other threads may hold it
                        os.ftruncate(fd, had)
                    else:  # nobody else can hold it: nothing is written before the reserve
                        del self._fds[slab]
                        try:
                            path.unlink()
                        finally:
                            os.close(fd)
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise DiskFull(e.errno, f"no space for slab {path}") from e
                    raise
        self._sized.add(slab)

    def _read_fd(self, slab: int) -> int:
        """A per-thread read descriptor: the kernel keeps readahead state per open file,
        so I/O threads sharing one descriptor would reset each other's readahead."""
        fds = getattr(self._tls, "fds", None)
        if fds is None:
            fds = self._tls.fds = {}
            with self._fd_lock:
                self._read_fds.append(fds)
        fd = fds.get(slab)
        if fd is None:  # a slot is read only once written, so its slab exists (and is sized)
            fd = fds[slab] = os.open(self._slab_path(slab),
                                     os.O_RDONLY | (os.O_DIRECT if self.direct else 0))
        return fd

    def _where(self, slot: int) -> tuple[int, int]:
        slab, i = divmod(slot, self.slab_slots)
        return slab, i * self.slot_disk_bytes

    def _bounce(self, nbytes: int) -> memoryview:
        """A per-thread page-aligned buffer (O_DIRECT needs aligned memory)."""
        buf = getattr(self._tls, "buf", None)
        if buf is None or len(buf) < nbytes:
            if buf is not None:
                buf.close()
            buf = mmap.mmap(-1, _align(max(nbytes, ALIGN)))
            self._tls.buf = buf
        return memoryview(buf)[:nbytes]

    # -- slots -------------------------------------------------------------------------
    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def used_slots(self) -> int:
        return self.n_slots - len(self._free)

    def alloc(self) -> int:
        if not self._free:
            raise DiskFull(errno.ENOSPC, f"all {self.n_slots} SSD slots are in use")
        return self._free.pop()

    def free(self, slot: int) -> None:
        """Invalidate the slot's header, then make it reusable (waits for its write)."""
        fut = self._pending.pop(slot, None)
        if fut is not None:
            fut.exception()
        self._invalidate(slot)
        self._free.append(slot)

    def _invalidate(self, slot: int) -> None:
        slab, off = self._where(slot)
        if slab in self._fds or self._slab_path(slab).exists():
            try:
                self._pwrite(self._fd(slab, False), self._zero_header(), off)
                self.stats.bytes_written += HEADER_BYTES
            except OSError:
                pass  # an unreadable header is as good as an invalid one

    def _zero_header(self) -> memoryview:
        z = getattr(self, "_zeros", None)
        if z is None:
            z = self._zeros = mmap.mmap(-1, HEADER_BYTES)
        return memoryview(z)

    def _pwrite(self, fd: int, data: Any, off: int) -> None:
        mv = memoryview(data).cast("B")
        if self.direct and (len(mv) % ALIGN or off % ALIGN):
            raise ValueError("O_DIRECT write must be aligned")
        while mv:
            n = os.pwrite(fd, mv, off)
            mv, off = mv[n:], off + n

    # -- writes ------------------------------------------------------------------------
    def write_async(self, slot: int, meta: BlockMeta, payload: np.ndarray) -> Future[Any]:
        """Write ``payload`` (flat uint8, alive until the future completes) and its header
        to ``slot``. The future's exception is :class:`DiskFull` on ENOSPC."""
        if payload.shape[0] != meta.length or meta.length > self.slot_bytes:
            raise ValueError("payload length does not match its metadata or the slot")
        assert self._pool is not None
        seq = self._seq
        self._seq += 1
        fut = self._pool.submit(self._write, slot, seq, meta, payload)
        self._pending[slot] = fut
        return fut

    def _write(self, slot: int, seq: int, meta: BlockMeta, payload: np.ndarray) -> int:
        slab, off = self._where(slot)
        try:
            fd = self._fd(slab, True)
            checksum = xxhash.xxh3_64_intdigest(payload.data)
            n = meta.length
            pay_off = off + HEADER_BYTES
            if self.direct:
                padded = _align(n)
                for start in range(0, padded, CHUNK_BYTES):
                    stop = min(padded, start + CHUNK_BYTES)
                    b = self._bounce(stop - start)
                    end = min(n, stop)
                    if end > start:
                        np.frombuffer(b, dtype=np.uint8)[: end - start] = payload[start:end]
                    self._pwrite(fd, b, pay_off + start)
                written = padded
            else:
                for start in range(0, n, CHUNK_BYTES):
                    self._pwrite(fd, payload[start:start + CHUNK_BYTES], pay_off + start)
                written = _align(n)  # the page cache writes back whole pages
            hdr = self._pack_header(seq, meta, checksum)
            hb = self._bounce(HEADER_BYTES)
            hb[:] = b"\0" * HEADER_BYTES
            hb[: len(hdr)] = hdr
            self._pwrite(fd, hb, off)
        except OSError as e:
            with self._stat_lock:
                self.stats.write_errors += 1
            if e.errno in (errno.ENOSPC, errno.EDQUOT) and not isinstance(e, DiskFull):
                raise DiskFull(e.errno, str(e)) from e
            raise
        with self._stat_lock:
            st = self.stats
            st.blocks_written += 1
            st.payload_bytes_written += n
            st.bytes_written += written + HEADER_BYTES
        return n

    @staticmethod
    def _pack_header(seq: int, meta: BlockMeta, checksum: int) -> bytes:
        ns = encode_namespace(meta.namespace)
        kt, kb = encode_key(meta.key)
        if len(meta.parent_id) != ID_BYTES:
            raise ValueError(f"parent id must be {ID_BYTES} bytes (root_id / chain_id)")
        body = _HDR.pack(MAGIC, FORMAT_VERSION, 0, seq, meta.length, meta.tokens,
                         min(meta.E, 0xFFFFFFFF), min(meta.R, 0xFFFFFFFF), checksum,
                         len(ns), ns, kt, len(kb), kb, meta.parent_id)
        return body + _HDR_CRC.pack(zlib.crc32(body))

    @staticmethod
    def _unpack_header(raw: bytes) -> tuple[int, BlockMeta, int] | None:
        if raw[:8] != MAGIC:
            return None
        body = raw[: _HDR.size]
        (crc,) = _HDR_CRC.unpack_from(raw, _HDR.size)
        if zlib.crc32(body) != crc:
            return None
        (_, ver, _, seq, length, tokens, e, r, checksum, nsl, ns, kt, kl, kb,
         parent_id) = _HDR.unpack(body)
        if ver != FORMAT_VERSION:
            return None
        try:
            key = decode_key(kt, kb[:kl])
            if key is None:
                return None
            meta = BlockMeta(ns[:nsl].decode(), key, parent_id, tokens, length, e, r)
        except (ValueError, UnicodeDecodeError):
            return None
        return seq, meta, checksum

    # -- reads -------------------------------------------------------------------------
    def read_async(self, slot: int, length: int, dst: np.ndarray,
                   ident: bytes | None = None) -> Future[Any]:
        """Read the slot's payload into ``dst`` (flat, writable uint8 of ``length``) and
        verify its checksum and, given ``ident``, that the slot holds that block (its chain
        identity, :attr:`BlockMeta.ident`); the future raises :class:`CorruptBlock` on any
        mismatch or I/O error — a miss, never other bytes."""
        assert self._pool is not None
        pending = self._pending.get(slot)
        return self._pool.submit(self._read, slot, length, dst, pending, ident)

    def read(self, slot: int, length: int, dst: np.ndarray, ident: bytes | None = None) -> None:
        self.read_async(slot, length, dst, ident).result()

    def _read(self, slot: int, length: int, dst: np.ndarray, pending: Future[Any] | None,
              ident: bytes | None = None) -> int:
        try:
            if pending is not None:
                pending.result()  # read-after-write: the block is readable once written
            return self._read_checked(slot, length, dst, ident)
        except CorruptBlock:
            raise
        except OSError as e:
            with self._stat_lock:
                self.stats.checksum_failures += 1
            raise CorruptBlock(f"slot {slot}: read failed ({e})") from e

    def _read_checked(self, slot: int, length: int, dst: np.ndarray, ident: bytes | None) -> int:
        slab, off = self._where(slot)
        fd = self._read_fd(slab)
        if self.direct:
            hb = self._pread_direct(fd, HEADER_BYTES, off)
        else:  # header and payload in one sequential read: no extra device round trip
            hbuf = getattr(self._tls, "hdr", None)
            if hbuf is None:
                hbuf = self._tls.hdr = bytearray(HEADER_BYTES)
            self._readinto_vec(fd, [hbuf, dst.data[:length]], off)
            hb = bytes(hbuf[: _HDR.size + _HDR_CRC.size])
        hdr = self._unpack_header(hb)
        if hdr is None or hdr[1].length != length:
            with self._stat_lock:
                self.stats.checksum_failures += 1
            raise CorruptBlock(f"slot {slot}: header invalid or length mismatch")
        if ident is not None and hdr[1].ident != ident:
            with self._stat_lock:
                self.stats.identity_mismatches += 1
            raise CorruptBlock(f"slot {slot} holds another block than expected (its chain "
                               f"identity differs)")
        checksum = hdr[2]
        if self.direct:
            pay_off = off + HEADER_BYTES
            padded = _align(length)
            for start in range(0, padded, CHUNK_BYTES):
                stop = min(padded, start + CHUNK_BYTES)
                b = self._bounce(stop - start)
                self._readinto(fd, b, pay_off + start)
                end = min(length, stop)
                if end > start:
                    dst[start:end] = np.frombuffer(b, dtype=np.uint8)[: end - start]
        if xxhash.xxh3_64_intdigest(dst[:length].data) != checksum:
            with self._stat_lock:
                self.stats.checksum_failures += 1
            raise CorruptBlock(f"slot {slot}: payload checksum mismatch (torn or damaged write)")
        with self._stat_lock:
            st = self.stats
            st.blocks_read += 1
            st.payload_bytes_read += length
        return length

    def _pread_direct(self, fd: int, n: int, off: int) -> bytes:
        b = self._bounce(n)
        self._readinto(fd, b, off)
        return bytes(b)

    @staticmethod
    def _readinto_vec(fd: int, bufs: list[Any], off: int) -> None:
        views = [memoryview(b).cast("B") for b in bufs]
        while views:
            n = os.preadv(fd, views, off)
            if n <= 0:
                raise CorruptBlock(f"short read at offset {off}")
            off += n
            while n and views:
                if n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][n:]
                    n = 0

    @staticmethod
    def _readinto(fd: int, mv: memoryview, off: int) -> None:
        mv = mv.cast("B")
        while mv:
            n = os.preadv(fd, [mv], off)
            if n <= 0:
                raise CorruptBlock(f"short read at offset {off}")
            mv, off = mv[n:], off + n

    # -- recovery ----------------------------------------------------------------------
    def _recover(self, verify: bool) -> set[int]:
        """Scan every slot header; keep valid blocks (the newest copy of a chain identity
        wins). Reads only: a slab shorter than its full size (a lost allocation race) is
        scanned as far as it goes and extended only when a write needs it."""
        best: dict[tuple[str, bytes], RecoveredBlock] = {}
        bad: list[int] = []
        n_slabs = -(-self.n_slots // self.slab_slots) if self.n_slots else 0
        for slab in range(n_slabs):
            path = self._slab_path(slab)
            if not path.exists():
                continue
            fd = self._read_fd(slab)
            size = os.fstat(fd).st_size
            for i in range(self.slab_slots):
                slot = slab * self.slab_slots + i
                if slot >= self.n_slots:
                    break
                off = i * self.slot_disk_bytes
                if off + HEADER_BYTES > size:
                    break
                raw = (self._pread_direct(fd, HEADER_BYTES, off) if self.direct
                       else os.pread(fd, HEADER_BYTES, off))
                if raw[:8] != MAGIC:
                    continue
                hdr = self._unpack_header(raw)
                if hdr is None or hdr[1].length > self.slot_bytes:
                    bad.append(slot)
                    continue
                seq, meta, _ = hdr
                if verify:
                    dst = np.empty(meta.length, dtype=np.uint8)
                    try:
                        self._read(slot, meta.length, dst, None)
                    except CorruptBlock:
                        bad.append(slot)
                        continue
                    self.stats.blocks_read -= 1
                    self.stats.payload_bytes_read -= meta.length
                self._seq = max(self._seq, seq + 1)
                ident = meta.ident
                k = (meta.namespace, ident)
                old = best.get(k)
                rb = RecoveredBlock(slot, seq, meta, ident)
                if old is None or old.seq < seq:
                    if old is not None:
                        bad.append(old.slot)
                    best[k] = rb
                else:
                    bad.append(slot)
        used = {rb.slot for rb in best.values()}
        for slot in bad:
            self._invalidate(slot)
        self.stats.recovery_dropped = len(bad)
        self.stats.recovered_blocks = len(best)
        self.recovered = sorted(best.values(), key=lambda b: b.seq)
        return used

    # -- lifecycle ---------------------------------------------------------------------
    def wait(self, slot: int) -> None:
        fut = self._pending.get(slot)
        if fut is not None:
            fut.exception()

    def drain(self) -> None:
        """Wait for every in-flight write."""
        for fut in list(self._pending.values()):
            fut.exception()
        self._pending.clear()

    def flush(self) -> None:
        """Wait for writes and fsync the slab files (durability against power loss)."""
        self.drain()
        for fd in list(self._fds.values()):
            os.fsync(fd)

    def drop_page_cache(self) -> None:
        """Flush, then ask the kernel to drop the slab files' cached pages, so the next
        reads come from the device (benchmarks; affects only these files)."""
        self.flush()
        for fd in self._fds.values():
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def disk_bytes(self) -> int:
        """Bytes the slab files occupy (allocated blocks on the filesystem)."""
        total = 0
        for p in self.dir.glob("slab-*.bin"):
            total += p.stat().st_blocks * 512
        return total

    def files_size(self) -> int:
        return sum(p.stat().st_size for p in self.dir.glob("slab-*.bin"))

    def iter_slabs(self) -> Iterator[Path]:
        return iter(sorted(self.dir.glob("slab-*.bin")))

    def close(self) -> None:
        if self._closed:
            return
        self.drain()
        self._release()

    def _release(self) -> None:
        """Close the pool and every descriptor, the directory lock last (also after a
        failed open, so the directory can be opened again)."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        for fds in self._read_fds:
            for fd in fds.values():
                os.close(fd)
            fds.clear()
        os.close(self._lock_fd)
