"""SAECache experiments: capacity sweep, mismatch, ablation, overhead, and SAECache as
SARIA's DRAM order (the design and the published results they compare with:
``docs/design/saecache.md``).

Evaluation seeds (4, 5, 6; 4, 5 for the smaller grids) differ from the seeds looked at
while the policy and the generators were developed (0–3); the mismatch experiment fits its
fixed parameters on seed 100. No parameter of the policy is
set per workload.

TTFT model: the prefill throughput of each cell is set so that serving every prompt
*uncached* would load the server to ``OFFERED_LOAD`` (1.0: without a cache it would just
saturate); the cache's token hit ratio then decides the real load and queueing, so TTFT
gains compound hit-ratio gains the way they do on a busy server. The token hit ratio does
not depend on this setting.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from aicache.experiments.base import Experiment, Figure, Goal, ReportSection, Table

if TYPE_CHECKING:
    from aicache.kv.saecache import SAEState
    from aicache.kv.saecache_reuse import ReuseState
    from aicache.traces.base import KVRequest

WORKLOADS = ("chat", "arena", "tool", "mix")
POLICIES = ("saecache", "saecache-seed", "saecache-priority", "lru", "lpc", "lfu", "s3fifo", "sieve", "belady")
#: the goal's baselines (its bar: the best of LRU, LFU, S3-FIFO, SIEVE and LPC)
GOAL_BASELINES = ("lru", "lfu", "s3fifo", "sieve", "lpc")
OFFERED_LOAD = 1.0
#: Evaluation seeds: held out. Seeds 0–3 were used while calibrating the generators and
#: tuning the policy; 4–6 never were, so the goals are judged on unseen workloads.
SEEDS = (4, 5, 6)
EVAL_SEEDS_2 = (4, 5)


@lru_cache(maxsize=8)
def _requests(workload: str, sessions: int, seed: int) -> tuple[list[KVRequest], str]:
    from aicache.sim.prefix import load_requests

    return load_requests(workload=workload, sessions=sessions, seed=seed)


def _throughput(reqs: Sequence[KVRequest]) -> float:
    """Prefill throughput that puts the uncached offered load at ``OFFERED_LOAD``, measured
    over the middle half of the requests (the steady state: generated traces ramp up as
    sessions start and trail off as the last sessions end)."""
    n = len(reqs)
    lo, hi = n // 4, max(n // 4 + 1, (3 * n) // 4)
    span = max(1.0, reqs[hi - 1].timestamp - reqs[lo].timestamp)
    return max(1.0, sum(r.input_length for r in reqs[lo:hi]) / span / OFFERED_LOAD)


def run_prefix(workload: str, sessions: int, seed: int, policy: str, capacity_pct: float,
               policy_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One prefix-cache replay; the metrics dict of :class:`PrefixResult`."""
    from aicache.sim.prefix import PrefixSimParams, simulate

    reqs, labels = _requests(workload, sessions, seed)
    res = simulate(reqs, policy, f"{capacity_pct}%", seed=seed, labels=labels,
                   params=PrefixSimParams(prefill_tokens_per_s=_throughput(reqs)),
                   policy_params=policy_params)
    out = res.to_dict()
    out.pop("policy")
    return out


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _by(rows: Sequence[Mapping[str, Any]], keys: tuple[str, ...], y: str) -> dict[tuple[Any, ...], float]:
    acc: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        if isinstance(r.get(y), (int, float)):
            acc.setdefault(tuple(r[k] for k in keys), []).append(float(r[y]))
    return {k: sum(v) / len(v) for k, v in acc.items()}


#: the SAECache variants the goals are judged for (the seed's formula, the engineered
#: seed priority, the default: the reuse-probability variant)
GOAL_POLICIES = ("saecache-seed", "saecache-priority", "saecache")
#: the goals: ≥ GAIN_PTS above the best baseline at GAIN_CAPS % of the working set, and never
#: more than BELOW_PTS below LRU at any capacity in BELOW_RANGE %
GAIN_CAPS = (5, 10, 20)
GAIN_PTS = 5.0
BELOW_PTS = 0.5
BELOW_RANGE = (5, 50)


