"""The end-to-end job on the real engine: JCT and CHR per system, per phase.

    python benchmarks/datacache_e2e.py [--files 600] [--latency-ms 20] [--systems nocache,juicefs,alluxio,chiron] [--json]

A W1-like dataset (~110 KB files) in moto S3 with injected per-request latency, a PyTorch
DataLoader with 2 workers reading through ``aicache`` (one policy daemon per cache dir),
phases: sequential pass → 3 shuffled epochs → weighted sampling; cache = 1/1.395 of the
dataset (W1's ratio). See :mod:`aicache.datacache.job`.
"""

from __future__ import annotations

import argparse
import json

from aicache.datacache.job import JobParams, run_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=600)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--compute-ms", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default="nocache,juicefs,alluxio,chiron")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    p = JobParams(files=a.files, latency_s=a.latency_ms / 1000, compute_s=a.compute_ms / 1000,
                  workers=a.workers, epochs=a.epochs, seed=a.seed)
    out = run_job(a.systems.split(","), p)
    if a.json:
        print(json.dumps(out))
        return
    best = min(r["jct_seconds"] for r in out["rows"] if r["system"] != "chiron")
    print(f"{'system':<10} {'JCT s':>8} {'CHR':>6}  per-phase CHR (seq, rand x{a.epochs}, skewed)")
    for r in out["rows"]:
        print(f"{r['system']:<10} {r['jct_seconds']:>8.2f} {r['chr']:>6.3f}  "
              + " ".join(f"{ph['chr']:.2f}" for ph in r["phases"]))
    chiron = next((r for r in out["rows"] if r["system"] == "chiron"), None)
    if chiron:
        print(f"chiron JCT vs best baseline: {100 * (chiron['jct_seconds'] / best - 1):+.1f}%  "
              f"(advisor calls {chiron['advisor_calls']}, switches {chiron['switches']}, "
              f"patterns {chiron['active_patterns']})")


if __name__ == "__main__":
    main()
