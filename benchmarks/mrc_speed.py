"""``sim mrc`` against running ``sim cache`` once per size, on the same trace, one process.

Generates a seeded Zipf trace (oracle-general file, sizes log-uniform per object), then

* LRU: the one-pass stack-distance curve at ``--sizes`` vs :func:`simulate` at each size —
  the seconds of each, the speed-up, and whether every miss ratio is identical;
* each of ``--policies``: the SHARDS-sampled curve (``--sample-rate``) vs full simulation
  at each size — seconds, speed-up and the largest absolute miss-ratio error.

    python benchmarks/mrc_speed.py [--requests 1000000] [--objects 100000] [--clock cpu] [--json]

``--clock cpu`` times both sides in CPU seconds of this process (``time.process_time``),
steadier than wall seconds on a shared machine; ``--repeat N`` keeps each side's best of N.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_speed import zipf_trace  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--alpha", type=float, default=0.9)
    ap.add_argument("--sizes", default="0.5%,1%,2%,5%,10%,20%,30%,50%,70%,90%")
    ap.add_argument("--size-mode", default="objects")
    ap.add_argument("--policies", default="s3fifo,arc,clock")
    ap.add_argument("--sample-rate", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from aicache.native import compiled_modules
    from aicache.sim.cache_sim import simulate
    from aicache.sim.mrc import miss_ratio_curve, parse_sizes
    from aicache.traces.formats._common import make_batch
    from aicache.traces.formats.oracle_general import write_oracle_general

    sizes = parse_sizes(args.sizes)
    ids = zipf_trace(args.requests, args.objects, args.alpha, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    obj_size = np.exp(rng.uniform(0, np.log(1 << 20), args.objects + 1)).astype(np.int64) + 1
    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "zipf.oracleGeneral")
        n = len(ids)
        step = 1 << 16
        write_oracle_general(path, [make_batch(list(range(s, min(n, s + step))),
                                               ids[s:s + step].tolist(),
                                               obj_size[ids[s:s + step] % len(obj_size)].tolist())
                                    for s in range(0, n, step)])
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        for pol in ["lru"] + [p for p in args.policies.split(",") if p]:
            t_mrc = t_full = float("inf")
            for _ in range(max(1, args.repeat)):
                t = clock()
                curve = miss_ratio_curve(path, pol, sizes, size_mode=args.size_mode,
                                         sample_rate=args.sample_rate, fmt="oracle-general")
                t_mrc = min(t_mrc, clock() - t)
                t = clock()
                full = [simulate(path, pol, s, size_mode=args.size_mode, fmt="oracle-general",
                                 progress=False).miss_ratio for s in sizes]
                t_full = min(t_full, clock() - t)
            err = max(abs(a - b) for a, b in zip(curve.miss_ratios, full))
            rows.append({"policy": pol, "method": curve.method, "mrc_seconds": t_mrc,
                         "per_size_seconds": t_full, "speedup": t_full / t_mrc,
                         "max_abs_error": err, "identical": curve.miss_ratios == full,
                         "sample_rates": curve.sample_rates})
    result = {"requests": args.requests, "objects": args.objects, "alpha": args.alpha,
              "size_mode": args.size_mode, "sizes": sizes, "sample_rate": args.sample_rate,
              "clock": args.clock, "repeat": args.repeat,
              "compiled": bool(compiled_modules()), "results": rows}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.requests} requests, {args.objects} objects, Zipf {args.alpha}, "
          f"{len(sizes)} sizes ({args.size_mode}), hot path "
          f"{'compiled' if result['compiled'] else 'pure Python'}")
    print(f"{'policy':8} {'method':15} {'mrc s':>7} {'per-size s':>10} {'speed-up':>8} {'max |err|':>9}")
    for r in rows:
        print(f"{r['policy']:8} {r['method']:15} {r['mrc_seconds']:7.2f} {r['per_size_seconds']:10.2f} "
              f"{r['speedup']:8.1f} {r['max_abs_error']:9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
