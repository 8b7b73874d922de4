"""The compiled hot path (aicache.native) against the pure-Python sources it is built from.

The same trace is replayed in this process (compiled modules where the install built them)
and in a fresh interpreter with ``AICACHE_PURE_PYTHON=1`` (the ``.py`` sources); every
request's hit, the evictions and the resident set must agree for every policy, in objects
and bytes mode. ``Cache.request_batch`` (the simulator's loop) must equal ``request`` called
once per request. ``make test-pure`` runs the lockstep tests on the pure path too.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aicache.native import COMPILED, PURE_ENV, compiled_modules, pure_requested
from aicache.policies import make_eviction
from aicache.sim.cache import Cache

POLICIES = ["lru", "fifo", "clock", "sieve", "s3fifo", "arc", "lfu", "2-random", "reject-when-full"]
MODES = ["objects", "bytes"]

_REPLAY = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_native import replay
from aicache.native import compiled_modules
d = np.load(sys.argv[2])
out = {f"{p}/{m}": replay(p, d["ids"], d["sizes"], m) for p in json.loads(sys.argv[3])
       for m in ("objects", "bytes")}
print(json.dumps({"compiled": compiled_modules(), "runs": out}))
"""


_PREFIX_REPLAY = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_native import prefix_replay
from aicache.native import compiled_modules
print(json.dumps({"compiled": compiled_modules(),
                  "runs": {p: prefix_replay(p) for p in json.loads(sys.argv[2])}}))