def saecache_goals(mean: Mapping[tuple[Any, ...], float], cells: Mapping[tuple[Any, ...], float],
                   gain_traces: Sequence[str], below_traces: Sequence[str], held_out: str,
                   sub: str) -> list[Goal]:
    """The SAECache goals, one row per variant, trace and capacity.

    ``mean[(trace, capacity, policy)]``: token hit ratio (averaged over ``sub``, e.g. the
    seeds); ``cells[(trace, sub, capacity, policy)]``: each replay alone, for "never below
    LRU", which holds per replay. ``held_out`` follows each trace's name (e.g. which
    seeds). The +5 goal compares with the best of LRU, LFU, S3-FIFO,
    SIEVE and the LPC stand-in at that capacity; the headroom share is (policy − LRU) /
    (Belady − LRU). A capacity the grid lacks gets a "not evaluated" row."""
    goals: list[Goal] = []
    for p in GOAL_POLICIES:
        for w in gain_traces:
            for c in GAIN_CAPS:
                text = (f"{p}, {w}{held_out}, {c}%: CHR ≥ best of LRU/LFU/S3-FIFO/SIEVE/LPC "
                        f"+ {GAIN_PTS:g} pts")
                v = mean.get((w, c, p))
                base = {b: mean.get((w, c, b)) for b in GOAL_BASELINES}
                if v is None or any(x is None for x in base.values()):
                    goals.append({"goal": text, "met": None, "value": "not in this grid"})
                    continue
                bname, best = max(((b, float(x)) for b, x in base.items() if x is not None),
                                  key=lambda kv: kv[1])
                lru, bel = float(base["lru"] or 0.0), mean.get((w, c, "belady"))
                share = (f"{(v - lru) / (bel - lru):.0%} of Belady's headroom over LRU"
                         if bel is not None and bel > lru else "no headroom (Belady = LRU)")
                gain = 100 * (v - best)
                goals.append({"goal": text, "met": gain >= GAIN_PTS,
                              "value": f"{gain:+.2f} pts vs {bname} ({best:.3f}); {share}"})
        lo, hi = BELOW_RANGE
        for w in below_traces:
            diffs = [(100 * (v - cells[(tw, k, c, "lru")]), k, c)
                     for (tw, k, c, pp), v in cells.items()
                     if tw == w and pp == p and lo <= c <= hi and (tw, k, c, "lru") in cells]
            caps = sorted({c for _, _, c in diffs})
            text = f"{p}, {w}{held_out}: never > {BELOW_PTS:g} pt below LRU at {lo}–{hi}%"
            if not diffs:
                goals.append({"goal": text, "met": None, "value": "not in this grid"})
                continue
            d, k, c = min(diffs)
            goals.append({"goal": text, "met": d >= -BELOW_PTS and caps[0] <= lo and caps[-1] >= hi,
                          "value": (f"worst {d:+.2f} pts ({sub} {k}, {c:g}%); capacities "
                                    f"{'/'.join(f'{x:g}' for x in caps)}%")})
    return goals


#: The published characterisation (``docs/design/saecache.md``): the only published
#: numbers; everything else in the generators is a stated assumption, see
#: :mod:`aicache.traces.gen_chat`.
SEED_CHARACTERISATION = {"system reuse": 0.923, "reasoning reuse": 0.022}


def workload_table(sessions: Mapping[str, int], seed: int) -> Table:
    """Characterisation of each generated workload next to the seed's numbers."""
    from aicache.traces.gen import SESSIONS
    from aicache.traces.gen_chat import workload_stats

    rows: list[dict[str, Any]] = [{
        "workload": "seed (published)", "source": "docs/design/saecache.md",
        "system reuse": SEED_CHARACTERISATION["system reuse"],
        "reasoning reuse": SEED_CHARACTERISATION["reasoning reuse"],
        "gaps": "log-normal, app-specific μ/σ (values not published)"}]
    for w, n in sessions.items():
        st = workload_stats(SESSIONS.get(w)(sessions=n, seed=seed))
        tr, t, sh = st["type_reuse"], st["turns"], st["token_share"]
        gaps = "; ".join(f"{k}: median {g['median_s']:.1f}s σ {g['sigma']:.2f}" for k, g in st["gaps"].items())
        rows.append({
            "workload": w, "source": f"generated, seed {seed}, {n} sessions",
            **{f"{ty} reuse": tr.get(ty) for ty in ("system", "reasoning", "tool", "user", "assistant", "decode")},
            "turns mean": t["mean"], "turns p90": t["p90"], "single-request share": t["single_share"],
            "gaps": gaps or "-", "shared tokens": sh["shared"], "session-local tokens": sh["session_local"],
            "never-reused tokens": sh["never_reused"]})
    keys = list(dict.fromkeys(k for r in rows for k in r))
    rows = [{k: r.get(k) for k in keys} for r in rows]
    return Table("Workload characterisation (reuse = share of a type's distinct blocks requested again)",
                 rows, note=("seed row: the only numbers the seed publishes; generator shapes "
                             "(catalogue sizes, lengths, turn counts, gap medians) are assumptions "
                             "stated in aicache.traces.gen_chat"))


