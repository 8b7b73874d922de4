"""Stable file → block ids for the data cache.

Files of one directory, sorted by path, get consecutive ranges of ``ceil(size /
block_size)`` ids (at least one) when the directory is first registered; ranges are handed
out in registration order and never move, so a sorted traversal of a dataset is a stride.
A file not in its directory's listing, or one that grew beyond its range, gets a fresh
range at the end.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Sequence


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

    def extent(self, path: str) -> tuple[int, int] | None:
        """(first, last) block id of a registered file (files are registered when listed or
        opened), None for a file not registered yet."""
        r = self._of.get(path)
        return None if r is None else (r[0], r[0] + r[1] - 1)

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
