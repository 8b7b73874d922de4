"""Advisor interface: given an access window, its statistics and review context, name the
access pattern with a confidence — or give *no advice*.

Advisors are called from a background worker (real engine) or after a virtual delay
(simulator); they may block (an HTTP call) but must never raise: any failure (bad JSON,
unknown pattern, confidence outside [0, 1], timeout, HTTP error) is returned as ``None``
and counted. The read path never waits on an advisor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

PATTERNS = ("sequential", "random", "skewed")

TRIGGER_CHR_ANOMALY = "chr anomaly"
TRIGGER_PERIODIC = "periodic retry"


@dataclass(frozen=True, slots=True)
class ReviewContext:
    """The third part of the runtime prompt (docs/design/chiron.md, "The review context")."""

    trigger: str = TRIGGER_PERIODIC  # "chr anomaly" | "periodic retry"
    previous_state: str = "default"  # "default" | "stable" | "transition"
    previous_pattern: str | None = None
    older_prefix_may_be_stale: bool = False
    recent_tail_length: int = 0

    @classmethod
    def for_review(
        cls,
        trigger: str,
        previous_state: str,
        previous_pattern: str | None,
        window_length: int,
    ) -> ReviewContext:
        """The seed's rule (docs/design/chiron.md): the stale-prefix flag is ``trigger == chr anomaly or
        previous_state == transition``; the tail length is the analyzer's ``t``."""
        from aicache.adaptive.analyzer import tail_length

        return cls(
            trigger=trigger,
            previous_state=previous_state,
            previous_pattern=previous_pattern if previous_pattern in PATTERNS else None,
            older_prefix_may_be_stale=trigger == TRIGGER_CHR_ANOMALY or previous_state == "transition",
            recent_tail_length=tail_length(window_length),
        )


@dataclass(frozen=True, slots=True)
class DiagnosisRequest:
    """A snapshot handed to the advisor. ``stats`` = {"window": {...}, "recent tail": {...}}
    as computed by :func:`aicache.adaptive.analyzer.analyze`; an empty mapping means
    "statistics off" (the ablation: LLM advisors then send neither the statistics nor their
    guide). It carries only what the controller knows: ground truth (a generator's phase
    label) reaches the experiment-only advisors through
    :class:`aicache.adaptive.advisor.oracle.GroundTruth`, never through a request."""

    unit: str
    window: tuple[int, ...]
    stats: Mapping[str, Any]
    context: ReviewContext


@dataclass(frozen=True, slots=True)
class Advice:
    pattern: str
    confidence: float
    reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0


@dataclass(slots=True)
class AdvisorCounters:
    calls: int = 0
    no_advice: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s_total: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, kind: str) -> None:
        """Count one *no advice* outcome of the given kind."""
        self.no_advice += 1
        self.errors[kind] = self.errors.get(kind, 0) + 1


class Advisor(ABC):
    """Names the access pattern of a window. Never raises from :meth:`advise`."""

    name: ClassVar[str] = ""
    #: Typical latency in seconds, used by the simulator as the virtual advisor delay.
    expected_latency_s: float = 0.0

    def __init__(self) -> None:
        self.counters = AdvisorCounters()

    @abstractmethod
    def advise(self, request: DiagnosisRequest) -> Advice | None:
        """Advice, or None for *no advice*."""

    def close(self) -> None:
        """Release connections / files."""


#: an advisor as the layers above hand it to a Chiron system: an instance, or a spec the
#: advisor registry resolves (``statistical``, ``noisy:0.3``, ``replay:FILE``…)
AdvisorSpec: TypeAlias = "Advisor | str"