class Capacity(Experiment):
    name = "saecache-capacity"
    title = "SAECache: token hit ratio and TTFT vs capacity, every policy, four workloads"
    reproduces = "SAECache seed: CHR and TTFT vs LRU / LPC (Sec. evaluation)"
    full_wall_time = "about 8–12 min on 2 cores (540 cells; 432 of them took 739 s on a loaded machine)"

    FULL: ClassVar[dict[str, Any]] = {"sessions": {"chat": 1000, "arena": 3000, "tool": 300, "mix": 1000},
                                      "capacities": (5, 10, 20, 30, 50), "seeds": SEEDS}
    QUICK: ClassVar[dict[str, Any]] = {"sessions": {"chat": 150, "arena": 300, "tool": 40, "mix": 150},
                                       "capacities": (10, 30), "seeds": (1,)}

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        g = self.QUICK if quick else self.FULL
        return [{"workload": w, "sessions": g["sessions"][w], "seed": s, "capacity_pct": c,
                 "policy": p}
                for w in WORKLOADS for s in g["seeds"] for c in g["capacities"] for p in POLICIES]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        return run_prefix(params["workload"], int(params["sessions"]), int(params["seed"]),
                          params["policy"], float(params["capacity_pct"]))

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import line_chart

        ok = [r for r in rows if "token_hit_ratio" in r]
        figs = []
        for w in WORKLOADS:
            sub = [r for r in ok if r["workload"] == w]
            if not sub:
                continue
            figs.append(Figure(line_chart(sub, x="capacity_pct", y="token_hit_ratio", hue="policy",
                                          path=Path(outdir) / f"saecache_chr_{w}.png",
                                          title=f"Token hit ratio: {w}", ylabel="token hit ratio",
                                          xlabel="capacity (% of working set)"),
                               f"Token hit ratio vs capacity on {w} (mean over seeds)."))
            figs.append(Figure(line_chart(sub, x="capacity_pct", y="ttft_mean_s", hue="policy",
                                          path=Path(outdir) / f"saecache_ttft_{w}.png",
                                          title=f"Mean TTFT: {w}", ylabel="TTFT (s)",
                                          xlabel="capacity (% of working set)", logy=True),
                               f"Mean TTFT vs capacity on {w} (offered load {OFFERED_LOAD} uncached)."))
        chr_ = _by(ok, ("workload", "capacity_pct", "policy"), "token_hit_ratio")
        ttft = _by(ok, ("workload", "capacity_pct", "policy"), "ttft_mean_s")
        table = []
        for (w, c, p), v in sorted(chr_.items()):
            # the seed's comparison (its published gain over the best of LRU and LPC) is
            # made with the seed's formula; the default and the engineered priority beside it
            if p != "saecache-seed":
                continue
            lru, lpc = chr_.get((w, c, "lru")), chr_.get((w, c, "lpc"))
            best = max(x for x in (lru, lpc) if x is not None) if (lru or lpc) else None
            bel = chr_.get((w, c, "belady"))
            gain = 100 * (v - best) if best is not None else None
            t_l = ttft.get((w, c, "lru"))
            allb = [chr_[(w, c, b)] for b in GOAL_BASELINES if (w, c, b) in chr_]
            dv = chr_.get((w, c, "saecache"))
            t_d = ttft.get((w, c, "saecache"))
            table.append({"workload": w, "capacity %": c, "saecache-seed CHR": v,
                          "gain vs best(LRU,LPC) pts": gain,
                          "saecache-priority CHR": chr_.get((w, c, "saecache-priority")),
                          "saecache (default) CHR": dv,
                          "saecache − LRU pts": 100 * (dv - lru) if dv is not None and lru is not None else None,
                          "saecache − best of 5 baselines pts": 100 * (dv - max(allb)) if dv is not None and allb else None,
                          "LRU": lru, "LPC": lpc,
                          "Belady headroom pts": 100 * (bel - best) if bel is not None and best is not None else None,
                          "TTFT LRU/saecache-seed": (t_l / ttft[(w, c, p)]) if t_l and ttft.get((w, c, p)) else None,
                          "TTFT LRU/saecache": (t_l / t_d) if t_l and t_d else None})
        seeds = sorted({int(r["seed"]) for r in ok})
        held = f" (seeds {'/'.join(map(str, seeds))}, held out)"
        goals = saecache_goals(chr_, _by(ok, ("workload", "seed", "capacity_pct", "policy"),
                                      "token_hit_ratio"),
                            ("chat", "tool", "mix"), WORKLOADS, held, "seed")
        policies = [p for p in POLICIES if any(k[2] == p for k in chr_)]
        overview = [{"policy": p, **{w: _mean([v for (ww, _, pp), v in chr_.items() if ww == w and pp == p])
                                     for w in WORKLOADS}} for p in policies]
        return ReportSection(
            title=self.title,
            description=("Prefix cache over generated chat (ShareGPT/LMSys-like), arena, tool "
                         "(BFCL-like) and shifting-mix workloads; capacity as % of the working "
                         "set (prompt + decoded blocks). Seeds 4–6 (the policy and generators "
                         "were developed on seeds 0–3). Belady is shown as a reference bound: with variable block "
                         "sizes and prefix dependence it is a strong heuristic, not a strict "
                         "optimum."),
            figures=figs,
            tables=[Table("SAECache vs the best of LRU and LPC", table,
                          note=("gain: the seed's formula (saecache-seed), in token-hit-ratio "
                                "points, as the seed reports it; Belady headroom = Belady − "
                                "best(LRU, LPC); saecache is the default")),
                    Table("Mean token hit ratio over capacities and seeds", overview),
                    workload_table({w: int(next(r["sessions"] for r in ok if r["workload"] == w))
                                    for w in WORKLOADS if any(r["workload"] == w for r in ok)},
                                   seed=min(int(r["seed"]) for r in ok) if ok else SEEDS[0])],
            published=[{"metric": "CHR gain vs best(LRU, LPC) (the seed's, against saecache-seed's; "
                                  "our goal is +5 over the best of five, in Goals)",
                        "seed": "+4.8 … +5.9 points"},
                       {"metric": "TTFT vs production baselines", "seed": "1.4× … 2.7× better"}],
            goals=goals)


