"""What ``aicache demo`` runs: the project's main job on embedded defaults.

A list of experiments with their size (quick or full) and an optional cell filter, chosen
so the whole demo finishes in under 10 minutes on 2 cores with no network and no user
configuration. Entries whose experiment is not registered are skipped with a printed note
(never silently), so the list can name experiments before they land.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DemoEntry:
    """One demo step: experiment ``name``, quick or full, and an optional cell filter
    (``{"param": value-or-list}``, as ``aicache experiment run --select``)."""

    name: str
    quick: bool = True
    select: Mapping[str, Any] | None = None
    why: str = ""


#: The headline comparison, one entry per system: each is small enough for the demo to
#: finish in a few minutes on 2 cores (each experiment's ``full_wall_time`` documents its
#: own run time).
DEMO_EXPERIMENTS: list[DemoEntry] = [
    DemoEntry("chiron-e2e", quick=False, select={"workload": "W1", "check": "main", "seed": 0},
              why="Chiron vs JuiceFS/Alluxio/JuiceFS-Adaptive on workflow W1, full scale"),
    DemoEntry("saria-agent", quick=False, why="SARIA vs LMCache-style baselines on agent sessions"),
    DemoEntry("cache-policies", quick=True, why="eviction-policy miss-ratio curves"),
    DemoEntry("datacache-real", quick=False, why="the real data cache: a PyTorch job over moto S3, JCT/CHR per system"),
]


__all__ = ["DEMO_EXPERIMENTS", "DemoEntry"]
