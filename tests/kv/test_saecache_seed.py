"""``saecache-seed``: the seed's priority P(b) = α_q · w_τ(b) · p_q(b) / Δt_b, its victim
checked against a brute-force implementation of the formula (score every resident block
from the policy's current parameters, take the minimum) on random small workloads."""

from __future__ import annotations

import math
from statistics import NormalDist

from hypothesis import given, settings
from hypothesis import strategies as st
from test_saecache_policy import TYPES, _request, _trace, _view

from aicache.kv.prefix_policies import make_prefix_policy
from aicache.kv.saecache import SAECacheSeed, SAEState, Queue, TOKEN_TYPES
from aicache.sim.prefix import simulate


def seed_priority(f: dict, q: int, tau: int, o: int, last: float, now: float) -> float:
    """The seed's formula, written from the spec alone (Δt = 0 → +∞, the documented guard)."""
    dt = now - last
    if dt <= 0:
        return math.inf
    a = f["alpha"][q] if q else 1.0
    w = f["w"][tau]
    if q == 1:
        om = f["o_max"]
        p = 1.0 - (o / om) ** f["gamma"] if (om > 0 and f["position"]) else 1.0
    elif q in (2, 3) and f["lognormal"]:
        p = 1.0 - NormalDist(f["mu"][q], f["sigma"][q]).cdf(math.log(dt))
    else:
        p = 1.0
    return a * w * p / dt


class _Checked(SAECacheSeed):
    checked = 0

    def victim(self, now: float) -> object:
        f = self.factors()
        keys = self.resident()
        infos = {k: self.block_info(k) for k in keys}
        ef = [k for k in keys if infos[k][0] == 0]
        pool = ef or keys
        scores = {k: seed_priority(f, *infos[k][:4], now) for k in pool}
        got = super().victim(now)
        best = min(scores.values())
        # the minimum P; among (numerically) equal finite positive P the oldest touch
        tied = [k for k in pool if math.isclose(scores[k], best, rel_tol=1e-9, abs_tol=1e-300)
                or scores[k] == best]
        assert got in tied, (got, scores[got], best)
        if 0.0 < best < math.inf:  # P = 0 (o = o_max, survival underflow) or +inf: any tied
            assert infos[got][4] == min(infos[k][4] for k in tied)
        type(self).checked += 1
        return got


@settings(max_examples=150, deadline=None)
@given(st.lists(_request, min_size=1, max_size=40), st.integers(16, 200), st.booleans())
def test_victim_is_the_brute_force_minimum_of_the_seed_formula(spec, capacity, learn) -> None:  # type: ignore[no-untyped-def]
    reqs = _trace(spec)
    pol = _Checked(capacity, learn=learn, update_every=1, gamma_every=2)
    res = simulate(reqs, pol, capacity)
    assert res.requests == len(reqs) and len(pol) == len(pol.resident())


def test_the_brute_force_check_is_exercised() -> None:
    _Checked.checked = 0
    reqs = _trace([(i % 3, 3.0 * (i % 4), [i % 4, i % 5, 1, 2], TYPES, i % 2 == 0) for i in range(40)])
    simulate(reqs, _Checked(60, update_every=1, gamma_every=2), 60)
    assert _Checked.checked > 20


def _fixed() -> SAECacheSeed:
    state = SAEState(type_reuse=[0.9, 0.5, 0.4, 0.0, 0.7, 0.2, 0.1],
                     mu=[0.0, 0.0, math.log(40.0), math.log(5.0)], sigma=[1.0, 1.0, 1.0, 0.5],
                     gamma=2.0, alpha=[1.0, 2.0, 0.5, 1.5], o_max=4,
                     predictor_w=[-5.0] + [0.0] * 7)
    return SAECacheSeed(10_000, state=state, learn=False)


def test_hand_computed_priorities() -> None:
    pol = _fixed()
    # multi-turn chat: w from each block's own type (system 0.95, user 0.55)
    pol.begin(_view("s", 2, ["system", "user"]), 0.0)
    pol.on_insert("u", 64, 1, 0.0)
    pol.on_insert("sy", 64, 0, 0.0)
    assert pol.queue_of("u") is Queue.CHAT and pol.queue_of("sy") is Queue.CHAT
    # at Δt = e^μ = 40 s the survival is 1/2, and no δ: P = 0.5 · 0.55 · 0.5 / 40
    assert math.isclose(pol.priority("u", 40.0), 0.5 * 0.55 * 0.5 / 40.0)
    assert math.isclose(pol.priority("sy", 40.0), 0.5 * 0.95 * 0.5 / 40.0)
    assert pol.priority("u", 0.0) == math.inf  # the Δt = 0 guard
    # structural: 1 − (o/o_max)^γ with the exact offset (o = 2, o_max = 4, γ = 2 → 0.75)
    pol = _fixed()
    pol.begin(_view("a", 1, ["system", "system", "system"]), 10.0)
    pol.on_insert("s2", 64, 2, 10.0)
    assert pol.queue_of("s2") is Queue.STRUCTURAL
    assert math.isclose(pol.priority("s2", 14.0), 2.0 * 0.95 * 0.75 / 4.0)


def test_decode_blocks_of_multi_turn_sessions_go_to_evict_first() -> None:
    pol = _fixed()
    v = _view("s", 3, ["user"])
    pol.begin(v, 0.0)
    pol.on_insert("prompt", 64, 0, 0.0)
    v.decode, v.block_types = True, ["assistant"]
    pol.on_insert("answer", 64, 0, 0.0)
    assert pol.queue_of("prompt") is Queue.CHAT
    assert pol.queue_of("answer") is Queue.EVICT_FIRST
    assert pol.victim(5.0) == "answer"  # evict-first is emptied first


def test_registered_and_runs_on_a_generated_workload() -> None:
    from aicache.sim.prefix import load_requests

    reqs, labels = load_requests(workload="mix", sessions=40, seed=3)
    res = simulate(reqs, make_prefix_policy("saecache-seed", 1), "15%", labels=labels)
    assert res.policy == "saecache-seed" and 0.0 < res.token_hit_ratio < 1.0
    assert len(TOKEN_TYPES) == 7