@runtime_checkable
class _ExportsState(Protocol):
    """A policy whose learned state can be exported and imported frozen (``state=``,
    ``learn=False``)."""

    def export_state(self) -> SAEState | ReuseState: ...


class Mismatch(Experiment):
    name = "saecache-mismatch"
    title = "SAECache under workload mismatch: fixed parameters vs online learning"
    reproduces = "SAECache seed: fixed-parameter policies lose up to 2.7× TTFT under mismatch"
    full_wall_time = "about 5 min on 2 cores (72 cells)"

    FULL: ClassVar[dict[str, Any]] = {"sessions": {"chat": 1000, "tool": 300, "mix": 1000},
                                      "seeds": EVAL_SEEDS_2, "capacity": 10}
    QUICK: ClassVar[dict[str, Any]] = {"sessions": {"chat": 150, "tool": 40, "mix": 150},
                                       "seeds": (1,), "capacity": 10}
    FIT_SEED: ClassVar[int] = 100

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        g = self.QUICK if quick else self.FULL
        out: list[dict[str, Any]] = []
        wl = tuple(g["sessions"])
        for run_on in wl:
            for seed in g["seeds"]:
                for pol in MISMATCH_POLICIES:
                    base = {"run_on": run_on, "seed": seed, "capacity_pct": g["capacity"],
                            "sessions": g["sessions"][run_on], "policy": pol}
                    out.append({**base, "mode": "online", "fit_on": "-", "fit_sessions": 0})
                    for fit_on in wl:
                        out.append({**base, "mode": "fixed", "fit_on": fit_on,
                                    "fit_sessions": g["sessions"][fit_on]})
        return out

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        from aicache.kv.prefix_policies import make_prefix_policy
        from aicache.sim.prefix import simulate

        cap = float(params["capacity_pct"])
        # rows stored before the policy was a cell parameter ran the engineered priority
        pol = str(params.get("policy", "saecache-priority"))
        pp: dict[str, Any] = {}
        if params["mode"] == "fixed":
            freqs, _ = _requests(params["fit_on"], int(params["fit_sessions"]), Mismatch.FIT_SEED)
            fit = make_prefix_policy(pol, 1, seed=Mismatch.FIT_SEED)
            # not isinstance against SAECache/SAECacheReuse: compiled, they share their base
            # PrefixPolicy's ABC cache, so one negative answer makes every later
            # isinstance(policy, PrefixPolicy) of that class False
            assert isinstance(fit, _ExportsState), pol
            simulate(freqs, fit, f"{cap}%", seed=Mismatch.FIT_SEED)
            pp = {"state": fit.export_state(), "learn": False}
        out = run_prefix(params["run_on"], int(params["sessions"]), int(params["seed"]),
                         pol, cap, policy_params=pp)
        return out

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        def _variant(r: Mapping[str, Any]) -> str:
            v = "online" if r["mode"] == "online" else f"fixed:{r['fit_on']}"
            pol = r.get("policy", "saecache-priority")
            return v if pol == "saecache" else f"{pol} {v}"

        ok = [dict(r, variant=_variant(r)) for r in rows if "ttft_mean_s" in r]
        figs = [Figure(bar_chart(ok, x="run_on", y="ttft_mean_s", hue="variant",
                                 path=Path(outdir) / "saecache_mismatch_ttft.png",
                                 title="TTFT: online vs fixed parameters", ylabel="mean TTFT (s)",
                                 xlabel="workload run on"),
                       "Mean TTFT of SAECache with parameters fitted on another workload (fixed) "
                       "vs learning online.")]
        t = _by(ok, ("run_on", "variant"), "ttft_mean_s")
        h = _by(ok, ("run_on", "variant"), "token_hit_ratio")
        table = []
        online_loss: dict[str, list[float]] = {}
        fixed_loss: dict[str, list[float]] = {}
        for run_on in sorted({k[0] for k in t}):
            for pol in MISMATCH_POLICIES:
                pre = "" if pol == "saecache" else f"{pol} "
                matched = t.get((run_on, f"{pre}fixed:{run_on}"))
                on = t.get((run_on, f"{pre}online"))
                worst = max((v for (w, var), v in t.items()
                             if w == run_on and var.startswith(f"{pre}fixed:")), default=None)
                if matched and on:
                    online_loss.setdefault(pol, []).append(on / matched - 1)
                if matched and worst:
                    fixed_loss.setdefault(pol, []).append(worst / matched - 1)
            for (w, var), v in sorted(t.items()):
                if w == run_on:
                    pre = next((f"{p} " for p in MISMATCH_POLICIES[1:] if var.startswith(f"{p} ")), "")
                    matched = t.get((run_on, f"{pre}fixed:{run_on}"))
                    table.append({"run on": w, "variant": var, "ttft_mean_s": v,
                                  "token_hit_ratio": h.get((w, var)),
                                  "TTFT / matched fixed": v / matched if matched else None})
        goals: list[Goal] = []
        for pol in MISMATCH_POLICIES:
            on_l, fx_l = online_loss.get(pol), fixed_loss.get(pol)
            if on_l:
                goals.append({"goal": f"online {pol} loses ≤ 5% TTFT vs parameters fitted on the same workload",
                              "met": max(on_l) <= 0.05,
                              "value": f"worst online loss {100 * max(on_l):+.1f}%"})
            if on_l and fx_l:
                goals.append({"goal": f"{pol}: fixed parameters fitted on another workload lose more than online",
                              "met": max(fx_l) > max(on_l),
                              "value": f"worst mismatched-fixed loss {100 * max(fx_l):+.1f}%"})
        return ReportSection(
            title=self.title,
            description=("Fixed = every learned quantity (saecache-priority and saecache-seed: "
                         "token-type weights, μ/σ, γ, α, the continuation predictor; saecache, the "
                         "default: the per-class reuse probabilities p_c and their counters) taken "
                         f"from a run on the fit workload (seed {self.FIT_SEED}) and frozen; online "
                         "= learning from scratch; unprefixed variants are the default's."),
            figures=figs, tables=[Table("TTFT and hit ratio by variant", table)],
            published=[{"metric": "fixed-parameter TTFT loss under mismatch", "seed": "up to 2.7×"}],
            goals=goals)


