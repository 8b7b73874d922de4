"""Chiron's experiments (the published Figures 11–16), on the datacache simulator.

Every arm runs through :func:`aicache.sim.datacache.simulate_datacache` with the same cost
model (2 ms hit, 250 ms miss + 200 MiB/s per fetch, 16 concurrent prefetches, at most 64
queued) — the baselines and Chiron differ only in their policies. Workloads are the
generators of :mod:`aicache.traces.workflows`; the full versions use the seed's sizes
(``scale=1``), the quick versions a few percent of them.

* ``chiron-e2e`` (Fig. 11/12): W1–W3, T1–T6 × all systems; also W1–W3 with generator
  seeds 1 and 2 and at half scale — workloads nobody looked at while building Chiron.
* ``chiron-micro`` (Fig. 13): W3; eviction with prefetch off (LRU, LeCaR, 2-random,
  Chiron), prefetch with LRU eviction (fixed stride, adaptive readahead, SFP-128, Chiron).
* ``chiron-ablation`` (Fig. 14): gate on/off under ``noisy:0.3``; feedback reflection
  on (45 s) / off (30 s); structured statistics in the prompt on/off (prompt tokens).
* ``chiron-1tb`` (Fig. 16): W1 at ~1 TB (scale 700), cache 10/25/50/85 %; scale-50 and
  scale-100 tiers (``--select scale=100``) are the sizes that complete on 2 cores.
* ``chiron-diagnosis``: the statistical advisor on phase-labelled windows of all nine
  workloads, with a confusion matrix.

Token counts of the offline advisors come from :class:`PromptCountingAdvisor`: it builds
the exact prompts the OpenAI advisor would send and counts them with the local model's
tokenizer, or a deterministic estimate where that is not installed
(:mod:`aicache.adaptive.advisor.tokens`; rows say which in ``tokens_counted_by``), so
token-cost comparisons run offline and for free; a run recorded against a real LLM
(``record:``) replays with the server's usage numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from aicache.adaptive.advisor.base import PATTERNS, Advice, Advisor, AdvisorSpec, DiagnosisRequest
from aicache.adaptive.advisor.tokens import TokenCounter, default_counter
from aicache.experiments.base import Experiment, Figure, Goal, ReportSection, Table

BASELINES = ("nocache", "juicefs", "alluxio", "juicefs-adaptive")
#: ``chiron-seed`` = Chiron with the seed's executor table as written (docs/design/chiron.md),
#: reported beside ours
E2E_ARMS = (*BASELINES, "chiron", "chiron-seed", "clairvoyant")
WORKFLOWS = ("W1", "W2", "W3")
TASKS = ("T1", "T2", "T3", "T4", "T5", "T6")

class PromptCountingAdvisor(Advisor):
    """Wraps an advisor; charges the tokens of the prompts an LLM advisor would be sent
    (with or without the structured statistics) and of the compact JSON answer."""

    name: ClassVar[str] = "counting"

    def __init__(self, inner: Advisor, include_stats: bool = True, tokens: TokenCounter | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.include_stats = include_stats
        self.expected_latency_s = inner.expected_latency_s
        self.tokens = tokens or default_counter()

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        from aicache.adaptive.prompt import format_advice, prompts_for

        advice = self.inner.advise(request)
        tin = self.tokens.prompt_tokens(*prompts_for(request, self.include_stats))
        tout = self.tokens.text_tokens(format_advice(advice)) if advice is not None else 0
        self.counters.calls += 1
        self.counters.input_tokens += tin
        self.counters.output_tokens += tout
        if advice is None:
            return None
        return Advice(advice.pattern, advice.confidence, advice.reason, tin, tout, advice.latency_s)


@lru_cache(maxsize=4)
def _workload(name: str, scale: float, seed: int, variant: str | None = None) -> Any:
    from aicache.sim.datacache import load_workload, workload_from_workflow
    from aicache.traces.heldout import SPECS as HELDOUT, generate_heldout

    if name in HELDOUT:
        return workload_from_workflow(generate_heldout(name, scale, seed))
    return load_workload(name, scale=scale, seed=seed, variant=variant)


def _advisor(spec: str, seed: int) -> Any:
    """``counting`` / ``counting-nostats`` = statistical advisor with prompt-token counting."""
    if spec.startswith("counting"):
        from aicache.adaptive.advisor.statistical import StatisticalAdvisor

        return PromptCountingAdvisor(StatisticalAdvisor(), include_stats=spec == "counting")
    return spec


def tokens_counted_by(advisor: AdvisorSpec | None) -> str | None:
    """What a row's advisor token counts come from: a :class:`PromptCountingAdvisor`'s counter
    (``tokenizer:MODEL`` or ``estimate``), the endpoint's ``usage`` for a live or replayed
    LLM, nothing for an advisor that is charged no tokens."""
    if isinstance(advisor, PromptCountingAdvisor):
        return advisor.tokens.source
    spec = advisor if isinstance(advisor, str) else str(getattr(advisor, "name", ""))
    if spec.split(":")[0] in ("openai", "replay", "record"):
        return "server usage"
    return None


def token_note(rows: Iterable[Mapping[str, Any]]) -> str:
    """One sentence saying what the rows' advisor tokens were counted with."""
    said = {"tokenizer:gemma3-270m": "Gemma 3 270M's tokenizer over the prompt as the local server renders it "
                                     "(the server's own prompt count) and over the compact answer",
            "estimate": "an estimate (one token per word, number or punctuation mark; the llm extra is not installed)",
            "server usage": "the server's own usage"}
    found = sorted({str(r["tokens_counted_by"]) for r in rows if r.get("tokens_counted_by")})
    return ("Tokens counted with " + "; ".join(said.get(f, f) for f in found) + ".") if found else ""


