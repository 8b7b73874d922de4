"""Why an admission misses issue 18's goal: the hits it loses against full duplicate, by
cause, and its SSD writes that are never read, by who decided them.

    python benchmarks/saria_misses.py [--workload agent] [--model qwen3.5-9b]
        [--sessions N] [--seed 0] [--arms E2,LA] [--links a30]
        [--dram-tokens N --ssd-tokens N] [--json]

Replays one workload (generated once, the ``saria-agent`` cells' parameters: default budgets,
12 h session window; ``--links a30`` and the A30 models for the ``saria-admission`` panel,
``--workload mooncake-trace-h2 --dram-tokens 2000000 --ssd-tokens 20000000`` for
``saria-mooncake``'s held-out half) through full duplicate (FD) and each arm, watching the index
(``KVIndex.lookup``/``_ssd_write``/``drop_ssd``/``_cancel_write``; the replay itself is
unchanged, its metrics are those of ``aicache experiment run saria-agent``). Blocks are
matched across replays by their prefix path.

Lost hits: for each request, the blocks FD reuses beyond the arm's reuse (FD's hit blocks
− the arm's, where positive), charged to the first block of the prompt the arm has no copy
of at lookup, by that block's history in the arm's replay: ``first_eviction`` (evicted once,
E_b = 1, never written: the seed's rule writes at the second eviction), ``not_admitted``
(evicted ≥ 2 times, never written), ``ssd_dropped`` (written, then dropped by SSD capacity),
``write_cancelled``, ``not_in_tree`` (no metadata left). ``held_but_cut`` counts, among the
lost blocks, those the arm had a copy of but could not use because no checkpoint follows
them (hybrid models: a reload ends at the last resident checkpoint, every
``checkpoint_tokens / block_tokens`` blocks).

Writes: each SSD write is ``read`` if the block is read from SSD before that copy is
dropped; a write issued at a DRAM eviction with E_b below θ_E is the learned rule's
(``learned``), the rest the seed's rule's (``seed``: at θ_E, or a prewrite). For the learned
admission its write budget is reported too (``offered`` = tokens first stored, the base the
½ cap is taken of, and ``written``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any


class _Watch:
    """Per-replay observations, keyed by a block's prefix path (stable across replays)."""

    def __init__(self, ids: dict[tuple[int, Any], int]) -> None:
        self.ids = ids
        self.memo: dict[int, int] = {}   # id(node) -> path id (nodes kept alive in keep)
        self.keep: list[Any] = []
        self.req: dict[int, tuple[int, int, str, int]] = {}  # request -> (hits, raw, cause, E)
        self.written: Counter[int] = Counter()
        self.dropped: Counter[int] = Counter()
        self.cancelled: Counter[int] = Counter()
        self.live: dict[int, list[Any]] = {}    # path id -> [bytes, learned, read]
        self.writes: list[list[Any]] = []
        self.in_evict = False
        self.index: Any = None
        #: FD's hit blocks per request (set for the arms' replays) and the blocks within
        #: them the arm has no copy of, evicted once and never written (path id -> bytes)
        self.fd_hits: dict[int, int] = {}
        self.missing: dict[int, int] = {}
        #: a write at an eviction with E_b below this is the learned rule's (0: none is)
        self.learned_below = 0

    def pid(self, n: Any) -> int:
        k = id(n)
        v = self.memo.get(k)
        if v is None:
            par = 0 if n.parent is None else self.pid(n.parent)
            v = self.ids.setdefault((par, n.key), len(self.ids) + 1)
            self.memo[k] = v
            self.keep.append(n)
        return v


