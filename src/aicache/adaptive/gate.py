"""The gate: adopt an advisor's pattern only when it is sure enough — and, by default, only
when the recorded accesses do not contradict it.

Advisors may hallucinate; the seed observes that wrong diagnoses tend to come with low
self-reported confidence, so its harness adopts ``p`` only when ``c >= tau`` (tau = 0.70)
and otherwise keeps the active policy. A filter alone does not correct a wrong diagnosis,
so a rejection (or *no advice*) asks the :class:`~aicache.adaptive.feedback.ReviewScheduler`
for an *early retry* with fresh accesses instead of waiting for the routine review.

Two gate modes (``ChironParams.gate_mode``, ``--gate``; docs/design/chiron.md):

* ``seed`` — the seed's confidence gate as written: accept iff ``c >= tau``.
* ``aicache`` (the default) adds a deterministic *evidence check*. Self-reported confidence
  need not track correctness (a small model can say the same pattern at c 0.98 on every
  window), so the harness also weighs the snapshot the advisor was shown with the
  statistical classifier (:func:`weigh_evidence`, the ``statistical`` advisor's own scores
  of the window and of its recent tail):

  - advice ``p`` with ``c >= tau`` is *contradicted* (rejected) when the evidence names
    another pattern and is at least ``tau`` sure, in the window *and* in its tail, that the
    pattern is not ``p`` (``against(p) >= tau``) — in the tail alone when the review context
    says the older prefix may be stale (after a CHR anomaly or a switch), as the statistical
    advisor then lets the recent part decide. Where the evidence is mixed (a window
    straddling a change, a stream the classifier cannot place) the advisor decides;
  - when the advice is not adopted (no advice, low confidence, contradicted) and the
    evidence's own diagnosis reaches ``tau``, the harness adopts that instead, so an advisor
    that fails or misleads costs at most what the statistical advisor would have done.

  The statistical advisor's own answer is the evidence's diagnosis, so with it the two
  modes decide exactly alike.

Pure: no clock, no I/O. Invariant: ``adopted`` (the only pattern a decision may switch a
policy to) is the advice's pattern iff the verdict is ``accept``; otherwise it is the
evidence's pattern when the evidence is confident (``aicache`` mode only), else None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from aicache.adaptive.advisor.base import PATTERNS, Advice
from aicache.adaptive.analyzer import tail_length
from aicache.errors import BadInput

DEFAULT_TAU = 0.70
#: gate modes: ``aicache`` (confidence + evidence check, the default) and ``seed`` (the
#: seed's confidence gate alone)
GATE_MODES = ("aicache", "seed")
DEFAULT_GATE_MODE = "aicache"


class Verdict(str, Enum):
    ACCEPT = "accept"
    LOW_CONFIDENCE = "low confidence"
    NO_ADVICE = "no advice"
    CONTRADICTED = "contradicted by evidence"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the recorded accesses of a snapshot say, independently of the advisor:
    the statistical classifier's diagnosis, and per pattern how sure it is that the pattern
    is *not* the one (the smaller of the window's and the recent tail's ``(1 - score) *
    reliability``; the tail's alone when the older prefix may be stale)."""

    diagnosis: Advice | None
    against: dict[str, float]

    def confident(self, tau: float) -> bool:
        d = self.diagnosis
        return d is not None and d.pattern in PATTERNS and math.isfinite(d.confidence) and d.confidence >= tau


def check_gate_mode(mode: str) -> str:
    if mode not in GATE_MODES:
        raise BadInput(f"gate mode {mode!r}: valid gate modes: {', '.join(GATE_MODES)} "
                       f"(aicache = confidence + evidence check, seed = confidence only)")
    return mode


def weigh_evidence(window: Sequence[int], stale_prefix: bool) -> Evidence:
    """The evidence check's view of ``window`` (``stale_prefix``: the review context's flag,
    which lets the recent part decide, as for the statistical advisor). ~ms per call; run
    once per judged answer, never per read."""
    from aicache.adaptive.advisor.statistical import StatisticalAdvisor, score_sequence

    n = len(window)
    if n == 0:
        return Evidence(None, {p: 0.0 for p in PATTERNS})
    w = np.asarray(window, dtype=np.int64)
    t = tail_length(n)
    parts = [score_sequence(w[n - t:])]
    if t < n and not stale_prefix:
        parts.append(score_sequence(w))
    against = {p: min((1.0 - s.score(p)) * s.reliability for s in parts) for p in PATTERNS}
    return Evidence(StatisticalAdvisor().diagnose(window, stale_prefix), against)


@dataclass(frozen=True, slots=True)
class GateDecision:
    verdict: Verdict
    pattern: str | None = None  # the advice's
    confidence: float = 0.0  # the advice's
    #: the pattern the harness commits to (None: keep the active policy)
    adopted: str | None = None

    @property
    def accepted(self) -> bool:
        """The *advice* was accepted as given."""
        return self.verdict is Verdict.ACCEPT

    @property
    def retry_early(self) -> bool:
        """Nothing adopted: gather fresh accesses and ask again sooner."""
        return self.adopted is None


@dataclass(slots=True)
class GateCounters:
    accepted: int = 0
    low_confidence: int = 0
    no_advice: int = 0
    contradicted: int = 0
    #: decisions whose adopted pattern came from the evidence, not the advice
    evidence_adopted: int = 0
    by_pattern: dict[str, int] = field(default_factory=dict)


class ConfidenceGate:
    """``check(advice)`` → accept iff ``advice.confidence >= tau`` (the seed's gate);
    ``check(advice, evidence)`` adds the evidence check (module docstring)."""

    __slots__ = ("tau", "counters")

    def __init__(self, tau: float = DEFAULT_TAU) -> None:
        if not (isinstance(tau, (int, float)) and math.isfinite(tau) and 0.0 <= tau <= 1.0):
            raise BadInput(f"confidence gate tau={tau!r} must be a number in [0, 1] (e.g. 0.7)")
        self.tau = float(tau)
        self.counters = GateCounters()

    def check(self, advice: Advice | None, evidence: Evidence | None = None) -> GateDecision:
        d = self._confidence(advice)
        if evidence is None:
            return d
        k = self.counters
        if d.accepted:
            assert advice is not None
            ev = evidence.diagnosis
            if (ev is not None and ev.pattern != advice.pattern and evidence.confident(self.tau)
                    and evidence.against.get(advice.pattern, 0.0) >= self.tau):
                k.accepted -= 1
                k.by_pattern[advice.pattern] -= 1
                k.contradicted += 1
                d = GateDecision(Verdict.CONTRADICTED, advice.pattern, advice.confidence)
            else:
                return d
        if evidence.confident(self.tau):
            assert evidence.diagnosis is not None
            k.evidence_adopted += 1
            return GateDecision(d.verdict, d.pattern, d.confidence, evidence.diagnosis.pattern)
        return d

    def _confidence(self, advice: Advice | None) -> GateDecision:
        if advice is None or advice.pattern not in PATTERNS:
            self.counters.no_advice += 1
            return GateDecision(Verdict.NO_ADVICE)
        c = advice.confidence
        if not math.isfinite(c) or c < self.tau:
            self.counters.low_confidence += 1
            return GateDecision(Verdict.LOW_CONFIDENCE, advice.pattern, c)
        self.counters.accepted += 1
        self.counters.by_pattern[advice.pattern] = self.counters.by_pattern.get(advice.pattern, 0) + 1
        return GateDecision(Verdict.ACCEPT, advice.pattern, c, advice.pattern)