def simulate_cell(params: Mapping[str, Any]) -> dict[str, Any]:
    """One simulation: ``workload, scale, seed, system`` (+ ``cache`` size, ``advisor``,
    ``chiron`` params dict, ``hit_ms``/``miss_ms``). Returns flat metrics."""
    from aicache.sim.datacache import simulate_datacache

    wl = _workload(params["workload"], float(params.get("scale", 1.0)), int(params.get("seed", 0)),
                   params.get("variant"))
    t0 = time.perf_counter()
    sp = dict(params.get("chiron", {})) if params["system"] == "chiron" else {}
    advisor = _advisor(params.get("advisor", "statistical"), int(params.get("seed", 0)))
    res = simulate_datacache(
        wl, params["system"], params.get("cache"), advisor=advisor,
        seed=int(params.get("seed", 0)), hit_ms=params.get("hit_ms"), miss_ms=params.get("miss_ms"),
        system_params=sp)
    wall = time.perf_counter() - t0
    d = res.to_dict()
    out: dict[str, Any] = {k: d[k] for k in (
        "cache_size_bytes", "requests", "chr", "jct_seconds", "prefetch_accuracy", "prefetched_blocks",
        "remote_bytes", "advisor_calls", "advisor_tokens", "diagnosis_accuracy", "switches",
        "late_prefetch_reads")}
    out["advisor_input_tokens"] = d.get("advisor_input_tokens", 0)
    out["tokens_counted_by"] = tokens_counted_by(advisor) if params["system"] == "chiron" else None
    out["recovery_s_mean"] = _mean(d.get("recovery_s") or [])
    out["wall_seconds"] = round(wall, 3)
    out["reads_per_second"] = round(res.requests / wall) if wall > 0 else None
    for p in res.phases:
        out[f"chr[{p.name}]"] = p.chr
    return out


def _pct(a: float, b: float) -> float:
    """Relative change of ``a`` against ``b`` in percent (negative = lower)."""
    return (a / b - 1.0) * 100.0 if b else float("nan")


