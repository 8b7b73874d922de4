"""``cache-policies``: miss-ratio curves of the eviction registry on synthetic traces.

The libCacheSim-style comparison (as in the SIEVE and S3-FIFO evaluations): every
registered eviction policy, on Zipf traces of three skews and on a Zipf trace polluted by
sequential scans, at cache sizes of 1/5/10/25 % of the trace's working set (distinct
objects), objects mode (every object size 1). The metric is the miss ratio of
:class:`aicache.sim.cache.Cache` — the same template the simulator and the real engines use
— so a difference between policies here is a difference the engines would see.

Traces are built in memory from the cell's seed (numpy ``default_rng``), so a cell is a
pure function of its params and the grid needs no files.

* ``zipf-A``: ``n_requests`` draws over ``n_objects`` ranks with P(rank i) ∝ i^-A; the
  rank → id mapping is a seeded permutation (ids carry no popularity information).
* ``scan-mix``: a ``zipf-1.0`` stream where 30 % of the requests are replaced by
  non-overlapping sequential scans of ``n_objects/10`` consecutive ids from a disjoint region of ``n_objects`` ids
  (each scan starts at a random offset) — one-hit-wonder bursts that flush recency-only
  policies, the case ARC, S3-FIFO and SIEVE are designed for.

Belady (when registered) is the offline optimum and the lower bound every other policy is
checked against; it is told each request's next-access index before the request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from aicache.experiments.base import Experiment, Figure, Goal, ReportSection, Table

#: Policies compared, in report order; only those registered and importable take part.
POLICIES: tuple[str, ...] = ("lru", "fifo", "clock", "sieve", "s3fifo", "arc", "lfu",
                             "lecar", "2-random", "belady")
TRACES: tuple[str, ...] = ("zipf-0.8", "zipf-1.0", "zipf-1.2", "scan-mix")
SIZES_PCT: tuple[float, ...] = (1.0, 5.0, 10.0, 25.0)
SCAN_FRACTION = 0.3
BOUND = "belady"


def available_policies() -> list[str]:
    """The :data:`POLICIES` that are registered and import cleanly right now."""
    from aicache.policies import EVICTION

    out = []
    for name in POLICIES:
        if name not in EVICTION:
            continue
        try:
            EVICTION.get(name)
        except Exception:  # noqa: BLE001 - a policy module still being written is skipped
            continue
        out.append(name)
    return out


def _zipf_ids(rng: np.random.Generator, n_objects: int, n: int, alpha: float) -> np.ndarray:
    ranks = np.arange(1, n_objects + 1, dtype=np.float64)
    p = ranks ** -alpha
    p /= p.sum()
    rank_of = rng.choice(n_objects, size=n, p=p)
    ids = rng.permutation(n_objects)
    return ids[rank_of].astype(np.int64)


@lru_cache(maxsize=8)
def make_trace(trace: str, seed: int, n_objects: int, n_requests: int) -> np.ndarray:
    """The request ids of ``trace`` (read-only int64 array), deterministic in its args."""
    rng = np.random.default_rng(seed)
    if trace.startswith("zipf-"):
        out = _zipf_ids(rng, n_objects, n_requests, float(trace[5:]))
    elif trace == "scan-mix":
        out = _zipf_ids(rng, n_objects, n_requests, 1.0)
        scan_len = max(1, n_objects // 10)
        n_scans = max(1, int(round(SCAN_FRACTION * n_requests / scan_len)))
        # non-overlapping scans at uniformly random places: sorted gaps, then shifted by
        # the scans before them, so exactly n_scans * scan_len requests are scan requests
        slack = max(0, n_requests - n_scans * scan_len)
        gaps = np.sort(rng.integers(0, slack + 1, size=n_scans))
        starts = gaps + scan_len * np.arange(n_scans)
        for s in starts.tolist():
            first = int(rng.integers(0, n_objects - scan_len + 1))
            out[s:s + scan_len] = n_objects + first + np.arange(scan_len)
    else:
        raise ValueError(f"unknown trace {trace!r}; valid: {', '.join(TRACES)}")
    out.setflags(write=False)
    return out


def next_access(ids: np.ndarray) -> np.ndarray:
    """For each request, the index of the next request to the same id, or -1 (never)."""
    n = ids.shape[0]
    order = np.argsort(ids, kind="stable")
    nxt = np.full(n, -1, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def simulate_miss_ratio(ids: np.ndarray, policy: str, capacity: int, seed: int) -> dict[str, Any]:
    """Replay ``ids`` through ``Cache(capacity, policy)`` in objects mode."""
    import random

    from aicache.policies import make_eviction
    from aicache.sim.cache import Cache

    pol = make_eviction(policy, capacity, rng=random.Random(seed))
    cache = Cache(capacity, pol, size_mode="objects")
    request = cache.request
    keys = ids.tolist()
    if pol.needs_future:
        tell = pol.set_next_access
        for t, (k, nx) in enumerate(zip(keys, next_access(ids).tolist())):
            tell(nx)
            request(k, 1, float(t))
    else:
        for t, k in enumerate(keys):
            request(k, 1, float(t))
    st = cache.stats
    return {"requests": st.requests, "hits": st.hits, "misses": st.requests - st.hits,
            "evictions": st.evictions, "miss_ratio": st.miss_ratio}


class CachePolicies(Experiment):
    name = "cache-policies"
    title = "Eviction policies: miss-ratio curves on Zipf and scan-mix traces"
    reproduces = "libCacheSim-style MRC comparison (SIEVE NSDI'24 / S3-FIFO SOSP'23 setups)"
    full_wall_time = "about 5 min on 2 cores (480 cells of 200k requests, 550 CPU-s)"

    FULL: ClassVar[dict[str, Any]] = {"n_objects": 20_000, "n_requests": 200_000, "seeds": (0, 1, 2),
                                      "traces": TRACES, "sizes": SIZES_PCT}
    QUICK: ClassVar[dict[str, Any]] = {"n_objects": 2_000, "n_requests": 20_000, "seeds": (0,),
                                       "traces": ("zipf-1.0", "scan-mix"), "sizes": (1.0, 10.0, 25.0)}

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        g = self.QUICK if quick else self.FULL
        return [
            {"trace": tr, "size_pct": sz, "policy": pol, "seed": seed,
             "n_objects": g["n_objects"], "n_requests": g["n_requests"]}
            for tr in g["traces"] for seed in g["seeds"] for sz in g["sizes"]
            for pol in available_policies()
        ]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        ids = make_trace(params["trace"], int(params["seed"]), int(params["n_objects"]),
                         int(params["n_requests"]))
        working_set = int(np.unique(ids).shape[0])
        capacity = max(1, int(round(working_set * float(params["size_pct"]) / 100.0)))
        out = simulate_miss_ratio(ids, params["policy"], capacity, int(params["seed"]))
        out.update(working_set=working_set, cache_objects=capacity)
        return out

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import line_chart

        ok = [r for r in rows if "miss_ratio" in r]
        traces = [t for t in TRACES if any(r["trace"] == t for r in ok)]
        figures = []
        for tr in traces:
            sub = [r for r in ok if r["trace"] == tr]
            path = line_chart(sub, x="size_pct", y="miss_ratio", hue="policy",
                              path=Path(outdir) / f"mrc_{tr}.png", title=f"Miss-ratio curve: {tr}",
                              ylabel="miss ratio", xlabel="cache size (% of working set)", logx=True)
            figures.append(Figure(path, f"Miss ratio vs cache size on {tr} (mean over seeds; "
                                        "bars: min–max)."))
        mean = _mean_by(ok, ("trace", "size_pct", "policy"))
        # best non-bound policy per (trace, size)
        best: dict[tuple[Any, Any], float] = {}
        for (tr, sz, pol), mr in mean.items():
            if pol != BOUND:
                best[(tr, sz)] = min(best.get((tr, sz), float("inf")), mr)
        policies = [p for p in POLICIES if any(k[2] == p for k in mean)]
        tables = []
        summary = []
        for pol in policies:
            ratios = [mr / best[(tr, sz)] for (tr, sz, p), mr in mean.items()
                      if p == pol and best.get((tr, sz), 0) > 0]
            wins = sum(1 for (tr, sz, p), mr in mean.items()
                       if p == pol and pol != BOUND and mr == best.get((tr, sz)))
            summary.append({
                "policy": pol,
                "mean miss ratio": _avg([mr for k, mr in mean.items() if k[2] == pol]),
                "mean ratio to best": _avg(ratios),
                "worst ratio to best": max(ratios) if ratios else None,
                "best in": f"{wins}/{len(best)}" if pol != BOUND else "(bound)",
            })
        summary.sort(key=lambda r: (r["policy"] == BOUND, r["mean ratio to best"] or 0))
        tables.append(Table("Summary over traces and sizes", summary,
                            note="ratio to best = miss ratio / lowest miss ratio of any non-Belady "
                                 "policy at the same trace and size (1.0 = best; Belady < 1)."))
        for tr in traces:
            sizes = sorted({k[1] for k in mean if k[0] == tr})
            trows = []
            for pol in policies:
                r: dict[str, Any] = {"policy": pol}
                for sz in sizes:
                    cell = mean.get((tr, sz, pol))
                    b = best.get((tr, sz))
                    r[f"{sz:g}%"] = cell
                    r[f"{sz:g}% ×best"] = cell / b if cell is not None and b else None
                trows.append(r)
            tables.append(Table(f"Miss ratio on {tr}", trows))
        goals: list[Goal] = []
        if BOUND in policies:
            viol = [(k, mr) for k, mr in mean.items() if k[2] != BOUND
                    and (k[0], k[1], BOUND) in mean and mr < mean[(k[0], k[1], BOUND)] - 1e-12]
            goals.append({"goal": "Belady is a lower bound for every policy at every size",
                          "met": not viol,
                          "value": "no violation" if not viol else f"{len(viol)} violations"})
        if "lru" in policies:
            bad = 0
            for tr in traces:
                curve = [mean[(tr, sz, "lru")] for sz in sorted({k[1] for k in mean if k[0] == tr})
                         if (tr, sz, "lru") in mean]
                bad += sum(1 for a, b in zip(curve, curve[1:]) if b > a + 1e-12)
            goals.append({"goal": "LRU's miss ratio never rises with cache size (stack property)",
                          "met": bad == 0, "value": f"{bad} rises"})
        return ReportSection(
            title=self.title,
            description=("Miss ratio of every registered, importable eviction policy on "
                         "synthetic traces (objects mode, sizes as % of distinct objects). "
                         "No published numbers: the seeds do not report this grid; the goals "
                         "check invariants any correct simulator must satisfy."),
            figures=figures, tables=tables, goals=goals)


def _mean_by(rows: Sequence[Mapping[str, Any]], keys: tuple[str, ...]) -> dict[tuple[Any, ...], float]:
    acc: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        acc.setdefault(tuple(r[k] for k in keys), []).append(float(r["miss_ratio"]))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def _avg(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


__all__ = ["CachePolicies", "available_policies", "make_trace", "next_access", "simulate_miss_ratio"]
