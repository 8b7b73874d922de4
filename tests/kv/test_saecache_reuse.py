"""saecache (the default; ``saecache-reuse`` before, still an alias): its victim against a
brute force that rebuilds the prefix tree from the trace itself, leaves only, determinism,
and learning that shows in the victim order."""

from __future__ import annotations

import json
import random
from collections import OrderedDict

import pytest

from aicache.kv.prefix_policies import PrefixPolicy, RequestView
from aicache.kv.saecache_reuse import NCLASS, ReuseParams, ReuseState, SAECacheReuse, class_of, size_group
from aicache.sim.prefix import infer_labels, load_requests, simulate
from aicache.traces.base import KVRequest


class _Checked(SAECacheReuse):
    """Checks every victim against the brute force: the evictable blocks are the resident
    ones with no resident child in the trace's own chains (prompt ``hash_ids`` and the
    decoded chain under the prompt's last full block), V = p_c / (age + 1) computed here
    from each block's class and last touch, and the victim the minimum (V, last touch)."""

    def __init__(self, cap: int, parent: dict[int, int], **kw: object) -> None:
        super().__init__(cap, **kw)  # type: ignore[arg-type]
        self.parent = parent
        self.victims: list[int] = []

    def victim(self, now: float) -> int:  # type: ignore[override]
        resident = set(self._nodes)
        has_child = {self.parent[k] for k in resident if k in self.parent}
        leaves = [k for k in resident if k not in has_child]
        t1 = self._t + 1

        def v(k: int) -> tuple[float, int]:
            nd = self._nodes[k]
            return self.prob[nd.cls] / (t1 - nd.last), nd.last

        want = min(leaves, key=v)
        got = super().victim(now)
        assert got == want, (got, want)
        self.victims.append(got)
        return got


def _parents(reqs: list[KVRequest]) -> dict[int, int]:
    par: dict[int, int] = {}
    for r in reqs:
        ids = r.hash_ids
        for i in range(1, len(ids)):
            par[ids[i]] = ids[i - 1]
        out = (r.extra or {}).get("output_hash_ids") or []
        first = r.input_length // r.block_tokens
        prev = ids[first - 1] if 0 < first <= len(ids) else None
        for h in out:
            if prev is not None:
                par[int(h)] = prev
            prev = int(h)
    return par


@pytest.mark.parametrize("workload,sessions,cap", [("chat", 30, "6%"), ("tool", 12, "10%"), ("mix", 30, "4%")])
def test_victim_equals_brute_force_and_only_leaves_go(workload: str, sessions: int, cap: str) -> None:
    reqs, labels = load_requests(workload=workload, sessions=sessions, seed=0)
    par = _parents(reqs)
    # small reconfiguration interval, so the order is checked under learned, unequal p_c
    pol = _Checked(1, par, min_interval=64)
    from aicache.sim.prefix import working_set_tokens

    from aicache.units import parse_size
    pol.capacity = parse_size(cap, total=working_set_tokens(reqs), what="cap")
    res = simulate(reqs, pol, pol.capacity, labels=labels)
    assert len(pol.victims) > 200
    assert len(set(pol.prob)) > 2  # learning moved the classes apart
    assert res.orphan_evictions == 0  # the simulator's own count: no inner block evicted


def _anonymous_trace(n: int, seed: int) -> list[KVRequest]:
    """Requests without session ids: 'long' conversations come back (the same chain grown
    by one block) and end their turns with short answers; one-off requests never return
    and have long answers."""
    rng = random.Random(seed)
    out: list[KVRequest] = []
    convs: list[list[int]] = []
    nxt = 0
    for t in range(n):
        if convs and rng.random() < 0.5:
            c = rng.choice(convs)
            c.append(nxt)
            nxt += 1
            ids, olen = list(c), 20
        else:
            ids = list(range(nxt, nxt + 4))
            nxt += 4
            if rng.random() < 0.3:
                convs.append(list(ids))
                olen = 20
            else:
                olen = 2000
        out.append(KVRequest(timestamp=float(t), input_length=512 * len(ids), output_length=olen,
                             hash_ids=ids, block_tokens=512))
    return infer_labels(out)[0]


