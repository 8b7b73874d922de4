"""Experiment-only advisors that read the generator's true phase label.

Ground truth never travels in a :class:`DiagnosisRequest` (the production request type):
these advisors ask a :class:`GroundTruth` source for the label of the request's submission
moment. The simulator's grader (:class:`aicache.sim.grading.ChironGrader`) is one and binds
itself with :func:`bind_truth` when it is attached; unbound (the real engine) they give
*no advice*.

``oracle`` bounds what any advisor could achieve (always right, always sure). ``noisy:P``
models an unreliable LLM: it names a uniformly chosen *wrong* pattern with probability
``P``, and its self-reported confidence is only weakly informative, as the seed observes of
real models (hallucinations tend to, but do not always, come with lower confidence):

* truthful answers draw ``c ~ U(0.55, 1.00)`` (mean 0.775; 67% pass tau = 0.70),
* lies draw ``c ~ U(0.45, 0.95)`` (mean 0.700; 50% pass tau = 0.70),

so the confidence gate filters some lies and some truths — exactly what the gate ablation
needs. All randomness comes from the injected ``random.Random``; one request consumes a
fixed number of draws (3), so runs are reproducible whatever the answers.
"""

from __future__ import annotations

import random
from typing import ClassVar, Protocol

from aicache.adaptive.advisor.base import PATTERNS, Advice, Advisor, DiagnosisRequest
from aicache.errors import BadInput

TRUTH_CONFIDENCE = (0.55, 1.0)
LIE_CONFIDENCE = (0.45, 0.95)


class GroundTruth(Protocol):
    def label_for(self, request: DiagnosisRequest) -> str | None:
        """The true pattern when ``request`` was submitted (None = unknown)."""
        ...


class TruthAdvisor(Advisor):
    """An advisor that answers from a :class:`GroundTruth` (``truth``; None = unbound)."""

    truth: GroundTruth | None = None

    def _label(self, request: DiagnosisRequest) -> str | None:
        label = self.truth.label_for(request) if self.truth is not None else None
        return label if label in PATTERNS else None


def bind_truth(advisor: Advisor, truth: GroundTruth) -> bool:
    """Point every :class:`TruthAdvisor` in ``advisor``'s wrapper chain (advisors that
    wrap another keep it in ``inner``) at ``truth``. True if one was found."""
    found = False
    a: object = advisor
    while isinstance(a, Advisor):
        if isinstance(a, TruthAdvisor):
            a.truth = truth
            found = True
        a = getattr(a, "inner", None)
    return found


class OracleAdvisor(TruthAdvisor):
    """Returns the true label with confidence 1.0; *no advice* when unknown."""

    name: ClassVar[str] = "oracle"
    expected_latency_s = 0.0

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        self.counters.calls += 1
        label = self._label(request)
        if label is None:
            self.counters.error("no true label")
            return None
        return Advice(label, 1.0, "true phase label")


class NoisyAdvisor(TruthAdvisor):
    """The oracle, lying with probability ``p`` (a uniformly chosen wrong pattern)."""

    name: ClassVar[str] = "noisy"
    expected_latency_s = 0.0

    def __init__(self, p: float, rng: random.Random | None = None) -> None:
        super().__init__()
        if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
            raise BadInput(f"noisy advisor lie probability {p!r} must be in [0, 1] (e.g. noisy:0.3)")
        self.p = float(p)
        self.rng = rng if rng is not None else random.Random(0)
        self.lies = 0

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        self.counters.calls += 1
        truth = self._label(request)
        if truth is None:
            self.counters.error("no true label")
            return None
        lie_draw, pick_draw, conf_draw = self.rng.random(), self.rng.random(), self.rng.random()
        if lie_draw < self.p:
            wrong = [q for q in PATTERNS if q != truth]
            self.lies += 1
            lo, hi = LIE_CONFIDENCE
            return Advice(wrong[int(pick_draw * len(wrong))], lo + (hi - lo) * conf_draw, "noisy: lie")
        lo, hi = TRUTH_CONFIDENCE
        return Advice(truth, lo + (hi - lo) * conf_draw, "noisy: truth")
