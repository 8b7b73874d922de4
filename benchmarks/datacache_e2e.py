"""The multi-phase PyTorch job through the real data cache: JCT and CHR per system.

    python benchmarks/datacache_e2e.py [--scale 0.05] [--workload W1]
        [--systems nocache,juicefs,alluxio,chiron] [--latency-ms 20] [--batch-size 32]
        [--loader-workers 2] [--per-process-policy] [--seed 0] [--json]

A W1-like dataset (the workload generator's files; ~110 KB each) is written into a moto S3
server on loopback; a DataLoader (2 worker processes) runs the phases (sequential pass,
3 shuffled epochs, weighted sampling) reading every sample through ``aicache`` over S3
with 20 ms injected per request; the cache budget is the seed's ratio (1 GiB of 1.395
GiB). Prints JCT, CHR, remote traffic and per-phase CHR for each system, and Chiron's JCT
and CHR against the best other system. ``--per-process-policy`` gives every loader worker
its own policy instead of the cache directory's one policy daemon (to see what the daemon
is for). See :mod:`aicache.experiments.datacache_job`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from aicache.experiments.datacache_job import JOB_SYSTEMS, JobParams, run_systems, table_rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="W1")
    ap.add_argument("--scale", type=float, default=0.05, help="dataset scale (1.0 = the seed's size)")
    ap.add_argument("--systems", default=",".join(JOB_SYSTEMS))
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--loader-workers", type=int, default=2)
    ap.add_argument("--time-scale", type=float, default=None,
                    help="factor on Chiron's wall-clock periods (default: derived from the job)")
    ap.add_argument("--per-process-policy", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    p = JobParams(workload=a.workload, scale=a.scale, seed=a.seed, latency_s=a.latency_ms / 1000.0,
                  batch_size=a.batch_size, loader_workers=a.loader_workers,
                  shared_policy=not a.per_process_policy, time_scale=a.time_scale)
    t0 = time.monotonic()
    res = run_systems(p, [s.strip() for s in a.systems.split(",") if s.strip()],
                      progress=None if a.json else lambda s: print(f"running {s} ...", file=sys.stderr))
    wall = time.monotonic() - t0
    if a.json:
        print(json.dumps({"params": dataclasses.asdict(p), "wall_seconds": wall,
                          "results": [r.to_dict() for r in res]}, default=str))
        return 0
    from aicache.cli.output import print_rows

    print(f"{a.workload} at scale {a.scale:g}: {res[0].dataset_bytes / 1e6:.1f} MB dataset, "
          f"{res[0].cache_size_bytes / 1e6:.1f} MB cache, {a.latency_ms:g} ms per request, "
          f"{a.loader_workers} loader workers, batch {a.batch_size}, "
          f"{'per-process policies' if a.per_process_policy else 'one policy daemon'}")
    print_rows(table_rows(res))
    by = {r.system: r for r in res}
    if "chiron" in by and len(by) > 1:
        ch = by["chiron"]
        others = [r for s, r in by.items() if s != "chiron"]
        best_jct = min(others, key=lambda r: r.jct_seconds)
        best_chr = max(others, key=lambda r: r.chr)
        print(f"chiron JCT {ch.jct_seconds:.2f} s vs best other ({best_jct.system}) "
              f"{best_jct.jct_seconds:.2f} s: {100 * (ch.jct_seconds / best_jct.jct_seconds - 1):+.1f}%")
        print(f"chiron CHR {ch.chr:.3f} vs best other ({best_chr.system}) {best_chr.chr:.3f}: "
              f"{100 * (ch.chr - best_chr.chr):+.1f} pp")
        dec = ch.policy.get("decisions") or []
        acc = [f"{d['t']:.1f}s {d['pattern']}" for d in dec if d["accepted"]]
        print(f"chiron: {ch.policy.get('advisor_calls')} advisor calls, accepted: {', '.join(acc) or 'none'}; "
              "phase ends: " + ", ".join(f"{p.pattern} {sum(q.seconds for q in ch.phases[:i + 1]):.1f}s"
                                         for i, p in enumerate(ch.phases)))
    print(f"wall time {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
