"""``aicache gen sessions KIND --out F.jsonl``: write a generated LLM session workload as
a kv-jsonl trace (any name in the SESSIONS registry: agent, weka, chat, arena, tool, mix).

``--stats`` also prints the generated statistics next to the published targets (agent
and weka)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("sessions", help="generate an LLM session workload (kv-jsonl)",
                              description="Write a generated session workload as kv-jsonl.")
    p.add_argument("kind", metavar="KIND", help="agent, weka, chat, arena, tool, mix")
    p.add_argument("--out", required=True, metavar="F.jsonl", help="output trace path")
    p.add_argument("--sessions", type=int, default=None, help="number of sessions")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--stats", action="store_true",
                   help="print generated statistics next to the targets (agent, weka)")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.errors import BadInput
    from aicache.traces.gen import SESSIONS
    from aicache.traces.io import write_kv_jsonl

    gen = SESSIONS.get(args.kind)
    if args.sessions is not None and args.sessions < 1:
        raise BadInput(f"--sessions {args.sessions} must be a positive integer")
    n = write_kv_jsonl(args.out, gen(args.sessions, args.seed))
    print(f"wrote {n} requests to {args.out}")
    if args.stats:
        from aicache.traces.gen_agent import TARGETS, print_stats

        if args.kind in TARGETS:
            print_stats(args.kind, args.sessions, args.seed)
    return 0
