"""SARIA's KV replay speed: block events per CPU second of ``simulate_kv``.

    python benchmarks/saria_speed.py [--workload agent] [--sessions 40] [--systems saria]
        [--repeats 3] [--seed 0] [--json] [--profile]

Replays a generated session workload (the same requests for every system, generated once)
through ``aicache.sim.kv.simulate_kv`` with the CLI's defaults (``aicache sim kv
--workload agent``: 1 M DRAM / 10 M SSD tokens, Qwen3-8B blocks) and reports block events
(one per block of a request's prompt, ``block_events`` in ``sim kv --json``) per second of
the replay's process CPU time, so waiting for a core on a shared machine does not count;
wall time beside it. The best of ``--repeats`` runs is kept. It uses only the API every
version of the replay has had, so the same script measures an older checkout:
``PYTHONPATH=OLD/src python benchmarks/saria_speed.py``. ``--profile`` prints cProfile's
top entries of one replay of the first system.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def measure(system: str, reqs: list[Any], repeats: int, seed: int) -> dict[str, Any]:
    from aicache.sim.kv import KVSimParams, simulate_kv

    best_cpu = best_wall = float("inf")
    events = 0
    char = 0.0
    for _ in range(repeats):
        params = KVSimParams(system=system, seed=seed)
        c0, w0 = time.process_time(), time.perf_counter()
        res = simulate_kv(reqs, params)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        best_cpu, best_wall = min(best_cpu, cpu), min(best_wall, wall)
        events = int(res.metrics["block_events"])
        char = float(res.metrics["char"])
    return {"system": system, "block_events": events, "cpu_seconds": best_cpu,
            "wall_seconds": best_wall, "events_per_cpu_second": events / best_cpu,
            "events_per_wall_second": events / best_wall, "char": char}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="agent", choices=("agent", "weka"))
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--systems", default="saria")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args(argv)
    if a.sessions < 1 or a.repeats < 1:
        print("--sessions and --repeats must be positive integers", file=sys.stderr)
        return 2
    import aicache
    from aicache.sim.kv import KV_SYSTEMS, KVSimParams, prepare, validate
    from aicache.traces.gen import SESSIONS

    systems = [s for s in a.systems.split(",") if s]
    for s in systems:
        KV_SYSTEMS.get(s)  # an unknown name is a one-line error listing the systems
    _, model = validate(KVSimParams(seed=a.seed))
    reqs = prepare(SESSIONS.get(a.workload)(a.sessions, a.seed), model.block_tokens)
    rows = [measure(s, reqs, a.repeats, a.seed) for s in systems]
    try:
        from aicache.native import compiled_modules

        compiled = compiled_modules()
    except ImportError:  # a checkout from before the compiled hot path
        compiled = []
    out = {"workload": a.workload, "sessions": a.sessions, "requests": len(reqs),
           "source": aicache.__file__, "compiled": compiled, "rows": rows}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.workload} x {a.sessions} sessions, {len(reqs)} requests; "
              f"{len(compiled)} modules compiled")
        print(f"{'system':<16} {'events':>9} {'CPU s':>7} {'events/CPU s':>13} {'events/wall s':>14}")
        for r in rows:
            print(f"{r['system']:<16} {r['block_events']:>9} {r['cpu_seconds']:>7.2f} "
                  f"{r['events_per_cpu_second']:>13,.0f} {r['events_per_wall_second']:>14,.0f}")
    if a.profile:
        import cProfile
        import pstats

        from aicache.sim.kv import simulate_kv

        prof = cProfile.Profile()
        prof.runcall(simulate_kv, reqs, KVSimParams(system=systems[0], seed=a.seed))
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
