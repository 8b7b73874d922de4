"""Advisors (statistical, oracle, noisy), the spec parser, the confidence gate, feedback
reflection and the review schedule, the prompt and the diagnosis confusion matrix."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.adaptive.advisor import PATTERNS, Advice, DiagnosisRequest, ReviewContext, make_advisor
from aicache.adaptive.advisor.base import TRIGGER_CHR_ANOMALY, TRIGGER_PERIODIC, Advisor
from aicache.adaptive.advisor.oracle import NoisyAdvisor, OracleAdvisor, bind_truth
from aicache.adaptive.advisor.replay import RecordingAdvisor, ReplayAdvisor
from aicache.adaptive.advisor.statistical import KAPPA_PARETO, StatisticalAdvisor, concentration_from
from aicache.adaptive.analyzer import analyze
from aicache.adaptive.feedback import FeedbackReflector, ReviewParams, ReviewScheduler
from aicache.adaptive.gate import ConfidenceGate, Verdict
from aicache.adaptive.metrics import diagnosis_confusion
from aicache.adaptive.prompt import build_runtime_prompt, parse_advice, system_prompt
from aicache.errors import BadInput

TAU = 0.70
N = 1000  # the seed's window

# ---------------------------------------------------------------------------- generators
# Each generator is written from what the pattern *is*, with its own sizes, so that the
# classifier is checked across parameterisations rather than fitted to one.

Gen = Callable[[np.random.Generator], list[int]]


def stride(step: int, start: int = 0) -> Gen:
    return lambda rng: [start + i * step for i in range(N)]


def sorted_files(lo: int, hi: int, frac: float = 1.0) -> Gen:
    """Files sorted by path own consecutive block ranges; read each file's first ``frac``."""

    def g(rng: np.random.Generator) -> list[int]:
        out: list[int] = []
        base = int(rng.integers(0, 10**6))
        while len(out) < N:
            blocks = int(rng.integers(lo, hi + 1))
            out += range(base, base + max(1, round(blocks * frac)))
            base += blocks
        return out[:N]

    return g


def small_reads(max_reads: int) -> Gen:
    """Sequential reads smaller than a block: each block ID repeats 1..max_reads times."""

    def g(rng: np.random.Generator) -> list[int]:
        out: list[int] = []
        b = 0
        while len(out) < N:
            out += [b] * int(rng.integers(1, max_reads + 1))
            b += 1
        return out[:N]

    return g


