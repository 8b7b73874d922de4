"""The slot-array policy core (aicache.policies.slotcore) against libCacheSim and against
its own two drivers.

* The simulator's path (``sim.cache_sim.simulate`` → ``slotcore.replay`` over dense slots)
  gives libCacheSim's per-request hits (``lcs_run``: one ``get`` per request), request by
  request, for the six policies; ``simulate`` reports libCacheSim's ``process_trace`` miss
  ratios on the same file, in objects and bytes mode (``replay_bytes``), and ``Cache``'s
  counts.
* The key-level adapter (``SlotPolicy`` under ``Cache``) with arbitrary (string) keys and
  slot recycling gives the same hits as the replay over dense ids that never recycles, and
  holds no more slots than the keys it keeps resident or in a ghost list.
* ``SlotMap`` numbers ids densely in order of first appearance (a dict is the reference).
* A pickled policy (a Ray worker, a copy) resumes with the same state: the same victims.

``make test-pure`` runs this file on the pure-Python path as well (``AICACHE_PURE_PYTHON``).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from aicache.policies import make_eviction, slotcore
from aicache.policies.slotted import SlotPolicy
from aicache.sim.cache import Cache
from aicache.sim.cache_sim import replayable, simulate
from lcs_oracle import lcs_process_trace, lcs_run, write_oracle_general

SIX = ["lru", "fifo", "clock", "sieve", "s3fifo", "arc"]


def _zipf(n: int, objects: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, objects + 1, dtype=np.float64) ** 0.9
    ranks = rng.choice(objects, size=n, p=p / p.sum())
    # large, sparse ids: the map must not rely on them being small
    return (rng.permutation(objects).astype(np.uint64) * 7919 + (1 << 40))[ranks]


def _replay_hits(policy: str, ids: np.ndarray, cap: int) -> np.ndarray:
    """Per-request hits of ``slotcore.replay``, one request per call (state carries)."""
    pol = make_eviction(policy, cap, rng=random.Random(0))
    assert isinstance(pol, SlotPolicy)
    slots = slotcore.SlotMap()
    dense = np.empty(len(ids), dtype=np.int32)
    slots.map(np.ascontiguousarray(ids, dtype=np.uint64), dense)
    pol.core.reserve(slots.n)
    one = np.ones(1, dtype=np.int64)
    hits = np.zeros(len(ids), dtype=bool)
    used = 0
    for k in range(len(ids)):
        h, _, _, _, used = slotcore.replay(pol.core, dense[k:k + 1], one, cap, used)
        hits[k] = h == 1
    return hits


@pytest.mark.parametrize("policy", SIX)
def test_replay_hits_equal_libcachesim_request_by_request(policy: str) -> None:
    ids = _zipf(6_000, 1_500, seed=3)
    sizes = np.ones(len(ids), dtype=np.int64)
    for cap in (20, 150):
        ours = _replay_hits(policy, ids, cap)
        ref = lcs_run(policy, ids, sizes, cap, "objects").hits
        bad = np.flatnonzero(ours != ref)
        assert not len(bad), f"{policy} cap {cap}: first mismatch at request {bad[0]}"
        assert 0 < ours.sum() < len(ids)


@pytest.mark.parametrize("mode", ["objects", "bytes"])
@pytest.mark.parametrize("policy", SIX)
def test_simulate_takes_the_slot_path_and_equals_process_trace(policy: str, mode: str,
                                                              tmp_path: Path) -> None:
    assert replayable(type(make_eviction(policy, 100)))
    ids = _zipf(20_000, 4_000, seed=5)
    sizes = np.random.default_rng(1).integers(1, 5000, len(ids))
    sizes = sizes[np.unique(ids, return_inverse=True)[1]]  # one size per object
    path = tmp_path / "t.og"
    write_oracle_general(path, ids, sizes)
    res = simulate(str(path), policy, "10%", size_mode=mode, fmt="oracle-general", progress=False)
    first = np.unique(ids, return_index=True)[1]
    assert res.working_set == (len(first) if mode == "objects" else int(sizes[first].sum()))
    assert res.requests == len(ids)
    mr, bmr = lcs_process_trace(policy, ids, sizes, res.cache_size, mode, tmp_path / "l.og")
    assert res.miss_ratio == pytest.approx(mr, abs=1e-12)
    if mode == "bytes":
        assert res.byte_miss_ratio == pytest.approx(bmr, abs=1e-12)
    # the same counts as Cache over the key-level policy (objects mode counts each
    # request's own size for the byte ratio, as Cache does)
    cache = Cache(res.cache_size, make_eviction(policy, res.cache_size), mode)
    for i, (k, s) in enumerate(zip(ids.tolist(), sizes.tolist())):
        cache.request(k, s, float(i))
    assert (res.hits, res.evictions) == (cache.stats.hits, cache.stats.evictions)
    assert res.byte_miss_ratio == pytest.approx(cache.stats.byte_miss_ratio, abs=1e-12)


@pytest.mark.parametrize("policy", SIX)
def test_adapter_recycles_slots_and_keeps_the_replays_hits(policy: str) -> None:
    # a long tail of one-time keys: without recycling the slot space would grow with it
    rng = np.random.default_rng(11)
    hot = _zipf(8_000, 300, seed=2)
    ids = np.where(rng.random(len(hot)) < 0.5, hot, np.arange(len(hot), dtype=np.uint64) + 1)
    cap = 60
    ref = _replay_hits(policy, ids, cap)
    pol = make_eviction(policy, cap, rng=random.Random(0))
    assert isinstance(pol, SlotPolicy)
    cache = Cache(cap, pol, "objects")
    hits = np.array([cache.request(f"k{k}", 1, float(i)) for i, k in enumerate(ids.tolist())])
    assert (hits == ref).all()
    assert len(pol) == len(cache) <= cap
    # slots in use = keys resident or remembered by a ghost list (S3-FIFO's ghost holds
    # 0.9 c, ARC's B1 + B2 at most c more than T1 + T2 — libCacheSim's bounds)
    live = len(pol._slot)
    assert live == sum(1 for s in range(len(pol._keys)) if pol.core.alive(s))
    assert live <= 2 * cap + 1
    assert pol.core.slots <= 2 * (2 * cap + 1)  # grown at most twofold past the peak


@pytest.mark.parametrize("policy", SIX)
def test_a_pickled_policy_resumes_with_the_same_state(policy: str) -> None:
    import pickle

    ids = _zipf(6_000, 400, seed=5).tolist()
    pol = make_eviction(policy, 300, rng=random.Random(0))
    cache = Cache(300, pol, "bytes")  # bytes: the per-list byte totals must travel too
    for i, k in enumerate(ids):
        cache.request(f"k{k}", 1 + k % 7, float(i))
    twin = pickle.loads(pickle.dumps(pol))
    assert twin.first_key() == pol.first_key() is not None
    # the victim order of the whole resident set depends on every list, count and total
    order = [pol.victim(0.0) for _ in range(len(pol))]
    assert [twin.victim(0.0) for _ in range(len(twin))] == order and len(order) > 10


def test_slot_map_numbers_ids_in_order_of_first_appearance() -> None:
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 1 << 63, 5_000, dtype=np.uint64)
    ids = np.concatenate([ids, ids[::-1], ids[:3000]])  # repeats, in another order
    m = slotcore.SlotMap()
    out = np.empty(len(ids), dtype=np.int32)
    half = len(ids) // 2
    m.map(ids[:half], out[:half])
    assert m.map(ids[half:], out[half:]) == 5_000  # grows several times from 1,024 buckets
    ref: dict[int, int] = {}
    expect = [ref.setdefault(k, len(ref)) for k in ids.tolist()]
    assert out.tolist() == expect
