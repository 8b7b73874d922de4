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


#: Measured on the shared 2-core machine: chiron-e2e W1 at full scale ~10 s, saria-agent
#: full (8 replays of ~1 M block events) ~45 s on 2 workers, cache-policies quick ~3 s,
#: datacache-real ~90 s; the whole demo ~2.5 min.
DEMO_EXPERIMENTS: list[DemoEntry] = [
    DemoEntry("chiron-e2e", quick=False, select={"workload": "W1", "check": "main", "seed": 0},
              why="Chiron vs JuiceFS/Alluxio/JuiceFS-Adaptive on workflow W1, full scale"),
    DemoEntry("saria-agent", quick=False, why="SARIA vs LMCache-style baselines on agent sessions"),
    DemoEntry("cache-policies", quick=True, why="eviction-policy miss-ratio curves"),
    DemoEntry("datacache-real", quick=False, why="the real data cache: a PyTorch job over moto S3, JCT/CHR per system"),
]


__all__ = ["DEMO_EXPERIMENTS", "DemoEntry"]
