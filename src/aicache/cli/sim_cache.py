"""``aicache sim cache``: replay a trace through eviction (+ prefetch) policies.

One policy and size: a table by default, the stable JSON keys first (``JSON_KEYS``; then every other row of
the table) with ``--json``. Comma lists (``--policy lru,s3fifo --cache-size 1%,5%,10%``)
run every combination over one parse of the trace (:mod:`aicache.sim.sweep`): a table with
one row per cell, or ``{"trace", "format", ..., "results": [...]}`` with ``--json``.
``--csv`` prints a header and one row per cell (the JSON keys), for a spreadsheet or pandas. Names (policy,
prefetcher, format, size mode) are checked by the registries, not by argparse ``choices``,
so a wrong one is one line on stderr listing the valid names (exit 2), not a usage dump.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "cache", help="replay a trace through an eviction policy",
        description="Replay a block/object trace (or a KV trace's prefix blocks) through an "
                    "eviction policy and report hit and miss ratios.")
    p.add_argument("--trace", required=True, metavar="PATH", help="trace file")
    p.add_argument("--format", default="auto", metavar="FMT",
                   help="auto|lcs-csv|lcs-txt|oracle-general|block-csv|mooncake|bailian|kv-jsonl "
                        "(default: detect from content)")
    p.add_argument("--policy", required=True, metavar="NAME[,NAME…]",
                   help="eviction policy, or a comma list run in one pass (e.g. lru,s3fifo,arc)")
    p.add_argument("--prefetch", default="none", metavar="NAME", help="prefetch policy (default none)")
    p.add_argument("--cache-size", required=True, metavar="SIZE[,SIZE…]",
                   help="objects or bytes (by --size-mode), e.g. 1000, 4GiB, or 10%% of the working "
                        "set (100%% and more allowed); a comma list sweeps them")
    p.add_argument("--size-mode", default="objects", metavar="objects|bytes",
                   help="objects: every object counts 1; bytes: the trace's sizes (default objects)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policy's randomness (default 0)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object on stdout")
    out.add_argument("--csv", action="store_true", help="CSV on stdout: a header, one row per cell")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.output import emit
    from aicache.errors import BadInput
    from aicache.sim.cache_sim import simulate
    from aicache.sim.sweep import split_list, sweep

    policies = split_list(args.policy, "--policy")
    sizes = split_list(args.cache_size, "--cache-size")
    if len(policies) * len(sizes) > 1 or args.csv:
        if args.prefetch != "none":
            raise BadInput("--prefetch needs one --policy and one --cache-size; run each cell "
                           "separately with a prefetcher")
        cells = sweep(args.trace, policies, sizes, size_mode=args.size_mode, seed=args.seed,
                      fmt=args.format, skip_bad=args.skip_bad)
        _report_skips(cells[0])
        _emit_cells(cells, args)
        return 0
    res = simulate(args.trace, args.policy, args.cache_size, size_mode=args.size_mode,
                   prefetch=args.prefetch, seed=args.seed, fmt=args.format, skip_bad=args.skip_bad)
    _report_skips(res)
    if args.json:
        emit(res.to_dict(), as_json=True)
    else:
        emit(res.to_full_dict(), as_json=False, title="sim cache")
    return 0


def _report_skips(res: Any) -> None:
    if res.bad_records:
        print(f"aicache: skipped {res.bad_records} malformed record(s) in {res.trace}", file=sys.stderr)
    if res.zero_size_skipped:
        print(f"aicache: skipped {res.zero_size_skipped} request(s) of obj_size 0 in {res.trace}, "
              "as libCacheSim's reader does", file=sys.stderr)


#: per-cell columns of the sweep table (the JSON and CSV carry every key)
TABLE_COLUMNS = ("policy", "cache_size", "requests", "hits", "miss_ratio", "byte_miss_ratio",
                 "evictions", "wall_seconds")


def _emit_cells(cells: list[Any], args: argparse.Namespace) -> None:
    from aicache.cli.output import dumps, print_rows

    rows = [c.to_dict() for c in cells]
    if args.csv:
        import csv

        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return
    first = cells[0]
    if args.json:
        print(dumps({"trace": first.trace, "format": first.format, "size_mode": first.size_mode,
                     "requests": first.requests, "working_set": first.working_set,
                     "seed": first.seed, "results": rows}))
        return
    print_rows([{k: r[k] for k in TABLE_COLUMNS} for r in rows],
               title=f"sim cache: {first.trace} ({first.format}, {first.requests} requests, "
                     f"working set {first.working_set} {first.size_mode})")
