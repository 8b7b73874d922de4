"""SSD admission under a write budget (:class:`~aicache.kv.write_budget.WriteBudget`).

:class:`BudgetedAdmission` writes a block only when it leaves DRAM (a block reused while it
stays in DRAM never costs a write) and spends the budget on the candidates with the best
evidence of reuse first:

* **strong** — the block was reused (``R_b ≥ 1``) or has been evicted before and came back
  (``E_b ≥ 2``: a block an earlier eviction refused, recomputed since — the ghost of a
  refusal). Admitted while the window's writes plus the block fit the allowance.
* **weak** — a first eviction with no reuse yet. Admitted only from what the strong class
  is not expected to need, and never ahead of schedule: everything written so far, the
  block, and the bytes strong candidates offered over the last ``pace_window`` (their
  demand, admitted or not) must stay within the rate's accrual since the first eviction
  plus one ``pace_window`` of it. Budget a quiet spell left unspent stays available (a
  long budget window is not lost to a burst's refusals), and the weak class cannot spend a
  long window's allowance early and starve the reused blocks that come later. When the
  strong demand is small the weak class gets nearly all of the budget (a generous budget
  writes every eviction); when it is large, none.

The budget is the hard limit (:class:`WriteBudget`'s window invariant): a write that does
not fit is refused, whatever its class. :class:`CappedAdmission` puts the same limit on
any other admission (the peers' rules, SARIA's E/R rule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aicache.kv.admission import SSDAdmission
from aicache.kv.radix import RadixNode
from aicache.kv.write_budget import DemandWindow, WriteBudget

if TYPE_CHECKING:
    from aicache.kv.saria import RequestAttrs

BlockBytes = Callable[[RadixNode], int]

#: the window weak candidates are paced over (at most the budget's own window)
PACE_WINDOW = 600.0


class BudgetedAdmission:
    """The budgeted admission (module docstring). Counters: ``strong`` / ``weak``
    candidates offered and ``strong_admitted`` / ``weak_admitted``."""

    __slots__ = ("budget", "pace_window", "t0", "size_of", "demand", "label", "strong",
                 "weak", "strong_admitted", "weak_admitted")

    def __init__(self, budget: WriteBudget, size_of: BlockBytes,
                 pace_window: float = PACE_WINDOW) -> None:
        self.budget = budget
        self.pace_window = pw = min(pace_window, budget.window)
        self.t0: float | None = None
        self.size_of = size_of
        self.demand = DemandWindow(pw)
        self.label = "budgeted"
        self.strong = self.weak = self.strong_admitted = self.weak_admitted = 0

    @staticmethod
    def is_strong(node: RadixNode) -> bool:
        return node.R >= 1 or node.E >= 2

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        size = self.size_of(node)
        if self.t0 is None:
            self.t0 = now
        if self.is_strong(node):
            self.strong += 1
            self.demand.add(size, now)
            ok = self.budget.fits(size, now)
            self.strong_admitted += ok
            return ok
        self.weak += 1
        b = self.budget
        ahead = b.charged + size + self.demand.total(now) - b.bytes_per_s * (now - self.t0)
        ok = ahead <= b.bytes_per_s * self.pace_window and b.fits(size, now)
        self.weak_admitted += ok
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
