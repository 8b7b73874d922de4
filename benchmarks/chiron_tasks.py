"""T1–T6 over seeds 0–9: Chiron's JCT ratio to the best baseline per task (mean, max).

The ``chiron-heldout`` experiment's task study (issue 19 must-show 4: mean <= 1.01 on
every task, no seed above 1.03) without its held-out half, to compare executor variants
quickly. Baselines do not depend on Chiron's executors, so ``--baselines`` may take their
rows from a stored ``cells.jsonl`` (e.g. docs/results/chiron-heldout/cells.jsonl);
``--chiron-params`` is a JSON object of :class:`aicache.adaptive.controller.ChironParams`
fields for the Chiron arm; ``--skewed-eviction NAME`` (an eviction registry name) replaces
the skewed executor's adaptive segmented LRU in this script's processes only, to measure a variant
before it is adopted.

    PYTHONPATH=src python benchmarks/chiron_tasks.py --workers 2 \
        --baselines docs/results/chiron-heldout/cells.jsonl --json
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from aicache.experiments.chiron import BASELINES, TASKS, best_baseline
from aicache.experiments.chiron_figs import run_arm
from aicache.experiments.chiron_heldout import TASK_SEEDS


def _use_skewed_eviction(name: str) -> None:
    """Pool initializer (and the parent's): the skewed executor's eviction is ``name``."""
    import random

    from aicache.adaptive.executors import SkewedExecutor
    from aicache.policies import EVICTION
    from aicache.policies.base import EvictionPolicy

    def make(self: SkewedExecutor, capacity: int, rng: random.Random) -> EvictionPolicy:
        return EVICTION.get(name)(capacity, rng=rng)

    SkewedExecutor._make_eviction = make  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated task names")
    ap.add_argument("--seeds", type=int, default=len(TASK_SEEDS), help="seeds 0..N-1")
    ap.add_argument("--baselines", type=Path, help="cells.jsonl with the baseline rows to reuse")
    ap.add_argument("--chiron-params", default="{}", help="JSON: ChironParams fields for Chiron")
    ap.add_argument("--skewed-eviction", help="eviction registry name for the skewed executor")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        cp = json.loads(a.chiron_params)
    except json.JSONDecodeError:
        print(f"--chiron-params {a.chiron_params!r} is not JSON; pass an object such as '{{}}'", file=sys.stderr)
        return 2
    tasks = [t for t in a.tasks.split(",") if t]
    bad = [t for t in tasks if t not in TASKS]
    if bad or not isinstance(cp, dict):
        print(f"--tasks: unknown {bad}; choose from {', '.join(TASKS)}" if bad
              else "--chiron-params must be a JSON object", file=sys.stderr)
        return 2
    if a.skewed_eviction:
        from aicache.policies import EVICTION

        if a.skewed_eviction not in EVICTION.names():
            print(f"--skewed-eviction {a.skewed_eviction!r}: choose from {', '.join(EVICTION.names())}",
                  file=sys.stderr)
            return 2
        _use_skewed_eviction(a.skewed_eviction)
    seeds = list(range(a.seeds))
    rows: dict[tuple[str, int, str], dict[str, Any]] = {}
    if a.baselines:
        for line in a.baselines.read_text().splitlines():
            r = json.loads(line)
            if r.get("study", "tasks") == "tasks" and r["system"] in BASELINES and float(r.get("scale", 1.0)) == 1.0:
                rows[(r["workload"], int(r["seed"]), r["system"])] = r
    cells = [{"workload": t, "system": s, "scale": 1.0, "seed": sd, **({"chiron": cp} if s == "chiron" else {})}
             for t in tasks for sd in seeds for s in (*BASELINES, "chiron") if (t, sd, s) not in rows]
    init, args = (_use_skewed_eviction, (a.skewed_eviction,)) if a.skewed_eviction else (None, ())
    with ProcessPoolExecutor(max_workers=a.workers, initializer=init, initargs=args) as pool:
        for c, r in zip(cells, pool.map(run_arm, cells)):
            rows[(c["workload"], c["seed"], c["system"])] = {**c, **r}
    table, per_seed = [], []
    for t in tasks:
        ratios = []
        for sd in seeds:
            b = best_baseline([rows[(t, sd, s)] for s in BASELINES])
            ch = rows[(t, sd, "chiron")]
            assert b is not None
            ratios.append(ch["jct_seconds"] / b["jct_seconds"])
            per_seed.append({"task": t, "seed": sd, "ratio": ratios[-1], "chiron chr": ch["chr"],
                             "best": b["system"], "best chr": b["chr"]})
        table.append({"task": t, "mean": sum(ratios) / len(ratios), "max": max(ratios),
                      "worst seed": seeds[ratios.index(max(ratios))]})
    if a.json:
        print(json.dumps({"chiron_params": cp, "skewed_eviction": a.skewed_eviction or "aslru", "tasks": table, "per_seed": per_seed}))
    else:
        for r in table:
            print(f"{r['task']}  mean {r['mean']:.3f}  max {r['max']:.3f}  (seed {r['worst seed']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
