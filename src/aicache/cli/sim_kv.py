"""``aicache sim kv``: replay a KV trace or a generated agent workload through SARIA or a
baseline tiered KV cache (GPU ← DRAM ← SSD).

Prints a table by default and the stable JSON keys (``aicache.sim.kv.JSON_KEYS``; extras such as
``block_events_per_second``, ``ssd_writes_never_read_frac``, ``dram_hit_share``) with
``--json``. A trace without session ids replays by its timestamps.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "kv", help="replay a KV trace through SARIA or a tiered-KV baseline",
        description="Trace-driven replay of a DRAM+SSD KV cache: persistence-aware admission, "
                    "unified reload planning, lazy partial promotion, coordinated reload.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="PATH", help="KV trace (mooncake, bailian, kv-jsonl)")
    src.add_argument("--workload", metavar="agent|weka", help="generated session workload")
    p.add_argument("--format", default="auto", metavar="FMT", help="trace format (default: detect)")
    p.add_argument("--skip-bad", action="store_true", help="skip and count malformed records")
    p.add_argument("--sessions", type=int, default=None, help="sessions to generate (--workload)")
    p.add_argument("--system", default="saria", metavar="NAME",
                   help="saria, full-duplicate, dram-only, lmcache-plus, gds-only, "
                        "full-promotion, zero-promotion, oracle (default saria)")
    p.add_argument("--theta-e", type=int, default=None, metavar="N",
                   help="eviction-count admission threshold θ_E (default 2 unless --theta-r)")
    p.add_argument("--theta-r", type=int, default=None, metavar="N",
                   help="reuse-count admission threshold θ_R (default off)")
    p.add_argument("--admission", default=None, metavar="NAME",
                   help="SSD admission instead of --theta-e/--theta-r: E<n>, R<n>, E<n>∨R<m>, "
                        "full-duplicate, or a registered one: sglang-selective, "
                        "vllm-reuse-filter, lmcache-gate, kvbm-frequency, mooncake-on-evict, "
                        "budgeted, budgeted-ranked, budgeted-threshold (tried, not the "
                        "default), learned, "
                        "oracle (the offline frontier)")
    p.add_argument("--ssd-write-budget", default=None, metavar="BUDGET",
                   help="SSD writes allowed, on the replay clock: drive writes per day of "
                        "the --ssd-tokens drive (1DWPD, 0.3DWPD) or a rate (200MB/s). With "
                        "no --admission the budgeted admission spends it; any other "
                        "admission is capped by it")
    p.add_argument("--ssd-write-window", default="10min", metavar="DURATION",
                   help="the budget holds over every window this long: writes in it <= "
                        "rate x window (default 10min)")
    p.add_argument("--promotion", type=float, default=None, metavar="R",
                   help="target DRAM share r of lazy partial promotion (default 0.4)")
    p.add_argument("--dram-tokens", default="1000000", metavar="N", help="DRAM budget in tokens")
    p.add_argument("--ssd-tokens", default="10000000", metavar="N", help="SSD budget in tokens")
    p.add_argument("--model", default="qwen3-8b", metavar="NAME",
                   help="model whose KV geometry sizes the blocks (default qwen3-8b)")
    p.add_argument("--session-window", default="12h", metavar="DURATION",
                   help="window that session starts spread over (12h, 4h, 2h, 30min...)")
    p.add_argument("--in-flight", type=int, default=4, metavar="N",
                   help="requests served at once (per GPU when queueing)")
    p.add_argument("--prefill-gpus", type=int, default=None, metavar="N",
                   help="queueing study: N prefill GPUs, TTFT from arrival (warns when the "
                        "offered load exceeds them). Default: the seed's logical replay clock "
                        "(6,500 computed tokens = 1 s), TTFT from submission")
    p.add_argument("--prefill-tokens-per-s", type=float, default=None, metavar="X",
                   help="queueing study: each GPU's prefill rate (default 6500; implies "
                        "--prefill-gpus 1)")
    p.add_argument("--transfer", default=None, metavar="MODE",
                   help="override the reload schedule: serial, overlap, coordinated")
    p.add_argument("--ssd-devices", type=int, default=1, metavar="N",
                   help="SSDs every object is striped over (bandwidths add up; default 1)")
    p.add_argument("--disk-gbps", type=float, default=20.0, metavar="X",
                   help="one SSD's read (GDS) rate in GB/s (default 20)")
    p.add_argument("--disk-write-gbps", type=float, default=18.8, metavar="X",
                   help="one SSD's write rate in GB/s (default 18.8: 20 x the real store's "
                        "measured write/read ratio)")
    p.add_argument("--ssd-writes", default="queued", metavar="MODEL",
                   help="queued: writes take SSD time, blocks are served from DRAM until "
                        "written (default); instant: a write is readable when issued")
    p.add_argument("--dram-policy", default="lru", metavar="NAME",
                   help="DRAM eviction order (lru, fifo, or a registered policy such as saecache)")
    p.add_argument("--seed", type=int, default=0, help="generator and replay seed (default 0)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.output import emit
    from aicache.progress import progress
    from aicache.errors import BadInput
    from aicache.kv.eviction import DRAM_POLICIES
    from aicache.sim.kv import KV_SYSTEMS, KVSimParams, prepare, simulate_kv, validate
    from aicache.traces.gen import SESSIONS
    from aicache.units import parse_duration, parse_size

    if args.sessions is not None and args.sessions < 1:
        raise BadInput(f"--sessions {args.sessions} must be a positive integer")
    KV_SYSTEMS.get(args.system)
    DRAM_POLICIES.get(args.dram_policy)
    theta_e = args.theta_e if (args.theta_e is not None or args.theta_r is None) else None
    params = KVSimParams(
        system=args.system, model=args.model,
        dram_tokens=parse_size(args.dram_tokens, what="--dram-tokens"),
        ssd_tokens=parse_size(args.ssd_tokens, what="--ssd-tokens"),
        theta_e=2 if theta_e is None and args.theta_r is None else theta_e,
        theta_r=args.theta_r, admission=args.admission, promotion=args.promotion,
        session_window=parse_duration(args.session_window, what="--session-window"),
        in_flight=args.in_flight, transfer=args.transfer, dram_policy=args.dram_policy,
        ssd_devices=args.ssd_devices, disk_gbps=args.disk_gbps,
        disk_write_gbps=args.disk_write_gbps, ssd_writes=args.ssd_writes,
        seed=args.seed, ssd_write_budget=args.ssd_write_budget,
        ssd_write_window=parse_duration(args.ssd_write_window, what="--ssd-write-window"),
        **_queueing(args))
    _, model = validate(params)
    bad = 0
    if args.workload is not None:
        if args.workload not in ("agent", "weka"):
            raise BadInput(f"unknown --workload {args.workload!r}; valid: agent, weka "
                           "(or pass any KV trace with --trace)")
        reqs = prepare(SESSIONS.get(args.workload)(args.sessions, args.seed), model.block_tokens)
        name = f"workload:{args.workload}"
    else:
        from aicache.traces.io import open_trace

        src = open_trace(args.trace, args.format, skip_bad=args.skip_bad)
        reqs = prepare(src.requests(), model.block_tokens)
        name = args.trace
        bad = int(getattr(src, "bad_records", 0) or 0)
    if not reqs:
        raise BadInput(f"trace {name!r} has no requests; give a non-empty KV trace")
    with progress(len(reqs), f"sim kv {args.system}") as bar:
        res = simulate_kv(reqs, params, progress=bar)
    for w in res.warnings:
        print(f"aicache sim kv: warning: {w}", file=sys.stderr)
    out = dict(res.metrics)
    out["trace"] = name
    out["format"] = src.format if args.trace is not None else "generated"
    out["bad_records"] = bad
    emit(out, as_json=args.json, title="sim kv")
    return 0


def _queueing(args: argparse.Namespace) -> dict[str, Any]:
    """KVSimParams overrides of the queueing mode (none: the seed's replay clock)."""
    from aicache.errors import BadInput

    gpus, tps = args.prefill_gpus, args.prefill_tokens_per_s
    if gpus is None and tps is None:
        return {}
    if gpus is not None and gpus < 1:
        raise BadInput(f"--prefill-gpus {gpus} must be at least 1")
    if tps is not None and not tps > 0:
        raise BadInput(f"--prefill-tokens-per-s {tps} must be a positive rate")
    out: dict[str, Any] = {"prefill_gpus": gpus or 1}
    if tps is not None:
        out["prefill_tps"] = tps
    return out
