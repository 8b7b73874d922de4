"""``aicache sim cache``: replay a trace through one eviction (+ prefetch) policy.

Prints a table by default and exactly CLI.md's JSON keys with ``--json``. Names (policy,
prefetcher, format, size mode) are checked by the registries, not by argparse ``choices``,
so a wrong one is one line on stderr listing the valid names (exit 2), not a usage dump.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "cache", help="replay a trace through an eviction policy",
        description="Replay a block/object trace (or a KV trace's prefix blocks) through an "
                    "eviction policy and report hit and miss ratios.")
    p.add_argument("--trace", required=True, metavar="PATH", help="trace file")
    p.add_argument("--format", default="auto", metavar="FMT",
                   help="auto|lcs-csv|lcs-txt|oracle-general|block-csv|mooncake|bailian|kv-jsonl "
                        "(default: detect from content)")
    p.add_argument("--policy", required=True, metavar="NAME", help="eviction policy (e.g. lru, s3fifo, arc)")
    p.add_argument("--prefetch", default="none", metavar="NAME", help="prefetch policy (default none)")
    p.add_argument("--cache-size", required=True, metavar="SIZE",
                   help="objects or bytes (by --size-mode), e.g. 1000, 4GiB, or 10%% of the working set")
    p.add_argument("--size-mode", default="objects", metavar="objects|bytes",
                   help="objects: every object counts 1; bytes: the trace's sizes (default objects)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policy's randomness (default 0)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.output import emit
    from aicache.sim.cache_sim import simulate

    res = simulate(args.trace, args.policy, args.cache_size, size_mode=args.size_mode,
                   prefetch=args.prefetch, seed=args.seed, fmt=args.format, skip_bad=args.skip_bad)
    if res.bad_records:
        print(f"aicache: skipped {res.bad_records} malformed record(s) in {res.trace}", file=sys.stderr)
    if res.zero_size_skipped:
        print(f"aicache: skipped {res.zero_size_skipped} request(s) of obj_size 0 in {res.trace}, "
              "as libCacheSim's reader does", file=sys.stderr)
    if args.json:
        emit(res.to_dict(), as_json=True)
    else:
        emit(res.to_full_dict(), as_json=False, title="sim cache")
    return 0
