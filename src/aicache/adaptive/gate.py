"""The confidence gate: adopt an advisor's pattern only when it is sure enough.

Advisors may hallucinate; the seed observes that wrong diagnoses tend to come with low
self-reported confidence, so the harness adopts ``p`` only when ``c >= tau`` (tau = 0.70)
and otherwise keeps the active policy. A filter alone does not correct a wrong diagnosis,
so a rejection (or *no advice*) asks the :class:`~aicache.adaptive.feedback.ReviewScheduler`
for an *early retry* with fresh accesses instead of waiting for the routine review.

Pure: no clock, no I/O. Invariant: a decision is ``accepted`` iff the advice exists, names a
known pattern and has ``confidence >= tau``; only accepted decisions may change a policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from aicache.adaptive.advisor.base import PATTERNS, Advice
from aicache.errors import BadInput

DEFAULT_TAU = 0.70


class Verdict(str, Enum):
    ACCEPT = "accept"
    LOW_CONFIDENCE = "low confidence"
    NO_ADVICE = "no advice"


@dataclass(frozen=True, slots=True)
class GateDecision:
    verdict: Verdict
    pattern: str | None = None
    confidence: float = 0.0

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPT

    @property
    def retry_early(self) -> bool:
        """Rejected or no advice: gather fresh accesses and ask again sooner."""
        return self.verdict is not Verdict.ACCEPT


@dataclass(slots=True)
class GateCounters:
    accepted: int = 0
    low_confidence: int = 0
    no_advice: int = 0
    by_pattern: dict[str, int] = field(default_factory=dict)


class ConfidenceGate:
    """``check(advice)`` → accept iff ``advice.confidence >= tau``."""

    __slots__ = ("tau", "counters")

    def __init__(self, tau: float = DEFAULT_TAU) -> None:
        if not (isinstance(tau, (int, float)) and math.isfinite(tau) and 0.0 <= tau <= 1.0):
            raise BadInput(f"confidence gate tau={tau!r} must be a number in [0, 1] (e.g. 0.7)")
        self.tau = float(tau)
        self.counters = GateCounters()

    def check(self, advice: Advice | None) -> GateDecision:
        if advice is None or advice.pattern not in PATTERNS:
            self.counters.no_advice += 1
            return GateDecision(Verdict.NO_ADVICE)
        c = advice.confidence
        if not math.isfinite(c) or c < self.tau:
            self.counters.low_confidence += 1
            return GateDecision(Verdict.LOW_CONFIDENCE, advice.pattern, c)
        self.counters.accepted += 1
        self.counters.by_pattern[advice.pattern] = self.counters.by_pattern.get(advice.pattern, 0) + 1
        return GateDecision(Verdict.ACCEPT, advice.pattern, c)
