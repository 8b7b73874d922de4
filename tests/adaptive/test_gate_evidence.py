"""The default gate's evidence check (``gate_mode="aicache"``, aicache.adaptive.gate) against
the seed's confidence gate (``gate_mode="seed"``):

* the rules on windows whose pattern is known by construction (a stride, a shuffle, a Zipf
  hot set, a stride turning into a shuffle);
* the statistical advisor — the evidence's own classifier — is never contradicted or
  overridden, so with it both gates decide alike, on random windows and on whole runs;
* the harness keeps Chiron safe against bad advice: an advisor that is always wrong with
  full confidence, and ``noisy:P``, leave Chiron within 10% of Chiron with the statistical
  advisor and no slower than the best baseline on W1 and W3, where the seed's gate lets
  the confident lies through;
* ``--gate`` on ``aicache sim datacache``; a bad gate mode is a one-line error.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from functools import cache
from typing import Any

import pytest

from aicache.adaptive.advisor.base import PATTERNS, Advice, DiagnosisRequest
from aicache.adaptive.advisor.oracle import OracleAdvisor
from aicache.adaptive.advisor.statistical import StatisticalAdvisor, score_sequence
from aicache.adaptive.analyzer import tail_length
from aicache.adaptive.controller import ChironParams
from aicache.adaptive.gate import ConfidenceGate, Verdict, weigh_evidence
from aicache.errors import BadInput

TAU = 0.70


def _stride(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def _shuffled(n: int, start: int, rng: random.Random) -> list[int]:
    ids = list(range(start, start + n))
    rng.shuffle(ids)
    return ids


def _zipf(n: int, rng: random.Random, universe: int = 500) -> list[int]:
    return [int(rng.paretovariate(1.2)) % universe for _ in range(n)]


# ------------------------------------------------------------------------- the rules
def test_evidence_is_the_classifiers_view_of_window_and_tail() -> None:
    rng = random.Random(3)
    w = _stride(600) + _shuffled(400, 10_000, rng)
    ev = weigh_evidence(w, False)
    parts = [score_sequence(w), score_sequence(w[len(w) - tail_length(len(w)):])]
    for p in PATTERNS:
        assert ev.against[p] == pytest.approx(min((1 - s.score(p)) * s.reliability for s in parts))
    assert ev.diagnosis == StatisticalAdvisor().diagnose(w, False)
    assert weigh_evidence([], False).diagnosis is None


def test_confident_advice_the_accesses_contradict_is_replaced_by_the_evidence() -> None:
    gate = ConfidenceGate(TAU)
    ev = weigh_evidence(_stride(1000), False)  # a clean stride: sequential, c ~0.96
    assert ev.diagnosis is not None and ev.diagnosis.pattern == "sequential" and ev.confident(TAU)
    d = gate.check(Advice("random", 0.99), ev)
    assert d.verdict is Verdict.CONTRADICTED and not d.accepted
    assert d.pattern == "random" and d.adopted == "sequential" and not d.retry_early
    d = gate.check(Advice("sequential", 0.95), ev)
    assert d.accepted and d.adopted == "sequential"
    # below tau, or no advice at all: the confident evidence is adopted
    assert gate.check(Advice("sequential", 0.40), ev).adopted == "sequential"
    d = gate.check(None, ev)
    assert d.verdict is Verdict.NO_ADVICE and d.adopted == "sequential"
    k = gate.counters
    assert (k.accepted, k.low_confidence, k.no_advice, k.contradicted, k.evidence_adopted) == (1, 1, 1, 1, 3)
    assert k.by_pattern == {"random": 0, "sequential": 1}


def test_where_the_evidence_is_mixed_the_advisor_decides() -> None:
    rng = random.Random(1)
    # a stride turning into a shuffle: the window still supports "sequential"
    w = _stride(700) + _shuffled(300, 100_000, rng)
    ev = weigh_evidence(w, False)
    assert ev.diagnosis is not None and not ev.confident(TAU)
    gate = ConfidenceGate(TAU)
    assert gate.check(Advice("sequential", 0.9), ev).adopted == "sequential"
    assert gate.check(Advice("random", 0.9), ev).adopted == "random"
    d = gate.check(Advice("random", 0.5), ev)
    assert d.verdict is Verdict.LOW_CONFIDENCE and d.adopted is None and d.retry_early
    # "skewed" has no support in either part: contradicted only once the evidence is sure
    assert ev.against["skewed"] >= TAU
    assert gate.check(Advice("skewed", 0.9), ev).adopted == "skewed"


def test_the_seed_mode_is_the_confidence_gate_alone() -> None:
    gate = ConfidenceGate(TAU)
    d = gate.check(Advice("random", 0.99))  # no evidence: the seed's rule
    assert d.accepted and d.adopted == "random"
    d = gate.check(Advice("sequential", 0.5))
    assert d.verdict is Verdict.LOW_CONFIDENCE and d.adopted is None
    assert ChironParams(gate_mode="seed").gate_mode == "seed" and ChironParams().gate_mode == "aicache"
    with pytest.raises(BadInput, match="valid gate modes: aicache, seed"):
        ChironParams(gate_mode="strict")


@pytest.mark.parametrize("seed", range(6))
def test_the_statistical_advisor_is_never_contradicted_or_overridden(seed: int) -> None:
    """Its answer is the evidence's diagnosis: the two gates decide alike on it, whatever the
    window (pure patterns, mixtures in both orders, short windows) and the stale flag."""
    rng = random.Random(seed)
    makers = [
        lambda n: _stride(n, rng.randrange(10_000)),
        lambda n: _shuffled(n, rng.randrange(10_000), rng),
        lambda n: _zipf(n, rng),
        lambda n: _stride(n // 2) + _shuffled(n - n // 2, 50_000, rng),
        lambda n: _zipf(n // 2, rng) + _stride(n - n // 2, 80_000),
        lambda n: _shuffled(n // 3, 0, rng) + _zipf(n - n // 3, rng),
    ]
    stat = StatisticalAdvisor()
    for make in makers:
        for n in (40, 150, 1000):
            w = tuple(make(n))
            for stale in (False, True):
                req = DiagnosisRequest("u", w, {}, _ctx(stale))
                advice = stat.advise(req)
                assert advice is not None
                ev = weigh_evidence(w, stale)
                aicache, seed_gate = ConfidenceGate(TAU).check(advice, ev), ConfidenceGate(TAU).check(advice)
                assert aicache.verdict is not Verdict.CONTRADICTED
                assert aicache.adopted == seed_gate.adopted == (advice.pattern if advice.confidence >= TAU else None)


def _ctx(stale: bool) -> Any:
    from aicache.adaptive.advisor.base import ReviewContext

    return ReviewContext(older_prefix_may_be_stale=stale)


# ------------------------------------------------------------------- whole simulated runs
#: the LLM scenarios' workflows and scales (chiron-advisors, must-show 2)
RUNS = (("W1", 0.05), ("W2", 0.1), ("W3", 0.05))


class AlwaysWrong(OracleAdvisor):
    """Names the pattern after the true one (a wrong one every time) at confidence 1.0: the
    worst advisor the confidence gate can meet, since it never looks unsure."""

    name = "always-wrong"

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        truth = super().advise(request)
        if truth is None:
            return None
        wrong = PATTERNS[(PATTERNS.index(truth.pattern) + 1) % len(PATTERNS)]
        return Advice(wrong, 1.0, "always wrong")


def _chiron(workload: str, scale: float, advisor: Any, gate: str, seed: int = 0) -> dict[str, Any]:
    from aicache.sim.datacache import load_workload, simulate_datacache

    wl = load_workload(workload, scale=scale, seed=0)
    return simulate_datacache(wl, "chiron", None, advisor=advisor, seed=seed,
                              system_params={"gate_mode": gate}).to_dict()


@cache
def _references(workload: str, scale: float) -> tuple[float, float]:
    """(best baseline JCT, Chiron-with-statistical JCT)."""
    from aicache.experiments.chiron import BASELINES
    from aicache.sim.datacache import load_workload, simulate_datacache

    wl = load_workload(workload, scale=scale, seed=0)
    best = min(simulate_datacache(wl, b, None, seed=0).jct_seconds for b in BASELINES)
    return best, float(_chiron(workload, scale, "statistical", "aicache")["jct_seconds"])


@pytest.mark.parametrize("workload,scale", RUNS[::2])
def test_statistical_runs_are_the_same_under_both_gates(workload: str, scale: float) -> None:
    a, s = _chiron(workload, scale, "statistical", "aicache"), _chiron(workload, scale, "statistical", "seed")
    for d in (a, s):
        d.pop("params", None)
        d.get("system_stats", {}).pop("params", None)
    assert a.get("contradicted_advice", 0) == a.get("evidence_adopted", 0) == 0
    assert json.dumps(a, sort_keys=True, default=str).replace('"aicache"', '"seed"') == \
        json.dumps(s, sort_keys=True, default=str)


@pytest.mark.parametrize("workload,scale", RUNS)
def test_an_always_wrong_confident_advisor_cannot_steer_chiron(workload: str, scale: float) -> None:
    best, stat = _references(workload, scale)
    protected = _chiron(workload, scale, AlwaysWrong(), "aicache")
    exposed = _chiron(workload, scale, AlwaysWrong(), "seed")
    # every answer is wrong at c = 1.0: the seed's gate takes them all, ours rejects them
    assert exposed["rejected_advice"] == 0
    assert protected["rejected_advice"] >= protected["advisor_calls"] - 1
    assert protected["contradicted_advice"] == protected["rejected_advice"] > 0
    assert protected["evidence_adopted"] > 0
    assert protected["jct_seconds"] <= 1.10 * stat
    assert protected["jct_seconds"] < exposed["jct_seconds"]
    if workload != "W2":  # on W2 x 0.1 juicefs-adaptive edges out Chiron with any advisor (docs/results)
        assert protected["jct_seconds"] <= best


@pytest.mark.parametrize("p", (0.3, 1.0))
@pytest.mark.parametrize("workload,scale", RUNS)
def test_noisy_advisors_stay_within_ten_percent_of_statistical(workload: str, scale: float, p: float) -> None:
    best, stat = _references(workload, scale)
    for s in (0, 1, 2):
        d = _chiron(workload, scale, f"noisy:{p}", "aicache", seed=s)
        assert d["jct_seconds"] <= 1.10 * stat, (s, d["jct_seconds"], stat)
        if workload != "W2":
            assert d["jct_seconds"] <= best, (s, d["jct_seconds"], best)


# ------------------------------------------------------------------------------- the CLI
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", "sim", "datacache", *args],
                          capture_output=True, text=True)


def test_cli_gate_flag() -> None:
    base = ("--workload", "W1", "--scale", "0.02", "--system", "chiron", "--advisor", "noisy:1.0", "--json")
    runs = {g: json.loads(_cli(*base, "--gate", g).stdout) for g in ("aicache", "seed")}
    assert runs["aicache"]["evidence_adopted"] > 0 and runs["seed"]["evidence_adopted"] == 0
    assert runs["aicache"]["jct_seconds"] < runs["seed"]["jct_seconds"]
    assert json.loads(_cli(*base).stdout)["jct_seconds"] == runs["aicache"]["jct_seconds"]  # the default
    bad = _cli("--workload", "W1", "--scale", "0.02", "--system", "juicefs", "--gate", "seed")
    assert bad.returncode == 2 and "--gate applies to --system chiron" in bad.stderr
