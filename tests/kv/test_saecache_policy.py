"""SAECache's priority formula, and its grouped-LRU/heap victim search against the plain
"score every resident block and take the minimum" reference."""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicache.kv.prefix_policies import RequestView
from aicache.kv.saecache import SAECache, SAECacheDuel, SAECacheSeed, SAEState, Queue, fit_gamma, lognormal_survival
from aicache.sim.prefix import infer_labels, load_requests, simulate, working_set_tokens
from aicache.traces.base import KVRequest

TYPES = ["system", "user", "assistant", "reasoning", "tool", "decode"]


def _view(session: str, turn: int, types: list[str], *, tool: bool = False) -> RequestView:
    v = RequestView()
    v.session_id, v.turn, v.block_types = session, turn, types
    v.hash_ids = list(range(len(types)))
    v.request_type = "tool" if tool else "text"
    return v


def _fixed(**kw: object) -> SAECache:
    state = SAEState(type_reuse=[0.9, 0.5, 0.4, 0.0, 0.7, 0.2, 0.1],
                     mu=[0.0, 0.0, math.log(40.0), math.log(5.0)], sigma=[1.0, 1.0, 1.0, 0.5],
                     gamma=1.0, alpha=[1.0, 2.0, 0.5, 1.5], o_max=2,
                     predictor_w=[-5.0] + [0.0] * 7)  # first requests: predicted single-turn
    return SAECache(10_000, state=state, learn=False, delta_s=1.0, **kw)


def test_priority_hand_computed() -> None:
    pol = _fixed()
    # A second turn (multi-turn chat): its user block goes to the chat queue.
    pol.begin(_view("s", 2, ["user"]), 0.0)
    pol.on_insert("u", 64, 0, 0.0)
    assert pol.queue_of("u") is Queue.CHAT
    # At Δt = e^μ (the median gap) the log-normal survival is exactly 1/2:
    # P = α_chat · w_user · 0.5 / (40 + δ) = 0.5 · (0.05 + 0.5) · 0.5 / 41
    assert pol.priority("u", 40.0) == pytest.approx(0.5 * 0.55 * 0.5 / 41.0)
    # Δt = 0: survival 1, P = 0.5 · 0.55 / 1
    assert pol.priority("u", 0.0) == pytest.approx(0.275)

    pol = _fixed()
    # A single-turn request's system block at offset 0 → structural; offset 0 is bucket 0,
    # posf = 1 − ((0 + 1) / (o_max + 2))^γ = 1 − 1/4 = 0.75.
    pol.begin(_view("a", 1, ["system", "user"]), 10.0)
    pol.on_insert("sys", 64, 0, 10.0)
    assert pol.queue_of("sys") is Queue.STRUCTURAL
    assert pol.priority("sys", 13.0) == pytest.approx(2.0 * (0.05 + 0.9) * 0.75 / (3.0 + 1.0))

    pol = _fixed()
    pol.begin(_view("r", 2, ["reasoning"]), 0.0)
    pol.on_insert("cot", 64, 0, 0.0)
    assert pol.queue_of("cot") is Queue.EVICT_FIRST
    # evict-first is plain LRU: P = 1 / (Δt + δ)
    assert pol.priority("cot", 4.0) == pytest.approx(1.0 / 5.0)


def test_lognormal_survival_reference_points() -> None:
    assert lognormal_survival(math.exp(1.3), 1.3, 0.7) == pytest.approx(0.5)
    # one sigma above the median: 1 − Φ(1) = 0.158655...
    assert lognormal_survival(math.exp(1.3 + 0.7), 1.3, 0.7) == pytest.approx(0.15865525, rel=1e-6)
    assert lognormal_survival(0.0, 1.0, 1.0) == 1.0


def test_evict_first_is_emptied_first() -> None:
    pol = _fixed()
    pol.begin(_view("s", 2, ["user", "user"]), 0.0)
    pol.on_insert("old-chat", 64, 0, 0.0)
    pol.begin(_view("t", 2, ["reasoning"]), 100.0)
    pol.on_insert("fresh-cot", 64, 0, 100.0)
    # the chat block is far older (lower P) but evict-first goes first
    assert pol.victim(100.0) == "fresh-cot"
    assert pol.victim(100.0) == "old-chat"


