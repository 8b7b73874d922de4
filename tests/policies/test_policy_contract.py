"""One contract, every registered eviction policy (``EVICTION.names()``).

A new policy registered in :mod:`aicache.policies` is tested here with no new test code,
like fsspec's parametrised cache tests. Hypothesis drives a :class:`Cache` with random
demand requests, prefetch inserts and removals, in objects and bytes mode, and after every
step checks what any policy must guarantee:

* the cache never holds more than its capacity, and its byte count is the sum of its sizes;
* a hit fetches and inserts nothing, and evicts nothing unless the policy declares
  ``self_evicting`` (LIRS, W-TinyLFU), whose hits may only drop keys, each counted;
* the policy's key set equals the cache's (``keys``, ``__len__`` and ``__contains__``),
  and ``first_key`` is the first key ``keys`` yields (None when empty);
* ``victim()`` (tried on a deep copy) names a resident key and forgets it;
* ``on_remove`` works for any resident key, and the run goes on normally afterwards;
* the same seed gives the same hits and the same final contents;
* a class that declares ``__slots__`` (all through its bases) has no instance ``__dict__``.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aicache.errors import BadInput, UnknownName
from aicache.policies import EVICTION, make_eviction
from aicache.policies.base import EvictionPolicy
from aicache.sim.cache import Cache

N_IDS = 30
Op = tuple[str, int]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(["objects", "bytes"]))
    sizes = draw(st.lists(st.integers(1, 300), min_size=N_IDS, max_size=N_IDS))
    cap = draw(st.integers(10, 25) if mode == "objects" else st.integers(10, 2_000))
    op = st.one_of(
        st.tuples(st.just("get"), st.integers(0, N_IDS - 1)),
        st.tuples(st.just("get"), st.integers(0, 8)),  # a hot set, so there are hits
        st.tuples(st.just("prefetch"), st.integers(0, N_IDS - 1)),
        st.tuples(st.just("remove"), st.integers(0, 1_000)),
    )
    ops = draw(st.lists(op, min_size=1, max_size=150))
    return {"mode": mode, "sizes": sizes, "cap": cap, "ops": ops,
            "seed": draw(st.integers(0, 2**32))}


def _next_gets(ops: list[Op]) -> list[int]:
    """For each op, the index of the next demand request for the same id (-1: none)."""
    nxt = [-1] * len(ops)
    upcoming: dict[int, int] = {}
    for t in range(len(ops) - 1, -1, -1):
        kind, key = ops[t]
        if kind != "remove":
            nxt[t] = upcoming.get(key, -1)
        if kind == "get":
            upcoming[key] = t
    return nxt


def _build(name: str, cap: int, seed: int) -> EvictionPolicy:
    try:
        return make_eviction(name, cap, rng=random.Random(seed))
    except BadInput as exc:  # a policy may refuse a configuration, with a one-line reason
        assert "\n" not in str(exc) and str(cap) in str(exc)
        assume(False)
        raise


def _check_consistent(policy: EvictionPolicy, cache: Cache, cap: int) -> None:
    assert 0 <= cache.used <= cap
    assert cache.used == sum(cache.sizes.values())
    keys = set(cache.keys())
    assert set(policy.keys()) == keys
    assert len(policy) == len(keys)
    assert policy.first_key() == next(iter(policy.keys()), None)  # the O(1) peek = keys()[0]
    assert all(k in policy for k in keys)
    assert -1 not in policy


def _drive(name: str, sc: dict[str, Any]) -> tuple[list[bool], set[int]]:
    cap, sizes, ops = sc["cap"], sc["sizes"], sc["ops"]
    policy = _build(name, cap, sc["seed"])
    cache = Cache(cap, policy, size_mode=sc["mode"])
    nxt = _next_gets(ops)
    hits: list[bool] = []
    for t, (kind, x) in enumerate(ops):
        now = float(t)
        if kind == "remove":
            if len(cache):
                key = sorted(cache.keys())[x % len(cache)]  # type: ignore[type-var]
                assert cache.remove(key)
                assert key not in policy
        else:
            if policy.needs_future:
                policy.set_next_access(nxt[t])
            if kind == "prefetch":
                cache.insert(x, sizes[x], now)
            else:
                resident = x in cache
                before = (set(cache.keys()), cache.used, cache.stats.evictions)
                hit = cache.request(x, sizes[x], now)
                assert hit == resident
                if hit and not policy.self_evicting:
                    assert (set(cache.keys()), cache.used, cache.stats.evictions) == before
                elif hit:
                    dropped = before[0] - set(cache.keys())
                    assert set(cache.keys()) <= before[0] and x in cache
                    assert cache.stats.evictions == before[2] + len(dropped)
                hits.append(hit)
        _check_consistent(policy, cache, cap)
        if t % 5 == 0 and len(cache):
            trial = copy.deepcopy(policy)
            victim = trial.victim(now)
            assert victim in cache
            assert victim not in trial and len(trial) == len(policy) - 1
    return hits, set(cache.keys())  # type: ignore[arg-type]


@pytest.mark.parametrize("name", EVICTION.names())
@given(sc=scenarios())
def test_eviction_policy_contract(name: str, sc: dict[str, Any]) -> None:
    first = _drive(name, sc)
    assert _drive(name, sc) == first  # same seed => same result


def _fixed_attributes(cls: type) -> bool:
    """Whether ``cls`` declares its attributes: ``__slots__`` in Python, or compiled by
    mypyc (aicache.native), whose classes keep attributes in C fields and list them in
    ``__mypyc_attrs__`` instead."""
    return "__slots__" in cls.__dict__ or "__mypyc_attrs__" in cls.__dict__


@pytest.mark.parametrize("name", EVICTION.names())
def test_policy_instances_have_no_dict_when_slotted(name: str) -> None:
    policy = make_eviction(name, 100)
    cls = type(policy)
    assert isinstance(policy, EvictionPolicy) and policy.capacity == 100
    if all(_fixed_attributes(c) for c in cls.__mro__[:-1]):
        assert not hasattr(policy, "__dict__")
    assert _fixed_attributes(cls), f"{cls.__name__} should declare __slots__ (hot path)"


def test_unknown_policy_lists_the_valid_names() -> None:
    with pytest.raises(UnknownName) as exc:
        make_eviction("lruu", 10)
    msg = str(exc.value)
    assert "'lruu'" in msg and "\n" not in msg
    for name in EVICTION.names():
        assert name in msg


def test_s3fifo_refuses_a_capacity_without_a_small_queue() -> None:
    """libCacheSim aborts on this configuration; we raise BadInput naming the fix."""
    with pytest.raises(BadInput, match="capacity 9 .*at least 10"):
        make_eviction("s3fifo", 9)
    assert make_eviction("s3fifo", 10).capacity == 10


@pytest.mark.parametrize("name", EVICTION.names())
@given(sc=scenarios())
def test_policy_driven_like_the_data_cache_engine(name: str, sc: dict[str, Any]) -> None:
    """The data-cache engine's protocol (``policies/system.py``): ``on_hit`` on a hit; on a
    miss ``victim`` until the block fits, then ``on_insert`` — no ``on_miss``, no
    ``drain_evicted``. Every policy must keep its key set equal to the store's there too
    (a self-evicting one hands what it dropped to the next ``victim`` calls)."""
    cap, sizes, ops = sc["cap"], sc["sizes"], sc["ops"]
    policy = _build(name, cap, sc["seed"])
    if policy.needs_future or policy.may_reject:
        return  # Belady needs next-access times and RejectWhenFull an admit call: not this protocol
    store: dict[int, int] = {}
    for t, (kind, x) in enumerate(ops):
        if kind == "remove":
            if store:
                key = sorted(store)[x % len(store)]
                del store[key]
                policy.on_remove(key)
            continue
        size = 1 if sc["mode"] == "objects" else sizes[x]
        if x in store:
            policy.on_hit(x, size, float(t))
        elif size <= cap:
            while sum(store.values()) + size > cap:
                victim = policy.victim(float(t))
                assert victim in store
                del store[victim]
            if policy.on_insert(x, size, float(t)) is not False:
                store[x] = size
        assert set(policy.keys()) == set(store) and len(policy) == len(store)
