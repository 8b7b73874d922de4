"""The policy side of a cache engine, separable from the bytes: the block map and the
DataCacheSystem with the bookkeeping that drives it.

:class:`LocalPolicy` lives in the engine's process (a FUSE mount, a single-process fsspec
user). :class:`aicache.datacache.daemon.DaemonPolicy` has the same methods but forwards
them to a local daemon that holds one ``LocalPolicy`` for the whole cache directory, so
every process reading it (DataLoader workers) feeds one access stream and one budget
(ARCHITECTURE.md, "One controller per cache unit, whatever the number of reader
processes"). The engine cannot tell them apart.

Block map (stable file → block ids): files of one directory, sorted by path, get
consecutive ranges of ``ceil(size / block_size)`` ids (at least one) when the directory is
first registered; ranges are handed out in registration order and never move. A file not
in its directory's listing, or one that grew beyond its range, gets a fresh range at the
end.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aicache.adaptive.system import DataCacheSystem
from aicache.datacache.store import BlockKey

_NONE: tuple[int, ...] = ()


class BlockMap:
    """path → (first block id, number of blocks); id → (path, index). Thread-safe."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._lock = threading.Lock()
        self._bases: list[int] = []
        self._files: list[tuple[str, int]] = []  # parallel to _bases
        self._of: dict[str, tuple[int, int]] = {}
        self._next = 0

    def register(self, files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        """Give each (path, size) a range unless it has one that fits; paths are taken in
        sorted order. Returns the ranges of all of them."""
        with self._lock:
            for path, size in sorted(files):
                self._alloc(path, size)
            return {p: self._of[p] for p, _s in files}

    def _alloc(self, path: str, size: int) -> None:
        n = max(1, math.ceil(size / self.block_size))
        have = self._of.get(path)
        if have is not None and have[1] >= n:
            return
        base = self._next
        self._next += n
        self._of[path] = (base, n)
        self._bases.append(base)
        self._files.append((path, n))

    def learn(self, ranges: dict[str, tuple[int, int]]) -> None:
        """Adopt ranges decided elsewhere (a daemon client caching the daemon's map)."""
        with self._lock:
            for path, (base, n) in ranges.items():
                if self._of.get(path) == (base, n):
                    continue
                self._of[path] = (base, n)
                i = bisect.bisect_left(self._bases, base)
                self._bases.insert(i, base)
                self._files.insert(i, (path, n))

    def ranges(self) -> dict[str, tuple[int, int]]:
        """path → (first block id, number of blocks) of every registered file."""
        with self._lock:
            return dict(self._of)

    def base(self, path: str) -> int | None:
        r = self._of.get(path)
        return None if r is None else r[0]

    def locate(self, bid: int) -> tuple[str, int] | None:
        with self._lock:
            i = bisect.bisect_right(self._bases, bid) - 1
            if i < 0:
                return None
            path, n = self._files[i]
            base = self._bases[i]
        idx = bid - base
        if idx >= n or self._of.get(path, (None, 0))[0] != base:
            return None
        return path, idx


@dataclass(slots=True)
class AccessResult:
    hit: bool
    prefetch: Sequence[int]
    prefetch_used: bool


class LocalPolicy:
    """A DataCacheSystem plus the set of blocks it holds, under one lock.

    Invariant: ``resident`` = the blocks the system holds (told via on_insert, forgotten
    via victim/on_remove). The store is the truth about bytes; blocks found on disk that
    the system does not hold (stored by an earlier run or another process) are *adopted*
    on their first read, and blocks the system holds but the disk lost are removed.
    """

    def __init__(self, system: DataCacheSystem, block_size: int) -> None:
        self.system = system
        self.map = BlockMap(block_size)
        self._lock = threading.Lock()
        self.resident: set[int] = set()
        self.keys: dict[int, BlockKey] = {}
        self.prefetched: set[int] = set()

    # block map
    def register(self, files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        return self.map.register(files)

    def base(self, path: str) -> int | None:
        return self.map.base(path)

    def locate(self, bid: int) -> tuple[str, int] | None:
        return self.map.locate(bid)

    # the driver protocol
    def access(self, unit: str, bid: int, key: BlockKey, size: int, local: bool, got: bool,
               now: float) -> AccessResult:
        """A demand read. ``local``: served from the store; ``got``: bytes in hand (from
        the store or a fetch we waited on)."""
        with self._lock:
            res = self.resident
            if local and bid not in res:
                self.system.on_insert(unit, bid, size, now, False)
                res.add(bid)
                self.keys[bid] = key
            elif not got and bid in res:
                res.discard(bid)
                self.keys.pop(bid, None)
                self.prefetched.discard(bid)
                self.system.on_remove(bid)
            hit = got and bid in res
            used = hit and bid in self.prefetched
            if used:
                self.prefetched.discard(bid)
            prefetch = self.system.on_access(unit, bid, size, hit, now)
            self.system.tick(now)
        return AccessResult(hit, prefetch or _NONE, used)

    def is_resident(self, bid: int) -> bool:
        return bid in self.resident

    def admit(self, unit: str, bid: int, size: int, used: int, now: float) -> bool | None:
        """None when already held (nothing to do), else the system's admission."""
        with self._lock:
            if bid in self.resident:
                return None
            return bool(self.system.admit(unit, bid, size, used, now))

    def inserted(self, unit: str, bid: int, key: BlockKey, size: int, now: float,
                 prefetched: bool) -> None:
        with self._lock:
            if bid in self.resident:
                return
            self.system.on_insert(unit, bid, size, now, prefetched)
            self.resident.add(bid)
            self.keys[bid] = key
            if prefetched:
                self.prefetched.add(bid)

    def victim(self, now: float) -> tuple[BlockKey | None, bool]:
        """(key of the block the system gives up, whether it was an unread prefetch)."""
        with self._lock:
            while self.resident:
                try:
                    v = self.system.victim(now)
                except Exception:  # noqa: BLE001 - a policy that lost track: store falls back
                    return None, False
                self.resident.discard(v)
                wasted = v in self.prefetched
                self.prefetched.discard(v)
                k = self.keys.pop(v, None)
                if k is not None:
                    return k, wasted
            return None, False

    def stats(self) -> dict[str, Any]:
        try:
            s = dict(self.system.stats())
        except Exception:  # noqa: BLE001 - metrics must survive a system's bug
            s = {}
        s["resident_blocks"] = len(self.resident)
        s.setdefault("advisor_no_advice", s.get("no_advice", 0))
        counters = getattr(getattr(self.system, "advisor", None), "counters", None)
        if counters is not None:
            s["advisor_latency_seconds_total"] = counters.latency_s_total
        s.pop("params", None)
        return s

    def close(self) -> None:
        self.system.close()