class _Checked(SAECache):
    """SAECache whose every victim is checked against a brute-force reference."""

    def victim(self, now: float) -> object:
        keys = self.resident()
        ef = [k for k in keys if self.queue_of(k) is Queue.EVICT_FIRST]
        pool = ef if ef else keys
        expect = min(pool, key=lambda k: (self.priority(k, now), self.touch_seq(k)))
        got = super().victim(now)
        assert got == expect
        return got


_request = st.tuples(
    st.integers(0, 5),  # session
    st.floats(0.0, 120.0),  # gap since the previous request
    st.lists(st.integers(0, 11), min_size=1, max_size=6),  # block ids (chained below)
    st.lists(st.sampled_from(TYPES), min_size=6, max_size=6),
    st.booleans(),  # tool request
)


def _trace(spec: list[tuple[int, float, list[int], list[str], bool]]) -> list[KVRequest]:
    t = 0.0
    out = []
    turns: dict[int, int] = {}
    for sess, gap, ids, types, tool in spec:
        t += gap
        turns[sess] = turns.get(sess, 0) + 1
        chained = []
        prev = 0
        for b in ids:  # chained ids: a block id names its whole prefix
            prev = prev * 13 + b + 1
            chained.append(prev)
        out.append(KVRequest(timestamp=t, input_length=16 * len(ids) - 3, output_length=20,
                             hash_ids=chained, block_tokens=16, session_id=f"s{sess}",
                             turn=turns[sess], block_types=types[:len(ids)],
                             request_type="tool" if tool else "text",
                             extra={"output_hash_ids": [10**9 + len(out)],
                                    "output_block_types": [types[-1]]}))
    return out


@given(st.lists(_request, min_size=1, max_size=40), st.integers(16, 200), st.booleans())
def test_fast_victim_equals_reference(spec, capacity, learn) -> None:  # type: ignore[no-untyped-def]
    reqs = _trace(spec)
    pol = _Checked(capacity, learn=learn, update_every=1, gamma_every=2)
    res = simulate(reqs, pol, capacity)
    assert res.requests == len(reqs)
    assert len(pol) == len(pol.resident())


@given(st.lists(_request, min_size=1, max_size=40), st.integers(16, 200))
def test_capacity_and_resident_set(spec, capacity) -> None:  # type: ignore[no-untyped-def]
    reqs = _trace(spec)
    pol = SAECache(capacity)
    res = simulate(reqs, pol, capacity)  # simulate asserts used <= capacity every request
    # the policy holds exactly what fits: total resident tokens never above capacity
    assert sum(pol._blocks[k].tokens for k in pol.resident()) <= capacity
    assert res.hit_tokens <= res.input_tokens


def test_order_matches_successive_victims() -> None:
    reqs = _trace([(i % 3, 7.0, [i % 4, i % 5, 1], TYPES, i % 2 == 0) for i in range(30)])
    pol = SAECache(80)
    simulate(reqs, pol, 80)
    now = reqs[-1].timestamp + 5.0
    order = list(pol.order(now))
    assert sorted(map(str, order)) == sorted(map(str, pol.resident()))
    victims = [pol.victim(now) for _ in range(len(order))]
    assert victims == order


def test_determinism() -> None:
    from aicache.sim.prefix import load_requests

    a, _ = load_requests(workload="mix", sessions=80, seed=9)
    b, _ = load_requests(workload="mix", sessions=80, seed=9)
    ra = simulate(a, "saecache-priority", "15%", seed=1).to_dict()
    rb = simulate(b, "saecache-priority", "15%", seed=1).to_dict()
    for r in (ra, rb):
        r.pop("wall_seconds"), r.pop("decisions_per_second"), r.pop("cpu_seconds")
    assert ra == rb


def test_block_record_has_no_dict() -> None:
    pol = _fixed()
    pol.begin(_view("s", 1, ["user"]), 0.0)
    pol.on_insert("k", 1, 0, 0.0)
    assert not hasattr(pol._blocks["k"], "__dict__")


def test_fit_gamma_is_exact_on_its_model() -> None:
    o_max = 30.0
    offs = [0.0, 1.0, 3.0, 7.0, 15.0]
    for g in (0.5, 2.0):
        reuse = [1 - ((o + 1) / (o_max + 2)) ** g for o in offs]
        assert fit_gamma(offs, reuse, o_max) == pytest.approx(g)


