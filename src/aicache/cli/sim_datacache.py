"""``aicache sim datacache``: replay an AI workflow through a data-cache system.

Either a generated workload (``--workload W1..W3|T1..T6 [--scale X]``) or a block trace
(``--trace PATH``). Prints a table by default and the stable JSON keys with ``--json`` (the
JSON holds no wall-clock value, so the same command gives byte-identical output).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from aicache.cli.chiron_flags import CHIRON_SYSTEMS, add_gate_prompt_args, gate_params, prompted_advisor

if TYPE_CHECKING:
    from aicache.cli import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "datacache", help="replay an AI workflow through a data-cache system (Chiron, baselines)",
        description="Event-driven data-cache simulation: loader workers, hit/miss latency, remote "
                    "bandwidth, a bounded prefetch budget; reports CHR, JCT and advisor costs.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", metavar="NAME", help="W1..W3 or T1..T6 (docs/design/chiron.md)")
    src.add_argument("--trace", metavar="PATH", help="a block trace (block-csv or another block format)")
    p.add_argument("--format", default="auto", metavar="FMT", help="trace format (default: detect)")
    p.add_argument("--scale", type=float, default=1.0, help="workload size factor (default 1.0 = the published evaluation's sizes)")
    p.add_argument("--system", required=True, metavar="NAME",
                   help="nocache, juicefs, alluxio, juicefs-adaptive, chiron, chiron-seed, clairvoyant, "
                        "or EVICTION+PREFETCH")
    p.add_argument("--cache-size", metavar="SIZE", default=None,
                   help="e.g. 1GiB or 25%% of the dataset (default: the workload's seed budget)")
    p.add_argument("--advisor", default="statistical", metavar="SPEC",
                   help="chiron's advisor: statistical (default), openai, oracle, noisy:P, replay:FILE, record:FILE")
    p.add_argument("--executors", default=None, choices=("ours", "seed"),
                   help="chiron's executor set: ours (default) or seed (the published executor table, docs/design/chiron.md: eager "
                        "removes a block once read, LRU for skewed, no prefetch for random)")
    add_gate_prompt_args(p)
    p.add_argument("--hit-ms", type=float, default=None, help="hit latency in ms (default 2)")
    p.add_argument("--miss-ms", type=float, default=None, help="miss latency in ms (default 250)")
    p.add_argument("--remote-mibps", type=float, default=None,
                   help="bandwidth of one remote fetch in MiB/s (default 200)")
    p.add_argument("--shared-ms", type=float, default=None, metavar="MS",
                   help="model a shared tier under the cache (--shared-cache): its round trip in "
                        "ms; a local miss asks it first (default: no tier)")
    p.add_argument("--shared-mibps", type=float, default=1000.0,
                   help="with --shared-ms: bandwidth of one shared-tier fetch in MiB/s (default 1000)")
    p.add_argument("--shared-warm", action="store_true",
                   help="with --shared-ms: the tier holds every block from the start (a warmup, "
                        "or other nodes' earlier epochs)")
    p.add_argument("--workers", type=int, default=8, help="loader workers for --trace (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generator and the policies (default 0)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from aicache.cli.output import emit
    from aicache.errors import BadInput
    from aicache.sim.datacache import load_workload, simulate_datacache, workload_from_trace

    if args.workers < 1:
        raise BadInput(f"--workers {args.workers} must be >= 1")
    if args.workload is not None:
        wl = load_workload(args.workload, scale=args.scale, seed=args.seed)
    else:
        wl = workload_from_trace(args.trace, workers=args.workers, fmt=args.format)
    bw = None if args.remote_mibps is None else args.remote_mibps * (1 << 20)
    advisor = prompted_advisor(args.advisor, args.prompt, args.seed) or "statistical"
    system_params = gate_params(args.gate, args.system, "--system")
    if args.executors is not None:
        if args.system not in CHIRON_SYSTEMS:
            raise BadInput(f"--executors applies to --system chiron, not {args.system!r}")
        system_params["executors"] = args.executors
    shared = None
    if args.shared_ms is not None:
        from aicache.sim.datacache import SharedTierCost

        shared = SharedTierCost(args.shared_ms, args.shared_mibps * (1 << 20), args.shared_warm)
    elif args.shared_warm:
        raise BadInput("--shared-warm needs --shared-ms MS (the tier's round trip), e.g. --shared-ms 5")
    res = simulate_datacache(wl, args.system, args.cache_size, hit_ms=args.hit_ms,
                             miss_ms=args.miss_ms, remote_bw=bw, advisor=advisor, seed=args.seed,
                             system_params=system_params, shared=shared)
    d = res.to_dict()
    if args.trace is not None:
        from aicache.traces.io import detect_format

        d["format"] = detect_format(args.trace) if args.format in ("", "auto") else args.format
    if not args.json:
        d.pop("params", None)
    emit(d, as_json=args.json, title=f"sim datacache: {res.system} on {res.workload}")
    return 0
