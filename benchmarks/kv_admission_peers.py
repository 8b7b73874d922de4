"""The field's SSD admission rules against aicache's budgeted admission, each peer's write
volume given as our budget.

    python benchmarks/kv_admission_peers.py [--trace traces/mooncake_fast25_synthetic.jsonl]
        [--generators agent,weka] [--seeds 1,2] [--window peer|DURATION] [--ours NAME] [--json]

Traces (one table each): the Mooncake synthetic trace's first half (the half the budgeted
admission was developed on) and its second half (held out), replayed by their timestamps
with ``--dram-tokens 2000000 --ssd-tokens 20000000``; the ``agent`` and ``weka`` generators
at ``--seeds`` (never used in development) with ``aicache sim kv``'s default budgets
(1,000,000 DRAM and 10,000,000 SSD tokens) and session window.

For each peer (``sglang-selective``, ``vllm-reuse-filter``, ``lmcache-gate``,
``kvbm-frequency``, ``mooncake-on-evict``, and SARIA's seed rule ``E2``): one replay with the
peer's rule, then one with the budgeted admission under the budget ``peer bytes / peer replay
seconds`` over a window as long as the peer's replay (``--window peer``: the peer's write
volume is the budget; a duration such as ``10min`` holds the same rate over every window of
that length instead, a stricter limit than the peer itself keeps). ``ok`` is true when ours
writes no more bytes, keeps at least the peer's CHAR and no worse mean TTFT. Every replay is
``aicache sim kv``'s (:func:`aicache.sim.kv.simulate_kv`), deterministic.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from aicache.kv.models import get_model
from aicache.sim.kv import KVSimParams, prepare, simulate_kv
from aicache.traces.gen import SESSIONS
from aicache.traces.io import open_trace
from aicache.units import parse_duration

PEERS = ("sglang-selective", "vllm-reuse-filter", "lmcache-gate", "kvbm-frequency",
         "mooncake-on-evict", "E2")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    name: str
    reqs: list
    dram_tokens: int
    ssd_tokens: int
    seed: int = 0


def _cases(trace: Path, generators: list[str], seeds: list[int]) -> list[Case]:
    bt = get_model("qwen3-8b").block_tokens
    allr = list(open_trace(str(trace), "auto").requests())
    half = len(allr) // 2
    out = [Case("mooncake first half (dev)", prepare(allr[:half], bt), 2_000_000, 20_000_000),
           Case("mooncake second half (held out)", prepare(allr[half:], bt), 2_000_000,
                20_000_000)]
    for g in generators:
        for s in seeds:
            out.append(Case(f"{g} seed {s}", prepare(SESSIONS.get(g)(None, s), bt),
                            1_000_000, 10_000_000, s))
    return out


def _point(m: dict) -> dict:
    return {"char": m["char"], "ssd_write_bytes": m["ssd_write_bytes"],
            "ttft_mean_s": m["ttft_mean_s"], "duration_s": m["duration_s"],
            "ssd_life_years": m["ssd_life_years"]}


def run_case(c: Case, window: str, ours: str | None = None) -> dict:
    base = dict(dram_tokens=c.dram_tokens, ssd_tokens=c.ssd_tokens, seed=c.seed)
    rows = []
    for peer in PEERS:
        p = simulate_kv(c.reqs, KVSimParams(admission=peer, **base)).metrics
        dur = p["duration_s"]
        rate = max(1, int(p["ssd_write_bytes"] / dur)) if dur > 0 else 1
        w = dur if window == "peer" else parse_duration(window, what="--window")
        o = simulate_kv(c.reqs, KVSimParams(admission=ours, ssd_write_budget=f"{rate}B/s",
                                            ssd_write_window=w, **base)).metrics
        ok = (o["ssd_write_bytes"] <= p["ssd_write_bytes"] and o["char"] >= p["char"]
              and o["ttft_mean_s"] <= p["ttft_mean_s"])
        capped = None
        if window != "peer":  # the peer's own rule held to the same window
            capped = _point(simulate_kv(c.reqs, KVSimParams(
                admission=peer, ssd_write_budget=f"{rate}B/s", ssd_write_window=w,
                **base)).metrics)
        rows.append({"peer": peer, "budget_bps": rate, "window_s": w, "peer_point": _point(p),
                     "peer_capped": capped,
                     "ours": _point(o), "ok": ok,
                     "ours_admitted_by_class": o.get("budget_admitted"),
                     "ours_candidates_by_class": o.get("budget_candidates"),
                     **({"ours_shadows": o["shadows"], "ours_switches": o["shadow_switches"],
                         "ours_shadow_events": o["shadow_events"]} if "shadows" in o else {})})
        print(f"  {c.name}: {peer} done", file=sys.stderr, flush=True)
    fd = simulate_kv(c.reqs, KVSimParams(admission="full-duplicate", **base)).metrics
    return {"trace": c.name, "requests": len(c.reqs), "dram_tokens": c.dram_tokens,
            "ssd_tokens": c.ssd_tokens, "full_duplicate": _point(fd), "rows": rows}


def table(res: dict) -> str:
    capped = any(r.get("peer_capped") for r in res["rows"])
    extra = " peer capped CHAR / GB |" if capped else ""
    lines = [f"**{res['trace']}** ({res['requests']} requests; full duplicate: CHAR "
             f"{res['full_duplicate']['char']:.3f}, "
             f"{res['full_duplicate']['ssd_write_bytes'] / 1e9:,.0f} GB)", "",
             "| peer | peer CHAR | peer GB | peer TTFT s | ours CHAR | ours GB | ours TTFT s "
             "| ok |" + extra, "|---|---|---|---|---|---|---|---|" + ("---|" if capped else "")]
    for r in res["rows"]:
        p, o, pc = r["peer_point"], r["ours"], r.get("peer_capped")
        lines.append(f"| {r['peer']} | {p['char']:.3f} | {p['ssd_write_bytes'] / 1e9:,.0f} | "
                     f"{p['ttft_mean_s']:.2f} | {o['char']:.3f} | "
                     f"{o['ssd_write_bytes'] / 1e9:,.0f} | {o['ttft_mean_s']:.2f} | "
                     f"{'yes' if r['ok'] else '**no**'} |"
                     + (f" {pc['char']:.3f} / {pc['ssd_write_bytes'] / 1e9:,.0f} |" if pc else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "traces/mooncake_fast25_synthetic.jsonl"))
    ap.add_argument("--generators", default="agent,weka")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--window", default="peer",
                    help="peer (the peer's replay length) or a duration such as 10min")
    ap.add_argument("--ours", default=None,
                    help="the admission that spends the budget (default: sim kv's default "
                         "budgeted one; e.g. budgeted-ranked, shadow-follow)")
    ap.add_argument("--only", default=None, help="run only traces whose name contains this")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="also write the JSON here after each trace")
    a = ap.parse_args(argv)
    gens = [g for g in a.generators.split(",") if g]
    seeds = [int(s) for s in a.seeds.split(",") if s]
    out = []
    for c in _cases(Path(a.trace), gens, seeds):
        if a.only and a.only not in c.name:
            continue
        res = run_case(c, a.window, a.ours)
        out.append(res)
        if a.out:
            Path(a.out).write_text(json.dumps({"window": a.window, "ours": a.ours or "budgeted",
                                               "traces": out}, indent=1))
        if not a.json:
            print(table(res) + "\n", flush=True)
    if a.json:
        print(json.dumps({"window": a.window, "traces": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
