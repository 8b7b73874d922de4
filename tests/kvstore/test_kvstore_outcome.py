"""What a store call reports (:class:`StoreOutcome`) checked against a brute-force scan of
the index before and after the call: per block, ``WRITTEN`` means the call put an SSD
copy there, ``HELD`` one was there already, ``REFUSED`` none is there; ``ssd_evicted``
names exactly the SSD copies the call removed. A failed write is ``FAILED`` once settled,
and an evicted block is named even when the same call reclaimed its metadata."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicache.kv.admission import AdmissionRule
from aicache.kv.models import ModelSpec
from aicache.kv.radix import RadixTree, Tier
from aicache.kv.saria import KVIndexParams
from aicache.kvstore.ssd import HEADER_BYTES
from aicache.kvstore.store import SSDWrite, StoreOutcome, TieredKVStore, TieredKVStoreParams

MODEL = ModelSpec("outcome-tiny", 1, 2, 8, block_tokens=8)  # 512-byte blocks
BB = MODEL.block_bytes
SLOT = HEADER_BYTES + 4096
SSD = int(Tier.SSD)


def make(tmp, dram_blocks: int, ssd_blocks: int, admission: str = "E1",  # type: ignore[no-untyped-def]
         window: float = 3600.0) -> TieredKVStore:
    ip = KVIndexParams(model=MODEL, dram_bytes=dram_blocks * BB, ssd_bytes=ssd_blocks * SLOT,
                       admission=AdmissionRule.parse(admission), metadata_window=window)
    return TieredKVStore(TieredKVStoreParams(ip, tmp, io_threads=2))


def on_ssd(store: TieredKVStore) -> set[tuple[Hashable, Hashable]]:
    """Brute force: every block of every namespace with an SSD copy, by (ns, key)."""
    return {(RadixTree.namespace_of(n), n.key) for n in store.index.tree.nodes()
            if n.kv_loc & SSD}


def pay(key: int) -> np.ndarray:
    return np.random.default_rng(key).integers(0, 256, BB, dtype=np.uint8)


def check(out: StoreOutcome, ns: str, keys: list[int], before: set, after: set) -> None:  # type: ignore[type-arg]
    assert [n.key for n in out.blocks] == keys
    for k, fate in zip(keys, out.ssd):
        name = (ns, k)
        if fate is SSDWrite.WRITTEN:
            assert name not in before and name in after, (k, fate)
        elif fate is SSDWrite.HELD:
            assert name in before and name in after, (k, fate)
        else:
            assert fate is SSDWrite.REFUSED and name not in after, (k, fate)
    assert len(out.ssd_evicted) == len(set(out.ssd_evicted))
    assert set(out.ssd_evicted) == before - after
    for i, fate in enumerate(out.ssd):
        assert out.on_ssd(i) == (fate in (SSDWrite.WRITTEN, SSDWrite.HELD))


request = st.tuples(st.booleans(), st.integers(0, 3), st.integers(1, 5))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reqs=st.lists(request, min_size=1, max_size=20), dram=st.integers(0, 4),
       ssd=st.integers(1, 6), admission=st.sampled_from(["E1", "E2", "R2", "full-duplicate"]))
def test_outcome_matches_a_scan_before_and_after(tmp_path_factory, reqs, dram, ssd,  # type: ignore[no-untyped-def]
                                                 admission) -> None:
    """Requests (lookup + finish_request) and plain saves (store) of session prefixes;
    a key names one position in the tree (sessions share the blocks 1, 2), so (ns, key)
    names a block."""
    store = make(tmp_path_factory.mktemp("kv"), dram, ssd, admission)
    try:
        for t, (is_request, sess, n) in enumerate(reqs):
            keys = [1, 2] + [1000 * (sess + 1) + i for i in range(n)]
            ns = "m" if sess % 2 == 0 else "other"
            if is_request:
                plan = store.lookup(ns, keys, now=float(t))
                pays = [None] * plan.hit_blocks + [pay(k) for k in keys[plan.hit_blocks:]]
                before = on_ssd(store)
                out = store.finish_request(plan, keys, pays, now=float(t) + 0.5)
            else:
                before = on_ssd(store)
                out = store.store(ns, keys, [pay(k) for k in keys], now=float(t))
            store.settle(out)
            check(out, ns, keys, before, on_ssd(store))
            store.check()
    finally:
        store.close()


def test_a_failed_write_is_reported_failed_once_settled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An SSD-only store writes every block; the write of block 2 fails on the device."""
    store = make(tmp_path, 0, 8, "full-duplicate")
    assert store.ssd is not None
    real = store.ssd._write

    def flaky(slot, seq, meta, payload):  # type: ignore[no-untyped-def]
        if meta.key == 2:
            raise OSError(5, "Input/output error")
        return real(slot, seq, meta, payload)

    store.ssd._write = flaky  # type: ignore[method-assign]
    try:
        out = store.store("m", [1, 2, 3], [pay(k) for k in (1, 2, 3)], now=0.0)
        assert out.ssd == [SSDWrite.WRITTEN] * 3  # issued; the device has not answered
        with pytest.warns(RuntimeWarning, match="SSD write failed"):
            store.settle(out)
        assert out.ssd == [SSDWrite.WRITTEN, SSDWrite.FAILED, SSDWrite.WRITTEN]
        assert on_ssd(store) == {("m", 1), ("m", 3)}
        assert store.lookup("m", [1, 2, 3], begin=False).hit_blocks == 1
        store.check()
    finally:
        store.close()


