"""Feedback reflection and the review schedule: *when* to ask the advisor again.

Calling the advisor on a short fixed period wastes tokens while the accepted diagnosis still
fits; a long period delays adaptation after a phase change. The seed resolves this with
cheap local feedback: per round ``t``, ``h_t`` is the cache hit ratio of the round and
``H_t = alpha*h_t + (1-alpha)*H_{t-1}`` its EWMA; a jump ``|h_t - H_{t-1}| >= theta``
(either direction: a random→skewed change *raises* CHR) requests an early review with
trigger ``chr anomaly``, so the routine period can be longer (45 s instead of 30 s).

Both objects are pure (told ``now`` and the counts; no clock, no I/O), so the simulator and
the real engine share them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aicache.adaptive.advisor.base import TRIGGER_CHR_ANOMALY, TRIGGER_PERIODIC
from aicache.errors import BadInput

DEFAULT_ALPHA = 0.35
DEFAULT_THETA = 0.18


@dataclass(frozen=True, slots=True)
class Reflection:
    """Outcome of one feedback round."""

    chr: float  # h_t
    previous_ewma: float | None  # H_{t-1}; None on the first round
    ewma: float  # H_t
    anomaly: bool

    @property
    def deviation(self) -> float:
        """``|h_t - H_{t-1}|`` (0 on the first round)."""
        return 0.0 if self.previous_ewma is None else abs(self.chr - self.previous_ewma)


class FeedbackReflector:
    """EWMA of per-round CHR; flags rounds that deviate from it by at least ``theta``.

    Invariants: the first observed round initialises ``H`` to ``h_1`` and is never an
    anomaly (there is nothing to deviate from); a round with fewer than
    ``min_round_accesses`` accesses carries no CHR and leaves ``H`` unchanged.
    """

    __slots__ = ("alpha", "theta", "min_round_accesses", "ewma", "rounds", "anomalies")

    def __init__(
        self,
        alpha: float = DEFAULT_ALPHA,
        theta: float = DEFAULT_THETA,
        min_round_accesses: int = 1,
    ) -> None:
        if not (0.0 < alpha <= 1.0):
            raise BadInput(f"feedback alpha={alpha!r} must be in (0, 1] (default {DEFAULT_ALPHA})")
        if not (0.0 < theta <= 1.0):
            raise BadInput(f"feedback theta={theta!r} must be in (0, 1] (default {DEFAULT_THETA})")
        if min_round_accesses < 1:
            raise BadInput(f"min_round_accesses={min_round_accesses!r} must be >= 1")
        self.alpha = float(alpha)
        self.theta = float(theta)
        self.min_round_accesses = int(min_round_accesses)
        self.ewma: float | None = None
        self.rounds = 0
        self.anomalies = 0

    def observe(self, chr_value: float) -> Reflection:
        """Close a round whose hit ratio was ``chr_value`` (in [0, 1])."""
        if not (math.isfinite(chr_value) and 0.0 <= chr_value <= 1.0):
            raise ValueError(f"round CHR must be in [0, 1], got {chr_value!r}")
        prev = self.ewma
        anomaly = prev is not None and abs(chr_value - prev) >= self.theta
        self.ewma = chr_value if prev is None else self.alpha * chr_value + (1.0 - self.alpha) * prev
        self.rounds += 1
        self.anomalies += anomaly
        return Reflection(chr_value, prev, self.ewma, anomaly)

    def observe_counts(self, hits: int, accesses: int) -> Reflection | None:
        """Close a round from counts; ``None`` (no update) when the round was too quiet."""
        if accesses < self.min_round_accesses:
            return None
        return self.observe(hits / accesses)


@dataclass(frozen=True, slots=True)
class ReviewParams:
    """When reviews happen. Defaults are the seed's (30 s routine; 45 s with reflection)."""

    routine_interval_s: float = 30.0
    reflection_interval_s: float = 45.0
    early_retry_s: float = 5.0
    #: First review of a fresh unit (still on the default policy): as soon as an early retry.
    first_review_s: float = 5.0
    reflection: bool = True

    def __post_init__(self) -> None:
        for name in ("routine_interval_s", "reflection_interval_s", "early_retry_s", "first_review_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise BadInput(f"review {name.removesuffix('_s')}={v!r} must be a positive duration in seconds")

    @property
    def routine_s(self) -> float:
        return self.reflection_interval_s if self.reflection else self.routine_interval_s


class ReviewScheduler:
    """Decides when the next diagnosis of one cache unit is due, and with which trigger.

    Protocol (driver told ``now``): ``due(now)`` → a trigger string when a review should
    start; ``started(now)`` when the snapshot is handed to the advisor; ``finished(now,
    accepted)`` when the gate has judged the answer; ``anomaly(now)`` when feedback
    reflection flags a round. At most one diagnosis is in flight. An anomaly during a
    diagnosis makes the next one due as soon as the current one finishes.
    """

    __slots__ = ("params", "next_at", "in_flight", "_trigger", "requests", "early_retries")

    def __init__(self, params: ReviewParams | None = None, now: float = 0.0) -> None:
        self.params = params or ReviewParams()
        self.next_at = now + self.params.first_review_s
        self.in_flight = False
        self._trigger = TRIGGER_PERIODIC
        self.requests = 0
        self.early_retries = 0

    def due(self, now: float) -> str | None:
        if self.in_flight or now < self.next_at:
            return None
        return self._trigger

    def started(self, now: float) -> str:
        """A diagnosis starts now; returns its trigger."""
        trigger = self._trigger
        self.in_flight = True
        self.requests += 1
        self._trigger = TRIGGER_PERIODIC
        self.next_at = math.inf
        return trigger

    def finished(self, now: float, accepted: bool) -> None:
        """The gate judged the answer: routine interval after an acceptance, early retry
        after a rejection or no advice. A pending anomaly keeps its earlier due time."""
        self.in_flight = False
        if self._trigger == TRIGGER_CHR_ANOMALY:
            self.next_at = now
            return
        if accepted:
            self.next_at = now + self.params.routine_s
        else:
            self.early_retries += 1
            self.next_at = now + self.params.early_retry_s

    def anomaly(self, now: float) -> None:
        """Feedback reflection flagged a round: review as soon as possible."""
        if not self.params.reflection:
            return
        self._trigger = TRIGGER_CHR_ANOMALY
        if not self.in_flight:
            self.next_at = min(self.next_at, now)
