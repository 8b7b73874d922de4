"""The real tiered store and ``aicache sim kv`` agree on the same trace.

The simulator is replayed with a recording :class:`KVIndex` (the call sequence and the
logical clock the replay produced: lookups, begins and finishes at their times, with 4
requests in flight). The same calls then drive a :class:`TieredKVStore` with real bytes.
Checked: every plan's per-block sources, SSD bytes written (counted by the slab files),
hits per tier, and CHAR against an unlimited-capacity reference computed here from the
recorded call order — not taken from the simulator.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import aicache.sim.kv as simkv
from aicache.kv.models import MODELS, ModelSpec
from aicache.kv.saria import KVIndex, RequestAttrs, Tier
from aicache.kvstore.dram import DramPool
from aicache.kvstore.ssd import HEADER_BYTES
from aicache.kvstore.store import TieredKVStore, TieredKVStoreParams
from aicache.traces.base import KVRequest

TINY = "kvstore-test-tiny"
if TINY not in MODELS._entries:  # 1 layer × 1 head × 8 dims × 2 × 2 B = 32 B/token
    MODELS.register(TINY, ModelSpec(TINY, 1, 1, 8, block_tokens=16), "tests: 512-byte blocks")
BT = 16
BB = 512


def trace(seed: int, sessions: int = 12, turns: int = 6) -> list[KVRequest]:
    """Agent-like sessions: a shared system prefix, then per-session history that grows
    by a few blocks each turn (block-aligned prompts)."""
    rng = random.Random(seed)
    system = [10_000 + i for i in range(3)]
    out = []
    nid = 1
    for s in range(sessions):
        hist: list[int] = []
        t = rng.uniform(0, 50)
        for turn in range(turns):
            add = rng.randint(1, 4)
            hist += list(range(nid, nid + add))
            nid += add
            if rng.random() < 0.1:  # occasional prefix reset
                hist = hist[-add:]
            ids = system + hist
            out.append(KVRequest(t, len(ids) * BT, 1, ids, BT, session_id=f"s{s}", turn=turn))
            t += rng.expovariate(1 / 30)
    return out


def payload(key: int) -> np.ndarray:
    return np.random.default_rng(key & 0xFFFFFFFF).integers(0, 256, BB, dtype=np.uint8)


class Recorder(KVIndex):
    calls: list[tuple] = []

    def lookup(self, ns, keys, now):  # type: ignore[no-untyped-def]
        plan = super().lookup(ns, keys, now)
        Recorder.calls.append(("lookup", ns, list(keys), now, plan, list(plan.sources)))
        return plan

    def finish(self, plan, keys, now, *, tokens, attrs=None):  # type: ignore[no-untyped-def]
        Recorder.calls.append(("finish", plan, list(keys), now, list(tokens), attrs))
        return super().finish(plan, keys, now, tokens=tokens, attrs=attrs)


def unlimited_achievable(calls: list[tuple]) -> int:
    """Longest previously *finished* prefix of each lookup (unlimited capacity)."""
    stored: set[tuple[int, ...]] = set()
    total = 0
    for c in calls:
        if c[0] == "lookup":
            keys = c[2]
            a = 0
            while a < len(keys) and tuple(keys[: a + 1]) in stored:
                a += 1
            total += a
        else:
            keys = c[2]
            for i in range(1, len(keys) + 1):
                stored.add(tuple(keys[:i]))
    return total


@pytest.mark.parametrize("system,extra", [
    ("saria", {}),
    ("saria", {"admission": "E2∨R2"}),
    ("full-duplicate", {}),
    ("lmcache-plus", {}),
    ("zero-promotion", {}),
    ("full-promotion", {}),
    ("gds-only", {}),
    ("dram-only", {}),
    ("saria", {"dram_policy": "fifo"}),
    ("saria", {"dram_policy": "saecache"}),
])
def test_store_matches_simulator(system: str, extra: dict, tmp_path, monkeypatch) -> None:
    reqs = trace(7)
    p = simkv.KVSimParams(system=system, model=TINY, dram_tokens=24 * BT, ssd_tokens=60 * BT,
                          session_window=600.0, in_flight=4, prefill_tps=200.0, p_tau=5.0,
                          **extra)
    Recorder.calls = []
    monkeypatch.setattr(simkv, "KVIndex", Recorder)
    m = simkv.simulate_kv(reqs, p).metrics
    calls = Recorder.calls
    assert m["hit_blocks"] > 0 and (m["dram_evictions"] > 0 or system == "gds-only")

    spec, model = simkv.validate(p)
    ip = simkv._index_params(p, spec, model)
    stride = -(-BB // 64) * 64
    dram_budget = (ip.dram_bytes // BB) * stride
    ssd_budget = (ip.ssd_bytes // BB) * (HEADER_BYTES + 4096)
    assert ip.dram_bytes % BB == 0 and ip.ssd_bytes % BB == 0
    from dataclasses import replace
    sp = TieredKVStoreParams(replace(ip, dram_bytes=dram_budget, ssd_bytes=ssd_budget),
                             tmp_path / "kv")
    store = TieredKVStore(sp)
    assert store.dram.n_slots == DramPool.slots_for(dram_budget, BB) == ip.dram_bytes // BB
    plans = {}
    mixed = 0
    try:
        for c in calls:
            if c[0] == "lookup":
                _, ns, keys, now, sim_plan, sim_sources = c
                plan = store.lookup("tiny", keys, now)
                assert plan.sources == sim_sources
                plans[id(sim_plan)] = plan
                bufs = [np.zeros(BB, dtype=np.uint8) for _ in range(plan.hit_blocks)]
                res = store.load(plan, bufs)
                assert res.valid_blocks == plan.hit_blocks
                for k, b in zip(keys, bufs):
                    assert np.array_equal(b, payload(k))
                if Tier.DRAM in plan.sources and Tier.SSD in plan.sources:
                    mixed += 1
            else:
                _, sim_plan, keys, now, tokens, attrs = c
                assert all(t == BT for t in tokens)
                plan = plans.pop(id(sim_plan))
                store.finish_request(plan, keys, [payload(k) for k in keys],
                                     RequestAttrs(attrs.session, attrs.turn, None), now)
            store.check()
        store.flush()
        st = store.stats()
        # the policy's writes: bytes on the device + re-admissions of a block dropped in
        # the same call, whose bytes never left the device (the store keeps them)
        written = st.get("ssd_payload_bytes_written", 0)
        assert written + st["ssd_bytes_elided"] == m["ssd_write_bytes"]
        assert st.get("ssd_blocks_written", 0) + st["ssd_writes_elided"] == m["ssd_write_blocks"]
        assert st["ssd_bytes_elided"] <= 0.1 * m["ssd_write_bytes"]
        assert st["hit_blocks_ssd"] == m["ssd_read_blocks"]
        assert st["hit_blocks_dram"] + st["hit_blocks_ssd"] == m["hit_blocks"]
        achievable = unlimited_achievable(calls)
        hits = st["hit_blocks_dram"] + st["hit_blocks_ssd"]
        assert hits / achievable == pytest.approx(m["char"], abs=1e-12)
        assert st.get("ssd_files_bytes", 0) <= ssd_budget
        if system not in ("lmcache-plus", "gds-only") and m["ssd_read_blocks"]:
            assert mixed > 0  # mixed DRAM/SSD plans were exercised with real bytes
    finally:
        store.close()