def interleaved(readers: int) -> Gen:
    """DataLoader workers each reading their own file in order, merged round-robin."""

    def g(rng: np.random.Generator) -> list[int]:
        starts = rng.choice(10**6, readers, replace=False)
        return [int(starts[i % readers]) + i // readers for i in range(N)]

    return g


def shuffled_epochs(items: int) -> Gen:
    def g(rng: np.random.Generator) -> list[int]:
        if items >= N:  # the window sees part of one epoch: a sample without replacement
            return [int(v) for v in rng.choice(items, N, replace=False)]
        out: list[int] = []
        while len(out) < N:
            out += [int(v) for v in rng.permutation(items)]
        return out[:N]

    return g


def uniform(items: int) -> Gen:
    return lambda rng: [int(v) for v in rng.integers(0, items, N)]


def zipf(items: int, alpha: float) -> Gen:
    def g(rng: np.random.Generator) -> list[int]:
        p = 1.0 / np.arange(1, items + 1) ** alpha
        ids = rng.permutation(items)  # hot items scattered over the ID range
        return [int(v) for v in ids[rng.choice(items, N, p=p / p.sum())]]

    return g


def hot_set(items: int, hot: int, share: float) -> Gen:
    def g(rng: np.random.Generator) -> list[int]:
        hot_ids = rng.choice(items, hot, replace=False)
        is_hot = rng.random(N) < share
        return [int(hot_ids[rng.integers(hot)]) if h else int(rng.integers(items)) for h in is_hot]

    return g


def shuffled_samples(sample_blocks: tuple[int, int]) -> Gen:
    """A shuffled epoch over samples that are runs of neighbouring blocks (an image and its
    caption sidecar: 2; a multi-block file: more), each sample read front to back."""

    def g(rng: np.random.Generator) -> list[int]:
        lens = rng.integers(sample_blocks[0], sample_blocks[1] + 1, 20_000)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        out: list[int] = []
        for i in rng.permutation(lens.size):
            out += range(int(starts[i]), int(starts[i] + lens[i]))
            if len(out) >= N:
                return out[:N]
        return out[:N]

    return g


GENERATORS: list[tuple[str, str, Gen]] = [
    ("sequential", "stride+1", stride(1)),
    ("sequential", "stride+2", stride(2, 4000)),
    ("sequential", "stride+7", stride(7, 123)),
    ("sequential", "stride-1", stride(-1, 10**6)),
    ("sequential", "files 2-40 blocks", sorted_files(2, 40)),
    ("sequential", "files 100-400 blocks", sorted_files(100, 400)),
    ("sequential", "files, first half read", sorted_files(4, 20, 0.5)),
    ("sequential", "small reads", small_reads(8)),
    ("sequential", "4 interleaved readers", interleaved(4)),
    ("random", "epochs of 300", shuffled_epochs(300)),
    ("random", "epochs of 5k", shuffled_epochs(5000)),
    ("random", "epochs of 1M", shuffled_epochs(10**6)),
    ("random", "uniform over 50", uniform(50)),
    ("random", "uniform over 2k", uniform(2000)),
    ("random", "uniform over 1M", uniform(10**6)),
    # within-sample contiguity is not a traversal: the samples are shuffled
    ("random", "shuffled image+caption pairs", shuffled_samples((2, 2))),
    ("random", "shuffled 1-3 block samples", shuffled_samples((1, 3))),
    # ... but files long enough to be read through are (readahead pays inside each)
    ("sequential", "shuffled 30-60 block files", shuffled_samples((30, 60))),
    ("skewed", "zipf 0.9 over 2k", zipf(2000, 0.9)),
    ("skewed", "zipf 1.0 over 1M", zipf(10**6, 1.0)),
    ("skewed", "zipf 1.1 over 50k", zipf(50_000, 1.1)),
    ("skewed", "zipf 1.3 over 1M", zipf(10**6, 1.3)),
    ("skewed", "hot 20 of 100k take 90%", hot_set(100_000, 20, 0.9)),
    ("skewed", "hot 100 of 100k take 80%", hot_set(100_000, 100, 0.8)),
    ("skewed", "hot 200 of 50k take 90%", hot_set(50_000, 200, 0.9)),
    # a hot set too thin for the 200-access tail to show (the window must decide alone)
    ("skewed", "hot 5k of 100k take 80%", hot_set(100_000, 5000, 0.8)),
]


class Truth:
    """Ground truth for the oracle/noisy advisors: the label each test request was made with
    (requests are held, so their ids stay unique)."""

    def __init__(self) -> None:
        self.labels: dict[int, tuple[DiagnosisRequest, str | None]] = {}

    def label_for(self, request: DiagnosisRequest) -> str | None:
        entry = self.labels.get(id(request))
        return entry[1] if entry is not None and entry[0] is request else None


TRUTH = Truth()


def request(window: list[int], *, stale: bool = False, label: str | None = None) -> DiagnosisRequest:
    trigger = TRIGGER_CHR_ANOMALY if stale else TRIGGER_PERIODIC
    ctx = ReviewContext.for_review(trigger, "stable", "random", len(window))
    req = DiagnosisRequest("/data/train", tuple(window), analyze(window), ctx)
    if label is not None:
        TRUTH.labels[id(req)] = (req, label)
    return req


A = TypeVar("A", bound=Advisor)


def truthful(adv: A) -> A:
    assert bind_truth(adv, TRUTH)
    return adv


# ---------------------------------------------------------------------------- statistical


@pytest.mark.parametrize(("truth", "name", "gen"), GENERATORS, ids=[g[1] for g in GENERATORS])
def test_statistical_names_clear_patterns_confidently(truth: str, name: str, gen: Gen) -> None:
    adv = StatisticalAdvisor()
    for seed in range(3):
        advice = adv.advise(request(gen(np.random.default_rng(seed))))
        assert advice is not None
        assert (advice.pattern, advice.confidence >= TAU) == (truth, True), (name, seed, advice)
        assert 0.0 <= advice.confidence <= 1.0
    assert adv.counters.calls == 3 and adv.counters.no_advice == 0


def _mixed(old: Gen, new: Gen, old_share: float, seed: int = 1) -> list[int]:
    rng = np.random.default_rng(seed)
    k = int(N * old_share)
    return old(rng)[:k] + new(rng)[: N - k]


MIXES = [
    ("sequential", "random", sorted_files(2, 40), shuffled_epochs(5000)),
    ("random", "sequential", shuffled_epochs(5000), stride(1)),
    ("skewed", "random", zipf(50_000, 1.1), shuffled_epochs(5000)),
    ("skewed", "sequential", hot_set(100_000, 20, 0.9), sorted_files(2, 40)),
]


@pytest.mark.parametrize(("old", "new", "gen_old", "gen_new"), MIXES, ids=[f"{m[0]}->{m[1]}" for m in MIXES])
def test_window_straddling_a_phase_change(old: str, new: str, gen_old: Gen, gen_new: Gen) -> None:
    adv = StatisticalAdvisor()
    pure = adv.advise(request(gen_new(np.random.default_rng(1))))
    assert pure is not None and pure.pattern == new
    # half old, half new: the evidence is mixed, so the gate must not act on it
    mixed = adv.advise(request(_mixed(gen_old, gen_new, 0.5)))
    assert mixed is not None and mixed.confidence < TAU
    assert mixed.confidence < pure.confidence
    # when the review context warns that the prefix may be stale, the recent tail decides
    stale = adv.advise(request(_mixed(gen_old, gen_new, 0.5), stale=True))
    assert stale is not None and stale.pattern == new and stale.confidence >= TAU


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40) | st.integers(0, 20), max_size=400), st.booleans())
def test_statistical_advice_is_well_formed(window: list[int], stale: bool) -> None:
    adv = StatisticalAdvisor()
    advice = adv.advise(request(window, stale=stale))
    if not window:
        assert advice is None
        return
    assert advice is not None and advice.pattern in PATTERNS
    assert 0.0 <= advice.confidence <= 1.0
    assert advice == StatisticalAdvisor().advise(request(window, stale=stale))
    assert adv.counters.no_advice == 0


