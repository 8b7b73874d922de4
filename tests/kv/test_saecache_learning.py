"""SAECache's online learning on synthetic streams whose true parameters are known."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from aicache.kv.prefix_policies import RequestView
from aicache.kv.saecache import (NB, SAECache, Queue, bucket_start, fit_gamma,
                                 offset_bucket, softmax_weights, type_index)
from aicache.kv.session_predictor import ContinuationPredictor, LogNormalGaps
from aicache.sim.prefix import simulate
from aicache.traces.base import KVRequest


@pytest.mark.parametrize("mu,sigma", [(math.log(40.0), 1.0), (math.log(5.0), 0.8)])
def test_lognormal_mle_recovers_parameters(mu: float, sigma: float) -> None:
    rng = np.random.default_rng(1)
    est = LogNormalGaps()
    for g in rng.lognormal(mu, sigma, 4000):
        est.add(float(g))
    assert est.mu == pytest.approx(mu, rel=0.05)
    assert est.sigma == pytest.approx(sigma, rel=0.05)


def test_policy_learns_per_queue_gaps_from_sessions() -> None:
    """Chat sessions with gaps LN(ln 40, 1.0) and tool sessions with LN(ln 5, 0.6),
    interleaved: each queue's (μ, σ) converges to its own distribution."""
    rng = np.random.default_rng(7)
    events = []
    for s in range(400):
        tool = s % 2 == 1
        mu, sg = (math.log(5.0), 0.6) if tool else (math.log(40.0), 1.0)
        t = float(rng.uniform(0, 20000))
        for turn in range(1, 9):
            events.append((t, f"s{s}", turn, tool))
            t += float(rng.lognormal(mu, sg))
    events.sort()
    pol = SAECache(1000, update_every=1)
    v = RequestView()
    for t, sid, turn, tool in events:
        v.session_id, v.turn, v.request_type = sid, turn, ("tool" if tool else "text")
        v.block_types, v.hash_ids = [], []
        pol.begin(v, t)
        pol.end(t)
    st = pol.export_state()
    assert st.mu[Queue.CHAT] == pytest.approx(math.log(40.0), rel=0.05)
    assert st.sigma[Queue.CHAT] == pytest.approx(1.0, rel=0.05)
    assert st.mu[Queue.AGENTIC] == pytest.approx(math.log(5.0), rel=0.05)
    assert st.sigma[Queue.AGENTIC] == pytest.approx(0.6, rel=0.05)


@pytest.mark.parametrize("gamma", [0.5, 1.5, 3.0])
def test_gamma_sign_and_size_from_position_reuse(gamma: float) -> None:
    """Structural accesses whose reuse probability is 1 − ((o+1)/(o_max+2))^γ: the learned
    γ is positive and within 25% of the truth."""
    rnd = random.Random(3)
    pol = SAECache(1000, gamma_every=1, update_every=1)
    o_max = 63
    for _ in range(60):
        for o in range(o_max + 1):
            p = 1 - ((bucket_start(offset_bucket(o)) + 1) / (o_max + 2)) ** gamma
            pol._learn_position(o, rnd.random() < p)
    v = RequestView()
    v.block_types = []
    pol.begin(v, 0.0)
    assert pol.state.gamma > 0
    assert pol.state.gamma == pytest.approx(gamma, rel=0.25)


def test_gamma_fit_sign_follows_the_correlation() -> None:
    offs = [float(bucket_start(b)) for b in range(6)]
    later_hits_more = [0.1, 0.2, 0.35, 0.5, 0.7, 0.9]
    earlier_hits_more = list(reversed(later_hits_more))
    assert fit_gamma(offs, earlier_hits_more, 40.0) > 0
    assert fit_gamma(offs, later_hits_more, 40.0) < 0  # clamped to the floor by the policy