"""
#: the prefix-cache policies of the compiled KV modules (LRUPrefix, LPC, the eviction
#: adapter, the three priority SAECache variants and the default saecache, the reuse variant)
PREFIX_POLICIES = ["lru", "lpc", "s3fifo", "saecache", "saecache-seed", "saecache-priority",
                   "saecache-duel"]


def prefix_replay(policy: str) -> dict[str, object]:
    """Every victim in order, and the replay's hit tokens, of ``policy`` on a generated
    mix workload (chat, arena, tool sessions) at an eighth of its working set."""
    from aicache.kv.prefix_policies import PrefixPolicy, RequestView, make_prefix_policy
    from aicache.sim.prefix import load_requests, simulate, working_set_tokens

    reqs, _ = load_requests(workload="mix", sessions=120, seed=4)
    cap = working_set_tokens(reqs) // 8
    inner = make_prefix_policy(policy, cap, seed=2)
    victims: list[object] = []

    class Logged(PrefixPolicy):  # delegates every event, records the victims
        name = inner.name
        needs_future = inner.needs_future

        def begin(self, view: RequestView, now: float) -> None:
            inner.begin(view, now)

        def begin_decode(self, now: float) -> None:
            inner.begin_decode(now)

        def end(self, now: float) -> None:
            inner.end(now)

        def on_hit(self, key: object, i: int, now: float) -> None:
            inner.on_hit(key, i, now)

        def on_insert(self, key: object, tokens: int, i: int, now: float) -> None:
            inner.on_insert(key, tokens, i, now)

        def victim(self, now: float) -> object:
            victims.append(inner.victim(now))
            return victims[-1]

        def set_next_access(self, next_vtime: int) -> None:
            inner.set_next_access(next_vtime)

        def __contains__(self, key: object) -> bool:
            return key in inner

        def __len__(self) -> int:
            return len(inner)

    r = simulate(reqs, Logged(cap), cap)
    return {"victims": victims, "hit_tokens": r.hit_tokens, "evictions": r.evictions}


def test_compiled_and_pure_prefix_policies_evict_the_same_blocks(tmp_path: Path) -> None:
    """The KV prefix policies (SAECache among them) on both paths: same victims, in order."""
    env = {**os.environ, PURE_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", _PREFIX_REPLAY, str(Path(__file__).parent),
                          json.dumps(PREFIX_POLICIES)],
                         check=True, capture_output=True, text=True, env=env)
    pure = json.loads(out.stdout.strip().splitlines()[-1])
    assert pure["compiled"] == []
    for p in PREFIX_POLICIES:
        here = json.loads(json.dumps(prefix_replay(p)))
        assert len(here["victims"]) > 500, p  # the capacity forces many decisions
        assert here == pure["runs"][p], p


def _trace(n: int = 6_000, n_obj: int = 800, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_obj + 1) ** 0.9
    ids = rng.permutation(n_obj)[rng.choice(n_obj, size=n, p=p / p.sum())].astype(np.int64)
    obj_size = np.exp(rng.uniform(0, np.log(4096), n_obj)).astype(np.int64) + 1
    return ids, obj_size[ids]


def replay(policy: str, ids: np.ndarray, sizes: np.ndarray, mode: str) -> dict[str, object]:
    """Hits per request (as a 0/1 string), evictions and resident keys at a tenth of the
    working set."""
    _, first = np.unique(ids, return_index=True)
    ws = len(first) if mode == "objects" else int(sizes[first].sum())
    cap = ws // 10
    cache = Cache(cap, make_eviction(policy, cap, rng=random.Random(3)), mode)
    hits = [cache.request(k, s, float(t))
            for t, (k, s) in enumerate(zip(ids.tolist(), sizes.tolist()))]
    return {"hits": "".join("1" if h else "0" for h in hits),
            "evictions": cache.stats.evictions, "resident": sorted(cache.keys())}


def test_compiled_and_pure_paths_agree_on_every_request(tmp_path: Path) -> None:
    ids, sizes = _trace()
    np.savez(tmp_path / "t.npz", ids=ids, sizes=sizes)
    env = {**os.environ, PURE_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", _REPLAY, str(Path(__file__).parent),
                          str(tmp_path / "t.npz"), json.dumps(POLICIES)],
                         check=True, capture_output=True, text=True, env=env)
    pure = json.loads(out.stdout.strip().splitlines()[-1])
    assert pure["compiled"] == []  # the switch really selects the sources
    for p in POLICIES:
        for m in MODES:
            here = replay(p, ids, sizes, m)
            assert "1" in here["hits"] and "0" in here["hits"]  # type: ignore[operator]
            assert here == pure["runs"][f"{p}/{m}"], (p, m)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("policy", POLICIES + ["belady"])
def test_request_batch_equals_one_request_at_a_time(policy: str, mode: str) -> None:
    ids, sizes = _trace(n=3_000, seed=9)
    cap = (len(np.unique(ids)) if mode == "objects" else int(sizes.sum()) // 8) // 10
    times = np.arange(len(ids), dtype=np.float64)
    from aicache.traces.formats.oracle_general import next_access_times

    nxt = next_access_times(ids).tolist()
    one = Cache(cap, make_eviction(policy, cap, rng=random.Random(1)), mode)
    batch = Cache(cap, make_eviction(policy, cap, rng=random.Random(1)), mode)
    future = one.policy.needs_future
    for i, (k, s) in enumerate(zip(ids.tolist(), sizes.tolist())):
        if future:
            one.policy.set_next_access(nxt[i])
        one.request(k, s, float(i))
    half = len(ids) // 2  # two batches: state carries over between calls
    for lo, hi in ((0, half), (half, len(ids))):
        batch.request_batch(ids[lo:hi].tolist(), sizes[lo:hi].tolist(), times[lo:hi].tolist(),
                            nxt[lo:hi] if future else None)
    assert batch.stats == one.stats and one.stats.hits > 0
    assert sorted(batch.keys()) == sorted(one.keys())


def test_all_or_none_of_the_hot_path_is_compiled() -> None:
    """A partial build (a shim without its shared library, a stale extension) would mix
    paths; where any extension exists beside its source, all must load compiled."""
    here = compiled_modules()
    if pure_requested():
        assert here == []
    else:
        assert here in ([], list(COMPILED))


def test_sources_edited_after_the_build_are_reported_stale(tmp_path: Path) -> None:
    import importlib.machinery

    from aicache.native import stale_sources

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    stems = [tmp_path.joinpath(*name.split(".")) for name in COMPILED[:2]]
    for stem in stems:
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_name(stem.name + ".py").write_text("")
        stem.with_name(stem.name + suffix).write_bytes(b"")
    assert stale_sources(str(tmp_path)) == []  # built together: not stale
    later = stems[1].with_name(stems[1].name + ".py")
    built = os.stat(stems[1].with_name(stems[1].name + suffix)).st_mtime
    os.utime(later, (built + 60, built + 60))  # the source edited a minute after the build
    assert stale_sources(str(tmp_path)) == [COMPILED[1]]
    # a module added to COMPILED after the build: a source without an extension beside
    # built ones would mix paths, so it counts; with no extension anywhere (a pure
    # install) nothing does
    added = tmp_path.joinpath(*COMPILED[2].split("."))
    added.parent.mkdir(parents=True, exist_ok=True)
    added.with_name(added.name + ".py").write_text("")
    assert stale_sources(str(tmp_path)) == [COMPILED[1], COMPILED[2]]
    for stem in stems:
        stem.with_name(stem.name + suffix).unlink()
    assert stale_sources(str(tmp_path)) == []


def test_every_compiled_abc_class_owns_its_abc_cache() -> None:
    # mypyc builds classes without ABCMeta.__new__; without their own caches all compiled
    # classes share one, and isinstance answers leak between them (aicache.compiled_abc)
    import abc
    import importlib

    from aicache.native import CYTHON

    shared = []
    for name in sorted(set(COMPILED) | set(CYTHON)):
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if isinstance(obj, abc.ABCMeta) and obj.__module__ == name and "_abc_impl" not in obj.__dict__:
                shared.append(f"{name}.{attr}")
    assert shared == []


def test_isinstance_answers_do_not_leak_between_policy_classes() -> None:
    from aicache.kv.prefix_policies import LRUPrefix, PrefixPolicy
    from aicache.kv.saecache import SAECache
    from aicache.policies.base import EvictionPolicy
    from aicache.policies.slotted import SlotPolicy

    lfu, lru = make_eviction("lfu", 10), make_eviction("lru", 10)
    # the answer for the base class first, then for a compiled sibling, then the base again
    assert isinstance(lfu, EvictionPolicy) and not isinstance(lfu, SlotPolicy) and isinstance(lfu, EvictionPolicy)
    assert not issubclass(type(lfu), SlotPolicy) and issubclass(type(lru), SlotPolicy)
    prefix = LRUPrefix(1000)
    assert not isinstance(prefix, SAECache) and isinstance(prefix, PrefixPolicy)
    assert not isinstance(prefix, SAECache) and isinstance(prefix, PrefixPolicy)


_SIMULATE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_native import simulate_counts
from aicache.native import compiled_modules
print(json.dumps({"compiled": compiled_modules(), "runs": simulate_counts(sys.argv[2])}))
"""
#: the policies ``sim cache`` replays on the slot core (slotcore.replay / replay_bytes)
SLOT_POLICIES = ["lru", "fifo", "clock", "sieve", "s3fifo", "arc"]