def test_learned_classes_separate_returning_conversations_and_show_in_the_order() -> None:
    from aicache.sim.prefix import working_set_tokens

    reqs = _anonymous_trace(1500, seed=1)
    cap = int(0.1 * working_set_tokens(reqs))
    pol = SAECacheReuse(cap, min_interval=256)
    res = simulate(reqs, pol, cap)
    user = 3  # token-type group of unlabelled new blocks
    # an inner block of a first request with a short answer (here: always a conversation
    # that returns) against one with a long answer (never returns)
    short = pol.prob[class_of(0, False, user, 1, size_group(4, 20, 512))]
    long_ = pol.prob[class_of(0, False, user, 1, size_group(4, 2000, 512))]
    assert short > 2 * long_
    lru = simulate(reqs, "lru", cap)
    blind = simulate(reqs, SAECacheReuse(cap, min_interval=256, output_length=False), cap)
    # what it learned shows: ahead of LRU, and ahead of itself without the lengths
    assert res.token_hit_ratio > lru.token_hit_ratio + 0.05
    assert res.token_hit_ratio > blind.token_hit_ratio + 0.01


def test_same_seed_same_victims_and_params_checked() -> None:
    reqs, labels = load_requests(workload="mix", sessions=30, seed=2)
    par = _parents(reqs)
    runs = []
    for _ in range(2):
        pol = _Checked(1, par)
        pol.capacity = 40_000
        simulate(reqs, pol, 40_000, labels=labels)
        runs.append(pol.victims)
    assert runs[0] == runs[1] and runs[0]
    with pytest.raises(ValueError):
        SAECacheReuse(100, decay=0.0)


def test_before_any_learning_the_order_is_lru_over_leaves() -> None:
    pol = SAECacheReuse(100)
    v = RequestView()
    v.hash_ids, v.block_types, v.block_tokens, v.input_length = [1, 2, 3], ["user"] * 3, 4, 12
    pol.begin(v, 0.0)
    for i in (2, 1, 0):  # tail first, as the simulator touches
        pol.on_insert(v.hash_ids[i], 4, i, 0.0)
    pol.end(0.0)
    w = RequestView()
    w.hash_ids, w.block_types, w.block_tokens, w.input_length = [7, 8], ["user"] * 2, 4, 8
    pol.begin(w, 1.0)
    for i in (1, 0):
        pol.on_insert(w.hash_ids[i], 4, i, 1.0)
    pol.end(1.0)
    # chain 1-2-3 is older: its tail goes first, then up the chain, then the other chain
    assert [pol.victim(2.0) for _ in range(5)] == [3, 2, 1, 8, 7]