#: the priority variants (the engineered one and the seed's formula exactly), ablated factor
#: by factor; the default ``saecache`` has its own switch (REUSE_ABLATIONS)
SAE_VARIANTS = ("saecache-priority", "saecache-seed")
#: every variant with learned state to export and freeze (the default first: its rows are unprefixed)
MISMATCH_POLICIES = ("saecache", *SAE_VARIANTS)

ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "no token-type weights": {"token_types": False},
    "no queue weights": {"queue_weights": False},
    "no log-normal timing": {"lognormal": False},
    "no position decay": {"position": False},
    # the other direction: a perfect first-request predictor (reads the session label: a
    # diagnostic bound on what better prediction could add, not a deployable variant)
    "oracle predictor": {"predictor": "oracle"},
}


#: the default's (saecache) own switch: the finished request's prompt/output lengths as class features
REUSE_ABLATIONS: dict[str, dict[str, Any]] = {"full": {}, "no request lengths": {"output_length": False}}


def _ablations(policy: str) -> dict[str, dict[str, Any]]:
    return REUSE_ABLATIONS if policy in ("saecache", "saecache-reuse") else ABLATIONS


class Ablation(Experiment):
    name = "saecache-ablation"
    title = "SAECache ablation: each factor of the priority switched off"
    reproduces = "SAECache seed: ablations (+23% types, +39% queue weights, +14% timing, +12% position)"
    full_wall_time = "about 3 min on 2 cores (144 cells)"

    FULL: ClassVar[dict[str, Any]] = {"sessions": {"chat": 1000, "tool": 300, "mix": 1000},
                                      "seeds": EVAL_SEEDS_2, "capacities": (10, 20)}
    QUICK: ClassVar[dict[str, Any]] = {"sessions": {"chat": 150, "tool": 40, "mix": 150},
                                       "seeds": (1,), "capacities": (10,)}

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        g = self.QUICK if quick else self.FULL
        return [{"workload": w, "sessions": n, "seed": s, "capacity_pct": c, "policy": p, "variant": v}
                for w, n in g["sessions"].items() for s in g["seeds"] for c in g["capacities"]
                for p in (*SAE_VARIANTS, "saecache") for v in _ablations(p)]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        return run_prefix(params["workload"], int(params["sessions"]), int(params["seed"]),
                          str(params.get("policy", "saecache-priority")), float(params["capacity_pct"]),
                          policy_params=_ablations(str(params.get("policy", "saecache-priority")))[params["variant"]])

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        # rows stored before the policy was a cell parameter ran the engineered priority
        ok = [dict(r, policy=r.get("policy", "saecache-priority")) for r in rows if "token_hit_ratio" in r]
        figs = [Figure(bar_chart([r for r in ok if r["policy"] == p], x="workload", y="token_hit_ratio",
                                 hue="variant", path=Path(outdir) / f"{p}_ablation.png",
                                 title=f"{p} ablation", ylabel="token hit ratio"),
                       f"{p}: token hit ratio with one factor of P switched off (mean over seeds/capacities).")
                for p in (*SAE_VARIANTS, "saecache") if any(r["policy"] == p for r in ok)]
        h = _by(ok, ("workload", "policy", "variant"), "token_hit_ratio")
        t = _by(ok, ("workload", "policy", "variant"), "ttft_mean_s")
        table = []
        for (w, p, v), x in sorted(h.items()):
            full = h.get((w, p, "full"))
            tf = t.get((w, p, "full"))
            table.append({"workload": w, "policy": p, "variant": v, "token_hit_ratio": x,
                          "CHR change of full vs this (pts)": 100 * (full - x) if full is not None else None,
                          "TTFT this / full": t[(w, p, v)] / tf if tf else None})
        return ReportSection(
            title=self.title,
            description=("Positive 'change' = the factor helps (full SAECache is better without removing "
                         "it). 'oracle predictor' goes the other way: the first-request session "
                         "predictor replaced by the trace's own label (a perfect predictor; reads "
                         "the future, a diagnostic bound, not a variant to deploy) — a negative "
                         "change is what better continuation prediction could add at most."),
            figures=figs, tables=[Table("Ablation", table)],
            published=[{"factor": "token-type weights", "seed": "+23%"},
                       {"factor": "adaptive queue weights", "seed": "+39%"},
                       {"factor": "log-normal timing", "seed": "+14%"},
                       {"factor": "position decay", "seed": "+12%"}])