def simulate_counts(path: str) -> dict[str, object]:
    """``sim cache``'s counts for each slot-core policy and size mode on one trace file."""
    from aicache.sim.cache_sim import simulate

    out: dict[str, object] = {}
    for p in SLOT_POLICIES:
        for m in MODES:
            r = simulate(path, p, "10%", size_mode=m, fmt="oracle-general", progress=False)
            out[f"{p}/{m}"] = [r.requests, r.hits, r.evictions, r.miss_ratio, r.byte_miss_ratio,
                               r.cache_size, r.working_set]
    return out


def test_compiled_and_pure_slot_core_give_sim_cache_the_same_counts(tmp_path: Path) -> None:
    # the simulator's own loop (dense slots, slotcore.replay) on both paths, in the suite
    # that CI runs (make test-pure covers the rest of the lockstep tests pure)
    from lcs_oracle import write_oracle_general

    ids, sizes = _trace(n=20_000, n_obj=3_000, seed=11)
    write_oracle_general(tmp_path / "t.og", ids, sizes)
    env = {**os.environ, PURE_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", _SIMULATE, str(Path(__file__).parent),
                          str(tmp_path / "t.og")], check=True, capture_output=True, text=True, env=env)
    pure = json.loads(out.stdout.strip().splitlines()[-1])
    assert pure["compiled"] == []
    here = json.loads(json.dumps(simulate_counts(str(tmp_path / "t.og"))))
    for key, counts in here.items():
        assert 0 < counts[1] < counts[0], key  # some hits, some misses
    assert here == pure["runs"]
