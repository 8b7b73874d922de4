"""SFP — smart file-aware prefetching (Wang et al. 2021), as JuiceFS-Adaptive uses it.

A first-order Markov table of file → next-file transitions, learned online from the order
in which files are opened (``unit`` here is the *file*, not the directory). When a read
enters a new file ``f``, SFP prefetches the blocks of ``f``'s most likely successors (by
transition count, ties by first observation) and the rest of ``f`` itself, up to a window
of ``window`` blocks. A file's block extent comes from the file system's metadata
when the driver gives it (:meth:`SFPPrefetcher.use_metadata`: a file's size is known at
open, as JuiceFS knows it, so SFP reads ahead in a file it has not read yet); otherwise it
is learned from the reads seen so far (lowest..highest block id read in it), which cannot
read ahead in a file on its first read.

The window is AIMD: +1 per prefetched block that is read, halved per prefetched block
evicted unread, within ``[min_window, max_window]``; ``sfp-128`` caps it at 128 blocks.

Why first-order and count-based: it is what SFP describes and what makes its failure mode
visible — a shuffled epoch has a new random successor for every file, so its table
predicts nothing, while a repeated sequential pass is learned after one traversal.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from aicache.policies.base import PrefetchPolicy

_EMPTY: tuple[int, ...] = ()
_SHIFT = 32
_ONE = 1 << _SHIFT


class SFPPrefetcher(PrefetchPolicy):
    """File-successor Markov prefetcher with an AIMD block window."""

    name = "sfp"

    def __init__(
        self,
        *,
        init_window: int = 8,
        min_window: int = 1,
        max_window: int = 1024,
        successors: int = 2,
    ) -> None:
        if not 1 <= min_window <= max_window:
            raise ValueError("need 1 <= min_window <= max_window")
        self.min_window = min_window
        self.max_window = max_window
        self.init_window = max(min_window, min(init_window, max_window))
        self.window = self.init_window
        self.successors = successors
        #: file -> {next file: score}; score = count * 2**32 - (first-observation rank), so
        #: one integer comparison orders by count, then by first observation
        self._rows: dict[Hashable, dict[Hashable, int]] = {}
        #: file -> its best ``successors`` next files, best first, kept up to date on each
        #: increment (counts only grow, so an entry only ever moves up): no sort per file
        self._top: dict[Hashable, list[Hashable]] = {}
        #: file -> [lowest, highest] block id read
        self.extent: dict[Hashable, list[int]] = {}
        self._last_file: Hashable | None = None
        #: file -> (first block, last block) from metadata, or None when unknown
        self._meta: Callable[[Hashable], tuple[int, int] | None] | None = None

    def use_metadata(self, extent_of: Callable[[Hashable], tuple[int, int] | None]) -> None:
        """Take file extents from metadata: ``extent_of(file)`` = (first, last) block id of
        the file, or None when unknown (then the learned extent is used)."""
        self._meta = extent_of

    def _extent(self, file: Hashable) -> tuple[int, int]:
        if self._meta is not None:
            ext = self._meta(file)
            if ext is not None:
                return ext
        lo, hi = self.extent[file]
        return lo, hi

    @property
    def table(self) -> dict[Hashable, dict[Hashable, int]]:
        """The Markov table as ``file -> {next file: count}`` (dict order = first seen)."""
        return {f: {g: (v + _ONE - 1) >> _SHIFT for g, v in row.items()} for f, row in self._rows.items()}

    def predict(self, file: Hashable) -> list[Hashable]:
        """Successors of ``file`` by decreasing transition count (ties: first seen)."""
        return list(self._top.get(file, _EMPTY))

    def _count(self, last: Hashable, unit: Hashable) -> None:
        row = self._rows.get(last)
        if row is None:
            row = self._rows[last] = {}
            self._top[last] = []
        v = row.get(unit)
        v = (_ONE - len(row)) if v is None else v + _ONE
        row[unit] = v
        top = self._top[last]
        if unit not in top:
            if len(top) < self.successors:
                top.append(unit)
            elif top and v > row[top[-1]]:
                top[-1] = unit
            else:
                return
        top.sort(key=row.__getitem__, reverse=True)

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        ext = self.extent.get(unit)
        if ext is None:
            self.extent[unit] = [block, block]
        else:
            if block < ext[0]:
                ext[0] = block
            elif block > ext[1]:
                ext[1] = block
        last = self._last_file
        if unit == last:
            return _EMPTY
        if last is not None:
            self._count(last, unit)
        self._last_file = unit
        budget = self.window
        out: list[int] = []
        hi = self._extent(unit)[1]
        for b in range(block + 1, hi + 1):  # the rest of this file, as far as we know it
            if budget == 0:
                return out
            out.append(b)
            budget -= 1
        for f in self.predict(unit):
            flo, fhi = self._extent(f)
            for b in range(flo, fhi + 1):
                if budget == 0:
                    return out
                out.append(b)
                budget -= 1
        return out

    def on_prefetch_used(self, block: int, now: float) -> None:
        if self.window < self.max_window:
            self.window += 1

    def on_prefetch_wasted(self, block: int, now: float) -> None:
        self.window = max(self.min_window, self.window // 2)

    def reset(self) -> None:
        self._rows.clear()
        self._top.clear()
        self.extent.clear()
        self._last_file = None
        self.window = self.init_window


class SFP128Prefetcher(SFPPrefetcher):
    """SFP with the window capped at 128 blocks (the ``SFP-128`` baseline of
    ``docs/design/chiron.md``)."""

    name = "sfp-128"

    def __init__(self, **kw: int) -> None:
        kw.setdefault("max_window", 128)
        super().__init__(**kw)