class _Reference(PrefixPolicy):
    """saecache-reuse's rule computed plainly from its docstring: per-key dicts, the parent
    links kept as a map, a leaf recomputed as "no resident block names it as parent", the
    victim by scanning every leaf, and the class counters as flat lists. No heaps, no
    stale entries, no cached leaf state: what the policy's bookkeeping must reproduce."""

    name = "saecache-reuse-reference"

    def __init__(self, cap: int, params: ReuseParams, state: ReuseState | None = None) -> None:
        super().__init__(cap)
        self.p = params
        self.last: dict[int, int] = {}
        self.cls: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self.parent: dict[int, int] = {}  # resident child -> its parent
        self.ghost: OrderedDict[int, tuple[int, int]] = OrderedDict()  # key -> (class, refs)
        self.reused = [0.0] * NCLASS
        self.ended = [0.0] * NCLASS
        self.prob = [0.5] * NCLASS
        self.t = 0
        self.next_cfg = params.min_interval
        self.prev: int | None = None
        self.droot: int | None = None
        self.t0 = self.turn = self.size_g = 0
        self.last_i = -1
        self.types: list[str] = []
        self.victims: list[int] = []
        if state is not None:  # imported: the order starts from its p_c, counting from its counters
            self.prob, self.reused, self.ended = list(state.prob), list(state.reused), list(state.ended)

    def begin(self, view: RequestView, now: float) -> None:
        super().begin(view, now)
        self.prev, self.t0 = None, self.t
        if view.session_id is not None:
            self.turn = view.turn or 1
        elif not view.hash_ids:
            self.turn = 1
        else:
            root = view.hash_ids[0]
            known = self.refs[root] + 1 if root in self.refs else \
                self.ghost[root][1] + 1 if root in self.ghost else 0
            self.turn = 1 + known
        self.size_g = size_group(len(view.hash_ids), None, view.block_tokens)
        self.types, self.last_i = view.block_types, len(view.hash_ids) - 1

    def begin_decode(self, now: float) -> None:
        v = self.view
        first = v.input_length // max(1, v.block_tokens)
        self.droot = v.hash_ids[first - 1] if 0 < first <= len(v.hash_ids) else None
        self.prev, self.types, self.last_i = None, v.block_types, len(v.block_types) - 1

    def end(self, now: float) -> None:
        if self.droot is not None:
            if self.droot in self.cls and self.prev is not None:
                self._link(self.droot)
            self.droot = None
        v = self.view
        if not self.p.output_length or not v.hash_ids or v.output_length <= 0:
            return
        d = size_group(len(v.hash_ids), v.output_length, v.block_tokens) - self.size_g
        for k in v.hash_ids:
            if d and k in self.cls and self.last[k] >= self.t0:
                self.cls[k] += d

    def _class(self, refs: int, i: int) -> int:
        groups = {"system": 0, "tool": 0, "reasoning": 1, "decode": 2}
        tg = groups.get(self.types[i], 3) if i < len(self.types) else 3
        return class_of(refs, i == self.last_i, tg, self.turn, self.size_g)

    def _link(self, key: int) -> None:
        c, self.prev = self.prev, key
        if c is not None and c in self.cls and c not in self.parent:
            self.parent[c] = key

    def _tick(self) -> None:
        self.t += 1
        if self.t < self.next_cfg or not self.p.learn:  # frozen: p_c never change
            return
        tr = tn = 0.0
        for a, b in zip(self.reused, self.ended):
            tr += a
            tn += b
        if tn > 0:
            k, pool = self.p.prior, tr / tn
            self.prob = [(a + k * pool) / (b + k) for a, b in zip(self.reused, self.ended)]
        self.reused = [x * self.p.decay for x in self.reused]
        self.ended = [x * self.p.decay for x in self.ended]
        self.next_cfg = self.t + max(self.p.min_interval, len(self.cls))

    def on_hit(self, key: int, i: int, now: float) -> None:  # type: ignore[override]
        self.reused[self.cls[key]] += 1.0
        self.ended[self.cls[key]] += 1.0
        self.refs[key] += 1
        self.cls[key], self.last[key] = self._class(self.refs[key], i), self.t
        self._link(key)
        self._tick()

    def on_insert(self, key: int, tokens: int, i: int, now: float) -> None:  # type: ignore[override]
        self.refs[key] = 0
        if key in self.ghost:
            c, refs = self.ghost.pop(key)
            self.reused[c] += 1.0
            self.refs[key] = refs + 1
        self.cls[key], self.last[key] = self._class(self.refs[key], i), self.t
        self._link(key)
        self._tick()

    def victim(self, now: float) -> int:
        named = set(self.parent.values())
        t1 = self.t + 1
        key = min((k for k in self.cls if k not in named),
                  key=lambda k: (self.prob[self.cls[k]] / (t1 - self.last[k]), self.last[k]))
        self.ghost[key] = (self.cls[key], self.refs[key])
        self.ended[self.cls[key]] += 1.0
        for table in (self.cls, self.last, self.refs, self.parent):
            table.pop(key, None)
        while len(self.ghost) > max(64, int(self.p.ghost_factor * len(self.cls))):
            self.ghost.popitem(last=False)
        if self.prev == key:
            self.prev = None
        self.victims.append(key)
        return key

    def __contains__(self, key: object) -> bool:
        return key in self.cls

    def __len__(self) -> int:
        return len(self.cls)


class _Logged(SAECacheReuse):
    def __init__(self, cap: int, **kw: object) -> None:
        super().__init__(cap, **kw)  # type: ignore[arg-type]
        self.victims: list[int] = []

    def victim(self, now: float) -> int:  # type: ignore[override]
        self.victims.append(super().victim(now))  # type: ignore[arg-type]
        return self.victims[-1]


@pytest.mark.parametrize("workload,sessions,cap,kw", [
    ("chat", 40, "5%", {"min_interval": 64}), ("tool", 12, "8%", {"min_interval": 64}),
    ("mix", 40, "4%", {"min_interval": 128, "output_length": False}), ("arena", 120, "10%", {"min_interval": 512, "ghost_factor": 2.0})])
def test_same_victims_and_learned_probabilities_as_a_plain_reference(
        workload: str, sessions: int, cap: str, kw: dict[str, object]) -> None:
    from aicache.sim.prefix import working_set_tokens
    from aicache.units import parse_size

    reqs, labels = load_requests(workload=workload, sessions=sessions, seed=3)
    c = parse_size(cap, total=working_set_tokens(reqs), what="cap")
    pol = _Logged(c, **kw)
    ref = _Reference(c, ReuseParams(**kw))  # type: ignore[arg-type]
    a = simulate(reqs, pol, c, labels=labels)
    b = simulate(reqs, ref, c, labels=labels)
    assert len(ref.victims) > 300
    assert pol.victims == ref.victims
    assert pol.prob == ref.prob and len(set(pol.prob)) > 2  # compared under learned p_c
    assert a.hit_tokens == b.hit_tokens


