"""``aicache sim mrc``: a policy's miss-ratio curve over many cache sizes in one run.

LRU's curve is exact, in one pass over the trace (stack distances); other policies are
estimated by spatial sampling (``--sample-rate``, SHARDS-style) or, with
``--sample-rate 1``, simulated size by size. See :mod:`aicache.sim.mrc`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "mrc", help="miss-ratio curve of a policy over many cache sizes",
        description="Miss ratio (and byte miss ratio) of an eviction policy at many cache "
                    "sizes: exact in one pass for LRU, sampled for other policies.")
    p.add_argument("--trace", required=True, metavar="PATH", help="trace file")
    p.add_argument("--format", default="auto", metavar="FMT",
                   help="trace format, as for `sim cache` (default: detect from content)")
    p.add_argument("--policy", required=True, metavar="NAME", help="eviction policy (e.g. lru, s3fifo)")
    p.add_argument("--sizes", required=True, metavar="LIST",
                   help="comma-separated cache sizes, e.g. 1%%,2%%,5%%,10%% or 1000,4GiB")
    p.add_argument("--size-mode", default="objects", metavar="objects|bytes",
                   help="objects: every object counts 1; bytes: the trace's sizes (default objects)")
    p.add_argument("--sample-rate", type=float, default=None, metavar="R",
                   help="fraction of objects sampled for policies other than LRU "
                        "(default 0.1; 1 = simulate every size over the whole trace)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policy's randomness (default 0)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records")
    p.add_argument("--plot", metavar="PNG", help="also write the curve as a PNG")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.output import emit
    from aicache.sim.mrc import miss_ratio_curve, parse_sizes, plot

    res = miss_ratio_curve(args.trace, args.policy, parse_sizes(args.sizes),
                           size_mode=args.size_mode, sample_rate=args.sample_rate,
                           seed=args.seed, fmt=args.format, skip_bad=args.skip_bad)
    if args.plot:
        plot(res, args.plot)
        print(f"aicache: wrote {args.plot}", file=sys.stderr)
    d = res.to_dict()
    if args.json:
        emit(d, as_json=True)
    else:
        rows = [{"size": s, "miss_ratio": m, "byte_miss_ratio": b}
                for s, m, b in zip(res.sizes, res.miss_ratios, res.byte_miss_ratios)]
        head = {k: v for k, v in d.items() if k not in ("sizes", "miss_ratios", "byte_miss_ratios")}
        emit({**head, "curve": rows}, as_json=False, title="sim mrc")
    return 0