def test_statistical_is_deterministic_and_never_raises() -> None:
    w = zipf(2000, 0.9)(np.random.default_rng(5))
    a, b = StatisticalAdvisor(), StatisticalAdvisor()
    assert a.advise(request(w)) == b.advise(request(w))
    assert a.advise(request([])) is None
    assert a.counters.errors == {"empty window": 1}
    assert a.advise(request([1, 2])) is not None  # tiny windows: low-confidence advice
    short = a.advise(request(list(range(8))))
    assert short is not None and short.confidence < TAU


def test_concentration_hand_computed() -> None:
    assert KAPPA_PARETO == pytest.approx(0.8**2 / 0.2 + 0.2**2 / 0.8) == pytest.approx(3.25)
    # n = 1000 over S = 1000: lam = 1, E0 = 1000*999/2000 = 499.5, sd0 = sqrt(1000*1.5) = 38.73
    # K = 1000: kappa_lo = (1000 - 3*38.73)/499.5 = 1.7694 → C = ln 1.7694 / ln 3.25 = 0.4842
    c, kappa = concentration_from(1000, 1000, 1000.0)
    assert kappa == pytest.approx(1000 / 499.5)
    assert c == pytest.approx(math.log((1000 - 3 * math.sqrt(1500)) / 499.5) / math.log(3.25))
    assert c == pytest.approx(0.4842, abs=1e-4)
    assert concentration_from(2000, 1000, 1000.0)[0] == 1.0  # stronger than 80/20
    assert concentration_from(499.5, 1000, 1000.0)[0] == 0.0  # exactly uniform