def _group(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    out: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        if "jct_seconds" not in r:
            continue
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return out


def _mean(xs: Sequence[float | None]) -> float | None:
    """The mean of the values present (None and NaN left out); None when there are none."""
    vals = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(vals) / len(vals) if vals else None


def _mean_of(xs: Sequence[float]) -> float:
    """The mean of a column every completed row carries (JCT, CHR); NaN for no rows."""
    m = _mean(xs)
    return float("nan") if m is None else m


def completed(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of cells that ran to the end, in order (a failed cell's row has no metrics)."""
    return [r for r in rows if "jct_seconds" in r]


def best_baseline(rows: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The :data:`BASELINES` row of ``rows`` with the lowest JCT, the first in ``rows``' order
    on a tie; None when ``rows`` holds no baseline."""
    base = [r for r in rows if r["system"] in BASELINES]
    return min(base, key=lambda r: r["jct_seconds"]) if base else None


def top_chr_baseline(rows: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The :data:`BASELINES` row of ``rows`` with the highest CHR (first on a tie), or None."""
    base = [r for r in rows if r["system"] in BASELINES]
    return max(base, key=lambda r: r["chr"]) if base else None


# -- Fig. 11/12 -----------------------------------------------------------------------------------
class EndToEnd(Experiment):
    name = "chiron-e2e"
    title = "Chiron end to end: W1–W3 and T1–T6 against the baselines"
    reproduces = "Chiron Fig. 11/12"
    full_wall_time = "about 3-4 min on 2 cores (259 cells, scale 1.0)"

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        scale = 0.02 if quick else 1.0
        out: list[dict[str, Any]] = []
        for w in (*WORKFLOWS, *TASKS):
            for s in E2E_ARMS:
                out.append({"workload": w, "system": s, "scale": scale, "seed": 0, "check": "main"})
        if not quick:
            for w in WORKFLOWS:
                for seed, sc in ((1, 1.0), (2, 1.0), (3, 0.5)):
                    for s in E2E_ARMS:
                        out.append({"workload": w, "system": s, "scale": sc, "seed": seed, "check": "untuned"})
            for w in TASKS:  # the T goal ("never") is judged on every seed, not on seed 0 alone
                for seed in (1, 2, 3):
                    for s in E2E_ARMS:
                        out.append({"workload": w, "system": s, "scale": 1.0, "seed": seed, "check": "untuned"})
            for s in E2E_ARMS:
                out.append({"workload": "W3", "variant": "captions", "system": s, "scale": 1.0, "seed": 0,
                            "check": "untuned"})
        return out

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        return simulate_cell(params)

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        groups = _group(rows, ("workload", "variant", "seed", "scale"))
        summary: list[dict[str, Any]] = []
        detail: list[dict[str, Any]] = []
        norm_rows: list[dict[str, Any]] = []
        goals_wf: list[bool] = []
        goals_t: list[bool] = []
        goals_var: list[bool] = []
        for (w, variant, seed, scale), rs in groups.items():
            w_label = f"{w}:{variant}" if variant else w
            by = {r["system"]: r for r in rs}
            ref = by.get("juicefs", {}).get("jct_seconds")
            for s in E2E_ARMS:
                if s in by:
                    r = by[s]
                    detail.append({"workload": w_label, "seed": seed, "scale": scale, "system": s,
                                   "CHR": r["chr"], "JCT (s)": r["jct_seconds"],
                                   "JCT / JuiceFS": r["jct_seconds"] / ref if ref else None,
                                   "advisor calls": r["advisor_calls"], "switches": r["switches"]})
                    if seed == 0 and not variant:
                        norm_rows.append({"workload": w, "system": s, "chr": r["chr"],
                                          "jct_norm": r["jct_seconds"] / ref if ref else None})
            base = [by[b] for b in BASELINES if b in by]
            best_jct, best_chr = best_baseline(base), top_chr_baseline(base)
            if "chiron" not in by or best_jct is None or best_chr is None:
                continue
            ch = by["chiron"]
            red = -_pct(ch["jct_seconds"], best_jct["jct_seconds"])
            gap = _pct(ch["jct_seconds"], by["clairvoyant"]["jct_seconds"]) if "clairvoyant" in by else None
            cs = by.get("chiron-seed")
            summary.append({"workload": w_label, "seed": seed, "scale": scale,
                            "chiron CHR": ch["chr"], "best baseline CHR": best_chr["chr"],
                            "best baseline (JCT)": best_jct["system"],
                            "chiron JCT reduction vs best %": red,
                            "seed executors CHR": cs["chr"] if cs else None,
                            "seed executors JCT reduction vs best %":
                                -_pct(cs["jct_seconds"], best_jct["jct_seconds"]) if cs else None,
                            "chiron above clairvoyant JCT %": gap,
                            "diagnosis accuracy": ch["diagnosis_accuracy"],
                            "mean recovery (s)": ch.get("recovery_s_mean")})
            if variant:  # a generator variant beyond the seed's workloads: reported apart
                goals_var.append(ch["chr"] >= best_chr["chr"] and red >= 14.0)
            elif w in WORKFLOWS:
                goals_wf.append(ch["chr"] >= best_chr["chr"] and red >= 14.0)
            else:
                # at most 3% slower per run ("never > 2% slower" would sit inside T5's
                # seed-to-seed spread); the mean bound over seeds 0-9 is chiron-heldout's
                goals_t.append(red >= -3.0)
        figures = []
        if norm_rows:
            p1 = bar_chart([r for r in norm_rows if r["system"] != "nocache"], "workload", "chr", "system",
                           Path(outdir) / "e2e_chr.png", title="CHR (seed 0)", ylabel="CHR")
            p2 = bar_chart(norm_rows, "workload", "jct_norm", "system", Path(outdir) / "e2e_jct.png",
                           title="JCT normalised to JuiceFS (seed 0)", ylabel="JCT / JuiceFS")
            figures = [Figure(p1, "Block-level cache hit ratio per workload and system (Fig. 11/12 left)."),
                       Figure(p2, "Job completion time normalised to JuiceFS (Fig. 11/12 right).")]
        def goal(text: str, runs: list[bool]) -> Goal:
            # met None = not evaluated (e.g. the demo's W1-only filter has no T runs)
            return {"goal": text, "met": all(runs) if runs else None,
                    "value": f"{sum(runs)}/{len(runs)} runs" if runs else "not run"}

        goals = [
            goal("W1–W3: chiron has the highest CHR and JCT >= 14% below the best baseline", goals_wf),
            goal("T1–T6: no run slower than 1.03 × the best baseline's JCT", goals_t),
        ]
        if goals_var:
            goals.append(goal("variants (not in the seed, not a goal): the same W1–W3 bar", goals_var))
        return ReportSection(
            title=self.title,
            description=("Same cost model and fetch budget for every system. Baselines: nocache, "
                         "JuiceFS (readahead + 2-random), Alluxio (LRU), JuiceFS-Adaptive (SFP + LeCaR); "
                         "chiron-seed = Chiron with the seed's executors (eager removes a block once read, "
                         "LRU for skewed, no prefetch for random, no shape reflection), not a baseline; "
                         "clairvoyant = Belady + perfect prefetch, the upper bound. Rows with seed 1–3 "
                         "(seed 3 at half scale) and W3:captions (a caption sidecar file per image) are generator "
                         "variants not used while building Chiron; T1–T6 also run on seeds 1–3, and their goal "
                         "counts every seed."),
            figures=figures,
            tables=[Table("Chiron vs the best baseline", summary,
                          note="reduction > 0 means chiron is faster; 'above clairvoyant' is chiron's gap "
                               "to the upper bound."),
                    Table("All systems", detail)],
            published=[{"workload": "W1", "chiron JCT vs best baseline": "-41.2%"},
                       {"workload": "W2", "chiron JCT vs best baseline": "-18.8%"},
                       {"workload": "W3", "chiron JCT vs best baseline": "-14.3%"},
                       {"workload": "T1–T6", "chiron JCT vs best baseline": "-5.22% mean on 4 of 6, parity on T5/T6"}],
            goals=goals)


# -- Fig. 13 ---------------------------------------------------------------------------------------
#: arm -> (system, chiron overrides)
MICRO_ARMS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "LRU": ("eviction", "lru+none", {}),
    "LeCaR": ("eviction", "lecar+none", {}),
    "2-random": ("eviction", "2-random+none", {}),
    "Chiron (evict)": ("eviction", "chiron", {"prefetch": "none"}),
    "Fixed": ("prefetch", "lru+stride-fixed", {}),
    "Adaptive": ("prefetch", "lru+readahead", {}),
    "SFP-128": ("prefetch", "lru+sfp-128", {}),
    "Chiron (prefetch)": ("prefetch", "chiron", {"eviction": "lru"}),
}


class Micro(Experiment):
    name = "chiron-micro"
    title = "Chiron micro-benchmarks on W3: eviction (prefetch off) and prefetch (LRU eviction)"
    reproduces = "Chiron Fig. 13"
    full_wall_time = "about 10 s (8 cells, scale 1.0)"

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        scale = 0.02 if quick else 1.0
        return [{"workload": "W3", "arm": a, "scale": scale, "seed": 0} for a in MICRO_ARMS]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        group, system, over = MICRO_ARMS[params["arm"]]
        out = simulate_cell({**params, "system": system, "chiron": over})
        out["group"] = group
        return out

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        ok = completed(rows)
        tables, figures = [], []
        goals: list[Goal] = []
        for group in ("eviction", "prefetch"):
            rs = [r for r in ok if r["group"] == group]
            if not rs:
                continue
            ch = [r for r in rs if r["arm"].startswith("Chiron")]
            others = [r for r in rs if not r["arm"].startswith("Chiron")]
            best = min(others, key=lambda r: r["jct_seconds"]) if others else None
            tables.append(Table(f"{group} arms", [
                {"arm": r["arm"], "CHR": r["chr"], "JCT (s)": r["jct_seconds"],
                 "JCT vs best other %": _pct(r["jct_seconds"], best["jct_seconds"]) if best else None,
                 "prefetch accuracy": r["prefetch_accuracy"]} for r in rs]))
            p = bar_chart(rs, "arm", "jct_seconds", None, Path(outdir) / f"micro_{group}.png",
                          title=f"W3 {group}: JCT", ylabel="JCT (s)")
            figures.append(Figure(p, f"JCT of the {group} arms on W3 (Fig. 13)."))
            if ch and best:
                goals.append({"goal": f"{group}: chiron highest CHR and lowest JCT",
                              "met": ch[0]["chr"] >= max(r["chr"] for r in others)
                              and ch[0]["jct_seconds"] <= best["jct_seconds"],
                              "value": f"JCT {_pct(ch[0]['jct_seconds'], best['jct_seconds']):+.1f}% vs {best['arm']}"})
        return ReportSection(
            title=self.title, figures=figures, tables=tables, goals=goals,
            description="Eviction arms run with prefetching disabled (Chiron: its admission/eviction "
                        "executors, no prefetcher); prefetch arms run with LRU eviction and always-admit "
                        "(Chiron: its prefetchers only).",
            published=[{"arm": "eviction", "CHR": "Chiron 40.74%, LeCaR 29.60%, 2-random 23.20%, LRU 18.44%",
                        "JCT (s)": "Chiron 5,315; 2-random 6,454; LRU 6,932; LeCaR 7,148 (-17.65%)"},
                       {"arm": "prefetch", "CHR": "Chiron 24.19%, Fixed 18.45%, SFP-128 18.44%, Adaptive 18.43%",
                        "JCT (s)": "Chiron 5,762; Adaptive 6,520; SFP-128 6,813; Fixed 6,888 (-11.63%)"}])


# -- Fig. 14 ---------------------------------------------------------------------------------------
class Ablation(Experiment):
    name = "chiron-ablation"
    title = "Chiron ablations: confidence gate, feedback reflection, structured statistics"
    reproduces = "Chiron Fig. 14"
    full_wall_time = "about 10 s (14 cells)"

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        seeds = (0, 1) if quick else (0, 1, 2, 3, 4)
        fast = 0.01 if quick else 0.1  # the seed's faster-switching variant: 1/10 of the reads
        scale = 0.02 if quick else 1.0
        out: list[dict[str, Any]] = []
        for seed in seeds:
            # "seed" = the seed's confidence gate (the figure's "on"), "aicache" = ours with
            # the evidence check (the default), "off" = no gate
            for gate in ("seed", "aicache", "off"):
                out.append({"study": "gate", "workload": "W1", "scale": fast, "seed": seed,
                            "advisor": "noisy:0.3", "gate": gate})
        for refl in (True, False):
            out.append({"study": "reflection", "workload": "W1", "scale": scale, "seed": 0,
                        "advisor": "counting", "reflection": refl})
        for stats in (True, False):
            out.append({"study": "statistics", "workload": "W3", "scale": scale, "seed": 0,
                        "advisor": "counting" if stats else "counting-nostats", "statistics": stats})
        return out

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        over: dict[str, Any] = {}
        if params["study"] == "gate":
            over["gate"] = params["gate"] != "off"
            over["gate_mode"] = "aicache" if params["gate"] == "aicache" else "seed"
        if params["study"] == "reflection":
            over["reflection"] = bool(params["reflection"])
        return simulate_cell({**params, "system": "chiron", "chiron": over})

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        ok = completed(rows)
        tables, figures = [], []
        goals: list[Goal] = []
        gate = [r for r in ok if r["study"] == "gate"]
        if gate:
            rs: list[dict[str, Any]] = []
            for mode in ("seed", "off", "aicache"):
                g = [r for r in gate if r["gate"] == mode]
                rs.append({"gate": {"seed": "on (seed's)", "off": "off", "aicache": "aicache (+ evidence)"}[mode],
                           "runs": len(g), "CHR": _mean([r["chr"] for r in g]),
                           "JCT (s)": _mean([r["jct_seconds"] for r in g]),
                           "switches": _mean([r["switches"] for r in g])})
            tables.append(Table("Confidence gate under noisy:0.3 (W1, 1/10 reads per phase; mean over seeds)", rs))
            figures.append(Figure(bar_chart(gate, "gate", "chr", None, Path(outdir) / "ablation_gate.png",
                                            title="CHR with/without the gate", ylabel="CHR"),
                                  "CHR with and without the confidence gate (mean, min–max over seeds)."))
            for gated in (rs[0], rs[2]):
                if gated["CHR"] is not None and rs[1]["CHR"]:
                    goals.append({"goal": f"gate {gated['gate']} raises CHR under a noisy advisor",
                                  "met": gated["CHR"] > rs[1]["CHR"],
                                  "value": f"{_pct(gated['CHR'], rs[1]['CHR']):+.1f}% relative"})
        refl = {r["reflection"]: r for r in ok if r["study"] == "reflection"}
        if len(refl) == 2:
            on, off = refl[True], refl[False]
            tables.append(Table("Feedback reflection (W1): routine 45 s with reflection vs 30 s without", [
                {"reflection": k, "advisor calls": r["advisor_calls"], "tokens": r["advisor_tokens"],
                 "CHR": r["chr"], "JCT (s)": r["jct_seconds"]} for k, r in (("on", on), ("off", off))]))
            goals.append({"goal": "reflection: fewer tokens at (about) equal CHR",
                          "met": on["advisor_tokens"] < off["advisor_tokens"] and on["chr"] >= off["chr"] - 0.01,
                          "value": f"tokens {_pct(on['advisor_tokens'], off['advisor_tokens']):+.1f}%, "
                                   f"CHR {on['chr'] - off['chr']:+.4f}"})
        st = {r["statistics"]: r for r in ok if r["study"] == "statistics"}
        if len(st) == 2:
            tables.append(Table("Structured statistics in the prompt (W3): prompt tokens", [
                {"statistics": "on" if k else "off", "advisor calls": r["advisor_calls"],
                 "prompt tokens": r["advisor_input_tokens"],
                 "prompt tokens / call": r["advisor_input_tokens"] / max(1, r["advisor_calls"]),
                 "CHR": r["chr"]} for k, r in ((True, st[True]), (False, st[False]))],
                note="Offline: the statistical advisor decides the same either way, so only the prompt "
                     "cost differs here; the effect of statistics on an LLM's diagnosis needs a transcript "
                     "recorded against a real LLM (record:FILE:openai), replayed with replay:FILE."))
        return ReportSection(
            title=self.title, figures=figures, tables=tables, goals=goals,
            description="Gate: oracle advisor lying 30% of the time (noisy:0.3), the seed's confidence gate "
                        "on/off, and our default gate (confidence + evidence check). Reflection: "
                        "routine reviews every 30 s without, 45 s with CHR-anomaly reviews; tokens = the "
                        "prompts an LLM would have been sent. Statistics: prompt size with and without part 2. "
                        + token_note(ok),
            published=[{"ablation": "statistics", "seed": "without: diagnosis F1 -45%, CHR -43%"},
                       {"ablation": "gate", "seed": "CHR 30.24% -> 34.05% (+12.6% rel.), JCT 1,838.5 -> 1,799.4 s"},
                       {"ablation": "reflection", "seed": "tokens 122.5K -> 88.1K (-28.1%) at equal CHR/JCT"}])


# -- Fig. 16 ---------------------------------------------------------------------------------------
class OneTB(Experiment):
    name = "chiron-1tb"
    title = "Chiron at ~1 TB: the ResNet-50 workflow (W1 x 700), hit 2 ms, miss 250 ms"
    reproduces = "Chiron Fig. 16"
    full_wall_time = ("scale 700 (~977 GiB, 51.2 M reads per cell), measured 2026-11-29 on 2 shared "
                      "cores: alluxio 281-803 s, juicefs 405-979 s, chiron 639-1,170 s, "
                      "juicefs-adaptive 1,212-1,842 s per cell (10-14 GB RAM per juicefs-adaptive "
                      "worker: run at most two cells at a time on 24 GB); all 16 cells 4.1 h of "
                      "cell time, ~2.1 h on 2 cores. Scale 100 (--select scale=100, ~140 GiB, "
                      "7.31 M reads per cell): 14.5 min on 2 idle cores (chiron 179-216 s per cell)")
    SIZES = (10, 25, 50, 85)
    ARMS = ("juicefs", "alluxio", "juicefs-adaptive", "chiron")
    #: Tiers: 50 (70 GiB, 3.66 M reads per cell) and 100 (140 GiB, 7.31 M) complete within
    #: ~30 min on 2 cores (``--select scale=50``); 700 is the seed's ~1 TB (977 GiB, 51.2 M).
    SCALES = (50.0, 100.0, 700.0)

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        scales = (0.05,) if quick else self.SCALES
        return [{"workload": "W1", "system": s, "cache": f"{pct}%", "cache_pct": pct, "scale": scale,
                 "seed": 0, "hit_ms": 2.0, "miss_ms": 250.0}
                for scale in scales for pct in self.SIZES for s in self.ARMS]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        return simulate_cell(params)

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import line_chart

        ok = completed(rows)
        by = _group(ok, ("scale", "cache_pct"))
        table, norm = [], []
        goals_met: dict[float, list[bool]] = {}
        top = max((r["scale"] for r in ok), default=None)  # the figure shows the largest scale run
        for (scale, pct), rs in sorted(by.items()):
            d = {r["system"]: r for r in rs}
            ref = d.get("juicefs", {}).get("jct_seconds")
            base = [d[s] for s in self.ARMS if s != "chiron" and s in d]
            if scale == top:
                for r in rs:
                    norm.append({"cache_pct": pct, "system": r["system"], "chr": r["chr"],
                                 "jct_norm": r["jct_seconds"] / ref if ref else None})
            if "chiron" in d and base:
                ch = d["chiron"]
                bc = max(r["chr"] for r in base)
                bj = min(r["jct_seconds"] for r in base)
                lacking = [s for s in self.ARMS if s not in d]
                if not lacking:  # a size is judged only against all of its baselines
                    goals_met.setdefault(scale, []).append(ch["chr"] >= bc and ch["jct_seconds"] <= bj)
                table.append({"scale": scale, "cache %": pct,
                              "arms missing": ", ".join(lacking) or "-",
                              "chiron CHR": ch["chr"], "best baseline CHR": bc,
                              "CHR gain (pp)": (ch["chr"] - bc) * 100,
                              "JCT vs best %": _pct(ch["jct_seconds"], bj),
                              "reads": ch["requests"], "wall s (chiron)": ch["wall_seconds"]})
        figs = []
        if norm:
            figs.append(Figure(line_chart(norm, "cache_pct", "chr", "system", Path(outdir) / "1tb_chr.png",
                                          title=f"CHR vs cache size (W1 x {top:g})", xlabel="cache (% of dataset)"),
                               "CHR at 10/25/50/85% of the dataset (Fig. 16 left)."))
            figs.append(Figure(line_chart(norm, "cache_pct", "jct_norm", "system", Path(outdir) / "1tb_jct.png",
                                          title=f"JCT / JuiceFS (W1 x {top:g})", xlabel="cache (% of dataset)"),
                               "JCT normalised to JuiceFS (Fig. 16 right)."))
        goals: list[Goal] = []
        for scale, met in sorted(goals_met.items()):
            done = {pct for (sc, pct), rs in by.items() if sc == scale
                    and {r["system"] for r in rs} >= set(self.ARMS)}
            missing = [p for p in self.SIZES if p not in done]  # incl. sizes lacking an arm
            # a size whose cells are not all stored yet (a partial run) is not evaluated
            value = f"{sum(met)}/{len(met)} sizes" + (
                f" ({', '.join(f'{p}%' for p in missing)} not run yet)" if missing else "")
            goals.append({"goal": f"chiron best CHR and JCT at every cache size (W1 x {scale:g})",
                          "met": (False if not all(met) else None if missing else bool(met)),
                          "value": value})
        return ReportSection(
            title=self.title, figures=figs,
            tables=[Table("Chiron vs the best baseline per cache size", table)],
            # no size with chiron and a baseline stored (e.g. a --select run of one arm):
            # nothing to judge, which is not the same as a failed goal
            goals=goals or [{"goal": "chiron best CHR and JCT at every cache size", "met": None,
                             "value": "no size has chiron and its baselines stored"}],
            description=(f"Full version: scale 700 (~977 GiB), with scale-50 and scale-100 tiers (~70 and "
                         f"~140 GiB) that complete on 2 cores. Wall time: {self.full_wall_time}."),
            published=[{"metric": "CHR gain vs best baseline", "seed": "+3.61 to +8.79 pp at every size"},
                       {"metric": "JCT vs best baseline", "seed": "-5.72% to -16.69% at every size"},
                       {"metric": "advisor delay", "seed": "< 1.3 s, off the critical path"}])


# -- diagnosis ------------------------------------------------------------------------------------
class _PhaseTruth:
    """Ground truth for :func:`diagnose_windows`: every window lies inside one phase."""

    label: str | None = None

    def label_for(self, request: DiagnosisRequest) -> str | None:
        return self.label


def diagnose_windows(workload: str, scale: float, seed: int, window: int = 1000,
                     step: int = 500, advisor: str = "statistical") -> dict[str, Any]:
    """Slide a ``window`` over every phase (windows wholly inside the phase, every ``step``
    reads) and ask the advisor. Returns accuracy for the first window of each phase and for
    the later ones, and the confusion counts ``true->predicted`` (``none`` = no advice)."""
    from aicache.adaptive.advisor.base import ReviewContext
    from aicache.adaptive.advisor.registry import make_advisor
    from aicache.adaptive.analyzer import analyze, tail_length
    from aicache.traces.gen import WORKFLOWS

    from aicache.adaptive.advisor.oracle import bind_truth

    tr = WORKFLOWS.get(workload)(scale, seed)
    adv = make_advisor(advisor, seed=seed)
    truth = _PhaseTruth()
    bind_truth(adv, truth)  # an oracle/noisy advisor answers from the phase being diagnosed
    conf: dict[str, int] = {}
    first_ok = first_n = later_ok = later_n = 0
    ids = tr.obj_id
    for ph in tr.phases:
        truth.label = ph.pattern
        w = min(window, ph.end - ph.start)
        starts = range(ph.start, ph.end - w + 1, step)
        for k, s in enumerate(starts):
            win = tuple(ids[s:s + w].tolist())
            req = DiagnosisRequest(tr.dataset.name, win, analyze(win),
                                   ReviewContext(recent_tail_length=tail_length(len(win))))
            a = adv.advise(req)
            pred = a.pattern if a is not None else "none"
            conf[f"{ph.pattern}->{pred}"] = conf.get(f"{ph.pattern}->{pred}", 0) + 1
            ok = pred == ph.pattern
            if k * step < w:  # overlaps the phase's first window
                first_ok += ok
                first_n += 1
            else:
                later_ok += ok
                later_n += 1
    adv.close()
    return {"windows": first_n + later_n, "first_windows": first_n,
            "accuracy_first": first_ok / first_n if first_n else None,
            "accuracy_after_first": later_ok / later_n if later_n else None,
            "accuracy_all": (first_ok + later_ok) / max(1, first_n + later_n),
            **{f"n[{k}]": v for k, v in sorted(conf.items())}}


def _f1(conf: Mapping[str, Mapping[str, int]], pattern: str) -> float | None:
    """F1 of ``pattern`` from a confusion table ``true -> predicted -> count``."""
    tp = conf.get(pattern, {}).get(pattern, 0)
    fn = sum(conf.get(pattern, {}).values()) - tp
    fp = sum(row.get(pattern, 0) for t, row in conf.items() if t != pattern)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None


class Diagnosis(Experiment):
    name = "chiron-diagnosis"
    title = "Statistical advisor: diagnosis accuracy on phase-labelled windows"
    reproduces = "Chiron §6.3 (diagnosis quality)"
    full_wall_time = "about 15-30 s (9 workloads x 2 seeds, scale 1.0)"

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        scale = 0.05 if quick else 1.0
        seeds = (0,) if quick else (0, 1)
        return [{"workload": w, "scale": scale, "seed": s} for w in (*WORKFLOWS, *TASKS) for s in seeds]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        return diagnose_windows(params["workload"], float(params["scale"]), int(params["seed"]))

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        from aicache.experiments.plots import bar_chart

        ok = [r for r in rows if "windows" in r]
        per = [{"workload": r["workload"], "seed": r["seed"], "windows": r["windows"],
                "accuracy (first window)": r["accuracy_first"],
                "accuracy (after first)": r["accuracy_after_first"]} for r in ok]
        conf: dict[str, dict[str, int]] = {}
        for r in ok:
            for k, v in r.items():
                if k.startswith("n[") and "->" in k:
                    t, p = k[2:-1].split("->")
                    conf.setdefault(t, {}).setdefault(p, 0)
                    conf[t][p] += v
        cols = [*PATTERNS, "none"]
        matrix = [{"true \\ predicted": t, **{p: conf.get(t, {}).get(p, 0) for p in cols},
                   "F1": _f1(conf, t)} for t in PATTERNS if t in conf]
        later = sum((r["accuracy_after_first"] or 0) * (r["windows"] - r["first_windows"]) for r in ok)
        n_later = sum(r["windows"] - r["first_windows"] for r in ok)
        acc = later / n_later if n_later else None
        figs = []
        if ok:
            figs.append(Figure(bar_chart(ok, "workload", "accuracy_after_first", None,
                                         Path(outdir) / "diagnosis_accuracy.png",
                                         title="Accuracy after the first window", ylabel="accuracy"),
                               "Statistical advisor accuracy per workload (windows after each phase's first)."))
        return ReportSection(
            title=self.title, figures=figs,
            tables=[Table("Accuracy per workload", per), Table("Confusion matrix (all workloads)", matrix)],
            goals=[{"goal": ">= 95% accuracy after the first window of each phase", "met": acc is not None and acc >= 0.95,
                    "value": f"{acc:.3f}" if acc is not None else "n/a"}],
            description="Windows of 1,000 reads, every 500 reads, wholly inside one phase; 'first window' = "
                        "windows overlapping a phase's first 1,000 reads.",
            published=[{"note": "the seed reports LLM diagnosis F1 only relative to ablations (-45% without statistics)"}])
