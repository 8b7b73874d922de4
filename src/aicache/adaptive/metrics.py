"""Diagnosis quality against the generator's true phase labels: confusion matrix, accuracy,
per-pattern precision/recall/F1 and macro F1 (the seed's "diagnosis F1").

*No advice* is a prediction too (``None``): it counts as wrong for accuracy and recall, but
it is not a false positive of any pattern. Labels outside the three patterns are rejected:
a silently ignored typo would inflate the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aicache.adaptive.advisor.base import PATTERNS

NO_ADVICE = "none"


@dataclass(frozen=True, slots=True)
class DiagnosisConfusion:
    """``matrix[true][predicted]`` over PATTERNS (+ ``"none"`` for no advice)."""

    matrix: dict[str, dict[str, int]]

    @property
    def total(self) -> int:
        return sum(sum(row.values()) for row in self.matrix.values())

    @property
    def accuracy(self) -> float:
        t = self.total
        return sum(self.matrix[p][p] for p in PATTERNS) / t if t else 0.0

    def precision(self, p: str) -> float:
        predicted = sum(self.matrix[q][p] for q in PATTERNS)
        return self.matrix[p][p] / predicted if predicted else 0.0

    def recall(self, p: str) -> float:
        actual = sum(self.matrix[p].values())
        return self.matrix[p][p] / actual if actual else 0.0

    def f1(self, p: str) -> float:
        pr, rc = self.precision(p), self.recall(p)
        return 2 * pr * rc / (pr + rc) if pr + rc else 0.0

    @property
    def macro_f1(self) -> float:
        """Mean F1 over the patterns that occur as true labels."""
        present = [p for p in PATTERNS if sum(self.matrix[p].values())]
        return sum(self.f1(p) for p in present) / len(present) if present else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "matrix": {t: dict(row) for t, row in self.matrix.items()},
            "accuracy": self.accuracy,
            "macro_f1": self.macro_f1,
            "f1": {p: self.f1(p) for p in PATTERNS},
            "total": self.total,
        }


def diagnosis_confusion(labels: Sequence[str], predictions: Sequence[str | None]) -> DiagnosisConfusion:
    """Tally true labels against predictions (``None`` = no advice)."""
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    cols = (*PATTERNS, NO_ADVICE)
    matrix = {t: {c: 0 for c in cols} for t in PATTERNS}
    for t, p in zip(labels, predictions):
        if t not in PATTERNS:
            raise ValueError(f"true label {t!r} is not one of {PATTERNS}")
        col = NO_ADVICE if p is None else p
        if col not in cols:
            raise ValueError(f"prediction {p!r} is not one of {PATTERNS} or None")
        matrix[t][col] += 1
    return DiagnosisConfusion(matrix)
