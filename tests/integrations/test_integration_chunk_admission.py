"""Admissions of the engine tiers' shared gate (``integrations.chunk_tier``), without an engine.

``learned`` is :class:`~aicache.kv.admission.LearnedRule` asked at the offer: checked in
lockstep against that class driven directly with the events the adapter promises to
pass, and by behaviour — on a stream where long requests' chunks are always asked for
again and short requests' never, it learns to write the former at their first offer and
not the latter, which SARIA's E2 cannot (it writes nothing at a first offer).
"""

from __future__ import annotations

import random

import pytest

from aicache.errors import BadInput
from aicache.integrations.chunk_tier import AdmissionGate, Offer, make_admission
from aicache.kv.admission import LearnedRule


def test_learned_matches_learned_rule_in_lockstep():
    rng = random.Random(3)
    gate = AdmissionGate(make_admission("learned", args={"horizon": 50, "write_budget": 0.5}),
                         capacity=10_000)
    ref = LearnedRule(None, 50.0, write_budget=0.5)
    ev: dict[tuple[str, bytes], list[int]] = {}  # key -> [E, R] (the brute-force counters)
    now = 0.0
    for step in range(3000):
        now += rng.random()
        sk = ("ns", rng.randrange(300).to_bytes(4, "big"))
        if rng.random() < 0.5:
            tokens = rng.choice([64, 512, 4096])
            e_r = ev.get(sk)
            if e_r is None:
                e_r = ev[sk] = [0, 0]
                ref.stored(1)
            else:
                e_r[0] += 1
            want = ref.evicted(sk, e_r[0] + 1, e_r[1], -1, tokens, 0.0, now)
            if want:
                ref.wrote(1)
            assert gate.offer(sk, Offer("r", -1, now, tokens)) is want, step
        elif sk in ev:
            ev[sk][1] += 1
            ref.referenced(sk, now)
            assert gate.reference(sk, now)
        else:
            assert not gate.reference(sk, now)
    assert gate.c.admitted > 0 and gate.c.declined > 0


def test_learned_writes_chunks_like_those_reused_at_their_first_offer():
    learned = AdmissionGate(make_admission("learned", args={"horizon": 100,
                                                            "write_budget": 1.0}), 10_000)
    e2 = AdmissionGate(make_admission("E2"), 10_000)
    now = 0.0
    for i in range(400):  # long requests' chunks come back, short requests' never
        now += 10.0
        long_k, short_k = ("ns", b"L%d" % i), ("ns", b"S%d" % i)
        for g in (learned, e2):
            g.offer(long_k, Offer("a", 32, now, 4096))
            g.offer(short_k, Offer("b", 32, now, 64))
        now += 5.0
        for g in (learned, e2):
            g.reference(long_k, now)
    now += 10.0
    first = [learned.offer(("ns", b"L-new"), Offer("c", 32, now, 4096)),
             learned.offer(("ns", b"S-new"), Offer("d", 32, now, 64))]
    assert first == [True, False]
    assert not e2.offer(("ns", b"L-new"), Offer("c", 32, now, 4096))  # E2: never at a first offer


def test_learned_bad_args_are_one_line_errors():
    with pytest.raises(BadInput, match="write_budget"):
        make_admission("learned", args={"write_budget": -1})
    with pytest.raises(BadInput, match="horizon"):
        make_admission("learned", args={"horizon": "soon"})


def test_peer_rules_and_seed_rule_decide_offers_through_the_one_registry():
    """The engine gate asks the registry's policies at each offer: sglang-selective writes
    a chunk offered again after a request reused it (hit_count 2); E2 with prewrite writes
    at the second offer (the eviction to come would be its second); vllm-reuse-filter
    needs two lookups, its own offers counting as one each."""
    sel = AdmissionGate(make_admission("sglang-selective"), 100)
    e2 = AdmissionGate(make_admission("E2"), 100)
    vf = AdmissionGate(make_admission("vllm-reuse-filter"), 100)
    a = ("ns", b"a")
    assert [g.offer(a) for g in (sel, e2, vf)] == [False, False, False]
    for g in (sel, e2, vf):
        g.reference(a)
    assert [g.offer(a) for g in (sel, e2, vf)] == [True, True, True]
    b = ("ns", b"b")
    sel.offer(b)
    assert not sel.offer(b)  # offered twice, never reused: hit_count stays 1 + R_b = 1
    assert e2.offer(b) is False and e2.offer(b) is True
    assert make_admission("mooncake-on-evict").label == "mooncake-on-evict"


def test_a_write_budget_caps_every_offer_window():
    """``budgeted`` and ``budgeted-threshold`` (first offers are weak candidates: paced,
    within the window) and a capped full duplicate all keep the bytes admitted in every
    window within the allowance; the registry rejects a budget for an engine-only admission."""
    from aicache.kv.write_budget import WriteBudget

    for name in ("budgeted", "budgeted-threshold", "full-duplicate"):
        budget = WriteBudget(1.0, 100.0)  # 100 B per 100 s
        gate = AdmissionGate(make_admission(name, size_of=lambda n: 10, budget=budget), 10_000)
        times = []
        for i in range(600):
            now = i * 0.5
            if gate.offer(("ns", b"%d" % i), Offer("r", -1, now)):
                times.append(now)
        assert len(times) > 10
        assert max(sum(1 for t in times if a <= t < a + 100.0) for a in times) * 10 <= 100
    assert make_admission("full-duplicate", budget=WriteBudget(1.0, 1.0)).label == \
        "full-duplicate@budget"
    with pytest.raises(BadInput, match="no write budget"):
        make_admission("learned", budget=WriteBudget(1.0, 1.0))
