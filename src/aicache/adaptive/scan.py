"""Epoch scans: a unit whose reads draw its files *without replacement* (a shuffled epoch)
will read every file it has not read yet, so those files are worth fetching ahead.

A shuffled epoch is random between samples, so no readahead predicts the *next* file; but
it reads each file once, so every file the epoch has not read yet is certain to be read
before it ends. :class:`EpochScan` keeps, per unit, the files whose first block was read
since the scan began (a re-read of one of them begins a new scan: the next epoch) and
decides whether the run is a scan with a significance test: draws *with* replacement from
the unit's ``n`` files make a run of ``k`` distinct files with probability
``prod(1 - i/n, i < k)`` (about ``exp(-k^2 / (2 n))``), and the shortest run at which that
falls to ``SCAN_ALPHA`` (:func:`scan_run`: about ``sqrt(2 n ln(1 / SCAN_ALPHA))`` files, 68
of 500) makes the run a scan at that level. A skewed stream (a hot set) re-reads long
before that; a uniform stream with replacement passes it in at most ``SCAN_ALPHA`` of its
runs.

The controller (:mod:`aicache.adaptive.controller`) asks for the files not read yet, while
the unit is diagnosed random, into free space only (a fetch that evicts nothing), a few
at a time and within the unread share: the scan fill of the ``ours`` executor set. Not
through the prefetch credit, whose window closes on a guess not read soon: a scan's file
is certain to be read, but at any time up to the epoch's end.
"""

from __future__ import annotations

from collections.abc import Callable

#: the significance of the scan test: the most often a stream that draws with replacement
#: is taken for a scan
SCAN_ALPHA = 0.01

#: units with more files than this get no scan fill (their file list is not walked)
MAX_SCAN_FILES = 1 << 16

#: files asked for per read of a scan: one to take the place of the file just read and one
#: more, so the number fetched ahead grows with every read (as a readahead window does)
#: until the free space, the unread share or the prefetch credit stops it
SCAN_FILL = 2


def scan_run(n: int, alpha: float = SCAN_ALPHA) -> int:
    """The shortest run of distinct files that draws with replacement from ``n`` files make
    with probability at most ``alpha``: the exact product (module docstring), about
    ``sqrt(2 n ln(1 / alpha))`` files; ``n + 1`` when not even a run of all ``n`` is that
    rare."""
    p = 1.0
    for i in range(n):
        p *= 1.0 - i / n
        if p <= alpha:
            return i + 1
    return n + 1


class EpochScan:
    """One unit's scan: the first blocks of its files (in block order), those read in the
    current scan, and where the search for unread ones goes on."""

    __slots__ = ("firsts", "read", "cursor", "needed", "confirmed", "exhausted")

    def __init__(self, firsts: list[int]) -> None:
        #: first blocks read since the scan began
        self.read: set[int] = set()
        self.recount(firsts)

    def recount(self, firsts: list[int]) -> None:
        """Take the unit's files as ``firsts`` (their first block ids, ascending): a folder
        is listed after its first file is read, so the count grows; the test's run follows
        it. The scan is confirmed when its run passes the test on this count."""
        #: the first block id of each of the unit's files, ascending
        self.firsts = firsts
        self.cursor = 0  # index into ``firsts`` where the next search starts
        self.needed = scan_run(len(firsts)) if firsts else 1 << 62
        self.confirmed = len(self.read) >= self.needed
        #: a whole lap of the search found nothing to fetch: every file the scan has not
        #: read is held or in flight, and stays so (a held file leaves only when read or
        #: evicted), so searching again would cost a lap per read for nothing
        self.exhausted = False

    def note(self, first: int) -> None:
        """A read of the file whose first block is ``first`` (a read of its first block)."""
        read = self.read
        if first in read:  # a re-read: the scan is over, and the next one begins here
            read.clear()
            self.confirmed = False
            self.exhausted = False
        read.add(first)

    def scanning(self) -> bool:
        return len(self.read) >= self.needed

    def unread(self, k: int, skip: Callable[[int], bool]) -> list[int]:
        """Up to ``k`` first blocks of files the scan has not read, from the cursor on
        (wrapping once), passing those ``skip`` names (held or in flight)."""
        firsts, read = self.firsts, self.read
        n = len(firsts)
        out: list[int] = []
        if self.exhausted:
            return out
        i = self.cursor
        for _ in range(n):
            b = firsts[i]
            i = i + 1 if i + 1 < n else 0
            if b not in read and not skip(b):
                out.append(b)
                if len(out) >= k:
                    break
        else:
            self.exhausted = not out
        self.cursor = i
        return out


def unit_firsts(block: int, unit: str, file_of: Callable[[int], str | None],
                extent_of: Callable[[str], tuple[int, int] | None],
                units_of: Callable[[str], str], limit: int = MAX_SCAN_FILES) -> list[int] | None:
    """The first block ids of the files of ``unit`` laid out next to ``block``'s file (a
    folder's files get consecutive block ranges), ascending; None when there are more than
    ``limit`` (or ``block`` has no file). Walks from ``block``'s file both ways, file by
    file, while the blocks belong to files of ``unit``."""
    f = file_of(block)
    ext = extent_of(f) if f is not None else None
    if ext is None:
        return None
    out = [ext[0]]
    for step in (-1, 1):
        b = ext[0] - 1 if step < 0 else ext[1] + 1
        while b >= 0:
            f = file_of(b)
            e = extent_of(f) if f is not None and units_of(f) == unit else None
            if e is None or not e[0] <= b <= e[1]:  # another unit's file, or no file here
                break
            out.append(e[0])
            if len(out) > limit:
                return None
            b = e[0] - 1 if step < 0 else e[1] + 1
    out.sort()
    return out
