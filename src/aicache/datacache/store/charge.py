"""What a block costs in a cache directory's byte budget.

The budget counts what the disk holds: a block file's size (header included) rounded up to
the file system's allocation unit, plus the block's row in the index; and the index's fixed
part is held back from the blocks' share of a large enough budget. The engine's driver and
the policy daemon charge blocks with these same numbers, so the policy, not the store's own
FIFO, picks every eviction.
"""

from __future__ import annotations

from aicache.datacache.store.format import HEADER_SIZE

#: the unit a file system allocates in: a block file takes its size rounded up to it on
#: disk (4 KiB pages on ext4, xfs, tmpfs, overlayfs), and the budget counts what the disk
#: holds, so a cache of many small blocks stays within it too
ALLOC_UNIT = 4096
#: what one block's row takes in ``index.sqlite`` (key digest, path, version, index,
#: size, sequence and their b-tree entries, rounded up): counted with the block
INDEX_ROW = 256
#: the index's fixed part (schema pages, the WAL the store checkpoints back to 64 KiB,
#: the lock and users files), held back from the blocks' budget of a cache of at least
#: ``16 * INDEX_RESERVE`` (a smaller one, a test's or a toy's, keeps its whole budget)
INDEX_RESERVE = 128 * 1024


def stored_size(payload: int) -> int:
    """What a block of ``payload`` bytes costs in the budget: its file (header included)
    rounded up to :data:`ALLOC_UNIT`, plus its index row."""
    return -(-(payload + HEADER_SIZE) // ALLOC_UNIT) * ALLOC_UNIT + INDEX_ROW


def block_budget(capacity: int) -> int:
    """The part of a cache directory's ``capacity`` its blocks may take (see
    :data:`INDEX_RESERVE`): with the blocks' :func:`stored_size`, the directory's disk
    usage stays within ``capacity``."""
    return capacity - INDEX_RESERVE if capacity >= 16 * INDEX_RESERVE else capacity
