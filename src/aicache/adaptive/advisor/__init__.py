"""Advisors by name: ``statistical`` (default), ``openai``, ``oracle``, ``noisy:P``,
``record:FILE`` (wraps another advisor, writes a transcript), ``replay:FILE``.

Use :func:`aicache.adaptive.advisor.registry.make_advisor` with a spec string.
"""

from aicache.adaptive.advisor.base import (
    PATTERNS,
    Advice,
    Advisor,
    DiagnosisRequest,
    ReviewContext,
)
from aicache.adaptive.advisor.registry import ADVISORS, DEFAULT_ADVISOR, make_advisor

__all__ = [
    "ADVISORS",
    "DEFAULT_ADVISOR",
    "PATTERNS",
    "Advice",
    "Advisor",
    "DiagnosisRequest",
    "ReviewContext",
    "make_advisor",
]
