"""Which SAECache variant holds as the default: token hit ratio of every SAECache variant
and of LRU / LFU / S3-FIFO / SIEVE at 5-50% of the working set, per trace and generator
seed (``aicache sim prefix``'s replay, :func:`aicache.sim.prefix.simulate`).

    python benchmarks/saecache_default.py [--trace traces/mooncake_fast25_synthetic.jsonl]
        [--workloads chat,arena,tool,mix] [--seeds 1,2] [--json]

The default must never be more than 0.5 points below LRU at any capacity and must gain over
the best of LRU/LFU/S3-FIFO/SIEVE at 5%. ``holds`` reports, per variant and trace, whether
both hold; ``worst_vs_lru`` the variant's lowest margin over LRU (points).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aicache.sim.prefix import load_requests, simulate

ROOT = Path(__file__).resolve().parent.parent
CAPACITIES = ("5%", "10%", "20%", "30%", "50%")
BASELINES = ("lru", "lfu", "s3fifo", "sieve")
VARIANTS = ("saecache", "saecache-seed", "saecache-priority")


def run_trace(name: str, reqs: list, labels: object, seed: int) -> dict:
    hr: dict[str, dict[str, float]] = {}
    for pol in BASELINES + VARIANTS:
        hr[pol] = {c: simulate(reqs, pol, c, seed=seed, labels=labels).token_hit_ratio
                   for c in CAPACITIES}
        print(f"  {name}: {pol} done", file=sys.stderr, flush=True)
    verdict = {}
    for v in VARIANTS:
        worst = min(100 * (hr[v][c] - hr["lru"][c]) for c in CAPACITIES)
        best5 = max(hr[b]["5%"] for b in BASELINES)
        gain5 = 100 * (hr[v]["5%"] - best5)
        verdict[v] = {"worst_vs_lru_points": worst, "gain_at_5pct_points": gain5,
                      "holds": worst >= -0.5 and gain5 > 0}
    return {"trace": name, "hit_ratio": hr, "verdict": verdict}


def table(res: dict) -> str:
    pols = BASELINES + VARIANTS
    lines = [f"**{res['trace']}** (token hit ratio, %)", "",
             "| capacity | " + " | ".join(pols) + " |", "|---" * (len(pols) + 1) + "|"]
    for c in CAPACITIES:
        lines.append(f"| {c} | " + " | ".join(f"{100 * res['hit_ratio'][p][c]:.1f}"
                                               for p in pols) + " |")
    lines.append("")
    for v, d in res["verdict"].items():
        lines.append(f"- `{v}`: worst vs LRU {d['worst_vs_lru_points']:+.1f} points, at 5% "
                     f"{d['gain_at_5pct_points']:+.1f} over the best baseline: "
                     f"{'holds' if d['holds'] else '**fails**'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "traces/mooncake_fast25_synthetic.jsonl"))
    ap.add_argument("--workloads", default="chat,arena,tool,mix")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="also write the JSON here after each trace")
    a = ap.parse_args(argv)
    out = []
    cases: list[tuple[str, str | None, str | None, int]] = [
        (f"trace {Path(a.trace).name}", a.trace, None, 0)]
    for w in (x for x in a.workloads.split(",") if x):
        for s in (int(x) for x in a.seeds.split(",") if x):
            cases.append((f"{w} seed {s}", None, w, s))
    for name, trace, workload, seed in cases:
        reqs, labels = load_requests(trace=trace, workload=workload, sessions=None, seed=seed,
                                     fmt="auto", skip_bad=False)
        res = run_trace(name, reqs, labels, seed)
        out.append(res)
        if a.out:
            Path(a.out).write_text(json.dumps({"traces": out}, indent=1))
        if not a.json:
            print(table(res) + "\n", flush=True)
    if a.json:
        print(json.dumps({"traces": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