def test_token_type_weights_order_system_user_reasoning() -> None:
    """System blocks are shared by every request, a user block is reused by its session's
    next turn only, reasoning is never reused: w_system > w_user > w_reasoning."""
    rng = random.Random(5)
    reqs = []
    t = 0.0
    nid = 10**6
    for s in range(300):
        hist: list[int] = [1, 2]  # the shared system prompt (chained ids 1, 2)
        types = ["system", "system"]
        for turn in range(1, 4):
            nid += 1
            hist = hist + [nid]
            types = types + ["user"]
            t += rng.expovariate(2.0)
            nid += 1
            reqs.append(KVRequest(
                timestamp=t, input_length=16 * len(hist), output_length=16,
                hash_ids=list(hist), block_tokens=16, session_id=f"s{s}", turn=turn,
                block_types=list(types), request_type="text",
                extra={"output_hash_ids": [nid], "output_block_types": ["reasoning"]}))
    reqs.sort(key=lambda r: r.timestamp)
    pol = SAECache(400)
    simulate(reqs, pol, 400)
    w = pol.state.type_reuse
    assert w[type_index("system")] > w[type_index("user")] > w[type_index("reasoning")]
    assert w[type_index("reasoning")] < 0.1


def test_alpha_softmax_behaviour() -> None:
    eff = [0.3, 0.05, 0.1]
    a = softmax_weights(eff, 1.0)
    assert sum(a) == pytest.approx(3.0)
    assert a[0] > a[2] > a[1]  # order of hit efficiency kept
    assert softmax_weights([e * 10 for e in eff], 1.0) == pytest.approx(a)  # scale-free
    hot = softmax_weights(eff, 1e-3)
    assert hot == pytest.approx([3.0, 0.0, 0.0], abs=1e-6)  # T→0: winner takes all
    cold = softmax_weights(eff, 1e6)
    assert cold == pytest.approx([1.0, 1.0, 1.0], abs=1e-4)  # T→∞: uniform
    assert softmax_weights([0.0, 0.0], 1.0) == [1.0, 1.0]


def test_alpha_follows_queue_efficiency() -> None:
    """A queue whose resident tokens earn more hits gets the larger α."""
    pol = SAECache(10**6, update_every=1)
    pol._res_tokens[Queue.STRUCTURAL] = 1000
    pol._res_tokens[Queue.CHAT] = 1000
    pol._res_tokens[Queue.AGENTIC] = 1000
    v = RequestView()
    v.block_types = []
    for _ in range(200):
        pol._hit_now[Queue.STRUCTURAL] += 500
        pol._hit_now[Queue.CHAT] += 100
        pol._hit_now[Queue.AGENTIC] += 20
        pol.end(0.0)
        pol.begin(v, 0.0)
    a = pol.state.alpha
    assert a[Queue.STRUCTURAL] > a[Queue.CHAT] > a[Queue.AGENTIC]


def test_predictor_learns_a_separable_rule() -> None:
    rng = np.random.default_rng(0)
    pred = ContinuationPredictor(lr=0.1)
    xs = rng.normal(size=(3000, 8))
    xs[:, 0] = 1.0
    ys = (xs[:, 3] > 0).astype(float)
    for x, y in zip(xs, ys):
        pred.update(x, float(y))
    acc = np.mean([(pred.predict(x) >= 0.5) == bool(y) for x, y in zip(xs[-500:], ys[-500:])])
    assert acc > 0.9


def test_offset_buckets_cover_offsets() -> None:
    for o in range(2000):
        b = offset_bucket(o)
        assert 0 <= b < NB
        assert bucket_start(b) <= o


def test_hidden_state_features_extend_the_predictor() -> None:
    """An adapter feeding (pooled) hidden states adds its dimensions to the classifier,
    and the classifier learns from them."""
    from aicache.kv.session_predictor import RequestFeatures

    class Hidden:
        dim = 2

        def features(self, request: object) -> np.ndarray:
            return np.array([1.0, -1.0]) if request == "continues" else np.array([-1.0, 1.0])

    pred = ContinuationPredictor(lr=0.2, hidden=Hidden())
    f = RequestFeatures(100, False, 0.0, False, 1, 0.0, 0)
    for _ in range(200):
        pred.update(pred.vector(f, "continues"), 1.0)
        pred.update(pred.vector(f, "ends"), 0.0)
    assert pred.w.shape == (10,)
    assert pred.predict(pred.vector(f, "continues")) > 0.9
    assert pred.predict(pred.vector(f, "ends")) < 0.1
