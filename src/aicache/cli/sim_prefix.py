"""``aicache sim prefix``: replay a KV trace or a generated workload through a prefix cache.

Prints a table by default and the stable JSON keys (plus extra keys: ``labels``,
``capacity_tokens``, ``working_set_tokens``, ...) with ``--json``. Policy and workload
names are checked by their registries, so a wrong one is one line listing the valid names.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "prefix", help="replay a KV trace through a prefix-cache eviction policy",
        description="Token-capacity prefix cache (chained block hashes, longest cached prefix "
                    "hits) with a prefill TTFT model; policies saecache (the default SAECache; "
                    "saecache-seed, saecache-priority), lru, lfu, lpc, s3fifo, sieve, belady.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="PATH", help="KV trace (mooncake, bailian, kv-jsonl)")
    src.add_argument("--workload", metavar="chat|arena|tool|mix", help="generated workload")
    p.add_argument("--format", default="auto", metavar="FMT", help="trace format (default: detect)")
    p.add_argument("--policy", required=True, metavar="NAME", help="prefix-cache policy")
    p.add_argument("--capacity-tokens", required=True, metavar="N",
                   help="cache capacity in tokens, or a percentage of the working set (10%%)")
    p.add_argument("--sessions", type=int, default=None, help="sessions to generate (--workload)")
    p.add_argument("--seed", type=int, default=0, help="generator and policy seed (default 0)")
    p.add_argument("--prefill-tokens-per-s", type=float, default=10_000.0,
                   help="prefill throughput of the TTFT model (default 10000)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.output import emit
    from aicache.errors import BadInput
    from aicache.kv.prefix_policies import PREFIX_POLICIES
    from aicache.sim.prefix import PrefixSimParams, load_requests, simulate
    from aicache.units import parse_size

    if args.sessions is not None and args.sessions < 1:
        raise BadInput(f"--sessions {args.sessions} must be a positive integer")
    if args.workload is not None and args.workload not in ("chat", "arena", "tool", "mix"):
        raise BadInput(f"unknown --workload {args.workload!r}; valid: arena, chat, mix, tool "
                       "(agent/weka run with 'aicache sim kv')")
    PREFIX_POLICIES.get(args.policy)  # unknown name: one line listing the valid ones
    parse_size(args.capacity_tokens, total=0, what="--capacity-tokens")  # syntax, before loading
    reqs, labels = load_requests(trace=args.trace, workload=args.workload,
                                 sessions=args.sessions, seed=args.seed, fmt=args.format,
                                 skip_bad=args.skip_bad)
    if not reqs:
        raise BadInput(f"trace {args.trace!r} has no requests; give a non-empty KV trace")
    res = simulate(reqs, args.policy, args.capacity_tokens, seed=args.seed, labels=labels,
                   params=PrefixSimParams(prefill_tokens_per_s=args.prefill_tokens_per_s))
    out = res.to_dict()
    out["trace"] = args.trace if args.trace is not None else f"workload:{args.workload}"
    if args.trace is not None:
        from aicache.traces.io import detect_format

        out["format"] = detect_format(args.trace) if args.format in ("", "auto") else args.format
    else:
        out["format"] = "generated"
    if args.workload is not None:  # what was generated: sizes, turns, gaps, type shares
        from aicache.traces.gen_chat import stats

        out["workload_stats"] = stats(reqs)
    emit(out, as_json=args.json, title="sim prefix")
    return 0
