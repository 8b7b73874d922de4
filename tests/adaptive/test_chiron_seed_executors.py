"""The seed's executors (``executors="seed"``, ``--executors seed``, system ``chiron-seed``),
each pinned on a hand-made block sequence against a brute-force reference, beside ours:

* sequential: the seed's eager eviction removes a block once read — read blocks leave first,
  least recently read first, before any unread (prefetched) block; ours takes the most
  recently read first (MRU);
* random: no prefetch at all (ours: the rest of a multi-block sample), reject when full;
* skewed: plain LRU (ours: segmented LRU).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import OrderedDict

import pytest

from aicache.adaptive.controller import ChironParams
from aicache.adaptive.executors import (
    EagerEviction,
    SeedEagerEviction,
    make_executor,
)
from aicache.datacache.policy.registry import make_system
from aicache.errors import BadInput
from aicache.policies.eviction.lru import LRU
from aicache.policies.eviction.slru import AdaptiveSLRU


def replay_loop(pattern: str, executors: str, trace: list[int], capacity: int) -> tuple[int, list[int]]:
    """A one-block-per-id driver: hit if resident, else evict until it fits and insert.
    Returns (hits, victims in order)."""
    ex = make_executor(pattern, capacity, random.Random(0), prefetch="none", executors=executors)
    resident: set[int] = set()
    hits, victims = 0, []
    for t, b in enumerate(trace):
        hit = b in resident
        hits += hit
        ex.on_access("u", b, 1, hit, float(t))
        if not hit:
            while len(resident) >= capacity:
                v = ex.eviction.victim(float(t))
                resident.remove(v)
                victims.append(v)
            resident.add(b)
            ex.on_insert(b, 1, float(t), False)
    return hits, victims


def removed_once_read(trace: list[int], capacity: int) -> tuple[int, list[int]]:
    """Brute force of "a block is removed once read", space given back when next needed:
    the victim is always the least recently read resident block."""
    last_read: dict[int, int] = {}
    hits, victims = 0, []
    for t, b in enumerate(trace):
        if b in last_read:
            hits += 1
        else:
            while len(last_read) >= capacity:
                v = min(last_read, key=last_read.__getitem__)
                del last_read[v]
                victims.append(v)
        last_read[b] = t
    return hits, victims


def test_seed_eager_matches_removed_once_read_on_a_loop_larger_than_the_cache() -> None:
    trace = [*range(10), *range(10), 9, 8, 0]
    assert replay_loop("sequential", "seed", trace, 5) == removed_once_read(trace, 5)
    hits, victims = replay_loop("sequential", "seed", trace, 5)
    assert hits == 2 and victims[:5] == [0, 1, 2, 3, 4]  # pass two misses throughout; 9, 8 hit
    # ours keeps the older part of the pass (MRU among read blocks): 0..3 hit in pass two
    ours_hits, ours_victims = replay_loop("sequential", "ours", trace, 5)
    assert ours_victims[:5] == [4, 5, 6, 7, 8] and ours_hits > hits


def test_seed_eager_evicts_read_blocks_before_unread_prefetched_ones() -> None:
    ev = SeedEagerEviction(100)
    ev.on_prefetch_insert(7, 1, 0.0)  # prefetched, not read
    ev.on_insert(1, 1, 1.0)  # demand misses: read as they arrive
    ev.on_insert(2, 1, 2.0)
    ev.on_prefetch_insert(8, 1, 3.0)
    ev.on_hit(8, 1, 4.0)  # the prefetched block is read now: it joins the read ones, last
    ev.on_hit(1, 1, 5.0)  # a re-read moves 1 behind 2 and 8
    assert list(ev.keys()) == [2, 8, 1, 7]
    assert [ev.victim(6.0) for _ in range(4)] == [2, 8, 1, 7]
    ours = EagerEviction(100)
    for b in (1, 2):
        ours.on_insert(b, 1, 0.0)
    ours.on_prefetch_insert(7, 1, 0.0)
    assert [ours.victim(1.0) for _ in range(3)] == [2, 1, 7]  # MRU first


def test_seed_random_never_prefetches_and_rejects_when_full() -> None:
    # shuffled 3-block samples, each read whole: ours fetches the rest of a sample once the
    # sample's length is known; the seed's random executor fetches nothing
    trace = [30, 31, 32, 90, 91, 92, 60, 61, 62, 0, 1, 2, 45, 46, 47]
    for executors, want_prefetch in (("seed", False), ("ours", True)):
        ex = make_executor("random", 10, random.Random(0), executors=executors)
        asked = [p for t, b in enumerate(trace) for p in ex.on_access("u", b, 1, False, float(t))]
        assert bool(asked) is want_prefetch, executors
        assert ex.admit(1, 9) and not ex.admit(1, 10)  # reject new blocks once full
    ours = make_executor("random", 10, random.Random(0))
    asked = {b: list(ours.on_access("u", b, 1, False, float(t))) for t, b in enumerate(trace)}
    assert asked[60] == [61, 62] and asked[0] == [1, 2]


def test_seed_skewed_is_plain_lru() -> None:
    # 1 and 2 re-read, then a one-off 3, then 2 again: LRU evicts 1 (least recent);
    # segmented LRU keeps both re-read blocks and takes the one-off
    seed = make_executor("skewed", 3, random.Random(0), executors="seed")
    ours = make_executor("skewed", 3, random.Random(0))
    assert isinstance(seed.eviction, LRU) and isinstance(ours.eviction, AdaptiveSLRU)
    for ex in (seed, ours):
        ex.on_insert(1, 1, 0.0, False)
        ex.on_insert(2, 1, 1.0, False)
        ex.on_access("u", 2, 1, True, 2.0)
        ex.on_access("u", 1, 1, True, 3.0)
        ex.on_insert(3, 1, 4.0, False)
        ex.on_access("u", 2, 1, True, 5.0)
    assert seed.eviction.victim(6.0) == 1
    assert ours.eviction.victim(6.0) == 3
    # and against a brute-force LRU on a random hit/insert sequence
    rng = random.Random(5)
    ex = make_executor("skewed", 8, random.Random(0), executors="seed", prefetch="none")
    ref: OrderedDict[int, None] = OrderedDict()
    for t in range(2000):
        b = rng.randrange(20)
        hit = b in ref
        ex.on_access("u", b, 1, hit, float(t))
        if hit:
            ref.move_to_end(b)
            continue
        if len(ref) >= 8:
            assert ex.eviction.victim(float(t)) == ref.popitem(last=False)[0]
        ref[b] = None
        ex.on_insert(b, 1, float(t), False)


def test_params_and_system_name() -> None:
    assert ChironParams().shape_reflection is True and ChironParams().executors == "ours"
    seed = ChironParams(executors="seed")
    assert seed.shape_reflection is False  # the seed has no shape reflection
    assert ChironParams(executors="seed", shape_reflection=True).shape_reflection is True
    with pytest.raises(BadInput, match="valid executor sets: ours, seed"):
        ChironParams(executors="mine")
    sys_ = make_system("chiron-seed", 1 << 30, 4096)
    assert sys_.params.executors == "seed"  # type: ignore[attr-defined]
    sys_.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", *args], capture_output=True, text=True)


def test_cli_executors_flag_is_the_chiron_seed_system() -> None:
    base = ("sim", "datacache", "--workload", "T5", "--scale", "0.02", "--json")
    flag = _cli(*base, "--system", "chiron", "--executors", "seed")
    named = _cli(*base, "--system", "chiron-seed")
    ours = _cli(*base, "--system", "chiron")
    assert flag.returncode == named.returncode == ours.returncode == 0, flag.stderr + named.stderr
    a, b, c = json.loads(flag.stdout), json.loads(named.stdout), json.loads(ours.stdout)
    a.pop("system"), b.pop("system"), c.pop("system")
    assert a == b and a["params"]["executors"] == "seed" and c["params"]["executors"] == "ours"
    bad = _cli(*base, "--system", "juicefs", "--executors", "seed")
    assert bad.returncode == 2 and "--executors applies to --system chiron" in bad.stderr


def test_mount_executors_flag_maps_to_chiron_seed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import argparse

    from aicache.cli.mount import add_engine_args, engine_config

    p = argparse.ArgumentParser()
    add_engine_args(p)
    base = ["--cache-dir", str(tmp_path / "c"), "--cache-size", "1GiB"]
    args = p.parse_args([*base, "--executors", "seed"])
    engine_config(args)
    assert args.policy == "chiron-seed"  # what the engine (and a daemon) is then built with
    args = p.parse_args([*base, "--policy", "juicefs", "--executors", "seed"])
    with pytest.raises(BadInput, match="--executors applies to --policy chiron"):
        engine_config(args)
    bad = _cli("mount", str(tmp_path), str(tmp_path), *base, "--policy", "alluxio", "--executors", "seed")
    assert bad.returncode == 2 and "--executors applies to --policy chiron" in bad.stderr
