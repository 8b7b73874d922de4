"""How a cache directory's byte budget is settled when a store opens it.

Two rules, both applied by :class:`~aicache.datacache.store.BlockStore` at open:

* **The free-disk guard** (JuiceFS's ``--free-space-ratio``): the budget never exceeds what
  the disk can hold while keeping ``free_space_ratio`` of it free (0.1 by default), i.e.
  ``budget ≤ cache's own bytes + free bytes − ratio × disk size``. A larger budget is
  capped to that, with a warning naming the budget, the free space and the cap; the cap is
  never below one block. Checked at open (the disk's other users may change it later; a
  full disk is still handled per write: the block is not stored, the read goes on).
* **One budget per directory at a time.** Every open store holds a shared ``flock`` on
  ``CACHE_DIR/users``. An opener that finds no other holder (an exclusive try succeeds)
  sets the directory's budget: a ``--cache-size`` differing from the recorded one is a
  resize (logged; eviction brings the cache down to it). An opener that finds other
  holders must give the recorded budget: a differing one is a ``BadInput`` naming both
  values, since two budgets on one directory would have the smaller one evict under the
  larger one's readers. The recorded budget is the requested one, before the disk cap.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
from collections.abc import Callable
from typing import Any

from aicache.errors import BadInput
from aicache.units import format_bytes

log = logging.getLogger("aicache.datacache")

#: the share of the cache's disk kept free (JuiceFS's ``--free-space-ratio`` default)
DEFAULT_FREE_SPACE_RATIO = 0.1


def check_free_space_ratio(ratio: float) -> float:
    r = float(ratio)
    if not 0.0 <= r < 1.0:
        raise BadInput(f"free space ratio {ratio!r} must be in [0, 1); give e.g. 0.1 "
                       "(keep 10% of the cache's disk free)")
    return r


def disk_capped(cache_dir: str, budget: int, used: int, ratio: float, block_size: int,
                statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> int:
    """``budget``, or the most the disk of ``cache_dir`` can hold while keeping ``ratio``
    of it free (the cache's own ``used`` bytes count as holdable), with a warning."""
    st = statvfs(cache_dir)
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    cap = max(block_size, used + free - int(ratio * total))
    if budget <= cap:
        return budget
    log.warning("aicache: cache budget %s for %s exceeds what its disk can hold with %g%% of it "
                "kept free (%s free, %s cached): capped at %s; free disk space, lower "
                "--cache-size or --free-space-ratio", format_bytes(budget), cache_dir,
                ratio * 100, format_bytes(free), format_bytes(used), format_bytes(cap))
    return cap


def join_users(fd: int) -> bool:
    """Hold a shared lock on the ``users`` file ``fd``; returns whether no other store had
    it open (then this opener sets the directory's budget). The caller holds the store's
    exclusive index lock, so no other opener runs between the try and the downgrade."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        alone = True
    except BlockingIOError:
        alone = False
    fcntl.flock(fd, fcntl.LOCK_SH)
    return alone


def index_meta(cache_dir: str, key: str) -> tuple[Any, ...] | None:
    """The ``meta`` row ``key`` of the cache directory's index, read without taking the
    store's lock or writing anything (None: no index, a damaged one, or no such row)."""
    index = os.path.join(cache_dir, "index.sqlite")
    if not os.path.isfile(index):
        return None
    try:
        db = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        try:
            row: tuple[Any, ...] | None = db.execute(
                "SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return row


def recorded_budget(cache_dir: str) -> int | None:
    """The budget the cache directory's index records (None: no cache there, or no record)."""
    row = index_meta(cache_dir, "capacity")
    try:
        return int(row[0]) if row else None
    except ValueError:
        return None


def check_joinable(cache_dir: str, budget: int) -> None:
    """Refuse ``budget`` now if a store holds ``cache_dir`` with another one (what the
    store's open would refuse; ``aicache mount`` asks before it detaches, so the error
    reaches the caller's terminal)."""
    try:
        fd = os.open(os.path.join(cache_dir, "users"), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return  # no store has opened it yet
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return  # nobody holds it: this budget will be the directory's
        except BlockingIOError:
            pass
        recorded = recorded_budget(cache_dir)
        settle_budget(cache_dir, budget, None if recorded is None else str(recorded), alone=False)
    finally:
        os.close(fd)


def settle_budget(cache_dir: str, budget: int, recorded: str | None, alone: bool) -> None:
    """Apply the one-budget rule (see the module docstring); raises BadInput on a clash."""
    try:
        old = int(recorded) if recorded is not None else None
    except ValueError:
        old = None
    if old is None or old == budget:
        return
    if not alone:
        raise BadInput(f"--cache-size {format_bytes(budget)} differs from {format_bytes(old)}, the "
                       f"budget of cache dir {cache_dir} that another process uses now; give "
                       f"--cache-size {old} (bytes), or stop that process to resize")
    log.info("aicache: cache dir %s resized from %s to %s", cache_dir, format_bytes(old),
             format_bytes(budget))