def test_concentration_false_alarms_under_uniform_access() -> None:
    # the z = 3 bound must keep uniform sampling (any span) from looking skewed
    rng = np.random.default_rng(2024)
    for span in (30, 1000, 10**5):
        alarms = 0
        for _ in range(200):
            x = rng.integers(0, span, N)
            _, counts = np.unique(x, return_counts=True)
            k = float((counts * (counts - 1)).sum()) / 2
            alarms += concentration_from(k, N, float(span))[0] > 0
        assert alarms <= 4, (span, alarms)  # one-sided z = 3: ~0.1% expected


def _loader_order(n: int, readers: int, batch: int, seed: int) -> list[int]:
    """A DataLoader-like sequential pass: ``readers`` workers each read their own batch of
    ``batch`` consecutive IDs, whichever worker happens to be ready reads next (random,
    not round-robin: no lag has a constant step)."""
    rnd = random.Random(seed)
    out: list[int] = []
    base = 0
    while len(out) < n:
        streams = [list(range(base + w * batch, base + (w + 1) * batch)) for w in range(readers)]
        base += readers * batch
        while any(streams):
            w = rnd.randrange(readers)
            if streams[w]:
                out.append(streams[w].pop(0))
    return out[:n]


@pytest.mark.parametrize("seed", range(5))
def test_irregularly_interleaved_readers_are_sequential(seed: int) -> None:
    """Two loader workers interleaved at random: every access continues one of the last
    few by +1, so a 200-access window is sequential above the gate's 0.7 (before the
    continuation test this was ``random`` at ~0.5: the real PyTorch job's sequential pass
    was never diagnosed); the same IDs shuffled stay random."""
    adv = StatisticalAdvisor()
    order = _loader_order(200, 2, 32, seed)
    a = adv.diagnose(order)
    assert a is not None and a.pattern == "sequential" and a.confidence >= TAU, a
    shuffled = list(order)
    random.Random(seed).shuffle(shuffled)
    b = adv.diagnose(shuffled)
    assert b is not None and b.pattern == "random", b


@settings(max_examples=60, deadline=None)
@given(x=st.lists(st.integers(0, 40), min_size=2, max_size=120))
def test_continuation_evidence_equals_a_plain_count(x: list[int]) -> None:
    """The vectorised continuation test against a plain loop over the accesses."""
    from aicache.adaptive.advisor.statistical import (MAX_LAG, MIN_STEPS, _wilson_lower,
                                                      continuation_evidence)

    arr = np.asarray(x, dtype=np.int64)
    m = len(set(x))
    got, _ = continuation_evidence(arr, m)
    n = len(x)
    L = min(2 * MAX_LAG, n - 1)
    p0 = min(1.0, L / max(m, 1))
    want = 0.0
    if L >= 1 and n - L >= MIN_STEPS and p0 < 1.0:
        for step in (1, -1):
            h = sum(1 for i in range(L, n) if (x[i] - step) in x[i - L:i])
            want = max(want, (_wilson_lower(h, n - L) - p0) / (1.0 - p0))
    assert got == pytest.approx(want, abs=1e-12)


# ---------------------------------------------------------------------------- oracle / noisy


def test_oracle() -> None:
    adv = truthful(OracleAdvisor())
    for p in PATTERNS:
        assert adv.advise(request([1, 2, 3], label=p)) == Advice(p, 1.0, "true phase label")
    assert adv.advise(request([1, 2, 3])) is None
    assert adv.counters.errors == {"no true label": 1}


