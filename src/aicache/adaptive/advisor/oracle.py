"""Experiment-only advisors that read the generator's true phase label.

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
from typing import ClassVar

from aicache.adaptive.advisor.base import PATTERNS, Advice, Advisor, DiagnosisRequest
from aicache.errors import BadInput

TRUTH_CONFIDENCE = (0.55, 1.0)
LIE_CONFIDENCE = (0.45, 0.95)


class OracleAdvisor(Advisor):
    """Returns ``request.true_label`` with confidence 1.0; *no advice* when unknown."""

    name: ClassVar[str] = "oracle"
    expected_latency_s = 0.0

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        self.counters.calls += 1
        if request.true_label not in PATTERNS:
            self.counters.error("no true label")
            return None
        return Advice(request.true_label, 1.0, "true phase label")


class NoisyAdvisor(Advisor):
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
        truth = request.true_label
        if truth not in PATTERNS:
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
