"""Bytes in, same bytes out: random prefixes stored and loaded back from DRAM, SSD and
mixed plans, checked against a plain dict of the payloads (the reference)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicache.errors import BadInput
from aicache.kv.models import ModelSpec
from aicache.kv.admission import AdmissionRule
from aicache.kv.promotion import PromotionMode, PromotionParams
from aicache.kv.saria import KVIndexParams, Tier
from aicache.kvstore.dram import DramPool
from aicache.kvstore.ssd import HEADER_BYTES
from aicache.kvstore.store import TieredKVStore, TieredKVStoreParams

MODEL = ModelSpec("rt-tiny", 1, 2, 8, block_tokens=8)  # 64 B/token, 512 B blocks
BB = MODEL.block_bytes
SLOT = HEADER_BYTES + 4096


def make(tmp, dram_blocks: int, ssd_blocks: int, admission: str = "E1",
         promotion: PromotionMode = PromotionMode.PARTIAL) -> TieredKVStore:
    ip = KVIndexParams(model=MODEL, dram_bytes=dram_blocks * BB, ssd_bytes=ssd_blocks * SLOT,
                       admission=AdmissionRule.parse(admission),
                       promotion=PromotionParams(promotion, 0.5, 0.0))
    return TieredKVStore(TieredKVStoreParams(ip, tmp))


def load_all(store: TieredKVStore, plan) -> list[bytes]:  # type: ignore[no-untyped-def]
    bufs = [bytearray(BB) for _ in range(plan.hit_blocks)]
    res = store.load(plan, bufs)
    assert res.valid_blocks == plan.hit_blocks
    return [bytes(b[: n.tokens * MODEL.kv_bytes_per_token]) for b, n in zip(bufs, plan.nodes)]


request = st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(0, 2**31))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reqs=st.lists(request, min_size=1, max_size=25), dram=st.integers(1, 8),
       ssd=st.integers(1, 12), admission=st.sampled_from(["E1", "E2", "R2", "full-duplicate"]),
       promotion=st.sampled_from(list(PromotionMode)))
def test_random_prefixes_round_trip(tmp_path_factory, reqs, dram, ssd, admission, promotion) -> None:
    """Sessions share a 2-block system prefix; a request is its session's first ``n``
    blocks. Every block a plan serves equals the payload stored under that prefix."""
    tmp = tmp_path_factory.mktemp("kv")
    store = make(tmp, dram, ssd, admission, promotion)
    ref: dict[int, bytes] = {}
    seen = set()
    try:
        for t, (sess, n, seed) in enumerate(reqs):
            keys = [1, 2] + [1000 * (sess + 1) + i for i in range(n)]
            plan = store.lookup("m", keys, now=float(t))
            assert [nd.key for nd in plan.nodes] == keys[: plan.hit_blocks]
            got = load_all(store, plan)
            for k, b in zip(keys, got):
                assert b == ref[k]
            seen.update(plan.sources)
            rng = np.random.default_rng(seed)
            pays = []
            for k in keys:
                if k not in ref:
                    ref[k] = rng.integers(0, 256, BB, dtype=np.uint8).tobytes()
                pays.append(np.frombuffer(ref[k], dtype=np.uint8))
            store.finish_request(plan, keys, pays, now=float(t) + 0.5)
            store.check()
    finally:
        store.close()


def test_dram_ssd_dram_interleaved_plan_is_byte_exact(tmp_path) -> None:
    """Force DRAM–SSD–DRAM–DRAM sources (LRU evicts the untouched 2nd block) and load a
    mix of buffer kinds (bytearray, numpy, memoryview)."""
    store = make(tmp_path, dram_blocks=4, ssd_blocks=16, admission="full-duplicate")
    rng = np.random.default_rng(0)
    a = [11, 12, 13, 14]
    pa = {k: rng.integers(0, 256, BB, dtype=np.uint8) for k in a + [99]}
    try:
        store.store("m", a, [pa[k] for k in a], now=0.0)
        p = store.lookup("m", a[:1], now=1.0)  # touch block 0 only
        store.finish_request(p, a[:1], [None], now=1.0)
        store.store("m", [99], [pa[99]], now=2.0)  # evicts the LRU block: 12
        plan = store.lookup("m", a, now=3.0)
        assert plan.sources == [Tier.DRAM, Tier.SSD, Tier.DRAM, Tier.DRAM]
        bufs = [bytearray(BB), np.zeros(BB, np.uint8), memoryview(bytearray(BB)),
                np.zeros(BB // 4, np.float32)]
        res = store.load(plan, bufs)
        assert res.valid_blocks == 4 and res.ssd_bytes == BB and res.dram_bytes == 3 * BB
        for k, b in zip(a, bufs):
            assert np.array_equal(np.frombuffer(b, dtype=np.uint8), pa[k])
        store.release(plan)
        store.check()
    finally:
        store.close()


def test_partial_last_block_and_ssd_only_plan(tmp_path) -> None:
    """A 3-token last block comes back with exactly its 192 bytes from the SSD after DRAM
    is cycled (zero promotion keeps it off DRAM)."""
    store = make(tmp_path, dram_blocks=2, ssd_blocks=8, admission="full-duplicate",
                 promotion=PromotionMode.ZERO)
    kvb = MODEL.kv_bytes_per_token
    rng = np.random.default_rng(1)
    pays = [rng.integers(0, 256, BB, dtype=np.uint8), rng.integers(0, 256, 3 * kvb, dtype=np.uint8)]
    try:
        store.store("m", [5, 6], pays, now=0.0)
        store.store("m", [7, 8], [rng.integers(0, 256, BB, dtype=np.uint8)] * 2, now=1.0)
        plan = store.lookup("m", [5, 6], now=2.0)
        assert plan.sources == [Tier.SSD, Tier.SSD]
        got = load_all(store, plan)
        assert got[0] == pays[0].tobytes() and got[1] == pays[1].tobytes()
        store.release(plan)
    finally:
        store.close()


def test_dram_only_store_and_namespaces(tmp_path) -> None:
    """No SSD tier: blocks live in DRAM only; namespaces never share blocks."""
    ip = KVIndexParams(model=MODEL, dram_bytes=8 * BB, ssd_bytes=0)
    store = TieredKVStore(TieredKVStoreParams(ip))
    p = np.arange(BB, dtype=np.uint8)
    store.store("a", [1], [p], now=0.0)
    assert store.lookup("b", [1], now=1.0, begin=False).hit_blocks == 0
    plan = store.lookup("a", [1], now=1.0)
    assert load_all(store, plan) == [p.tobytes()]
    store.release(plan)
    assert store.dram.n_slots == DramPool.slots_for(8 * BB, BB) == 8


def test_bad_inputs_are_one_line(tmp_path) -> None:
    store = make(tmp_path, 2, 4)
    with pytest.raises(BadInput, match="payload 0 has 100 B"):
        store.store("m", [1], [np.zeros(100, np.uint8)], now=0.0)
    with pytest.raises(BadInput, match="namespace"):
        store.lookup(("m", None), [1])  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="block hash"):
        store.store("m", [1.5], [np.zeros(BB, np.uint8)], now=1.0)
    store.check()  # failed stores left nothing pinned or allocated
    assert all(n.pins == 0 for n in store.index.tree.nodes())
    with pytest.raises(BadInput, match="another KV store process"):
        make(tmp_path, 2, 4)
    store.close()
    with pytest.raises(BadInput, match="geometry"):
        TieredKVStore(TieredKVStoreParams(KVIndexParams(
            model=ModelSpec("other", 1, 1, 8, block_tokens=8), dram_bytes=BB, ssd_bytes=4 * SLOT),
            tmp_path))
    make(tmp_path, 2, 4).close()  # failed opens released the directory lock
    with pytest.raises(BadInput, match="smaller than one"):
        TieredKVStore(TieredKVStoreParams(
            KVIndexParams(model=MODEL, dram_bytes=BB, ssd_bytes=100), tmp_path / "y"))
    with pytest.raises(BadInput, match="smaller than one"):
        TieredKVStore(TieredKVStoreParams(
            KVIndexParams(model=MODEL, dram_bytes=BB - 1, ssd_bytes=0)))


@pytest.mark.parametrize("direct", [False, "auto"])
def test_o_direct_detected_and_byte_exact(tmp_path, direct) -> None:
    """``direct='auto'`` uses O_DIRECT exactly where the filesystem accepts it, through
    aligned bounce buffers; bytes survive either way, including a reopen."""
    from aicache.kvstore.ssd import odirect_supported

    ip = KVIndexParams(model=MODEL, dram_bytes=BB, ssd_bytes=8 * SLOT,
                       admission=AdmissionRule.parse("full-duplicate"))
    sp = TieredKVStoreParams(ip, tmp_path, direct=direct)
    rng = np.random.default_rng(5)
    pays = [rng.integers(0, 256, BB, dtype=np.uint8) for _ in range(3)]
    store = TieredKVStore(sp)
    assert store.ssd is not None
    assert store.ssd.direct == (direct == "auto" and odirect_supported(tmp_path))
    store.store("m", [1, 2, 3], pays, now=0.0)
    store.close()
    store = TieredKVStore(sp)
    plan = store.lookup("m", [1, 2, 3], now=1.0)
    assert plan.sources == [Tier.SSD] * 3
    assert load_all(store, plan) == [p.tobytes() for p in pays]
    store.release(plan)
    store.close()


def test_fenced_dram_slot_is_reused_only_after_its_write() -> None:
    """A slot released while an SSD write still reads it is handed out again only once
    that write finished (the DRAM copy stays readable until then)."""
    import threading
    import time
    from concurrent.futures import Future

    pool = DramPool(100, 2)
    a, b = pool.alloc(), pool.alloc()
    fut: Future[int] = Future()
    pool.release(a, after=fut)
    assert pool.used == 1 and pool.free_slots == 0
    t0 = time.monotonic()  # before the timer starts: it fires no earlier than t0 + 0.2
    threading.Timer(0.2, fut.set_result, (0,)).start()
    assert pool.alloc() == a
    assert fut.done() and time.monotonic() - t0 >= 0.2  # alloc waited for the transfer
    pool.release(b)
    assert pool.alloc() == b


def test_write_accounting_and_dwpd_lifetime(tmp_path) -> None:
    """Device bytes = payload area + 4 KiB header per block written, + 4 KiB per slot
    invalidated; lifetime follows 1,825·C at 1 DWPD over 5 years."""
    from aicache.kvstore.ssd import lifetime_days

    store = make(tmp_path, dram_blocks=2, ssd_blocks=3, admission="full-duplicate")
    rng = np.random.default_rng(2)
    for r in range(3):
        keys = [100 * r + j for j in range(2)]
        store.store("m", keys, [rng.integers(0, 256, BB, dtype=np.uint8) for _ in keys],
                    now=float(r))
    store.flush()
    st = store.ssd.stats  # type: ignore[union-attr]
    assert st.blocks_written == 6 and st.payload_bytes_written == 6 * BB
    evicted = store.index.stats.ssd_evictions  # 6 blocks into 3 slots: 3 invalidations
    assert evicted == 3
    assert st.bytes_written == 6 * (4096 + HEADER_BYTES) + evicted * HEADER_BYTES
    assert store.stats()["ssd_files_bytes"] <= 3 * SLOT
    store.close()
    tb = 10**12
    assert lifetime_days(tb, 86400.0, tb) == pytest.approx(1825.0)       # 1 drive/day
    assert lifetime_days(tb // 2, 86400.0, 4 * tb) == pytest.approx(1825.0 * 8)
    assert lifetime_days(tb, 86400.0, tb, dwpd=3, years=3) == pytest.approx(3 * 365 * 3)
    assert lifetime_days(0, 10.0, tb) is None
