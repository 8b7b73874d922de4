"""saecache-reuse: its victim against a brute force that rebuilds the prefix tree from the
trace itself, leaves only, determinism, and learning that shows in the victim order."""

from __future__ import annotations

import random

import pytest

from aicache.kv.prefix_policies import RequestView
from aicache.kv.saecache_reuse import SAECacheReuse, class_of, size_group
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
