"""What the data cache's layers name things by: a remote file's metadata and a block key.

These sit below the policy layer, the engine, the daemon, FUSE and the disk store: a
policy or a front-end can speak of blocks without importing the store (SQLite, file
descriptors, mappings). The one piece of on-disk naming here is :meth:`BlockKey.digest`,
the block file's name, which is a property of the key and the block size alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileMeta:
    """What the engine knows of one remote file: its size and version (the block key's
    version, see :mod:`aicache.datacache.version`); ``pin`` is what a range read asks the
    remote for to get exactly that version, when it is not the version itself."""

    path: str
    size: int
    version: str
    pin: str = ""


@dataclass(frozen=True, slots=True)
class BlockKey:
    """A block of one version of one remote file. Immutable content ⇒ safe to share."""

    path: str
    version: str
    index: int

    def digest(self, block_size: int) -> str:
        """The file name of this block in a store of ``block_size`` blocks (the block size
        is part of the name: block ``i`` of 1 MiB blocks is not block ``i`` of 4 MiB)."""
        h = hashlib.blake2b(digest_size=16, key=block_size.to_bytes(8, "little"))
        h.update(raw_bytes(self.path))
        h.update(b"\0")
        h.update(raw_bytes(self.version))
        h.update(b"\0")
        h.update(str(self.index).encode())
        return h.hexdigest()


def raw_bytes(s: str) -> bytes:
    """``s``'s bytes: UTF-8, and a file name that is not UTF-8 (decoded by Python with
    ``surrogateescape``, as ``os.fsdecode`` does) as the bytes it was made of."""
    return s.encode("utf-8", "surrogateescape")
