"""The JuiceFS-Adaptive baseline at full strength: SFP reads file extents from metadata,
LeCaR's discount counts entries (blocks), not bytes.

* LeCaR ``discount="entries"`` is libCacheSim's LeCaR (``discount="capacity"``, checked
  against libcachesim in ``test_policies_vs_libcachesim.py``) wherever the two are
  comparable: unit sizes give the same victims; equal block sizes B at capacity k*B give the
  victims of the unit-size cache of k entries;
* SFP with metadata reads ahead in a file on its first read and fetches a predicted
  successor's whole extent; without it, only what it has seen;
* the simulator hands every system the workload's file extents (brute-force block table).
"""

from __future__ import annotations

import random

import pytest

from aicache.policies.eviction.lecar import LeCaR
from aicache.policies.prefetch.sfp import SFPPrefetcher
from aicache.sim.datacache import load_workload, simulate_datacache


def lecar_victims(trace: list[int], size: int, capacity: int, discount: str) -> tuple[list[int], float]:
    pol = LeCaR(capacity, rng=random.Random(7), discount=discount)
    used, victims = 0, []
    for b in trace:
        if b in pol:
            pol.on_hit(b, size, 0.0)
            continue
        pol.on_miss(b, size, 0.0)
        while used + size > capacity:
            victims.append(pol.victim(0.0))
            used -= size
        pol.on_insert(b, size, 0.0)
        used += size
    return victims, pol.dr


def zipf_trace(n: int, objects: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(objects)]
    return rng.choices(range(objects), weights, k=n)


def test_lecar_entries_is_libcachesims_lecar_where_comparable() -> None:
    trace = zipf_trace(20_000, 2_000, 3)
    k = 100
    unit, dr_unit = lecar_victims(trace, 1, k, "capacity")
    assert lecar_victims(trace, 1, k, "entries") == (unit, dr_unit)  # unit sizes: one policy
    block = 4 << 20
    entries, dr_entries = lecar_victims(trace, block, k * block, "entries")
    assert (entries, dr_entries) == (unit, dr_unit) and dr_unit == pytest.approx(0.005 ** (1 / k))
    # counting bytes: the discount is ~1, the policy learns differently
    byte_victims, dr_bytes = lecar_victims(trace, block, k * block, "capacity")
    assert dr_bytes > 1 - 1e-7 and byte_victims != unit
    with pytest.raises(ValueError, match="entries"):
        LeCaR(10, discount="blocks")


def test_sfp_reads_ahead_in_a_file_it_has_not_read_from_metadata() -> None:
    extents = {"a": (0, 9), "b": (10, 19), "c": (20, 29)}
    blind, meta = SFPPrefetcher(init_window=8), SFPPrefetcher(init_window=8)
    meta.use_metadata(extents.get)
    # first read of a file: only metadata knows it continues
    assert list(blind.on_access("a", 0, False, 0.0)) == []
    assert list(meta.on_access("a", 0, False, 0.0)) == [1, 2, 3, 4, 5, 6, 7, 8]
    for p in (blind, meta):  # a, then one block of b, then c: learns a -> b, b -> c
        p.on_access("b", 10, False, 1.0)
        p.on_access("c", 20, False, 2.0)
        p.window = 30
    # back in a: the rest of a, then successor b — whole from metadata, one block if learned
    assert list(blind.on_access("a", 0, False, 3.0)) == [10]
    assert list(meta.on_access("a", 0, False, 3.0)) == [*range(1, 10), *range(10, 20)]
    # a file metadata does not know falls back to what was learned
    meta2 = SFPPrefetcher(init_window=8)
    meta2.use_metadata({}.get)
    assert list(meta2.on_access("x", 5, False, 0.0)) == []


def test_simulator_hands_file_extents_from_the_block_table() -> None:
    wl = load_workload("W3", scale=0.02, seed=0)
    want: dict[str, list[int]] = {}
    for b, code in enumerate(wl.block_unit_of):  # type: ignore[arg-type]
        lo_hi = want.setdefault(wl.units[code], [b, b])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], b), max(lo_hi[1], b)
    assert wl.file_extents() == {f: (lo, hi) for f, (lo, hi) in want.items()}
    # SFP uses them: on a one-file sequential pass, learned extents never read ahead
    t1 = load_workload("T1", scale=0.02, seed=0)
    d = simulate_datacache(t1, "lru+sfp").to_dict()
    assert d["prefetched_blocks"] > 0 and d["chr"] > 0


def test_next_fixed_reads_ahead_on_every_read_without_detection() -> None:
    from aicache.policies import PREFETCH
    from aicache.policies.prefetch.stride import FixedStridePrefetcher

    blind = PREFETCH.get("next-fixed")(depth=3)
    detecting = FixedStridePrefetcher(depth=3)
    trace = [40, 7, 93, 15, 61]  # a random stream: no stride to detect
    assert [list(blind.on_access("u", b, False, float(t))) for t, b in enumerate(trace)] == \
        [[b + 1, b + 2, b + 3] for b in trace]
    assert all(not detecting.on_access("u", b, False, float(t)) for t, b in enumerate(trace))