def test_noisy_lies_at_the_requested_rate() -> None:
    draws = 6000
    adv = truthful(make_advisor("noisy:0.3", seed=11))
    assert isinstance(adv, NoisyAdvisor)
    labels = [PATTERNS[i % 3] for i in range(draws)]
    out = [adv.advise(request([0], label=lab)) for lab in labels]
    lies = [(a, lab) for a, lab in zip(out, labels) if a is not None and a.pattern != lab]
    sigma = (0.3 * 0.7 / draws) ** 0.5
    assert abs(len(lies) / draws - 0.3) < 4 * sigma
    assert adv.lies == len(lies)
    # a lie is a uniformly chosen *wrong* pattern: each of the two wrong ones about half
    for truth in PATTERNS:
        wrong = Counter(a.pattern for a, lab in lies if lab == truth)
        total = sum(wrong.values())
        assert set(wrong) <= set(PATTERNS) - {truth}
        assert all(abs(c / total - 0.5) < 0.1 for c in wrong.values())
    truths = [a.confidence for a, lab in zip(out, labels) if a is not None and a.pattern == lab]
    lie_c = [a.confidence for a, _ in lies]
    assert min(truths) >= 0.55 and max(truths) <= 1.0
    assert min(lie_c) >= 0.45 and max(lie_c) <= 0.95
    assert np.mean(truths) > np.mean(lie_c)  # weakly informative, not useless
    # same seed, same answers; another seed, other answers
    again = truthful(make_advisor("noisy:0.3", seed=11))
    assert [again.advise(request([0], label=lab)) for lab in labels[:200]] == out[:200]
    other = truthful(make_advisor("noisy:0.3", seed=12))
    assert [other.advise(request([0], label=lab)) for lab in labels[:200]] != out[:200]


def test_noisy_extremes() -> None:
    honest, liar = truthful(NoisyAdvisor(0.0, random.Random(1))), truthful(NoisyAdvisor(1.0, random.Random(1)))
    for lab in PATTERNS * 20:
        assert honest.advise(request([0], label=lab)).pattern == lab  # type: ignore[union-attr]
        assert liar.advise(request([0], label=lab)).pattern != lab  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- registry


