"""What Chiron's controller tells whoever watches it decide: the observer API.

The controller (:class:`~aicache.adaptive.controller.ChironSystem`) only *decides*: it
detects patterns through its advisor, gates the advice and switches executors. It knows
nothing of ground truth. Anything that grades or records those decisions — diagnosis
accuracy against a generator's phase labels, recovery time after a phase change, a
per-answer log for a figure — is an observer attached with
:meth:`ChironSystem.add_observer`. Observers never change a decision: the controller
calls them after it has acted, ignores what they return, and a run with or without them
makes exactly the same decisions.

Events (each at most once per diagnosis, never per read, so observers cost the read path
nothing):

* :meth:`ChironObserver.on_submit` — a diagnosis ``request`` was handed to the advisor
  runner at ``now``. Called *before* the runner sees it, so an observer may associate
  facts of the submission moment with the request (the simulator's grader records the
  true phase label here, and answers the ``oracle``/``noisy`` advisors from it).
* :meth:`ChironObserver.on_judged` — the gate judged the runner's answer to ``request``
  (``advice`` None = no advice); :class:`Judgement` says what was decided.
* :meth:`ChironObserver.on_switch` — a unit's executor changed from one pattern to
  another (``None`` = the default executor).

:class:`DecisionLog` is the plain recording observer (also usable on the real engine).
The simulator's grader is :class:`aicache.sim.grading.ChironGrader`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from aicache.adaptive.advisor.base import Advice, DiagnosisRequest


@dataclass(frozen=True, slots=True)
class Judgement:
    """One judged answer. ``pattern``/``confidence`` are the advice's (None = no advice);
    ``accepted`` is the gate's verdict on the advice; ``adopted`` the pattern the harness
    committed to — the advice's when accepted, the evidence check's own diagnosis when it
    overrode the advice (:mod:`aicache.adaptive.gate`), None when the policy stayed. Only
    an adopted pattern may switch an executor."""

    t: float
    unit: str
    trigger: str
    pattern: str | None
    confidence: float | None
    accepted: bool
    adopted: str | None = None

    @property
    def committed(self) -> str | None:
        """The adopted pattern (an accepted answer built without ``adopted`` adopts its own)."""
        return self.adopted if self.adopted is not None else self.pattern if self.accepted else None

    def as_dict(self) -> dict[str, Any]:
        return {"t": round(self.t, 3), "unit": self.unit, "trigger": self.trigger,
                "pattern": self.pattern, "confidence": self.confidence, "accepted": self.accepted,
                "adopted": self.committed}


class ChironObserver:
    """Base observer: every event is a no-op; override the ones you need."""

    def on_submit(self, request: DiagnosisRequest, now: float) -> None:
        """A diagnosis was submitted (before the advisor runner sees it)."""

    def on_judged(self, request: DiagnosisRequest, advice: Advice | None, judgement: Judgement) -> None:
        """The gate judged the answer to ``request``."""

    def on_switch(self, unit: str, old: str | None, new: str, now: float) -> None:
        """``unit``'s executor changed from pattern ``old`` (None = default) to ``new``."""


class DecisionLog(ChironObserver):
    """Records every :class:`Judgement` in order. ``limit`` keeps only the newest ones
    (a long-running mount must not grow without bound); None keeps all."""

    def __init__(self, limit: int | None = None) -> None:
        self.judgements: deque[Judgement] = deque(maxlen=limit)

    def on_judged(self, request: DiagnosisRequest, advice: Advice | None, judgement: Judgement) -> None:
        self.judgements.append(judgement)