def test_dram_adapter_contract() -> None:
    """SAECache as the KV index's DRAM order: holds exactly the inserted-and-not-removed
    nodes, and offers each of them exactly once, in SAECache's victim order."""
    from aicache.kv.eviction import make_dram_policy
    from aicache.kv.radix import RadixNode

    pol = make_dram_policy("saecache", 100)
    root = RadixNode("root", None)
    nodes = []
    parent = root
    for i in range(12):
        n = RadixNode(i, parent, tokens=64)
        n.session, n.turn = f"s{i % 3}", 1 + i // 3
        n.token_type, n.offset = ("system", "user", "tool")[i % 3], 64 * i
        nodes.append(n)
        parent = n
    for t, n in enumerate(nodes):
        pol.on_insert(n, float(t))
    for t, n in enumerate(nodes[::2]):
        pol.on_access(n, 20.0 + t)
    pol.on_remove(nodes[5])
    live = [n for n in nodes if n is not nodes[5]]
    assert len(pol) == len(live) and all(n in pol for n in live) and nodes[5] not in pol
    offered = list(pol.candidates(40.0))
    assert sorted(n.key for n in offered) == sorted(n.key for n in live)
    assert offered == [k for k in pol.sae.order(40.0)]


def test_saria_runs_with_saecache_dram_order() -> None:
    from aicache.sim.kv import KVSimParams, simulate_kv
    from aicache.traces.gen import SESSIONS

    reqs = list(SESSIONS.get("agent")(sessions=4, seed=1))
    res = simulate_kv(reqs, KVSimParams(system="saria", dram_policy="saecache",
                                        dram_tokens=100_000, ssd_tokens=1_000_000))
    assert 0.0 < res.metrics["char"] <= 1.0
    assert res.metrics["dram_evictions"] > 0


def test_oracle_predictor_routes_first_requests_by_the_session_label() -> None:
    """The diagnostic ``predictor="oracle"`` reads the trace's session label for a first
    request; the online one (here: a classifier fixed to "single-turn") does not."""
    for predictor, expect in (("online", Queue.STRUCTURAL), ("oracle", Queue.CHAT)):
        pol = _fixed(predictor=predictor)
        v = _view("s", 1, ["system"])
        v.session_type = "chat"  # the label: this session goes on
        pol.begin(v, 0.0)
        pol.on_insert("head", 64, 0, 0.0)
        assert pol.queue_of("head") is expect
    pol = _fixed(predictor="oracle")
    v = _view("t", 1, ["user"])
    v.session_type = "single"
    pol.begin(v, 0.0)
    pol.on_insert("once", 64, 0, 0.0)
    assert pol.queue_of("once") is Queue.EVICT_FIRST
    with pytest.raises(ValueError, match="predictor"):
        SAECache(100, predictor="psychic")


_MOONCAKE = Path(__file__).resolve().parents[2] / "traces" / "mooncake_fast25_synthetic.jsonl"


@pytest.mark.parametrize("source", ["chat", "mooncake"])
def test_fast_victim_equals_reference_on_generated_and_real_traces(source: str) -> None:
    # every victim of the grouped-LRU/heap path (with the phase hook and the inlined heap
    # pop) against "score every resident block, take the minimum (P, seq)", with learning
    # on, on a generated workload and on a slice of the real Mooncake trace
    if source == "chat":
        reqs, _ = load_requests(workload="chat", sessions=40, seed=5)
    else:
        from aicache.traces.io import open_trace

        reqs, _ = infer_labels(list(open_trace(str(_MOONCAKE), "mooncake").requests())[:160])
    cap = working_set_tokens(reqs) // 10
    pol = _Checked(cap)
    res = simulate(reqs, pol, cap)
    assert res.evictions > 200  # the reference was consulted many times
    assert res.token_hit_ratio == simulate(reqs, "saecache-priority", cap).token_hit_ratio