class Overhead(Experiment):
    name = "saecache-overhead"
    title = "SAECache per-decision cost vs LRU and the other policies"
    reproduces = "SAECache seed: predictor/policy overhead (8.8× LPC's throughput claim)"
    full_wall_time = "about 1.5 min, run it with --workers 1 (timing)"

    FULL: ClassVar[dict[str, Any]] = {"sessions": {"chat": 1000, "arena": 3000, "tool": 300, "mix": 1000},
                                      "repeats": 3}
    QUICK: ClassVar[dict[str, Any]] = {"sessions": {"chat": 150, "arena": 300, "tool": 40, "mix": 150},
                                       "repeats": 1}

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        g = self.QUICK if quick else self.FULL
        return [{"workload": w, "sessions": n, "seed": 1, "capacity_pct": 10, "policy": p,
                 "repeats": g["repeats"]}
                for w, n in g["sessions"].items() for p in POLICIES]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        """CPU time of the whole replay loop (simulator + policy; ``cpu_seconds``, so time
        spent waiting for a core on a shared machine does not count), best of ``repeats``
        runs; a decision is one policy call (hit, insert or victim). Timing numbers are not
        deterministic; everything else is. ``benchmarks/saecache_overhead.py`` measures the
        same ratio with LRU and SAECache interleaved in one process."""
        best: dict[str, Any] | None = None
        for _ in range(int(params["repeats"])):
            out = run_prefix(params["workload"], int(params["sessions"]), int(params["seed"]),
                             params["policy"], float(params["capacity_pct"]))
            if best is None or out["cpu_seconds"] < best["cpu_seconds"]:
                best = out
        assert best is not None
        best["us_per_decision"] = 1e6 * best["cpu_seconds"] / max(1, best["decisions"])
        return best

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        ok = [r for r in rows if "us_per_decision" in r]
        figs = [Figure(bar_chart(ok, x="workload", y="us_per_decision", hue="policy",
                                 path=Path(outdir) / "saecache_overhead.png",
                                 title="Cost per decision", ylabel="µs per decision (replay)"),
                       "Replay CPU time per policy decision (simulator included, best of repeats).")]
        us = _by(ok, ("workload", "policy"), "us_per_decision")
        table = []
        ratios = []
        for (w, p), v in sorted(us.items()):
            l = us.get((w, "lru"))
            r = v / l if l else None
            if p == "saecache" and r is not None:
                ratios.append(r)
            table.append({"workload": w, "policy": p, "µs/decision": v,
                          "decisions/s": 1e6 / v if v else None, "× LRU": r})
        goals: list[Goal] = []
        if ratios:
            goals.append({"goal": "SAECache per-decision cost ≤ 3× LRU", "met": max(ratios) <= 3.0,
                          "value": f"{min(ratios):.2f}×…{max(ratios):.2f}× LRU"})
        return ReportSection(
            title=self.title,
            description=("Cost per decision of the whole replay (the simulator's own work per "
                         "block is shared by every policy). SAECache's predictor runs once per "
                         "first request, not per block."),
            figures=figs, tables=[Table("Per-decision cost", table)], goals=goals)