def test_a_leaf_touched_again_in_its_class_ranks_by_its_newest_touch() -> None:
    """Block 1's third hit keeps its class (hits capped at 2+), so its entry from the
    second hit is still in that class's heap when block 2 arrives; block 2 is the older
    block at the victim and must go first."""
    pol = SAECacheReuse(100)
    v = RequestView()
    v.session_id, v.turn, v.block_types, v.block_tokens, v.input_length = "s", 1, ["user"], 4, 4
    for key, hit in ((1, False), (1, True), (1, True), (2, False), (1, True)):
        v.hash_ids = [key]
        pol.begin(v, 0.0)
        if hit:
            pol.on_hit(key, 0, 0.0)
        else:
            pol.on_insert(key, 4, 0, 0.0)
        pol.end(0.0)
    assert [pol.victim(0.0), pol.victim(0.0)] == [2, 1]


def test_frozen_policy_replays_the_imported_probabilities_as_a_plain_reference() -> None:
    """The mismatch setup: learn on one workload, export, freeze, replay another. The frozen
    policy's victims are the plain reference's with p_c held at the imported values, its p_c
    and its export stay the imported state, and the imported p_c matter (the order differs
    from the same rule with equal p_c, and from learning online)."""
    from aicache.sim.prefix import working_set_tokens
    from aicache.units import parse_size

    fit_reqs, fit_labels = load_requests(workload="chat", sessions=40, seed=100)
    fit = SAECacheReuse(1, min_interval=64)
    simulate(fit_reqs, fit, "5%", labels=fit_labels)
    st = fit.export_state()
    assert st.prob == fit.prob and len(set(st.prob)) > 2
    assert st == ReuseState(**json.loads(json.dumps(st.to_dict())))  # survives a JSON round trip

    reqs, labels = load_requests(workload="mix", sessions=40, seed=4)
    c = parse_size("5%", total=working_set_tokens(reqs), what="cap")
    kw = {"min_interval": 64, "learn": False}
    pol = _Logged(c, state=st.to_dict(), **kw)
    ref = _Reference(c, ReuseParams(**kw), state=st)  # type: ignore[arg-type]
    a = simulate(reqs, pol, c, labels=labels)
    b = simulate(reqs, ref, c, labels=labels)
    assert len(ref.victims) > 300 and pol.victims == ref.victims
    assert a.hit_tokens == b.hit_tokens
    assert pol.prob == st.prob and pol.export_state() == st
    flat = _Reference(c, ReuseParams(**kw))  # type: ignore[arg-type]
    online = _Logged(c, min_interval=64)
    simulate(reqs, flat, c, labels=labels)
    simulate(reqs, online, c, labels=labels)
    assert pol.victims != flat.victims and pol.victims != online.victims


def test_imported_state_warm_starts_learning_as_the_reference_does() -> None:
    """An import with learning on continues from the exported p_c and counters: the same
    victims and learned p_c as the reference started from that state; a bad state is refused."""
    from aicache.sim.prefix import working_set_tokens
    from aicache.units import parse_size

    fit_reqs, fit_labels = load_requests(workload="tool", sessions=12, seed=100)
    fit = SAECacheReuse(1, min_interval=64)
    simulate(fit_reqs, fit, "8%", labels=fit_labels)
    st = fit.export_state()
    assert SAECacheReuse(10, state=st).export_state() == st  # nothing lost on import
    reqs, labels = load_requests(workload="chat", sessions=40, seed=4)
    c = parse_size("5%", total=working_set_tokens(reqs), what="cap")
    pol = _Logged(c, state=st, min_interval=64)
    ref = _Reference(c, ReuseParams(min_interval=64), state=st)
    simulate(reqs, pol, c, labels=labels)
    simulate(reqs, ref, c, labels=labels)
    assert len(ref.victims) > 300 and pol.victims == ref.victims
    assert pol.prob == ref.prob and pol.prob != st.prob
    with pytest.raises(ValueError, match="ReuseState"):
        SAECacheReuse(10, state={"prob": [0.5], "reused": [0.0], "ended": [0.0]})
