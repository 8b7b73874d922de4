"""An SSD write budget as a hard limit: a sliding-window ledger of the bytes an admission
wrote, the budget's parsing (drive writes per day or bytes per second) and the drive life
a write rate projects.

Invariant of :class:`WriteBudget` (what the brute-force test checks): for every half-open
window ``[a, a + window)`` of the ledger's clock, the bytes charged in it are at most
``allowance = rate × window``. Why it holds: a charge of ``s`` bytes at ``t`` is accepted
only when the bytes charged in ``(t − window, t]`` plus ``s`` fit the allowance; the
charges of any window ``[a, a + window)`` lie in ``(t_last − window, t_last]`` for its last
charge ``t_last`` (``t_last < a + window``), and were all accepted by then. The clock never
runs backwards: a charge stamped earlier than the last one is booked at the last one's
time (a later stamp can only move bytes into windows the check already covered).

Drive life: a drive rated ``rated_dwpd`` drive writes per day over ``rated_years`` (the
datacenter norm, 1 DWPD × 5 years, is the default) endures
``rated_dwpd · 365 · rated_years · capacity`` bytes; at a steady write rate it lasts
``endurance / rate``.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass

from aicache.errors import BadInput
from aicache.units import parse_size

#: the endurance rating projected lives are stated against
RATED_DWPD = 1.0
RATED_YEARS = 5.0

_DWPD = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*dwpd\s*$", re.IGNORECASE)
_RATE = re.compile(r"^\s*(.+?)\s*/\s*s(?:ec)?\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A parsed ``--ssd-write-budget``: bytes per second of the replay's (or engine's)
    clock, and how the user wrote it."""

    bytes_per_s: float
    text: str


def parse_write_budget(text: str, ssd_bytes: int) -> BudgetSpec:
    """``1DWPD`` / ``0.3dwpd`` (drive writes per day of a ``ssd_bytes`` drive) or a rate
    such as ``200MB/s`` / ``1GiB/s``. Anything else is a one-line :class:`BadInput`."""
    what = "--ssd-write-budget"
    m = _DWPD.match(text)
    if m:
        dwpd = float(m.group(1))
        if dwpd <= 0 or ssd_bytes <= 0:
            raise BadInput(f"{what} {text!r}: needs a positive DWPD and an SSD tier "
                           f"(--ssd-tokens); or give a rate like 200MB/s")
        return BudgetSpec(dwpd * ssd_bytes / 86400.0, text)
    r = _RATE.match(text)
    if not r:
        raise BadInput(f"{what} {text!r} is not a budget; use drive writes per day "
                       f"(1DWPD, 0.3DWPD) or a rate (200MB/s, 1GiB/s)")
    bps = parse_size(r.group(1), what=what)
    if bps <= 0:
        raise BadInput(f"{what} {text!r} must be a positive rate, e.g. 200MB/s")
    return BudgetSpec(float(bps), text)


def life_years(bytes_written: float, duration_s: float, capacity_bytes: int,
               rated_dwpd: float = RATED_DWPD, rated_years: float = RATED_YEARS) -> float | None:
    """Years a ``capacity_bytes`` drive rated ``rated_dwpd`` × ``rated_years`` lasts at the
    rate ``bytes_written / duration_s`` (None when nothing was written: unbounded)."""
    if bytes_written <= 0 or duration_s <= 0 or capacity_bytes <= 0:
        return None
    endurance = rated_dwpd * 365.0 * rated_years * capacity_bytes
    per_year = bytes_written / duration_s * 86400.0 * 365.0
    return endurance / per_year


