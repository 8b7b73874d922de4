"""The policies papers compare against (2Q, GDSF, ...) against libCacheSim (the
``libcachesim`` package, which exposes TwoQ, LIRS, WTinyLFU, LHD and GDSF) in lockstep, on
the generated traces of ``test_policies_vs_libcachesim.py``.

2Q agrees on every request in objects mode; in bytes mode libCacheSim's nested Am cache
may evict on its own after the outer loop made room (see :mod:`aicache.policies.eviction.twoq`),
so there the hit vectors must agree on all but a few requests and the miss ratios closely.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lcs_oracle import first_mismatch, lcs_run, run_ours
from test_policies_vs_libcachesim import FRACTIONS, TRACES, _lockstep, capacity, make_trace


@pytest.mark.parametrize("kind", list(TRACES))
def test_2q_identical_in_objects_mode(kind: str) -> None:
    ids, sizes = make_trace(kind)
    for frac in FRACTIONS:
        cap = capacity(ids, sizes, "objects", frac)
        if int(cap * 0.25) == 0:
            continue  # refused (BadInput), as libCacheSim can store nothing there
        theirs = lcs_run("2q", ids, sizes, cap, "objects")
        ours = run_ours("2q", ids, sizes, cap, "objects")
        assert first_mismatch(theirs, ours) == -1, (kind, cap, first_mismatch(theirs, ours))


@pytest.mark.parametrize("kind", list(TRACES))
def test_2q_close_in_bytes_mode(kind: str) -> None:
    ids, sizes = make_trace(kind)
    for frac in FRACTIONS:
        cap = capacity(ids, sizes, "bytes", frac)
        theirs = lcs_run("2q", ids, sizes, cap, "bytes")
        ours = run_ours("2q", ids, sizes, cap, "bytes")
        assert int((theirs.hits != ours.hits).sum()) <= len(ids) // 100, (kind, cap)
        assert abs(theirs.miss_ratio - ours.miss_ratio) <= 0.003
        assert abs(theirs.byte_miss_ratio - ours.byte_miss_ratio) <= 0.005


def _twoq_model(ids: list[int], sizes: list[int], cap: int, nested: bool) -> list[bool]:
    """libCacheSim's TwoQ.c, brute force (queue sizes recomputed every time). ``nested``:
    a ghost hit enters Am through Am's own cache (which may evict from Am on its own);
    without it, only the outer loop evicts — the cache template's rule."""
    ain_c, aout_c = int(cap * 0.25), int(cap * 0.5)
    am_c = cap - ain_c
    ain: dict[int, int] = {}
    aout: dict[int, int] = {}
    am: dict[int, int] = {}  # dicts keep insertion order: oldest / LRU first
    hits = []
    for k, s in zip(ids, sizes):
        if k in ain:
            hits.append(True)
            continue
        ghost = aout.pop(k, None) is not None
        if k in am:
            am[k] = am.pop(k)
            hits.append(True)
            continue
        hits.append(False)
        if s > ain_c:
            continue
        while sum(ain.values()) + sum(am.values()) + s > cap:
            if sum(ain.values()) > ain_c:
                v = next(iter(ain))
                vs = ain.pop(v)
                if vs <= aout_c:
                    while sum(aout.values()) + vs > aout_c:
                        del aout[next(iter(aout))]
                    aout[v] = vs
            else:
                del am[next(iter(am))]
        if ghost:
            while nested and sum(am.values()) + s > am_c:
                del am[next(iter(am))]
            am[k] = s
        else:
            ain[k] = s
    return hits


@pytest.mark.parametrize("kind", ["zipf1.2", "scan+zipf"])
def test_2q_bytes_mode_departure_is_exactly_the_nested_am_eviction(kind: str) -> None:
    """The brute force with Am's nested eviction is libCacheSim on every request; without
    it, it is ours on every request — so that eviction is the whole difference."""
    ids, sizes = make_trace(kind, n=3_000)
    for frac in FRACTIONS:
        cap = capacity(ids, sizes, "bytes", frac)
        il, sl = ids.tolist(), sizes.tolist()
        assert lcs_run("2q", ids, sizes, cap, "bytes").hits.tolist() == _twoq_model(il, sl, cap, True)
        assert run_ours("2q", ids, sizes, cap, "bytes").hits.tolist() == _twoq_model(il, sl, cap, False)


