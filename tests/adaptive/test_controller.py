"""Chiron's controller: gating, asynchrony, early retry, reflection, and a read path that
never waits on the advisor."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from aicache.adaptive.advisor.base import (
    TRIGGER_CHR_ANOMALY,
    Advice,
    Advisor,
    DiagnosisRequest,
    ReviewContext,
)
from aicache.adaptive.controller import ChironParams, ChironSystem, ThreadRunner, VirtualDelayRunner
from aicache.adaptive.executors import EagerEviction, make_executor
from aicache.policies.eviction.slru import SegmentedLRU
from aicache.errors import BadInput


class Scripted(Advisor):
    """Answers from a script of (pattern, confidence) pairs; None = no advice."""

    name = "scripted"

    def __init__(self, answers: list[tuple[str, float] | None]) -> None:
        super().__init__()
        self.answers = list(answers)
        self.requests: list[DiagnosisRequest] = []

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        self.requests.append(request)
        a = self.answers.pop(0) if self.answers else self.answers_default()
        return None if a is None else Advice(a[0], a[1], input_tokens=100, output_tokens=10)

    def answers_default(self) -> tuple[str, float]:
        return ("sequential", 0.9)


#: the seed's confidence gate alone: these scripts give answers that the synthetic stride
#: would contradict, to test the controller's mechanics (the evidence check:
#: tests/adaptive/test_gate_evidence.py); fixed early retry (the seed's; back-off: own test)
PARAMS = ChironParams(min_window=10, first_review_s=1.0, early_retry_s=2.0, routine_interval_s=30.0,
                      reflection_interval_s=45.0, round_s=1.0, min_round_accesses=5, advisor_delay_s=0.0,
                      retry_backoff=1.0, gate_mode="seed")


def drive(sys: ChironSystem, t0: float, t1: float, dt: float = 0.1, hit: bool = False,
          unit: str = "ds/f") -> float:
    """Reads every ``dt`` seconds from t0 up to t1; returns the last time."""
    t = t0
    b = int(t0 * 1000)
    while t < t1:
        sys.tick(t)
        if hit:  # make it resident first, so the hit is real
            sys.on_insert(unit, b, 4096, t, False)
        sys.on_access(unit, b, 4096, hit, t)
        b += 1
        t = round(t + dt, 6)
    return t


def pattern(sys: ChironSystem, unit: str = "ds") -> str:
    return sys.units[unit].executor.pattern


def test_switch_only_on_accepted_advice():
    adv = Scripted([("random", 0.5), ("random", 0.69), ("random", 0.71)])
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS)
    drive(sys, 0.0, 1.5)
    assert len(adv.requests) == 1 and pattern(sys) == "default"  # 0.5 < tau: kept default
    drive(sys, 1.5, 3.6)
    assert len(adv.requests) == 2 and pattern(sys) == "default"  # 0.69 < 0.70
    drive(sys, 3.6, 5.7)
    assert len(adv.requests) == 3 and pattern(sys) == "random"  # 0.71 >= 0.70: adopted
    st = sys.stats()
    assert st["switches"] == 1 and st["advisor_calls"] == 3
    assert st["advisor_tokens"] == 3 * 110


def test_no_advice_never_switches_and_retries_early():
    adv = Scripted([None, None, ("skewed", 0.95)])
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS)
    drive(sys, 0.0, 5.7)
    assert [r.context.trigger for r in adv.requests] == ["periodic retry"] * 3
    assert pattern(sys) == "skewed"
    assert sys.stats()["no_advice"] == 2


def test_pending_diagnosis_never_changes_the_policy():
    adv = Scripted([("random", 1.0)])
    params = ChironParams(min_window=10, first_review_s=1.0, advisor_delay_s=20.0)
    sys = ChironSystem(1 << 30, advisor=adv, params=params)
    drive(sys, 0.0, 20.9)
    assert len(adv.requests) == 1  # asked at t=1, answer due at t=21
    assert pattern(sys) == "default"
    drive(sys, 20.9, 21.2)
    assert pattern(sys) == "random"


class TimedRunner(VirtualDelayRunner):
    """Records when each diagnosis was submitted."""

    def __init__(self, advisor: Advisor) -> None:
        super().__init__(advisor, 0.0)
        self.times: list[float] = []

    def submit(self, request: DiagnosisRequest, now: float) -> None:
        self.times.append(now)
        super().submit(request, now)


def test_early_retry_after_rejection_then_routine_interval():
    adv = Scripted([("random", 0.3), ("random", 0.9), ("random", 0.9)])
    runner = TimedRunner(adv)
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS, runner=runner)
    drive(sys, 0.0, 100.0, dt=0.1)
    t = runner.times
    # first review at 1 s; rejected -> early retry 2 s later; accepted -> routine 45 s later
    # (reflection on); reads are every 0.1 s so a due review starts within 0.1 s
    assert t[0] == pytest.approx(1.0, abs=0.11)
    assert t[1] - t[0] == pytest.approx(2.0, abs=0.11)
    assert t[2] - t[1] == pytest.approx(45.0, abs=0.11)
    assert sys.units["ds"].scheduler.early_retries == 1


def test_reflection_triggers_on_a_chr_jump_with_review_context():
    adv = Scripted([("random", 0.9)] + [("random", 0.9)] * 5)
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS)
    t = drive(sys, 0.0, 20.0, hit=False)  # stable CHR 0, one accepted diagnosis
    assert [r.context.trigger for r in adv.requests] == ["periodic retry"]
    drive(sys, t, 23.0, hit=True)  # CHR jumps to 1: |1 - H| >= theta
    req = adv.requests[1]  # the first review after the jump
    assert req.context.trigger == TRIGGER_CHR_ANOMALY
    assert req.context.older_prefix_may_be_stale is True
    assert req.context.previous_pattern == "random"
    assert req.context.previous_state == "transition"
    # without reflection the jump triggers nothing before the routine interval
    adv2 = Scripted([("random", 0.9)] * 3)
    sys2 = ChironSystem(1 << 30, advisor=adv2, params=ChironParams(
        min_window=10, first_review_s=1.0, round_s=1.0, min_round_accesses=5, reflection=False,
        advisor_delay_s=0.0))
    t = drive(sys2, 0.0, 20.0)
    drive(sys2, t, 23.0, hit=True)
    assert all(r.context.trigger == "periodic retry" for r in adv2.requests) and len(adv2.requests) == 1


def test_gate_off_adopts_low_confidence_advice():
    adv = Scripted([("skewed", 0.2)])
    sys = ChironSystem(1 << 30, advisor=adv, params=ChironParams(
        min_window=10, first_review_s=1.0, gate=False, advisor_delay_s=0.0))
    drive(sys, 0.0, 1.5)
    assert pattern(sys) == "skewed"


class Hanging(Advisor):
    name = "hanging"

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()
        self.returned = threading.Event()

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        self.entered.set()
        self.release.wait(30)
        self.returned.set()
        return Advice("random", 1.0)


def test_reads_never_wait_on_a_hanging_advisor():
    adv = Hanging()
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS, runner=ThreadRunner(adv))
    try:
        t = drive(sys, 0.0, 3.0, dt=0.001)  # 3000 reads, a diagnosis due at t=1
        assert adv.entered.wait(5)  # the advisor really is stuck inside advise()
        # all 3000 reads returned while advise() was still blocked (it returns only once
        # released): no read waited on it, whatever the machine's load
        assert not adv.returned.is_set()
        assert pattern(sys) == "default"
        adv.release.set()
        deadline = time.perf_counter() + 60  # generous: only a lost answer expires it
        while pattern(sys) != "random" and time.perf_counter() < deadline:
            t = drive(sys, t, t + 0.01, dt=0.001)
            time.sleep(0.01)
        assert pattern(sys) == "random"  # the answer is applied on a later tick
    finally:
        adv.release.set()
        sys.close()


def test_virtual_runner_is_deterministic_and_delayed():
    adv = Scripted([("random", 0.9)])
    r = VirtualDelayRunner(adv, 1.5)
    req = DiagnosisRequest("u", (1, 2, 3), {}, ReviewContext())
    r.submit(req, 10.0)
    assert r.poll(11.4) == [] and r.next_ready() == 11.5
    [(got, advice)] = r.poll(11.5)
    assert got is req and advice is not None and advice.pattern == "random"


def test_switch_hands_over_resident_blocks_and_eager_evicts_read_blocks_first():
    adv = Scripted([("sequential", 0.9)])
    cap = 10 * 4096
    sys = ChironSystem(cap, advisor=adv, params=PARAMS)
    for b in range(5):  # blocks 0..4 read (demand) and stored
        sys.tick(b * 0.1)
        sys.on_access("ds/f", b, 4096, False, b * 0.1)
        sys.on_insert("ds/f", b, 4096, b * 0.1, False)
    sys.on_insert("ds/f", 99, 4096, 0.5, True)  # prefetched, unread
    drive(sys, 0.6, 1.5)
    assert pattern(sys) == "sequential"
    ev = sys.units["ds"].executor.eviction
    assert isinstance(ev, EagerEviction) and set(ev.keys()) == {0, 1, 2, 3, 4, 99}
    victims = [sys.victim(2.0) for _ in range(6)]
    assert victims[-1] == 99  # the unread prefetched block goes last
    assert set(victims[:5]) == {0, 1, 2, 3, 4}


def test_random_executor_rejects_when_full_and_skewed_is_lru():
    import random

    ex = make_executor("random", 100, random.Random(0))
    assert ex.admit(10, 90) and not ex.admit(10, 91)
    sk = make_executor("skewed", 100, random.Random(0))
    for b in (1, 2, 3):
        sk.on_insert(b, 1, 0.0, False)
    sk.on_access("u", 1, 1, True, 1.0)
    assert sk.eviction.victim(2.0) == 2


def test_diagnosis_f1_and_prompt_token_counting():
    from aicache.adaptive.advisor.statistical import StatisticalAdvisor
    from aicache.adaptive.analyzer import analyze
    from aicache.adaptive.advisor.tokens import estimate_tokens
    from aicache.experiments.chiron import PromptCountingAdvisor, _f1

    conf = {"random": {"random": 3, "skewed": 1}, "skewed": {"random": 1, "skewed": 5}}
    assert _f1(conf, "random") == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))
    assert _f1(conf, "skewed") == pytest.approx(2 * 5 / (2 * 5 + 1 + 1))
    # { " p " : " random " , " c " : 0 . 9 }  -> 17 words/numbers/marks
    assert estimate_tokens('{"p": "random", "c": 0.9}') == 17
    window = tuple(range(0, 400, 2))
    req = DiagnosisRequest("u", window, analyze(window), ReviewContext(recent_tail_length=100))
    on = PromptCountingAdvisor(StatisticalAdvisor(), include_stats=True).advise(req)
    off = PromptCountingAdvisor(StatisticalAdvisor(), include_stats=False).advise(req)
    assert on is not None and off is not None and on.pattern == off.pattern == "sequential"
    assert on.input_tokens > off.input_tokens > estimate_tokens(str(list(window)))
    assert on.output_tokens == off.output_tokens > 0


def test_first_review_as_soon_as_the_window_holds_min_window_accesses():
    adv = Scripted([("random", 0.9)])
    runner = TimedRunner(adv)
    params = ChironParams(min_window=10, first_review_s=30.0, advisor_delay_s=0.0)
    sys = ChironSystem(1 << 30, advisor=adv, params=params, runner=runner)
    drive(sys, 0.0, 3.0, dt=0.1)
    # the 10th access comes at t=0.9; the review starts at the next tick, long before 30 s
    assert runner.times and runner.times[0] == pytest.approx(1.0, abs=0.11)
    assert len(adv.requests[0].window) >= 10


def _retry_gaps(answers: list[tuple[str, float] | None], until: float, **kw: Any) -> list[float]:
    adv = Scripted(answers)
    runner = TimedRunner(adv)
    params = ChironParams(**{**dict(min_window=10, first_review_s=1.0, early_retry_s=2.0,
                                    retry_backoff=2.0, routine_interval_s=10.0, reflection=False,
                                    advisor_delay_s=0.0, gate_mode="seed"), **kw})
    sys = ChironSystem(1 << 30, advisor=adv, params=params, runner=runner)
    drive(sys, 0.0, until, dt=0.1)
    return [b - a for a, b in zip(runner.times, runner.times[1:])]


def test_retry_backs_off_once_a_fresh_window_is_still_ambiguous_and_resets_on_acceptance():
    # window of 20 reads = 2 s: from the second rejection on, a whole fresh window has been
    # judged ambiguous -> 4, 8, then capped at the routine interval (10 s); an acceptance
    # -> routine 10 s; the next rejection starts again from the early retry
    gaps = _retry_gaps([("random", 0.5)] * 6 + [("random", 0.9)] + [("random", 0.5)] * 3, 60.0, window=20)
    expected = [2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0, 2.0]
    assert gaps[: len(expected)] == pytest.approx(expected, abs=0.11)


def test_retry_does_not_back_off_during_a_transition():
    # the answers change pattern (the evidence is moving): plain early retries
    changing = [("random", 0.6), ("skewed", 0.4), ("random", 0.3), ("skewed", 0.6)] * 2
    assert _retry_gaps(changing, 17.5, window=20) == pytest.approx([2.0] * 7, abs=0.11)
    # the same pattern, but the window has not turned over yet (1,000 reads = 100 s)
    assert _retry_gaps([("random", 0.5)] * 8, 17.5) == pytest.approx([2.0] * 7, abs=0.11)
    # back-off 1 is the seed's fixed early retry
    assert _retry_gaps([("random", 0.5)] * 8, 17.5, window=20, retry_backoff=1.0) == \
        pytest.approx([2.0] * 7, abs=0.11)
    with pytest.raises(BadInput, match="retry_backoff"):
        ChironParams(retry_backoff=0.5)


def test_shape_reflection_flags_an_order_change_that_chr_does_not_show():
    """Random -> sequential with every read a miss (CHR 0 throughout, as under the random
    executor, which does not prefetch): only the access shape changes."""
    import random as _random

    def run(shape: bool) -> tuple[list[DiagnosisRequest], list[float]]:
        adv = Scripted([("random", 0.9)] * 5)
        params = ChironParams(min_window=10, first_review_s=1.0, round_s=1.0, min_round_accesses=5,
                              advisor_delay_s=0.0, shape_reflection=shape)
        runner = TimedRunner(adv)
        sys = ChironSystem(1 << 30, advisor=adv, params=params, runner=runner)
        rng = _random.Random(3)
        t = 0.0
        while t < 20.0:  # shuffled reads
            sys.tick(t)
            sys.on_access("ds/f", rng.randrange(10**6), 4096, False, t)
            t = round(t + 0.1, 6)
        b = 5 * 10**6
        while t < 24.0:  # a sequential pass
            sys.tick(t)
            sys.on_access("ds/f", b, 4096, False, t)
            b += 1
            t = round(t + 0.1, 6)
        return adv.requests, runner.times

    reqs, times = run(True)
    assert reqs[0].context.trigger == "periodic retry" and times[0] < 2.0
    # one review within a round or two of the change (t = 20 s), flagged as an anomaly;
    # the shape EWMA restarts at the new level, so the one change is one review
    assert len(reqs) == 2 and 20.0 < times[1] <= 22.1
    assert reqs[1].context.trigger == TRIGGER_CHR_ANOMALY and reqs[1].context.older_prefix_may_be_stale
    assert len(run(False)[0]) == 1  # CHR alone sees nothing before the 45 s routine review


class NaiveSLRU:
    """Obviously-correct reference: two Python lists, oldest first, scanned linearly."""

    def __init__(self, share: float) -> None:
        self.share, self.prob, self.prot, self.unread = share, [], [], set()

    def hit(self, k: int) -> None:
        if k in self.prot:
            self.prot.remove(k)
            self.prot.append(k)
        elif k in self.unread:  # a prefetched block's first read: first access
            self.unread.discard(k)
            self.prob.remove(k)
            self.prob.append(k)
        else:  # read again while resident: protected
            self.prob.remove(k)
            self.prot.append(k)
            while len(self.prot) > self.share * (len(self.prob) + len(self.prot)):
                self.prob.append(self.prot.pop(0))

    def insert(self, k: int, prefetched: bool) -> None:
        self.prob.append(k)
        if prefetched:
            self.unread.add(k)

    def victim(self) -> int:
        k = self.prob.pop(0) if self.prob else self.prot.pop(0)
        self.unread.discard(k)
        return k


@pytest.mark.parametrize("share", [0.0, 0.5, 0.8, 1.0])
def test_segmented_lru_matches_a_naive_reference(share: float) -> None:
    import random as _random

    rng = _random.Random(int(share * 10))
    fast, ref = SegmentedLRU(10**9, protected_share=share), NaiveSLRU(share)
    resident: set[int] = set()
    for _ in range(4000):
        # skewed: a hot tenth of the keys takes most reads; some inserts are prefetches
        k = rng.randrange(10) if rng.random() < 0.7 else rng.randrange(10, 120)
        if k in resident:
            fast.on_hit(k, 1, 0.0)
            ref.hit(k)
        else:
            pf = rng.random() < 0.3
            (fast.on_prefetch_insert if pf else fast.on_insert)(k, 1, 0.0)
            ref.insert(k, pf)
            resident.add(k)
            if len(resident) > 40:
                v = fast.victim(0.0)
                assert v == ref.victim()
                resident.discard(v)
        assert len(fast) == len(resident) and list(fast.keys()) == ref.prob + ref.prot


def test_segmented_lru_protects_reused_blocks_from_one_off_and_speculative_ones() -> None:
    ev = SegmentedLRU(10**9)
    for k in (1, 2, 3, 10, 11):  # demand reads
        ev.on_insert(k, 1, 0.0)
    for k in (20, 21):  # prefetched neighbours
        ev.on_prefetch_insert(k, 1, 0.0)
    for k in (1, 2, 3):  # hot: read again (3 of 7 resident <= 80%: all stay protected)
        ev.on_hit(k, 1, 0.0)
    ev.on_hit(21, 1, 0.0)  # a prefetched block's first read: still on probation
    ev.on_remove(11)
    assert 11 not in ev and len(ev) == 6
    # one-off and speculative blocks go first, by age; the reused ones last, LRU
    assert [ev.victim(1.0) for _ in range(6)] == [10, 20, 21, 1, 2, 3]
    import random as _random

    assert make_executor("skewed", 100, _random.Random(0)).eviction.name == "aslru"


def test_retries_of_a_rejected_anomaly_review_keep_the_anomaly_context():
    # seven rejections at 2 s intervals outlast the rounds the CHR EWMA needs to catch up
    adv = Scripted([("random", 0.9)] + [("skewed", 0.4)] * 7 + [("skewed", 0.9)] * 3)
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS)
    t = drive(sys, 0.0, 20.0, hit=False)  # CHR 0, one accepted diagnosis
    drive(sys, t, 90.0, hit=True)  # CHR jumps to 1: anomaly
    triggers = [r.context.trigger for r in adv.requests]
    stale = [r.context.older_prefix_may_be_stale for r in adv.requests]
    # the anomaly review and its early retries (rejected) are about the anomaly; once a
    # diagnosis is accepted the anomaly is resolved
    assert triggers[:9] == ["periodic retry"] + [TRIGGER_CHR_ANOMALY] * 8
    assert stale[1:9] == [True] * 8
    assert triggers[9] == "periodic retry"
    assert pattern(sys) == "skewed" and sys.units["ds"].open_anomaly is False


def test_a_no_change_answer_to_an_anomaly_is_rechecked_once_the_tail_turned_over():
    """Flagged within a round of a change, the tail is still mostly old accesses: a 'same
    pattern' answer then is premature. The anomaly stays open and is re-checked once the
    tail (200 accesses of a 1,000 window) holds only accesses made after it."""
    adv = Scripted([("random", 0.9)] * 20)
    runner = TimedRunner(adv)
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS, runner=runner)
    t = drive(sys, 0.0, 20.0, hit=False)
    drive(sys, t, 120.0, hit=True)  # CHR jumps at t=20: anomaly at the end of that round
    anomalies = [x for x, r in zip(runner.times, adv.requests) if r.context.trigger == TRIGGER_CHR_ANOMALY]
    first = anomalies[0]
    assert 20.0 < first <= 21.2
    # the re-check: 200 reads (20 s at 10 reads/s) after the anomaly, still an anomaly review
    assert any(first + 18.5 <= x <= first + 20.5 for x in anomalies)
    last = max(anomalies)
    assert last <= first + 20.5 and not sys.units["ds"].open_anomaly
    # then back to the routine schedule
    later = [x for x in runner.times if x > last]
    assert later and later[0] - last == pytest.approx(45.0, abs=0.11)


@pytest.mark.parametrize("pattern,eviction", [("sequential", None), ("random", None), ("skewed", None),
                                              ("default", None), ("skewed", "lecar"), ("skewed", "arc")])
def test_bulk_adoption_equals_adopting_block_by_block(pattern: str, eviction: str | None) -> None:
    """A switch hands the resident blocks over with ``adopt_many`` (one bulk update for
    list-backed policies); the executor must end up exactly as with one ``adopt`` per
    block: the same victims in the same order."""
    import random as _random

    rng = _random.Random(3)
    blocks = rng.sample(range(10_000), 300)
    unread = set(rng.sample(blocks, 60))
    sizes = {b: 1 + b % 7 for b in blocks}
    one = make_executor(pattern, 10**9, _random.Random(1), eviction=eviction)
    bulk = make_executor(pattern, 10**9, _random.Random(1), eviction=eviction)
    for b in blocks:
        one.adopt(b, sizes[b], 5.0, read=b not in unread)
    bulk.adopt_many(blocks, sizes, 5.0, unread)
    assert list(one.eviction.keys()) == list(bulk.eviction.keys())
    assert [one.eviction.victim(6.0) for _ in range(250)] == [bulk.eviction.victim(6.0) for _ in range(250)]


def test_oscillating_advice_is_damped_by_exponential_back_off():
    """An advisor that flips random <-> skewed at every review (what a skewed phase over a
    hot set too large for one window looks like) gets a switch-back only after the unit
    has stayed ``window * 2**k`` reads in the other pattern, k = switch-backs so far; a
    pattern the unit did not just leave (sequential) is adopted at the next review."""
    flips = [("random", 0.9), ("skewed", 0.9)] * 200
    adv = Scripted(flips)
    params = ChironParams(window=50, min_window=10, first_review_s=0.5, early_retry_s=0.5,
                          routine_interval_s=1.0, reflection_interval_s=1.0, round_s=1.0,
                          min_round_accesses=5, advisor_delay_s=0.0, retry_backoff=2.0, gate_mode="seed")
    sys = ChironSystem(1 << 30, advisor=adv, params=params)
    log: list[tuple[str | None, str, int]] = []
    orig = sys._switch

    def spy(u, pattern, now):  # type: ignore[no-untyped-def]
        log.append((u.pattern, pattern, u.reads))
        orig(u, pattern, now)

    sys._switch = spy  # type: ignore[method-assign]
    t = drive(sys, 0.0, 160.0)  # 1,600 reads, ~160 reviews asking to flip
    assert len(adv.requests) > 100
    # default -> random, random -> skewed are moves to new patterns; the rest switch back
    assert [(a, b) for a, b, _ in log[:2]] == [(None, "random"), ("random", "skewed")]
    backs = log[2:]
    assert 2 <= len(backs) <= 6  # log2(1600 / 50) + 1 at most
    prev = log[1][2]
    for k, (_, _, reads) in enumerate(backs):
        assert reads - prev >= 50 * 2 ** k  # dwell before the k-th switch-back
        prev = reads
    assert sys.stats()["flaps_suppressed"] > 50  # about half the answers ask to flip back
    # a real change of pattern goes through at once
    adv.answers = [("sequential", 0.9)]
    n = len(log)
    drive(sys, t, t + 2.0)
    assert len(log) == n + 1 and log[-1][1] == "sequential"


@pytest.mark.parametrize("threaded", [False, True])
def test_tick_visits_units_per_event_not_per_read(threaded: bool) -> None:
    """A dataset of many small units (2,000 folders, 9 reads each: below ``min_window``)
    keeps every review due but waiting for evidence. ``tick`` must not walk all units on
    each read then — it did, ~500 µs per read through a mount of 512 top-level files —
    but look at a unit only on its own events: creation, review due, round end. The
    reference is that event count (≤ 5 per unit here), not a timing; a walk per read
    would be 18,000 x 2,000 visits."""
    adv = Scripted([])
    runner = ThreadRunner(adv) if threaded else None
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS, runner=runner)
    try:
        t = 0.0
        for rnd in range(9):
            for u in range(2000):
                sys.tick(t)
                sys.on_access(f"ds{u}/f", rnd * 10_000 + u, 4096, False, t)
                t = round(t + 0.0001, 7)  # 18,000 reads over 1.8 s; rounds are 1 s
        sys.tick(t)
        assert len(sys.units) == 2000 and not adv.requests  # never enough for a review
        assert 2000 <= sys.unit_visits <= 5 * 2000, sys.unit_visits
        assert all(u.round_start > 0.9 for u in sys.units.values())  # rounds did close
    finally:
        sys.close()
