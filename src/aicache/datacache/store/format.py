"""A block file's bytes: the 72-byte header, the checksums, and how a header is judged.

A block file is ``HEADER`` then the payload. The header holds the magic, the format
version, the checksum algorithm, the payload length and checksum, and the block's
identity (block size, block index, the 16-byte digest that is also its file name, and
8-byte hashes of its remote path and version): a reader compares the identity with the
key it asked for before it trusts the checksum, so a valid block under another block's
name is refused (:attr:`Fault.MISPLACED`), never served. The shared tier writes and reads
the same bytes (:func:`encode_block`, :func:`decode_block`).

Nothing here touches the index or keeps state: the functions judge bytes the caller read.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Callable

from aicache.datacache.keys import BlockKey, raw_bytes

try:  # xxh3 is much faster than blake2b; the algorithm id is stored in every header
    import xxhash

    def _xxh3(data: bytes | memoryview) -> int:
        return xxhash.xxh3_64_intdigest(data)

except ImportError:  # pragma: no cover - xxhash is a core dependency
    xxhash = None  # type: ignore[assignment]  # None marks xxhash missing
    _xxh3 = None  # type: ignore[assignment]  # None: no xxh3 checksum (checked below)


def _blake2b(data: bytes | memoryview) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


#: algorithm id in the header → checksum function
CHECKSUMS: dict[int, Callable[[bytes | memoryview], int]] = {2: _blake2b}
if _xxh3 is not None:
    CHECKSUMS[1] = _xxh3
DEFAULT_ALGO = 1 if _xxh3 is not None else 2
#: the name of :data:`DEFAULT_ALGO`, as ``aicache cache stats`` reports it
CHECKSUM_NAME = {1: "xxh3-64", 2: "blake2b-64"}[DEFAULT_ALGO]

MAGIC = b"AICB"
#: magic, format version, algo, length, checksum | identity: block size, block index,
#: name digest (16 bytes), path hash (8), version hash (8)
HEADER = struct.Struct("<4sHHQQQQ16s8s8s")
HEADER_SIZE = HEADER.size  # 72
_IDENT_AT = 24  # the identity's offset in the header (it runs to the header's end)
_IDENT = struct.Struct("<QQ16s8s8s")
_LENGTH = struct.Struct("<Q")  # the length field, at offset 8 of the header
#: 1: no identity in the header (a 24-byte header); 2: the block's identity in it
FORMAT_VERSION = 2
_FMT = struct.Struct("<H")  # the format field, at offset 4


class VerifyMode(enum.StrEnum):
    """When a block read checks the block's checksum (the store's module docstring says
    what each mode catches). A ``StrEnum``: the settings and the CLI spell them as text."""

    #: every read hashes the whole block
    FULL = "full"
    #: a block is hashed once per content version (its ``fstat`` signature)
    STAT = "stat"
    #: no hash on reads (magic, length and file size are still checked)
    NONE = "none"


#: the verify modes' names, for choices and messages
VERIFY_MODES = tuple(m.value for m in VerifyMode)
DEFAULT_VERIFY = VerifyMode.STAT


def check_verify_mode(mode: str) -> VerifyMode:
    """``mode`` as a :class:`VerifyMode`; BadInput naming the valid ones otherwise."""
    from aicache.errors import BadInput

    try:
        return VerifyMode(mode)
    except ValueError:
        raise BadInput(f"checksum verify mode {mode!r} is unknown; give one of "
                       f"{', '.join(VERIFY_MODES)}") from None


class Fault(enum.Enum):
    """Why a block file was refused, or that it was not."""

    OK = 0
    #: damaged, truncated or foreign bytes (bad magic, length or checksum)
    CORRUPT = 1
    #: a well-formed header naming another block, or an earlier format naming none
    MISPLACED = 2
    #: not a regular file where the block's file should be (a directory, a link loop,
    #: a file at ``blocks/ab``)
    WRONG_TYPE = 3


def _hash8(s: str) -> bytes:
    return hashlib.blake2b(raw_bytes(s), digest_size=8).digest()


def key_identity(key: BlockKey, block_size: int) -> bytes:
    """The identity part of ``key``'s block header in a store of ``block_size`` blocks
    (see :data:`HEADER`): what a read compares before it trusts a block file."""
    return _IDENT.pack(block_size, key.index, bytes.fromhex(key.digest(block_size)),
                       _hash8(key.path), _hash8(key.version))


def block_header(ident: bytes, data: bytes | memoryview) -> bytes:
    """The header of a block file holding ``data`` for the block whose identity is
    ``ident`` (:func:`key_identity`)."""
    return HEADER.pack(MAGIC, FORMAT_VERSION, DEFAULT_ALGO, len(data),
                       CHECKSUMS[DEFAULT_ALGO](data), *_IDENT.unpack(ident))


def header_fault(head: bytes, ident: bytes, n: int) -> Fault:
    """What is wrong with a block file's header, for a payload of ``n`` bytes and the
    expected identity ``ident``: OK, CORRUPT (damaged, truncated, foreign) or MISPLACED
    (a well-formed header naming another block, or an earlier format that names none)."""
    if len(head) < _IDENT_AT or head[:4] != MAGIC:
        return Fault.CORRUPT
    if _FMT.unpack_from(head, 4)[0] != FORMAT_VERSION:
        return Fault.MISPLACED
    if len(head) != HEADER_SIZE or _LENGTH.unpack_from(head, 8)[0] != n:
        return Fault.CORRUPT
    return Fault.OK if head[_IDENT_AT:] == ident else Fault.MISPLACED


def checksum_ok(head: bytes, data: bytes | memoryview) -> bool:
    """The checksum algorithm is known and the checksum matches ``data``."""
    _magic, _fmt, algo, _length, checksum = HEADER.unpack(head)[:5]
    fn = CHECKSUMS.get(algo)
    return fn is not None and fn(data) == checksum


def file_fault(digest: str, head: bytes, data: bytes, key: BlockKey | None) -> Fault:
    """Judge a whole block file (``head`` and the payload ``data`` after it) found under
    the name ``digest``: MISPLACED when its header names another file, or, given the
    index row's ``key`` (with a path), another block; CORRUPT when damaged."""
    if len(head) < _IDENT_AT or head[:4] != MAGIC:
        return Fault.CORRUPT
    if _FMT.unpack_from(head, 4)[0] != FORMAT_VERSION:
        return Fault.MISPLACED
    if len(head) != HEADER_SIZE:
        return Fault.CORRUPT
    bs, _idx, name, _ph, _vh = _IDENT.unpack_from(head, _IDENT_AT)
    if name.hex() != digest:
        return Fault.MISPLACED
    if key is not None and key.path and head[_IDENT_AT:] != key_identity(key, bs):
        return Fault.MISPLACED
    if _LENGTH.unpack_from(head, 8)[0] != len(data) or len(data) > bs \
            or not checksum_ok(head, data):
        return Fault.CORRUPT
    return Fault.OK


def header_block_index(head: bytes) -> int:
    """The block index a (well-formed) header names."""
    return int(_IDENT.unpack_from(head, _IDENT_AT)[1])


def encode_block(key: BlockKey, data: bytes, block_size: int) -> bytes:
    """A block file's bytes (header, then payload) exactly as the store writes them: the
    format any other tier that keeps blocks (the shared tier) writes too."""
    return block_header(key_identity(key, block_size), data) + data


def decode_block(key: BlockKey, blob: bytes, block_size: int) -> bytes | None:
    """The payload of ``blob`` when it is a whole, intact block file of ``key`` (magic,
    format, length, identity and checksum all agree); None for anything else — a torn or
    truncated copy, garbage, another block's file, another version's, an earlier format."""
    n = len(blob) - HEADER_SIZE
    if n < 0 or n > block_size:
        return None
    head = blob[:HEADER_SIZE]
    if header_fault(head, key_identity(key, block_size), n) is not Fault.OK:
        return None
    data = blob[HEADER_SIZE:]
    return data if checksum_ok(head, data) else None
