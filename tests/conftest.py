"""Shared test configuration.

Hypothesis runs without per-example deadlines: the machines here are shared and noisy, and
a deadline would turn load into flaky failures. Example counts stay modest so the whole
suite fits in a few minutes on 2 cores.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "aicache",
    deadline=None,
    max_examples=int(os.environ.get("AICACHE_HYPOTHESIS_EXAMPLES", "50")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("aicache")
os.environ.setdefault("AICACHE_NO_PROGRESS", "1")