class SariaSAECache(Experiment):
    name = "saria-saecache"
    title = "SARIA with SAECache vs LRU as its DRAM eviction order (agent workload)"
    reproduces = "combination beyond the seeds: SARIA tiering + SAECache ordering"
    full_wall_time = "about 2 min on 2 cores (8 cells)"

    FULL: ClassVar[dict[str, Any]] = {"sessions": 120, "seeds": (1, 2), "dram_tokens": (500_000, 2_000_000)}
    QUICK: ClassVar[dict[str, Any]] = {"sessions": 15, "seeds": (1,), "dram_tokens": (200_000,)}

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        g = self.QUICK if quick else self.FULL
        return [{"workload": "agent", "sessions": g["sessions"], "seed": s, "dram_tokens": d,
                 "dram_policy": p}
                for s in g["seeds"] for d in g["dram_tokens"] for p in ("lru", "saecache")]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        from aicache.sim.kv import KVSimParams, simulate_kv
        from aicache.traces.gen import SESSIONS

        reqs = list(SESSIONS.get(params["workload"])(sessions=int(params["sessions"]),
                                                      seed=int(params["seed"])))
        d = int(params["dram_tokens"])
        t0 = time.perf_counter()
        res = simulate_kv(copy.deepcopy(reqs), KVSimParams(
            system="saria", dram_policy=params["dram_policy"], dram_tokens=d, ssd_tokens=10 * d,
            seed=int(params["seed"])))
        m = dict(res.metrics)
        keep = ("char", "ttft_mean_s", "ttft_p90_s", "ssd_write_bytes", "ssd_writes_norm",
                "dram_evictions", "requests")
        out = {k: m[k] for k in keep if k in m}
        out["wall_seconds"] = time.perf_counter() - t0
        return out

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        ok = [r for r in rows if "char" in r]
        figs = [Figure(bar_chart(ok, x="dram_tokens", y=y, hue="dram_policy",
                                 path=Path(outdir) / f"saria_saecache_{y}.png",
                                 title=f"SARIA + DRAM order: {y}", ylabel=y, xlabel="DRAM tokens"),
                       f"{y} of SARIA with LRU vs SAECache ordering DRAM (agent).")
                for y in ("char", "ttft_mean_s", "ssd_write_bytes")]
        table = []
        for key, v in sorted(_by(ok, ("dram_tokens", "dram_policy"), "char").items()):
            d, p = key
            sub = [r for r in ok if r["dram_tokens"] == d and r["dram_policy"] == p]
            table.append({"dram_tokens": d, "dram_policy": p, "CHAR": v,
                          "ttft_mean_s": _mean([r["ttft_mean_s"] for r in sub]),
                          "ssd_write_bytes": _mean([r["ssd_write_bytes"] for r in sub])})
        return ReportSection(title=self.title,
                             description=("SARIA's admission, promotion and coordinator unchanged; "
                                          "only the DRAM eviction order differs."),
                             figures=figs, tables=[Table("SARIA + LRU vs SARIA + SAECache", table)])


# --------------------------------------------------------------------- Mooncake trace
#: the Mooncake FAST'25 synthetic trace shipped with the repository (traces/README.md)
MOONCAKE_TRACE = Path(__file__).resolve().parents[3] / "traces" / "mooncake_fast25_synthetic.jsonl"
#: every policy of the goal's comparison; "lpc" is the project's LPC *stand-in* (LRU window
#: reordered by the online continuation classifier; the learned-embedding LPC is not built)
MOONCAKE_POLICIES = ("lru", "lfu", "s3fifo", "sieve", "lpc", *GOAL_POLICIES, "belady")
BASELINES = ("lru", "lfu", "s3fifo", "sieve", "lpc")
LABEL = {"lpc": "LPC stand-in (continuation classifier over an LRU window)"}


@lru_cache(maxsize=4)
def _mooncake(part: str, limit: int | None) -> tuple[list[Any], str]:
    """The shipped trace's requests (the first ``limit`` with ``limit``), all of them or the
    first/second half by request index; labels inferred (the trace has none)."""
    from aicache.sim.prefix import infer_labels
    from aicache.traces.io import open_trace

    reqs = list(open_trace(str(MOONCAKE_TRACE), "mooncake").requests())
    if limit:
        reqs = reqs[:limit]
    h = len(reqs) // 2
    reqs = {"all": reqs, "first": reqs[:h], "second": reqs[h:]}[part]
    return infer_labels(reqs)