class _CheckedDuel(SAECacheDuel):
    """The duel's victims against references: LRU's order (a recency list kept here) while
    the miniature LRU leads, the brute-force minimum (P, seq) otherwise."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.ref_recency: OrderedDict[object, None] = OrderedDict()
        self.branches: Counter[bool] = Counter()

    def on_hit(self, key: object, i: int, now: float) -> None:
        super().on_hit(key, i, now)
        self.ref_recency.move_to_end(key)

    def on_insert(self, key: object, tokens: int, i: int, now: float) -> None:
        super().on_insert(key, tokens, i, now)
        self.ref_recency[key] = None

    def victim(self, now: float) -> object:
        lru = self.lru_leads()
        self.branches[lru] += 1
        if lru:
            expect = next(iter(self.ref_recency))
        else:
            keys = self.resident()
            ef = [k for k in keys if self.queue_of(k) is Queue.EVICT_FIRST]
            expect = min(ef or keys, key=lambda k: (self.priority(k, now), self.touch_seq(k)))
        got = super().victim(now)
        assert got == expect
        del self.ref_recency[got]
        return got


def test_duel_evicts_in_the_leading_order() -> None:
    reqs, _ = load_requests(workload="mix", sessions=60, seed=5)
    cap = working_set_tokens(reqs) // 8
    pol = _CheckedDuel(cap, sample_shift=2)
    res = simulate(reqs, pol, cap)
    assert pol.branches[True] > 0 and pol.branches[False] > 0  # both orders were followed
    assert res.evictions == sum(pol.branches.values())
    # the miniature caches saw only the sampled keys, within their own capacity
    for sim in pol._sims:
        assert all(pol._sampled(k) for k in sim.res) and sim.used <= sim.cap


@pytest.mark.parametrize("cls", [SAECache, SAECacheSeed])
def test_anonymous_request_is_single_turn_in_saecache_only(cls: type[SAECache]) -> None:
    # a predictor that always says "continues" (bias +5): a first request with a session id
    # goes to the chat queue in both variants; one without a session id goes to chat only
    # in the seed's routing (saecache: no session to continue, so evict-first)
    state = SAEState(predictor_w=[5.0] + [0.0] * 7)
    got = {}
    for sid in ("s1", None):
        pol = cls(10**6, state=state, learn=False)
        v = RequestView()
        v.session_id, v.turn, v.block_types, v.hash_ids = sid, None, ["user"], [1]
        pol.begin(v, 0.0)
        pol.on_insert(1, 16, 0, 0.0)
        got[sid] = pol.queue_of(1)
    assert got["s1"] is Queue.CHAT
    assert got[None] is (Queue.CHAT if cls is SAECacheSeed else Queue.EVICT_FIRST)


@pytest.mark.parametrize("cls", [SAECache, SAECacheSeed])
def test_group_lists_hold_every_resident_block_least_recent_first(cls: type[SAECache]) -> None:
    # the victim search reads only group heads: each group's list must link exactly its
    # resident blocks, in touch order (seq ascending), with counts and back links consistent
    reqs, _ = load_requests(workload="mix", sessions=30, seed=3)
    cap = working_set_tokens(reqs) // 10
    pol = cls(cap)
    res = simulate(reqs, pol, cap)
    assert res.evictions > 100
    groups = pol._groups
    gids = range(len(groups)) if isinstance(groups, list) else list(groups)
    linked: list[object] = []
    for gid in gids:
        g = groups[gid]
        seqs, prev, b = [], None, g.head
        while b is not None:
            assert b.prev is prev and b.gid == gid
            seqs.append(b.seq)
            linked.append(b.key)
            prev, b = b, b.nxt
        assert g.tail is prev and g.n == len(seqs) and seqs == sorted(seqs)
    assert sorted(map(str, linked)) == sorted(map(str, pol.resident()))


@pytest.mark.parametrize("name", ["saecache-priority", "saecache-seed"])
def test_turns_numbered_from_zero_are_first_requests(name: str) -> None:
    # the agent generators number a session's turns from 0: the continuation predictor
    # reads turn 0 as a first request (log1p(turn - 1) was a math domain error there)
    from aicache.kv.session_predictor import RequestFeatures

    f = dict(input_tokens=100, tool_request=False, template_match=0.0, system_match=False,
             gap_s=0.0, hit_tokens=0)
    assert RequestFeatures(turn=0, **f).vector() == RequestFeatures(turn=1, **f).vector()
    reqs, labels = load_requests(workload="agent", sessions=6, seed=0)
    assert min(r.turn for r in reqs) == 0
    res = simulate(reqs, name, "10%", labels=labels)
    assert res.evictions > 0 and 0.0 <= res.token_hit_ratio <= 1.0