class WriteBudget:
    """The sliding-window ledger (module docstring). ``fits(size, now, reserve)`` asks
    whether ``size`` more bytes, with ``reserve`` bytes kept back for other writers, stay
    within the allowance of the window ending at ``now``; :meth:`charge` books a write.
    The ledger holds every charge of the last window (one entry per write)."""

    __slots__ = ("bytes_per_s", "window", "allowance", "_log", "_sum", "_t", "charged",
                 "refused", "max_window", "history")

    def __init__(self, bytes_per_s: float, window: float, *, keep_history: bool = False) -> None:
        if not bytes_per_s > 0 or not window > 0 or math.isinf(window):
            raise BadInput(f"write budget {bytes_per_s} B/s over {window} s: both must be "
                           f"positive and finite")
        self.bytes_per_s = float(bytes_per_s)
        self.window = float(window)
        self.allowance = self.bytes_per_s * self.window
        self._log: deque[tuple[float, int]] = deque()
        self._sum = 0
        self._t = -math.inf
        self.charged = 0   #: bytes booked since the start
        self.refused = 0   #: candidates :meth:`fits` turned down
        #: the most bytes any window held (the window ending at a charge is the fullest)
        self.max_window = 0
        #: every charge as (time, bytes), with ``keep_history`` (tests); else None
        self.history: list[tuple[float, int]] | None = [] if keep_history else None

    def _advance(self, now: float) -> float:
        t = now if now > self._t else self._t
        self._t = t
        log, cut = self._log, t - self.window
        while log and log[0][0] <= cut:
            self._sum -= log.popleft()[1]
        return t

    def spent(self, now: float) -> int:
        """Bytes charged in ``(now − window, now]``."""
        self._advance(now)
        return self._sum

    def fits(self, size: int, now: float, reserve: float = 0.0) -> bool:
        self._advance(now)
        ok = self._sum + size + reserve <= self.allowance
        if not ok:
            self.refused += 1
        return ok

    def charge(self, size: int, now: float) -> None:
        t = self._advance(now)
        self._log.append((t, size))
        self._sum += size
        self.charged += size
        if self._sum > self.max_window:
            self.max_window = self._sum
        if self.history is not None:
            self.history.append((t, size))


class DemandWindow:
    """Bytes offered by a class of candidates over the last ``window`` (admitted or not):
    the demand a budgeted admission reserves for them."""

    __slots__ = ("window", "_log", "_sum", "_t")

    def __init__(self, window: float) -> None:
        self.window = window
        self._log: deque[tuple[float, int]] = deque()
        self._sum = 0
        self._t = -math.inf

    def add(self, size: int, now: float) -> None:
        self._t = max(self._t, now)
        self._log.append((self._t, size))
        self._sum += size

    def total(self, now: float) -> int:
        self._t = max(self._t, now)
        log, cut = self._log, self._t - self.window
        while log and log[0][0] <= cut:
            self._sum -= log.popleft()[1]
        return self._sum


class RankedDemandWindow:
    """Bytes offered over the last ``window`` by rank: each offer carries a rank bucket
    (``0 ≤ bucket < buckets``, higher = better evidence) and :meth:`at_least` answers how
    many of the window's bytes ranked at least as high as a given bucket. A Fenwick tree
    over the buckets keeps both an offer and a query at O(log buckets) (a budgeted
    admission asks at every eviction)."""

    __slots__ = ("window", "buckets", "_log", "_tree", "_t", "_sum")

    def __init__(self, window: float, buckets: int) -> None:
        if not window > 0 or buckets < 1:
            raise ValueError("window and buckets must be positive")
        self.window = window
        self.buckets = buckets
        self._log: deque[tuple[float, int, int]] = deque()
        self._tree = [0] * (buckets + 1)
        self._t = -math.inf
        self._sum = 0

    def _add(self, bucket: int, size: int) -> None:
        # stored reversed (best bucket first) so that "at least as good" is a prefix sum
        i, tree, n = self.buckets - bucket, self._tree, self.buckets
        while i <= n:
            tree[i] += size
            i += i & -i

    def _expire(self, now: float) -> None:
        self._t = max(self._t, now)
        log, cut = self._log, self._t - self.window
        while log and log[0][0] <= cut:
            _, b, s = log.popleft()
            self._add(b, -s)
            self._sum -= s

    def add(self, bucket: int, size: int, now: float) -> None:
        self._expire(now)
        self._log.append((self._t, bucket, size))
        self._add(bucket, size)
        self._sum += size

    def at_least(self, bucket: int, now: float) -> int:
        """Bytes offered in ``(now − window, now]`` ranked in ``bucket`` or better."""
        self._expire(now)
        i, tree, got = self.buckets - bucket, self._tree, 0
        while i > 0:
            got += tree[i]
            i -= i & -i
        return got

    def total(self, now: float) -> int:
        self._expire(now)
        return self._sum