def test_make_advisor_valid_specs(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(make_advisor("statistical"), StatisticalAdvisor)
    assert isinstance(make_advisor(" oracle "), OracleAdvisor)
    noisy = make_advisor("noisy:0.25", seed=3)
    assert isinstance(noisy, NoisyAdvisor) and noisy.p == 0.25
    rec = make_advisor(f"record:{tmp_path / 't.jsonl'}:statistical")
    assert isinstance(rec, RecordingAdvisor) and isinstance(rec.inner, StatisticalAdvisor)
    rec.close()
    assert isinstance(make_advisor(f"replay:{tmp_path / 't.jsonl'}"), ReplayAdvisor)
    # record defaults to wrapping openai (constructed without any network traffic)
    monkeypatch.setenv("AICACHE_OPENAI_MODEL", "m")
    monkeypatch.setenv("AICACHE_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    rec2 = make_advisor(f"record:{tmp_path / 'o.jsonl'}")
    assert rec2.inner.name == "openai"  # type: ignore[attr-defined]
    rec2.close()


@pytest.mark.parametrize(
    "spec",
    ["", "magic", "noisy", "noisy:", "noisy:x", "noisy:1.5", "noisy:-0.1", "noisy:nan", "record:", "replay:",
     "statistical:1", "oracle:yes", "record:f.jsonl:record:g.jsonl", "record:f.jsonl:nope"],
)
def test_make_advisor_bad_specs(spec: str, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as err:
        make_advisor(spec)
    msg = str(err.value)
    assert "\n" not in msg
    assert "statistical" in msg and "noisy:P" in msg and "replay:FILE" in msg


def test_missing_transcript_and_model_are_bad_input(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BadInput, match="cannot read the transcript"):
        make_advisor(f"replay:{tmp_path / 'absent.jsonl'}")
    (tmp_path / "bad.jsonl").write_text('{"key": "k"}\nnot json\n')
    with pytest.raises(BadInput, match="line 2"):
        make_advisor(f"replay:{tmp_path / 'bad.jsonl'}")
    monkeypatch.delenv("AICACHE_OPENAI_MODEL", raising=False)
    with pytest.raises(BadInput, match="AICACHE_OPENAI_MODEL"):
        make_advisor("openai")


def test_record_replay_of_a_non_llm_advisor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "noisy.jsonl"
    rec = truthful(make_advisor(f"record:{path}:noisy:0.4", seed=9))
    reqs = [request(list(range(i, i + 50)), label=PATTERNS[i % 3]) for i in range(30)]
    reqs.append(request([1, 2, 3]))  # no label: no advice, recorded as such
    recorded = [rec.advise(r) for r in reqs]
    rec.close()
    rep = make_advisor(f"replay:{path}")
    assert [rep.advise(r) for r in reqs] == recorded
    assert rep.counters.errors == {"no true label": 1}
    assert rep.advise(request([9, 9, 9], label="random")) is None  # never recorded
    assert rep.counters.errors["missing key"] == 1


# ---------------------------------------------------------------------------- gate


def test_confidence_gate() -> None:
    gate = ConfidenceGate()
    assert gate.tau == TAU
    d = gate.check(Advice("skewed", 0.70))
    assert d.accepted and d.verdict is Verdict.ACCEPT and d.pattern == "skewed" and not d.retry_early
    d = gate.check(Advice("skewed", 0.6999))
    assert not d.accepted and d.verdict is Verdict.LOW_CONFIDENCE and d.retry_early
    d = gate.check(None)
    assert d.verdict is Verdict.NO_ADVICE and d.retry_early and d.pattern is None
    assert gate.check(Advice("bogus", 1.0)).verdict is Verdict.NO_ADVICE
    assert gate.check(Advice("random", float("nan"))).verdict is Verdict.LOW_CONFIDENCE
    assert (gate.counters.accepted, gate.counters.low_confidence, gate.counters.no_advice) == (1, 2, 2)
    assert ConfidenceGate(0.0).check(Advice("random", 0.0)).accepted
    assert not ConfidenceGate(1.0).check(Advice("random", 0.999)).accepted
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(BadInput, match="tau"):
            ConfidenceGate(bad)


# ---------------------------------------------------------------------------- feedback


def test_feedback_reflection_hand_computed() -> None:
    f = FeedbackReflector(alpha=0.35, theta=0.18)
    # h:      0.5    0.5    0.9                   0.6                      0.2
    # H_prev: -      0.5    0.5                   0.64                     0.626
    # |dev|:  -      0      0.4 (>= .18)          0.04                     0.426 (>= .18)
    # H:      0.5    0.5    .35*.9+.65*.5=0.64    .35*.6+.65*.64=0.626     .35*.2+.65*.626=0.4769
    out = [f.observe(h) for h in (0.5, 0.5, 0.9, 0.6, 0.2)]
    assert [r.anomaly for r in out] == [False, False, True, False, True]
    assert [r.ewma for r in out] == pytest.approx([0.5, 0.5, 0.64, 0.626, 0.4769])
    assert out[0].previous_ewma is None and out[0].deviation == 0.0
    assert out[4].deviation == pytest.approx(0.426)
    assert (f.rounds, f.anomalies) == (5, 2)


def test_feedback_threshold_is_inclusive_and_quiet_rounds_are_skipped() -> None:
    f = FeedbackReflector(alpha=0.5, theta=0.25)  # binary-exact values
    f.observe(0.5)
    assert f.observe(0.75).anomaly  # |0.75 - 0.5| == theta
    g = FeedbackReflector(alpha=0.5, theta=0.25)
    g.observe(0.5)
    assert not g.observe(0.7499).anomaly
    q = FeedbackReflector(min_round_accesses=10)
    assert q.observe_counts(3, 9) is None and q.ewma is None
    r = q.observe_counts(5, 10)
    assert r is not None and r.chr == 0.5 and q.ewma == 0.5
    with pytest.raises(BadInput):
        FeedbackReflector(alpha=0.0)
    with pytest.raises(BadInput):
        FeedbackReflector(theta=1.5)


def test_review_scheduler_protocol() -> None:
    s = ReviewScheduler(ReviewParams(), now=0.0)  # reflection on: routine 45 s, retry 5 s
    assert s.due(4.9) is None
    assert s.due(5.0) == TRIGGER_PERIODIC
    assert s.started(5.0) == TRIGGER_PERIODIC
    assert s.due(1000.0) is None  # one diagnosis in flight at a time
    s.finished(6.0, accepted=True)
    assert s.due(50.9) is None and s.due(51.0) == TRIGGER_PERIODIC
    s.started(51.0)
    s.finished(52.0, accepted=False)  # rejected → early retry
    assert s.due(56.9) is None and s.due(57.0) == TRIGGER_PERIODIC
    s.anomaly(53.0)  # CHR jump: review now, flagged as such
    assert s.due(53.0) == TRIGGER_CHR_ANOMALY
    assert s.started(53.0) == TRIGGER_CHR_ANOMALY
    s.anomaly(54.0)  # during a diagnosis: the next one is due as soon as it ends
    assert s.due(54.0) is None
    s.finished(55.0, accepted=True)
    assert s.due(55.0) == TRIGGER_CHR_ANOMALY
    assert s.started(55.0) == TRIGGER_CHR_ANOMALY
    s.finished(56.0, accepted=True)
    assert s.due(100.9) is None and s.due(101.0) == TRIGGER_PERIODIC
    assert (s.requests, s.early_retries) == (4, 1)


def test_review_scheduler_without_reflection() -> None:
    s = ReviewScheduler(ReviewParams(reflection=False, early_retry_s=2.0, first_review_s=1.0), now=10.0)
    assert s.due(11.0) == TRIGGER_PERIODIC
    s.started(11.0)
    s.finished(11.5, accepted=True)
    s.anomaly(12.0)  # ignored: reflection is off
    assert s.due(41.4) is None and s.due(41.5) == TRIGGER_PERIODIC
    with pytest.raises(BadInput, match="early_retry"):
        ReviewParams(early_retry_s=0)


# ---------------------------------------------------------------------------- prompt


def test_runtime_prompt_parts() -> None:
    w = list(range(0, 800, 2))
    ctx = ReviewContext.for_review(TRIGGER_PERIODIC, "stable", "random", len(w))
    req = DiagnosisRequest("/bucket/imagenet/train", tuple(w), analyze(w), ctx)
    lines = build_runtime_prompt(req).split("\n")
    assert [ln.split(":", 1)[0] for ln in lines] == ["Access sequence", "Structured statistics", "Review context"]
    assert json.loads(lines[0].split(": ", 1)[1]) == w
    assert json.loads(lines[1].split(": ", 1)[1]) == analyze(w)
    # the seed's A.1 review context, field for field
    assert json.loads(lines[2].split(": ", 1)[1]) == {
        "review trigger": "periodic retry",
        "previous control state": "stable",
        "previous committed pattern": "random",
        "older prefix may be stale": False,
        "recent tail length": 200,
    }
    assert "imagenet" not in build_runtime_prompt(req)
    no_stats = build_runtime_prompt(req, include_stats=False)
    assert "Structured statistics" not in no_stats and "Access sequence" in no_stats and "Review context" in no_stats
    for text in (system_prompt(True), system_prompt(False)):
        assert all(p in text for p in PATTERNS) and '"p"' in text and '"c"' in text
    assert "gini" in system_prompt(True) and "gini" not in system_prompt(False)


def test_review_context_stale_flag_follows_table_4() -> None:
    assert ReviewContext.for_review(TRIGGER_CHR_ANOMALY, "stable", "skewed", 1000).older_prefix_may_be_stale
    assert ReviewContext.for_review(TRIGGER_PERIODIC, "transition", "skewed", 1000).older_prefix_may_be_stale
    ctx = ReviewContext.for_review(TRIGGER_PERIODIC, "default", "bogus", 30)
    assert not ctx.older_prefix_may_be_stale and ctx.previous_pattern is None and ctx.recent_tail_length == 15


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('{"p":"skewed","c":0.86,"r":"recurring hot IDs"}', Advice("skewed", 0.86, "recurring hot IDs")),
        ('  \n{"p": "random", "c": 1}\n ', Advice("random", 1.0, "")),
        ('```json\n{"p":"sequential","c":0.0}\n```', Advice("sequential", 0.0, "")),
        ('```\n{"p":"Sequential","c":0.5,"r":null}\n```', Advice("sequential", 0.5, "")),
    ],
)
def test_parse_advice_accepts(text: str, want: Advice) -> None:
    assert parse_advice(text) == (want, None)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("", "empty response"),
        (None, "empty response"),
        ("sequential", "bad json"),
        ('Sure! {"p":"random","c":0.9}', "bad json"),
        ('{"p":"random","c":0.9} thanks', "bad json"),
        ('```python\n{"p":"random","c":0.9}\n```', "bad json"),
        ('["random", 0.9]', "bad schema"),
        ('{"p":"random"}', "bad schema"),
        ('{"p":"random","c":0.9,"extra":1}', "bad schema"),
        ('{"p":"random","c":0.9,"r":5}', "bad schema"),
        ('{"p":"looping","c":0.9}', "unknown pattern"),
        ('{"p":7,"c":0.9}', "unknown pattern"),
        ('{"p":"random","c":1.2}', "bad confidence"),
        ('{"p":"random","c":-0.1}', "bad confidence"),
        ('{"p":"random","c":"0.9"}', "bad confidence"),
        ('{"p":"random","c":true}', "bad confidence"),
        ('{"p":"random","c":NaN}', "bad confidence"),
    ],
)
def test_parse_advice_rejects(text: str | None, kind: str) -> None:
    assert parse_advice(text) == (None, kind)


