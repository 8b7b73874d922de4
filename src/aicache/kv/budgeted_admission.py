"""SSD admission under a write budget (:class:`~aicache.kv.write_budget.WriteBudget`).

:class:`BudgetedAdmission` writes a block only when it leaves DRAM (a block reused while it
stays in DRAM never costs a write) and spends the budget on the candidates with the best
evidence of reuse first, in three classes:

0. **returning** — evicted before, recomputed, and evicted again (``E_b ≥ 2``): the block's
   gaps between uses have outlasted DRAM once already (the ghost of an earlier refusal).
   Admitted while the window's writes plus the block fit the allowance.
1. **reused** — reused while in DRAM (``R_b ≥ 1``), first eviction.
2. **first** — a first eviction with no reuse yet.

Classes 1 and 2 are admitted only from what the classes above them are not expected to
need, and never ahead of schedule: everything written so far, the block, and the bytes the
higher classes offered over the last ``pace_window`` (their demand, admitted or not) must
stay within the rate's accrual since the first eviction plus one ``pace_window`` of it.
Budget a quiet spell left unspent stays available (a long budget window is not lost to a
burst's refusals), and a lower class cannot spend a long window's allowance early and
starve the returning blocks that come later. When the higher classes ask for little, the
lower ones get nearly all of the budget (a generous budget writes every eviction).

The budget is the hard limit (:class:`WriteBudget`'s window invariant): a write that does
not fit is refused, whatever its class. :class:`CappedAdmission` puts the same limit on
any other admission (the peers' rules, SARIA's E/R rule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aicache.kv.admission import SSDAdmission
from aicache.kv.radix import RadixNode
from aicache.kv.request_attrs import RequestAttrs
from aicache.kv.write_budget import DemandWindow, WriteBudget

BlockBytes = Callable[[RadixNode], int]

#: the window weaker candidates are paced over (at most the budget's own window)
PACE_WINDOW = 600.0
CLASSES = 3


class BudgetedAdmission:
    """The budgeted admission (module docstring). Counters per evidence class (0 returning,
    1 reused, 2 first eviction): ``offered[k]`` and ``admitted[k]``."""

    __slots__ = ("budget", "pace_window", "t0", "size_of", "demand", "label", "offered",
                 "admitted")

    def __init__(self, budget: WriteBudget, size_of: BlockBytes,
                 pace_window: float = PACE_WINDOW) -> None:
        self.budget = budget
        self.pace_window = pw = min(pace_window, budget.window)
        self.t0: float | None = None
        self.size_of = size_of
        #: bytes each class offered over the last pace window (its demand)
        self.demand = [DemandWindow(pw) for _ in range(CLASSES)]
        self.label = "budgeted"
        self.offered = [0] * CLASSES
        self.admitted = [0] * CLASSES

    @staticmethod
    def evidence_class(node: RadixNode) -> int:
        """0: evicted before and back (``E_b ≥ 2`` at this eviction); 1: reused while in
        DRAM (``R_b ≥ 1``); 2: a first eviction with no reuse."""
        return 0 if node.E >= 2 else 1 if node.R >= 1 else 2

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        size = self.size_of(node)
        if self.t0 is None:
            self.t0 = now
        k = self.evidence_class(node)
        self.offered[k] += 1
        self.demand[k].add(size, now)
        b = self.budget
        if k == 0:
            ok = b.fits(size, now)
        else:
            reserve = sum(d.total(now) for d in self.demand[:k])
            ahead = b.charged + size + reserve - b.bytes_per_s * (now - self.t0)
            ok = ahead <= b.bytes_per_s * self.pace_window and b.fits(size, now)
        self.admitted[k] += ok
        return ok

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return False

    def on_reference(self, node: RadixNode, now: float) -> None:
        return None

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        self.budget.charge(size, now)

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        return None


class CappedAdmission:
    """Any admission under a write budget: its decisions stand only while the write fits
    the window's allowance."""

    __slots__ = ("base", "budget", "size_of", "label")

    def __init__(self, base: SSDAdmission, budget: WriteBudget, size_of: BlockBytes) -> None:
        self.base = base
        self.budget = budget
        self.size_of = size_of
        self.label = f"{base.label}@budget"

    def _fits(self, node: RadixNode, now: float) -> bool:
        return self.budget.fits(self.size_of(node), now)

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        return self.base.at_eviction(node, now) and self._fits(node, now)

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return self.base.prewrite_now(node, now) and self._fits(node, now)

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return self.base.prewrite_at_store(node, now) and self._fits(node, now)

    def on_reference(self, node: RadixNode, now: float) -> None:
        self.base.on_reference(node, now)

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        self.budget.charge(size, now)
        self.base.on_write(node, size, now)

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        self.base.on_store(path, skip, now, attrs)
