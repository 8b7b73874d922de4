"""Grading Chiron's decisions against a generator's phase labels (simulation only).

The controller decides without ground truth (:mod:`aicache.adaptive.observer`); this
observer holds it. The simulator tells it the true pattern of the reads that follow at each
phase boundary (:meth:`ChironGrader.observe_label`), and it grades what the controller
reports:

* **diagnosis accuracy** — answered diagnoses (advice, accepted or not) whose pattern is the
  label current when the diagnosis was *submitted*, over answered diagnoses with a known
  label; *no advice* is left out (``diagnosis_accuracy``, ``diagnosis_confusion`` =
  ``{true: {predicted: count}}``);
* **diagnosis F1** — macro F1 over the same diagnoses plus the unanswered ones (no advice
  counts as a miss, never as a false positive): :class:`~aicache.adaptive.metrics.DiagnosisConfusion`;
* **recovery time** — from a label change to the first judged answer whose *adopted*
  pattern is the label current when it is judged (``recovery_s``, one entry per recovered boundary);
* **the answer log** — one row per judged answer (:attr:`log`: time, unit, trigger, pattern,
  confidence, accepted, and the submission-time label).

It is also the :class:`~aicache.adaptive.advisor.oracle.GroundTruth` of the experiment-only
``oracle``/``noisy`` advisors: :meth:`attach` binds them to it, and they answer with the
label recorded at submission.

Use::

    grader = ChironGrader()
    res = simulate_datacache(wl, "chiron", grader=grader)  # the simulator attaches it
    grader.log, grader.confusion().macro_f1, res.to_dict()["diagnosis_accuracy"]

:func:`~aicache.sim.datacache.simulate_datacache` attaches a fresh grader when none is
given, so its results always carry the grades of a Chiron run.
"""

from __future__ import annotations

from typing import Any

from aicache.adaptive.advisor.base import PATTERNS, Advice, DiagnosisRequest
from aicache.adaptive.advisor.oracle import bind_truth
from aicache.adaptive.controller import ChironSystem
from aicache.adaptive.metrics import DiagnosisConfusion, diagnosis_confusion
from aicache.adaptive.observer import ChironObserver, Judgement
from aicache.policies.system import DataCacheSystem


class ChironGrader(ChironObserver):
    """Ground truth and the grades of one run (see the module docstring)."""

    def __init__(self) -> None:
        self.label: str | None = None  # the true pattern of the reads now being replayed
        self._boundary: float | None = None  # time of the last label change, until recovered
        #: submitted, not yet judged: id(request) -> (request, label at submission); the
        #: request is held so that its id is not reused while the entry lives
        self._submitted: dict[int, tuple[DiagnosisRequest, str | None]] = {}
        self.total = 0
        self.correct = 0
        self.matrix: dict[str, dict[str, int]] = {}
        self._labels: list[str] = []  # every judged diagnosis with a known label ...
        self._predictions: list[str | None] = []  # ... and its answer (None = no advice)
        self.recovery_s: list[float] = []
        self.log: list[dict[str, Any]] = []

    def attach(self, system: DataCacheSystem) -> bool:
        """Observe ``system`` if it is Chiron, and answer its truth-reading advisors.
        False (nothing attached) for any other system."""
        if not isinstance(system, ChironSystem):
            return False
        system.add_observer(self)
        bind_truth(system.advisor, self)
        return True

    # -- ground truth ---------------------------------------------------------------------------
    def observe_label(self, label: str | None, now: float) -> None:
        """The true pattern of the reads from ``now`` on (None = unknown)."""
        if label != self.label:
            self._boundary = now
        self.label = label

    def label_for(self, request: DiagnosisRequest) -> str | None:
        entry = self._submitted.get(id(request))
        return entry[1] if entry is not None and entry[0] is request else None

    # -- ChironObserver ---------------------------------------------------------------------------
    def on_submit(self, request: DiagnosisRequest, now: float) -> None:
        self._submitted[id(request)] = (request, self.label)

    def on_judged(self, request: DiagnosisRequest, advice: Advice | None, judgement: Judgement) -> None:
        entry = self._submitted.pop(id(request), None)
        label = entry[1] if entry is not None else None
        if label in PATTERNS:
            assert label is not None
            self._labels.append(label)
            self._predictions.append(advice.pattern if advice is not None and advice.pattern in PATTERNS
                                     else None)
            if advice is not None:
                self.total += 1
                self.correct += advice.pattern == label
                row = self.matrix.setdefault(label, {})
                row[advice.pattern] = row.get(advice.pattern, 0) + 1
        self.log.append({**judgement.as_dict(), "label": label})
        if self._boundary is not None and judgement.committed == self.label:
            self.recovery_s.append(judgement.t - self._boundary)
            self._boundary = None

    # -- results ------------------------------------------------------------------------------
    def confusion(self) -> DiagnosisConfusion:
        """Every judged diagnosis with a known label, no advice as ``"none"``."""
        return diagnosis_confusion(self._labels, self._predictions)

    def stats(self) -> dict[str, Any]:
        return {
            "diagnosis_accuracy": (self.correct / self.total) if self.total else None,
            "diagnosis_confusion": self.matrix,
            "diagnosis_f1": self.confusion().macro_f1 if self._labels else None,
            "recovery_s": [round(x, 3) for x in self.recovery_s],
        }