def _install(w: list[_Watch]) -> Callable[[], None]:
    """Wrap the index's methods to feed ``w[0]``; returns the undo."""
    from aicache.kv import saria

    K = saria.KVIndex
    orig_init, orig_lookup = K.__init__, K.lookup
    orig_write, orig_drop, orig_cancel, orig_evict = (K._ssd_write, K.drop_ssd, K._cancel_write,
                                                      K.evict_dram)

    def init(self: Any, params: Any) -> None:
        orig_init(self, params)
        w[0].index = self

    def lookup(self: Any, ns: Any, keys: Any, now: float) -> Any:
        plan = orig_lookup(self, ns, keys, now)
        cur = w[0]
        known = self.tree.match(ns, keys)
        raw = 0
        for n in known:
            if not n.kv_loc:
                break
            raw += 1
        cause, e = "none", 0
        if raw < len(keys):
            if raw == len(known):
                cause = "not_in_tree"
            else:
                n = known[raw]
                p = cur.pid(n)
                e = n.E
                if cur.written[p] and cur.dropped[p]:
                    cause = "ssd_dropped"
                elif cur.cancelled[p]:
                    cause = "write_cancelled"
                elif cur.written[p]:
                    cause = "written_other"
                elif n.E <= 1:
                    cause = "first_eviction" if n.E == 1 else "never_evicted"
                else:
                    cause = "not_admitted"
        for n, s in zip(plan.nodes, plan.sources):
            if s is saria.Tier.SSD:
                lv = cur.live.get(cur.pid(n))
                if lv is not None:
                    lv[2] = True
        if id(keys) not in cur.req:
            cur.req[id(keys)] = (len(plan.nodes), raw, cause, e)
            for n in known[raw:cur.fd_hits.get(id(keys), 0)]:
                if not n.kv_loc and n.E == 1:
                    p = cur.pid(n)
                    if not cur.written[p]:
                        cur.missing[p] = self.size(n)
        return plan

    def write(self: Any, n: Any, now: float, moves: Any) -> bool:
        st = self.stats
        before = st.ssd_writes
        ok = orig_write(self, n, now, moves)
        if ok and st.ssd_writes > before:
            cur = w[0]
            p = cur.pid(n)
            cur.written[p] += 1
            rec = [self.size(n), cur.in_evict and n.E < cur.learned_below, False]
            cur.live[p] = rec
            cur.writes.append(rec)
        return ok

    def drop(self: Any, n: Any, moves: Any) -> None:
        st = self.stats
        before = st.ssd_writes_withdrawn
        orig_drop(self, n, moves)
        cur = w[0]
        p = cur.pid(n)
        rec = cur.live.pop(p, None)
        if st.ssd_writes_withdrawn > before:
            if rec is not None:
                cur.writes.remove(rec)
            cur.written[p] -= 1
        else:
            cur.dropped[p] += 1

    def cancel(self: Any, n: Any, moves: Any) -> None:
        orig_cancel(self, n, moves)
        cur = w[0]
        p = cur.pid(n)
        rec = cur.live.pop(p, None)
        if rec is not None:
            cur.writes.remove(rec)
        cur.written[p] -= 1
        cur.cancelled[p] += 1

    def evict(self: Any, n: Any, now: float, moves: Any) -> None:
        cur = w[0]
        cur.in_evict = True
        try:
            orig_evict(self, n, now, moves)
        finally:
            cur.in_evict = False

    K.__init__, K.lookup = init, lookup  # type: ignore[method-assign]
    K._ssd_write, K.drop_ssd, K._cancel_write, K.evict_dram = (  # type: ignore[method-assign]
        write, drop, cancel, evict)

    def undo() -> None:
        K.__init__, K.lookup = orig_init, orig_lookup  # type: ignore[method-assign]
        K._ssd_write, K.drop_ssd, K._cancel_write, K.evict_dram = (  # type: ignore[method-assign]
            orig_write, orig_drop, orig_cancel, orig_evict)

    return undo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="agent")
    ap.add_argument("--model", default="qwen3.5-9b")
    ap.add_argument("--sessions", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", default="E2,LA",
                    help="E<n> (the seed's rule), LA (learned) or an admission such as E2∨R1")
    ap.add_argument("--links", choices=("default", "a30"), default="default",
                    help="a30: saria-admission's A30 testbed links, as its cells pass them")
    ap.add_argument("--dram-tokens", type=int, default=None)
    ap.add_argument("--ssd-tokens", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    from aicache.experiments.saria import FULL_SESSIONS, _workload
    from aicache.kv.models import get_model

    full = FULL_SESSIONS.get(a.workload, 350)
    n = a.sessions or full
    window = 12 * 3600.0 * n / full
    model = get_model(a.model)
    reqs = _workload(a.workload, a.sessions, a.seed, model.block_tokens)
    ids: dict[tuple[int, Any], int] = {}
    holder: list[_Watch] = [_Watch(ids)]
    undo = _install(holder)
    try:
        out = _run(a, reqs, model, window, holder, ids)
    finally:
        undo()
    _print(out, a.json)
    return 0


def _run(a: argparse.Namespace, reqs: list[Any], model: Any, window: float,
         holder: list[_Watch], ids: dict[tuple[int, Any], int]) -> dict[str, Any]:
    from aicache.experiments.saria import _SIM_KEYS, A30_LINKS
    from aicache.sim.kv import KVSimParams, simulate_kv

    fd: _Watch = holder[0]

    def replay(label: str) -> tuple[dict[str, Any], _Watch]:
        holder[0] = _Watch(ids)
        if label != "FD":
            holder[0].fd_hits = {k: v[0] for k, v in fd.req.items()}
        kw: dict[str, Any] = {"model": a.model, "session_window": window, "seed": a.seed}
        if a.links == "a30":  # filtered as run_sim_cell filters the experiment's cells
            kw.update({k: v for k, v in A30_LINKS.items() if k in _SIM_KEYS})
        for k in ("dram_tokens", "ssd_tokens"):
            if getattr(a, k) is not None:
                kw[k] = getattr(a, k)
        if label == "FD":
            kw["system"] = "full-duplicate"
        elif label == "LA":
            kw.update(system="saria", admission="learned")
            holder[0].learned_below = 2  # LearnedRule's θ_E (its default)
        elif label[1:].isdigit() and label[0] == "E":
            kw.update(system="saria", theta_e=int(label[1:]))
        else:
            kw.update(system="saria", admission=label)
        m = simulate_kv(reqs, KVSimParams(**kw)).metrics
        return m, holder[0]

    fd_m, fd = replay("FD")
    out: dict[str, Any] = {"workload": a.workload, "model": a.model, "links": a.links,
                           "dram_tokens": a.dram_tokens, "ssd_tokens": a.ssd_tokens,
                           "sessions": len(
                               {r.session for r in reqs}),
                           "seed": a.seed, "checkpoint_every_blocks":
                           (model.checkpoint_tokens // model.block_tokens) if model.hybrid else 0,
                           "fd": {"char": fd_m["char"], "hit_blocks": fd_m["hit_blocks"],
                                  "ssd_write_bytes": fd_m["ssd_write_bytes"]}, "arms": {}}
    for label in a.arms.split(","):
        m, arm = replay(label)
        lost: Counter[str] = Counter()
        gained = held_cut = 0
        for key, (h_fd, _raw, _c, _e) in fd.req.items():
            h, raw, cause, _e2 = arm.req[key]
            if h_fd > h:
                lost[cause] += h_fd - h
                held_cut += min(raw, h_fd) - h
            elif h > h_fd:
                gained += h - h_fd
        wr: dict[str, dict[str, float]] = {}
        for kind in ("seed", "learned"):
            recs = [r for r in arm.writes if r[1] == (kind == "learned")]
            wr[kind] = {"writes": len(recs), "bytes_vs_fd": sum(r[0] for r in recs)
                        / fd_m["ssd_write_bytes"],
                        "never_read": sum(1 for r in recs if not r[2]),
                        "never_read_bytes_vs_fd": sum(r[0] for r in recs if not r[2])
                        / fd_m["ssd_write_bytes"]}
        row: dict[str, Any] = {
            "char_vs_fd": m["char"] / fd_m["char"],
            "writes_vs_fd": m["ssd_write_bytes"] / fd_m["ssd_write_bytes"],
            "fd_hit_blocks": fd_m["hit_blocks"], "hit_blocks": m["hit_blocks"],
            "lost_blocks": sum(lost.values()), "lost_by_cause": dict(lost.most_common()),
            "lost_held_but_cut": held_cut, "gained_blocks": gained,
            "missing_first_evicted_blocks": len(arm.missing),
            "missing_first_evicted_bytes_vs_fd": sum(arm.missing.values())
            / fd_m["ssd_write_bytes"], "writes": wr}
        adm = getattr(arm.index.adm, "lr", None)
        if adm is not None:
            kv = arm.index.kv_bpt
            row["budget"] = {"write_budget": adm.write_budget, "offered_tokens": adm.offered,
                             "written_tokens": adm.written,
                             "written_vs_offered": adm.written / max(1, adm.offered),
                             "offered_bytes_vs_fd_writes": adm.offered * kv
                             / fd_m["ssd_write_bytes"],
                             "over_budget_refusals": adm.over_budget}
        out["arms"][label] = row
    return out


def _print(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        fd = out["fd"]
        print(f"{out['workload']} / {out['model']}: FD CHAR {fd['char']:.4f}, "
              f"{fd['hit_blocks']} hit blocks")
        for label, r in out["arms"].items():
            print(f"{label}: CHAR {r['char_vs_fd']:.4f}x FD, writes {r['writes_vs_fd']:.4f}x FD; "
                  f"lost {r['lost_blocks']} blocks {r['lost_by_cause']} (held but cut "
                  f"{r['lost_held_but_cut']}), gained {r['gained_blocks']}; "
                  f"{r['missing_first_evicted_blocks']} distinct first-evicted blocks missing "
                  f"({r['missing_first_evicted_bytes_vs_fd']:.4f}x FD bytes)")
            for kind, v in r["writes"].items():
                print(f"  {kind} writes {v['writes']} ({v['bytes_vs_fd']:.4f}x FD bytes), "
                      f"never read {v['never_read']} ({v['never_read_bytes_vs_fd']:.4f}x FD)")
            if "budget" in r:
                print(f"  budget {r['budget']}")


if __name__ == "__main__":
    raise SystemExit(main())
