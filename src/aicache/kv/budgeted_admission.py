"""SSD admission under a write budget (:class:`~aicache.kv.write_budget.WriteBudget`).

The budgeted admissions write a block only when it leaves DRAM (a block reused while it
stays in DRAM never costs a write) and sort candidates into three evidence classes:

0. **returning** — evicted before, recomputed, and evicted again (``E_b ≥ 2``): its gaps
   between uses have outlasted DRAM once already. Admitted while the window's writes plus
   the block fit the allowance: a refused returning block is recomputed and comes back,
   so pacing this class turns one refusal into several prefills (except in
   :class:`ThresholdBudgetedAdmission`, which ranks it too).
1. **reused** — reused while in DRAM (``R_b ≥ 1``), first eviction.
2. **first** — a first eviction with no reuse yet.

Classes 1 and 2 are admitted never ahead of the budget's schedule: everything written so
far, the block and a reserve must stay within the rate's accrual since the first eviction
plus one ``pace_window`` of it (``room``). Budget a quiet spell left unspent stays
available. They differ in the reserve:

* :class:`ClassPacedAdmission` (``budgeted``, the default): the reserve is every byte the
  higher classes offered over the last pace window; within a class, first come.
* :class:`RankedBudgetedAdmission` (``budgeted-ranked``, an alternative, not the default)
  ranks every candidate by class and, within its class, by its **decayed use count** (each store of a new block and each
  reuse adds one; the count halves every ``half_life``, the pace window): the reserve is
  the bytes offered over the last pace window that ranked *above* the block (the
  forecast of the better demand to come). Under a tight budget a reused block used often
  and recently goes before one used once long ago; when the better demand leaves room,
  the block is written (its own class's equals and lower ranks reserve nothing).
* :class:`ThresholdBudgetedAdmission` (``budgeted-threshold``, tried, not the default)
  puts the returning class under the ranked threshold too, with a share of the window's
  allowance it may run ahead of the schedule.

The budget is the hard limit (:class:`WriteBudget`'s window invariant): a write that does
not fit is refused, whatever its rank. :class:`CappedAdmission` puts the same limit on
any other admission (the peers' rules, SARIA's E/R rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from aicache.kv.admission import SSDAdmission
from aicache.kv.radix import RadixNode
from aicache.kv.request_attrs import RequestAttrs
from aicache.kv.write_budget import DemandWindow, RankedDemandWindow, WriteBudget

BlockBytes = Callable[[RadixNode], int]

#: the window weaker candidates are paced over (at most the budget's own window)
PACE_WINDOW = 600.0
CLASSES = 3
#: rank buckets of the decayed use count: quarter steps of its log2 over [-64, 16)
RANK_STEPS = 4
RANK_LOW = -64.0
RANK_BUCKETS = 80 * RANK_STEPS
#: the share of the window's allowance ``budgeted-threshold`` lets returning blocks run
#: ahead of the rate's schedule
RETURNING_SHARE = 0.25


def evidence_class(node: RadixNode) -> int:
    """0: evicted before and back (``E_b ≥ 2`` at this eviction); 1: reused while in
    DRAM (``R_b ≥ 1``); 2: a first eviction with no reuse."""
    return 0 if node.E >= 2 else 1 if node.R >= 1 else 2


class BudgetSpender:
    """What both budgeted admissions share: the ledger they charge, the block sizes, the
    schedule's start, and per evidence class (0 returning, 1 reused, 2 first eviction)
    the candidates ``offered[k]`` and ``admitted[k]``. They never prewrite."""

    __slots__ = ("budget", "pace_window", "t0", "size_of", "label", "offered", "admitted")

    def __init__(self, budget: WriteBudget, size_of: BlockBytes, pace_window: float,
                 label: str) -> None:
        if not pace_window > 0:
            raise ValueError("pace_window must be positive")
        self.budget = budget
        self.pace_window = min(pace_window, budget.window)
        self.t0: float | None = None
        self.size_of = size_of
        self.label = label
        self.offered = [0] * CLASSES
        self.admitted = [0] * CLASSES

    evidence_class = staticmethod(evidence_class)

    def room(self, now: float) -> float:
        """Bytes the schedule leaves: the rate's accrual since the first eviction plus one
        pace window of it, less what was written."""
        b = self.budget
        t0 = now if self.t0 is None else self.t0
        return b.bytes_per_s * (now - t0 + self.pace_window) - b.charged

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        """Counts the candidate in its class; the subclass's :meth:`decide` says whether
        it is written."""
        size = self.size_of(node)
        if self.t0 is None:
            self.t0 = now
        k = evidence_class(node)
        self.offered[k] += 1
        ok = self.decide(node, size, k, now)
        self.admitted[k] += ok
        return ok

    def decide(self, node: RadixNode, size: int, k: int, now: float) -> bool:
        raise NotImplementedError

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return False

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        self.budget.charge(size, now)


class DecayedUses(BudgetSpender):
    """A budget spender that keeps each block's **decayed use count**: each store of a new
    block and each reuse adds one; the count halves every ``half_life`` (default: the pace
    window). Both ranked rules order candidates by it."""

    __slots__ = ("half_life", "_uses", "_keep")

    def __init__(self, budget: WriteBudget, size_of: BlockBytes, pace_window: float,
                 label: str, half_life: float | None = None) -> None:
        super().__init__(budget, size_of, pace_window, label)
        self.half_life = self.pace_window if half_life is None else half_life
        if not self.half_life > 0:
            raise ValueError("half_life must be positive")
        #: node -> (log2 of its decayed use count at time t, t); an entry is dropped once
        #: its count decays below 2**RANK_LOW (so a node the tree reclaimed is held at
        #: most about -RANK_LOW half-lives longer)
        self._uses: dict[RadixNode, tuple[float, float]] = {}
        self._keep = 1 << 16

    def log_count(self, node: RadixNode, now: float) -> float:
        """log2 of ``node``'s use count decayed to ``now``: ``Σ 2^(−(now − t_i)/half_life)``
        over its uses ``t_i`` (-inf: never used)."""
        got = self._uses.get(node)
        if got is None:
            return -math.inf
        return got[0] - (now - got[1]) / self.half_life

    def count_bucket(self, node: RadixNode, now: float) -> int:
        """The decayed use count in quarter steps of its log2 over
        ``[RANK_LOW, RANK_LOW + 80)``: ``0 ≤ bucket < RANK_BUCKETS``, higher = more used."""
        lc = self.log_count(node, now)
        return 0 if lc <= RANK_LOW else min(RANK_BUCKETS - 1,
                                             int((lc - RANK_LOW) * RANK_STEPS))

    def _use(self, node: RadixNode, now: float) -> None:
        lc = self.log_count(node, now)
        self._uses[node] = (0.0 if lc == -math.inf else math.log2(1.0 + 2.0 ** lc), now)
        if len(self._uses) > 2 * self._keep:
            # a count decayed below 2**RANK_LOW ranks in the lowest bucket anyway
            self._uses = {n: u for n, u in self._uses.items()
                          if u[0] - (now - u[1]) / self.half_life > RANK_LOW}
            self._keep = max(self._keep, len(self._uses))

    def on_reference(self, node: RadixNode, now: float) -> None:
        self._use(node, now)

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        # a block stored for the first time; a recomputed one (E_b ≥ 1) is counted as the
        # reuse it is (on_reference)
        for i in range(skip, len(path)):
            n = path[i]
            if n.E == 0 and n not in self._uses:
                self._use(n, now)


class RankedBudgetedAdmission(DecayedUses):
    """The ranked budgeted admission (module docstring). ``half_life``: seconds over which
    a use's weight halves (default: the pace window). Invariant of the decision for a
    reused or first-eviction block of rank ``ρ``: ``size + (bytes offered in the last
    pace window ranked above ρ) ≤ room(now)``, and the write fits the ledger."""

    __slots__ = ("_ranked",)

    def __init__(self, budget: WriteBudget, size_of: BlockBytes,
                 pace_window: float = PACE_WINDOW, half_life: float | None = None) -> None:
        super().__init__(budget, size_of, pace_window, "budgeted-ranked", half_life)
        #: every candidate's bytes over the last pace window, by rank (class, then count)
        self._ranked = RankedDemandWindow(self.pace_window, RANK_BUCKETS * CLASSES)

    def rank(self, node: RadixNode, now: float) -> int:
        """Higher is better: the evidence class first (returning above reused above first
        eviction), then the decayed use count in quarter steps of its log2."""
        return ((CLASSES - 1 - evidence_class(node)) * RANK_BUCKETS
                + self.count_bucket(node, now))

    def decide(self, node: RadixNode, size: int, k: int, now: float) -> bool:
        r = self.rank(node, now)
        self._ranked.add(r, size, now)
        if k == 0:
            # A refused returning block is recomputed and offered again (each refusal
            # costs a prefill): the returning class is paced only by the ledger.
            ok = self.budget.fits(size, now)
        else:
            better = self._ranked.at_least(r + 1, now)
            ok = size + better <= self.room(now) and self.budget.fits(size, now)
        return ok


class ThresholdBudgetedAdmission(RankedBudgetedAdmission):
    """The threshold budgeted admission, ``budgeted-threshold`` (tried; see the module
    docstring): ``budgeted-ranked``'s threshold for **every** class, the returning one
    included. A candidate of rank ``ρ`` (class, then decayed use count) is written when
    ``size + (bytes offered in the last pace window ranked above ρ) ≤ room(now) + ahead``
    and the write fits the ledger, where ``ahead`` is 0 for the reused and first-eviction
    classes and ``returning_share × allowance`` for the returning class.

    Why: a returning block taken first come (the other two rules) spends a tight budget
    early on whatever returns first and leaves nothing for the blocks that return later,
    so each later return is a prefill; ranked under the same threshold, the blocks that
    came back often and recently are written and the spending follows the rate's
    schedule. Why the share: a refused returning block is recomputed and comes back, so
    pacing the class strictly to the schedule turns bursts above the rate into prefills;
    the share lets the class run ahead of the schedule by a fixed part of the window's
    allowance (the ledger's own limit still holds) before its ranks decide.

    Invariant: the bytes written since the first eviction never exceed the rate's accrual
    since then plus one pace window of it plus ``returning_share × allowance``."""

    __slots__ = ("returning_share",)

    def __init__(self, budget: WriteBudget, size_of: BlockBytes,
                 pace_window: float = PACE_WINDOW, half_life: float | None = None,
                 returning_share: float = RETURNING_SHARE) -> None:
        super().__init__(budget, size_of, pace_window, half_life)
        if not 0.0 <= returning_share <= 1.0:
            raise ValueError("returning_share must be within [0, 1]")
        self.returning_share = returning_share
        self.label = "budgeted-threshold"

    def decide(self, node: RadixNode, size: int, k: int, now: float) -> bool:
        r = self.rank(node, now)
        self._ranked.add(r, size, now)
        ahead = self.returning_share * self.budget.allowance if k == 0 else 0.0
        better = self._ranked.at_least(r + 1, now)
        return size + better <= self.room(now) + ahead and self.budget.fits(size, now)


class ClassPacedAdmission(BudgetSpender):
    """The class-paced budgeted admission, ``budgeted`` (module docstring)."""

    __slots__ = ("demand",)

    def __init__(self, budget: WriteBudget, size_of: BlockBytes,
                 pace_window: float = PACE_WINDOW) -> None:
        super().__init__(budget, size_of, pace_window, "budgeted")
        #: bytes each class offered over the last pace window (its demand)
        self.demand = [DemandWindow(self.pace_window) for _ in range(CLASSES)]

    def decide(self, node: RadixNode, size: int, k: int, now: float) -> bool:
        self.demand[k].add(size, now)
        b = self.budget
        if k == 0:
            ok = b.fits(size, now)
        else:
            reserve = sum(d.total(now) for d in self.demand[:k])
            ok = size + reserve <= self.room(now) and b.fits(size, now)
        return ok

    def on_reference(self, node: RadixNode, now: float) -> None:
        return None

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