def test_a_failure_collected_by_a_later_call_is_still_this_calls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every write fails; the second call's entry collects the first call's failure (it
    forgets the copy then) — settle still reports each call's own write as FAILED."""
    store = make(tmp_path, 0, 8, "full-duplicate")
    assert store.ssd is not None

    def broken(*a, **k):  # type: ignore[no-untyped-def]
        raise OSError(5, "Input/output error")

    store.ssd._write = broken  # type: ignore[method-assign]
    try:
        with pytest.warns(RuntimeWarning, match="SSD write failed"):
            first = store.store("m", [1], [pay(1)], now=0.0)
            store.ssd.drain()  # the first write has failed before the next call
            second = store.store("other", [2], [pay(2)], now=1.0)
            store.settle(first, second)
        assert first.ssd == [SSDWrite.FAILED] and second.ssd == [SSDWrite.FAILED]
        assert on_ssd(store) == set()
        store.check()
    finally:
        store.close()


def test_an_evicted_block_is_named_after_its_metadata_is_reclaimed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One SSD slot, a 1 s metadata window: storing B at t=10 evicts A, whose node the
    same call reclaims (idle 10 s, no copy left) — the outcome still names A."""
    store = make(tmp_path, 0, 1, "full-duplicate", window=1.0)
    try:
        a = store.store("m", [7], [pay(7)], now=0.0)
        assert a.ssd == [SSDWrite.WRITTEN] and a.ssd_evicted == []
        node_a = a.blocks[0]
        b = store.store("m", [8], [pay(8)], now=10.0)
        assert node_a.parent is None  # reclaimed: no walk up to the root names it
        assert b.ssd == [SSDWrite.WRITTEN]
        assert b.ssd_evicted == [("m", 7)]
        assert on_ssd(store) == {("m", 8)}
    finally:
        store.close()


def test_storing_a_held_block_again_writes_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = make(tmp_path, 0, 4, "full-duplicate")
    try:
        store.settle(store.store("m", [1, 2], [pay(1), pay(2)], now=0.0))
        written = store.stats()["ssd_blocks_written"]
        again = store.store("m", [1, 2, 3], [None, None, pay(3)], now=1.0)
        store.settle(again)
        assert again.ssd == [SSDWrite.HELD, SSDWrite.HELD, SSDWrite.WRITTEN]
        assert store.stats()["ssd_blocks_written"] == written + 1
    finally:
        store.close()