# ---------------------------------------------------------------------------- metrics


def test_diagnosis_confusion_hand_computed() -> None:
    labels = ["sequential", "sequential", "random", "random", "skewed", "skewed"]
    preds = ["sequential", "random", "random", None, "skewed", "random"]
    cm = diagnosis_confusion(labels, preds)
    assert cm.matrix["sequential"] == {"sequential": 1, "random": 1, "skewed": 0, "none": 0}
    assert cm.matrix["random"] == {"sequential": 0, "random": 1, "skewed": 0, "none": 1}
    assert cm.total == 6 and cm.accuracy == pytest.approx(3 / 6)
    # random: predicted 3 times, right once → P = 1/3; actual 2, found 1 → R = 1/2; F1 = 0.4
    assert cm.precision("random") == pytest.approx(1 / 3)
    assert cm.recall("random") == pytest.approx(1 / 2)
    assert cm.f1("random") == pytest.approx(0.4)
    # sequential: P = 1, R = 1/2, F1 = 2/3; skewed: P = 1, R = 1/2, F1 = 2/3
    assert cm.macro_f1 == pytest.approx((2 / 3 + 0.4 + 2 / 3) / 3)
    assert json.loads(json.dumps(cm.as_dict()))["total"] == 6
    with pytest.raises(ValueError):
        diagnosis_confusion(["sequential"], [])
    with pytest.raises(ValueError):
        diagnosis_confusion(["loop"], ["random"])


def test_stale_review_judges_a_change_inside_the_tail_on_its_newest_half() -> None:
    """A feedback anomaly can be flagged within a round of a change: the 200-access tail is
    then half old (shuffled) and half new (a sequential pass)."""
    rng = np.random.default_rng(5)
    old = [int(v) for v in rng.permutation(10**5)[:900]]
    window = old + list(range(5 * 10**5, 5 * 10**5 + 100))
    adv = StatisticalAdvisor()
    stale = adv.advise(request(window, stale=True))
    assert stale is not None and stale.pattern == "sequential" and stale.confidence >= TAU
    assert "newest half" in (stale.reason or "")
    # without the stale flag the window (90% shuffled) is not overturned by 100 accesses
    fresh = adv.advise(request(window))
    assert fresh is not None and not (fresh.pattern == "sequential" and fresh.confidence >= TAU)
    # a tail that is one pattern throughout keeps the tail's (longer, more reliable) verdict
    seq = list(range(1000))
    whole = adv.advise(request(seq, stale=True))
    assert whole is not None and whole.pattern == "sequential" and "newest half" not in (whole.reason or "")