def run_mooncake(part: str, limit: int | None, policy: str, capacity_pct: float,
                 policy_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    from aicache.sim.prefix import PrefixSimParams, simulate

    reqs, labels = _mooncake(part, limit)
    res = simulate(reqs, policy, f"{capacity_pct}%", labels=labels,
                   params=PrefixSimParams(prefill_tokens_per_s=_throughput(reqs)),
                   policy_params=policy_params)
    out = res.to_dict()
    out.pop("policy")
    return out


def headroom_table(ok: Sequence[Mapping[str, Any]], keys: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per (keys…, capacity): every policy's CHR, SAECache's gain over the best baseline,
    its share of Belady's headroom over LRU, and the cells more than 0.5 pt below LRU."""
    chr_ = _by(ok, (*keys, "capacity_pct", "policy"), "token_hit_ratio")
    cells = sorted({k[:-1] for k in chr_})
    rows, below = [], []
    for c in cells:
        def get(p: str, c: tuple[Any, ...] = c) -> float | None:
            return chr_.get((*c, p))

        lru, bel = get("lru"), get("belady")
        base = [v for p in BASELINES if (v := get(p)) is not None]
        best = max(base) if base else None
        row: dict[str, Any] = dict(zip((*keys, "capacity %"), c))
        row.update({p: get(p) for p in MOONCAKE_POLICIES})
        for p in GOAL_POLICIES:
            v = get(p)
            if v is None:
                continue
            if best is not None:
                row[f"{p} − best baseline (pts)"] = 100 * (v - best)
            if lru is not None and bel is not None and bel > lru:
                row[f"{p} share of Belady headroom"] = (v - lru) / (bel - lru)
            if lru is not None and v < lru - 0.005:
                below.append(f"{p} at {c[-1]}%{' ' + '/'.join(map(str, c[:-1])) if c[:-1] else ''}: "
                             f"{100 * (v - lru):+.2f} pts vs LRU")
        rows.append(row)
    return rows, below


class MooncakeTrace(Experiment):
    name = "saecache-mooncake"
    title = "SAECache on the shipped Mooncake trace: token hit ratio vs capacity, every policy"
    reproduces = "SAECache seed's CHR comparison, on a real trace (not in the seed)"
    full_wall_time = "about 2.5 min on 2 shared cores (120 cells)"

    #: "first"/"second": each half of the trace replayed alone (capacity as % of that
    #: half's working set) — the second half is the held-out half for any tuning on the first
    FULL: ClassVar[dict[str, Any]] = {"limit": None, "capacities": (5, 10, 20, 30, 50),
                                      "parts": ("all", "first", "second")}
    QUICK: ClassVar[dict[str, Any]] = {"limit": 400, "capacities": (10, 30), "parts": ("all",)}

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        g = self.QUICK if quick else self.FULL
        return [{"part": part, "limit": g["limit"], "capacity_pct": c, "policy": p}
                for part in g["parts"] for c in g["capacities"] for p in MOONCAKE_POLICIES]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        lim = params.get("limit")
        return run_mooncake(str(params["part"]), int(lim) if lim else None, str(params["policy"]),
                            float(params["capacity_pct"]))

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import line_chart

        ok = [dict(r, policy=LABEL.get(r["policy"], r["policy"])) for r in rows
              if "token_hit_ratio" in r and r.get("part", "all") == "all"]
        fig = Figure(line_chart(ok, x="capacity_pct", y="token_hit_ratio", hue="policy",
                                path=Path(outdir) / "saecache_mooncake_chr.png",
                                title="Token hit ratio: Mooncake FAST'25 synthetic",
                                ylabel="token hit ratio", xlabel="capacity (% of working set)"),
                     "Token hit ratio vs capacity on the shipped Mooncake trace.")
        good = [r for r in rows if "token_hit_ratio" in r]
        table, below = headroom_table(good, ("part",))
        # the whole trace is the goal's; its second half is held out (developed on the first)
        names = {"all": "Mooncake whole", "first": "Mooncake first half (development)",
                 "second": "Mooncake second half (held out)"}
        named = [dict(r, trace=names.get(str(r.get("part", "all")), str(r.get("part"))))
                 for r in good]
        traces = [names[p] for p in ("all", "first", "second")
                  if any(r.get("part", "all") == p for r in good)]
        goals = saecache_goals(_by(named, ("trace", "capacity_pct", "policy"), "token_hit_ratio"),
                            _by(named, ("trace", "part", "capacity_pct", "policy"), "token_hit_ratio"),
                            [t for t in traces if t != names["first"]], traces, "", "part")
        return ReportSection(
            title=self.title,
            description=("traces/mooncake_fast25_synthetic.jsonl (3,993 requests, 512-token "
                         "blocks, no session ids or token types: labels inferred, a block seen "
                         "in an earlier request is 'system', the rest 'user'; no decode blocks). "
                         "Capacity as % of the trace's working set. 'lpc' is the project's LPC "
                         "stand-in, not the learned-embedding LPC. Headroom share = (policy − "
                         "LRU) / (Belady − LRU). part: all, or one half of the requests "
                         "replayed alone."),
            figures=[fig],
            tables=[Table("Mooncake: token hit ratio by capacity", table,
                          note="below LRU by > 0.5 pt: " + ("; ".join(below) or "none"))],
            goals=goals)
