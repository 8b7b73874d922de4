"""Does the simulator rank the systems as the real peers benchmark did?

    python benchmarks/peers_sim.py [RUN.json] [--traces DIR] [--json]

``RUN.json`` is a ``benchmarks/peers.py --json`` run and ``DIR`` its ``--record-dir``: the
block trace ``aicache record``'s recorder wrote for each job and budget (default: the run
and traces committed in ``docs/results/peers/``). Each
trace is replayed by :func:`aicache.sim.datacache.simulate_datacache` for the systems the
simulator models — ``chiron`` (aicache's default policy), ``lru`` (``aicache --policy lru``)
and ``juicefs`` (our model of JuiceFS's 2-random eviction and readahead) — with the run's
budget, the mount's 4 MiB blocks and the run's reader threads as workers. Per job and budget
it prints the real order (job time; GET bytes at the server) beside the simulated one (JCT;
remote bytes) and whether they agree.

What the simulator does not model, and where an order may differ because of it: the kernel's
page cache (JuiceFS keeps file pages across opens, so its re-reads never reach its cache or
the network), JuiceFS's in-memory read buffer, and each tool's per-request CPU cost (a Go
daemon against a Python one on two shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

#: real system name in the peers benchmark -> the simulator's system
MODELLED = {"aicache": "chiron", "aicache-lru": "lru", "juicefs": "juicefs"}
BLOCK = 4 * 1024 * 1024


def simulate(run: dict[str, Any], traces: str) -> list[dict[str, Any]]:
    from aicache.sim.datacache import simulate_datacache, workload_from_trace

    threads = int(run["meta"].get("threads", 4))
    cells: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in run["results"]:
        if r["system"] in MODELLED and r.get("status") == "ok":
            cells.setdefault((r["job"], r["budget"]), {})[r["system"]] = r
    out = []
    for (job, budget), real in sorted(cells.items()):
        path = os.path.join(traces, f"{job}-{budget}.csv")
        if not os.path.exists(path) or len(real) < 2:
            continue
        wl = workload_from_trace(path, workers=threads)
        sim: dict[str, dict[str, float]] = {}
        for name in real:
            res = simulate_datacache(wl, MODELLED[name], int(real[name]["budget_bytes"]), block_size=BLOCK)
            sim[name] = {"jct_s": res.jct_seconds, "remote_bytes": float(res.remote_bytes), "chr": res.chr}
        real_time = sorted(real, key=lambda s: real[s]["time_s"])
        sim_time = sorted(real, key=lambda s: sim[s]["jct_s"])
        real_bytes = sorted(real, key=lambda s: real[s]["get_bytes"])
        sim_bytes = sorted(real, key=lambda s: sim[s]["remote_bytes"])
        out.append({"job": job, "budget": budget,
                    "real_time_order": real_time, "sim_time_order": sim_time,
                    "time_order_agrees": real_time == sim_time,
                    "real_bytes_order": real_bytes, "sim_bytes_order": sim_bytes,
                    "bytes_order_agrees": real_bytes == sim_bytes,
                    "real": {s: {"time_s": real[s]["time_s"], "get_bytes": real[s]["get_bytes"]} for s in real},
                    "sim": sim})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "results", "peers")
    ap.add_argument("run", nargs="?", default=os.path.join(here, "after.json"),
                    help="a benchmarks/peers.py --json output (default: the committed run)")
    ap.add_argument("--traces", default=os.path.join(here, "traces"), help="the run's --record-dir")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        with open(a.run) as f:
            run = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"peers_sim.py: cannot read RUN {a.run!r} ({exc}); give a peers.py --json output", file=sys.stderr)
        return 2
    if not os.path.isdir(a.traces):
        print(f"peers_sim.py: --traces {a.traces!r} is not a directory; give the run's --record-dir",
              file=sys.stderr)
        return 2
    rows = simulate(run, a.traces)
    if a.json:
        print(json.dumps(rows))
        return 0
    from aicache.cli.output import print_rows

    print_rows([{"job": r["job"], "budget": r["budget"],
                 "real by time": " < ".join(r["real_time_order"]),
                 "sim by JCT": " < ".join(r["sim_time_order"]),
                 "agree": "yes" if r["time_order_agrees"] else "no",
                 "real by GET bytes": " < ".join(r["real_bytes_order"]),
                 "sim by remote bytes": " < ".join(r["sim_bytes_order"]),
                 "agree ": "yes" if r["bytes_order_agrees"] else "no"} for r in rows])
    n = len(rows)
    print(f"time order agrees on {sum(r['time_order_agrees'] for r in rows)}/{n}, "
          f"bytes order on {sum(r['bytes_order_agrees'] for r in rows)}/{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