@st.composite
def _small_objects(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    n_ids = draw(st.integers(1, 60))
    ids = np.array(draw(st.lists(st.integers(0, n_ids - 1), min_size=1, max_size=300)), dtype=np.int64)
    return ids, np.ones(len(ids), dtype=np.int64), draw(st.integers(4, 40))


# small traces, with and without removals: 2Q and GDSF both agree on every request
@pytest.mark.parametrize("policy", ["2q", "gdsf"])
@settings(max_examples=60)
@given(case=_small_objects())
def test_identical_on_small_traces(policy: str, case: tuple[np.ndarray, np.ndarray, int]) -> None:
    ids, sizes, cap = case
    assert first_mismatch(lcs_run(policy, ids, sizes, cap, "objects"),
                          run_ours(policy, ids, sizes, cap, "objects")) == -1


@pytest.mark.parametrize("policy", ["2q", "gdsf"])
@settings(max_examples=40)
@given(data=st.data())
def test_identical_with_removals(policy: str, data: st.DataObject) -> None:
    ids, sizes, cap = data.draw(_small_objects())
    is_removal = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    _lockstep(policy, ids, sizes, is_removal, cap, "objects")


def test_2q_separates_from_lru_on_a_scan() -> None:
    """The paper's point: a one-time scan does not flush the re-referenced set (Am)."""
    ids, sizes = make_trace("scan+zipf")
    cap = capacity(ids, sizes, "objects", 0.05)
    assert run_ours("2q", ids, sizes, cap, "objects").miss_ratio < \
        run_ours("lru", ids, sizes, cap, "objects").miss_ratio


# -- GDSF ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(TRACES))
def test_gdsf_identical_in_objects_mode(kind: str) -> None:
    ids, sizes = make_trace(kind)
    for frac in FRACTIONS:
        cap = capacity(ids, sizes, "objects", frac)
        theirs = lcs_run("gdsf", ids, sizes, cap, "objects")
        ours = run_ours("gdsf", ids, sizes, cap, "objects")
        assert first_mismatch(theirs, ours) == -1, (kind, cap, first_mismatch(theirs, ours))


@pytest.mark.parametrize("kind", list(TRACES))
def test_gdsf_close_in_bytes_mode(kind: str) -> None:
    """The departure (residents ranked below a bypassed object stay) stays small: within
    2 points of miss ratio at 1% of the working set, half a point from 5% on."""
    ids, sizes = make_trace(kind)
    for frac in FRACTIONS:
        cap = capacity(ids, sizes, "bytes", frac)
        theirs = lcs_run("gdsf", ids, sizes, cap, "bytes")
        ours = run_ours("gdsf", ids, sizes, cap, "bytes")
        tol = 0.02 if frac < 0.05 else 0.005
        assert abs(theirs.miss_ratio - ours.miss_ratio) <= tol, (kind, frac)


def _brute_gdsf(ids: list[int], sizes: list[int], cap: int, insert_first: bool) -> list[bool]:
    """GDSF brute force, H(p) = L + F(p) * 1e6 / S(p), ties to the oldest H, L = the last
    evicted H. ``insert_first=False`` is Cherkasova's pseudo-code: on a miss evict min H
    until the object fits, then insert it. ``True`` is what the libcachesim package's GDSF
    does: insert the missed object with the current L, then evict the lowest
    (priority, stamp) — it included — until it fits."""
    inflation, h, freq, size, used, stamp, hits = 0.0, {}, {}, {}, 0, 0, []
    for k, s in zip(ids, sizes):
        stamp += 1
        if k in h:
            freq[k] += 1
            h[k] = (inflation + freq[k] * 1.0e6 / size[k], stamp)
            hits.append(True)
            continue
        hits.append(False)
        if s > cap:
            continue
        if insert_first:
            freq[k], size[k], h[k] = 1, s, (inflation + 1.0e6 / s, stamp)
            used += s
        while used + (0 if insert_first else s) > cap:
            v = min(h, key=h.__getitem__)
            inflation = h[v][0]
            used -= size.pop(v)
            del h[v], freq[v]
        if not insert_first:
            freq[k], size[k] = 1, s
            h[k] = (inflation + 1.0e6 / s, stamp)
            used += s
    return hits


@pytest.mark.parametrize("mode", ["objects", "bytes"])
def test_gdsf_evict_first_is_the_paper(mode: str) -> None:
    from aicache.policies.eviction.gdsf import GDSF
    from aicache.sim.cache import Cache

    ids, sizes = make_trace("scan+zipf", n=3_000)
    req = [1] * len(ids) if mode == "objects" else sizes.tolist()
    for frac in FRACTIONS:
        cap = capacity(ids, sizes, mode, frac)
        cache = Cache(cap, GDSF(cap, evict_first=True), size_mode=mode)
        ours = [cache.request(k, s, float(i)) for i, (k, s) in enumerate(zip(ids.tolist(), req))]
        assert ours == _brute_gdsf(ids.tolist(), req, cap, insert_first=False), (mode, cap)


def test_gdsf_keeps_small_objects_where_lru_keeps_large_ones() -> None:
    """Size awareness, GDSF's reason to exist: in bytes mode it beats LRU on object miss
    ratio when sizes vary over four orders of magnitude."""
    ids, sizes = make_trace("zipf0.9")
    cap = capacity(ids, sizes, "bytes", 0.05)
    assert run_ours("gdsf", ids, sizes, cap, "bytes").miss_ratio < \
        run_ours("lru", ids, sizes, cap, "bytes").miss_ratio - 0.05


@pytest.mark.parametrize("mode", ["objects", "bytes"])
def test_gdsf_libcachesim_order_is_insert_then_evict(mode: str) -> None:
    """The order GDSF's module states for libcachesim (and so its bytes-mode departure) is
    libcachesim's on every request, in both modes."""
    ids, sizes = make_trace("zipf0.9", n=3_000)
    req = [1] * len(ids) if mode == "objects" else sizes.tolist()
    for frac in FRACTIONS:
        cap = capacity(ids, sizes, mode, frac)
        assert lcs_run("gdsf", ids, sizes, cap, mode).hits.tolist() == \
            _brute_gdsf(ids.tolist(), req, cap, insert_first=True)
