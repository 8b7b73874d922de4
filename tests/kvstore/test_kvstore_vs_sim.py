"""The real tiered store and ``aicache sim kv`` agree exactly on the same trace.

The simulator is replayed with a recording :class:`KVIndex` (the call sequence and the
logical clock the replay produced: lookups, begins and finishes at their times, with 4
requests in flight). The same calls then drive a :class:`TieredKVStore` with real bytes.
Checked for all seven systems, ``E2∨R2`` and three DRAM policies: every plan's per-block
sources, SSD bytes and blocks written (counted by the slab files) *equal* to the
simulator's ``ssd_write_bytes``, hits per tier, and CHAR against an unlimited-capacity
reference computed here from the recorded call order — not taken from the simulator.

Exact write equality holds because the index never rewrites a copy the device still has:
a block dropped and re-admitted within one call is *kept* (``KVIndex._ssd_write``), and a
block written and dropped within one call is never written. The property test at the end
checks that against a plain reference device that applies every :class:`Moves`.

Why the trace is block-aligned. The store has fixed slots, so :class:`SlotKVIndex`
charges a partial last block a whole slot, while the simulator charges its tokens. With a
partial block the two indexes see different ``dram_used``/``ssd_used`` and may evict at
different moments — the store is conservative, never over budget, but not the same
replay. Every block here is full, so both charge ``block_bytes`` per block and the
comparison is exact; ``test_partial_blocks_*`` shows the difference is only accounting.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aicache.sim.kv as simkv
from aicache.kv.models import MODELS, ModelSpec
from aicache.kv.admission import AdmissionRule
from aicache.kv.promotion import PromotionMode, PromotionParams
from aicache.kv.saria import KVIndex, KVIndexParams, LookupMode, Moves, RequestAttrs, Tier
from aicache.kvstore.dram import DramPool
from aicache.kvstore.ssd import HEADER_BYTES
from aicache.kvstore.store import SlotKVIndex, TieredKVStore, TieredKVStoreParams
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


def replay_on_store(calls: list[tuple], p: simkv.KVSimParams, directory) -> dict:
    """Drive a :class:`TieredKVStore` with the recorded calls; its stats at the end.
    Checks on the way: the same sources per block as the simulator's plans, every loaded
    byte equal to what was stored, the store's invariants after every call."""
    spec, model = simkv.validate(p)
    ip = simkv._index_params(p, spec, model)
    stride = -(-BB // 64) * 64
    dram_budget = (ip.dram_bytes // BB) * stride
    ssd_budget = (ip.ssd_bytes // BB) * (HEADER_BYTES + 4096)
    assert ip.dram_bytes % BB == 0 and ip.ssd_bytes % BB == 0
    sp = TieredKVStoreParams(replace(ip, dram_bytes=dram_budget, ssd_bytes=ssd_budget),
                             directory)
    store = TieredKVStore(sp)
    assert store.dram.n_slots == DramPool.slots_for(dram_budget, BB) == ip.dram_bytes // BB
    plans = {}
    mixed = 0
    tokens_of: dict[tuple, int] = {}
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
                for i, (k, b) in enumerate(zip(keys, bufs)):
                    n = tokens_of[tuple(keys[: i + 1])] * (BB // BT)
                    assert np.array_equal(b[:n], payload(k)[:n])
                if Tier.DRAM in plan.sources and Tier.SSD in plan.sources:
                    mixed += 1
            else:
                _, sim_plan, keys, now, tokens, attrs = c
                plan = plans.pop(id(sim_plan))
                for i, t in enumerate(tokens):
                    tokens_of.setdefault(tuple(keys[: i + 1]), t)
                store.finish_request(plan, keys,
                                     [payload(k)[: t * (BB // BT)] for k, t in zip(keys, tokens)],
                                     RequestAttrs(attrs.session, attrs.turn, None), now)
            store.check()
        store.flush()
        sst = store.stats()
        assert sst.get("ssd_files_bytes", 0) <= ssd_budget
        sst["mixed_plans"] = mixed
        return sst
    finally:
        store.close()


def simulate_recorded(reqs: list[KVRequest], p: simkv.KVSimParams, monkeypatch,
                      index_cls: type[KVIndex] = KVIndex) -> tuple[dict, list[tuple]]:
    """The simulator's metrics and the index calls it made (through ``index_cls``)."""
    rec = type("Rec", (Recorder, index_cls), {})
    Recorder.calls = []
    monkeypatch.setattr(simkv, "KVIndex", rec)
    m = simkv.simulate_kv(reqs, p).metrics
    return m, Recorder.calls


@pytest.mark.parametrize("system,extra", [
    ("saria", {}),
    ("saria", {"admission": "E2∨R2"}),
    ("saria", {"theta_e": 3}),
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
                          ssd_writes="instant",  # the store writes before its next call
                          session_window=600.0, in_flight=4, prefill_tps=200.0, p_tau=5.0,
                          **extra)
    m, calls = simulate_recorded(reqs, p, monkeypatch)
    assert m["hit_blocks"] > 0 and (m["dram_evictions"] > 0 or system == "gds-only")
    assert all(t == BT for c in calls if c[0] == "finish" for t in c[4])  # block-aligned
    sst = replay_on_store(calls, p, tmp_path / "kv")
    # every write the simulator counts is one the slab files performed, and vice versa
    assert sst.get("ssd_payload_bytes_written", 0) == m["ssd_write_bytes"]
    assert sst.get("ssd_blocks_written", 0) == m["ssd_write_blocks"]
    assert sst.get("ssd_keeps", 0) == m["ssd_keep_blocks"]
    # hits per tier
    assert sst["hit_blocks_ssd"] == m["ssd_read_blocks"]
    assert sst["hit_blocks_dram"] + sst["hit_blocks_ssd"] == m["hit_blocks"]
    if m["hit_blocks"]:
        assert sst["hit_blocks_dram"] / m["hit_blocks"] == m["dram_hit_share"]
    # CHAR against an unlimited-capacity reference built here from the call order
    achievable = unlimited_achievable(calls)
    assert achievable == m["achievable_blocks"]
    assert (sst["hit_blocks_dram"] + sst["hit_blocks_ssd"]) / achievable == m["char"]
    if system not in ("lmcache-plus", "gds-only") and m["ssd_read_blocks"]:
        assert sst["mixed_plans"] > 0  # mixed DRAM/SSD plans were exercised with real bytes
    if system == "full-duplicate":
        assert m["ssd_keep_blocks"] > 0  # the drop-then-readmit case is exercised


def partial_trace(seed: int) -> list[KVRequest]:
    """:func:`trace` with a partial last block (1–15 tokens) under a fresh id per request
    (an engine never caches a partial block under a full block's hash)."""
    rng = random.Random(seed)
    out = []
    fresh = 1_000_000
    for r in trace(seed):
        fresh += 1
        ids = list(r.hash_ids) + [fresh]
        tokens = (len(ids) - 1) * BT + rng.randint(1, BT - 1)
        out.append(KVRequest(r.timestamp, tokens, 1, ids, BT, session_id=r.session_id,
                             turn=r.turn))
    return out


@pytest.mark.parametrize("system", ["saria", "full-duplicate"])
def test_partial_blocks_differ_only_by_slot_accounting(system: str, tmp_path,
                                                       monkeypatch) -> None:
    """With partial last blocks the token-charging simulator and the slot-charging store
    are different replays; the simulator driving the store's :class:`SlotKVIndex`
    reproduces the store exactly — the gap is the size charge, nothing else."""
    reqs = partial_trace(11)
    p = simkv.KVSimParams(system=system, model=TINY, dram_tokens=24 * BT, ssd_tokens=60 * BT,
                          ssd_writes="instant",  # the store writes before its next call
                          session_window=600.0, in_flight=4, prefill_tps=200.0, p_tau=5.0)
    m, calls = simulate_recorded(reqs, p, monkeypatch, SlotKVIndex)
    assert any(t < BT for c in calls if c[0] == "finish" for t in c[4])
    sst = replay_on_store(calls, p, tmp_path / "kv")
    assert sst["hit_blocks_ssd"] == m["ssd_read_blocks"]
    assert sst["hit_blocks_dram"] + sst["hit_blocks_ssd"] == m["hit_blocks"]
    assert sst.get("ssd_blocks_written", 0) == m["ssd_write_blocks"]
    assert sst.get("ssd_keeps", 0) == m["ssd_keep_blocks"]
    # the slot index charges whole slots; the device holds only the tokens' bytes
    if system == "full-duplicate":  # partial blocks are written through: strictly less
        assert 0 < sst["ssd_payload_bytes_written"] < m["ssd_write_bytes"]
    else:
        assert sst.get("ssd_payload_bytes_written", 0) <= m["ssd_write_bytes"]


# ------------------------------------------------- the index never rewrites a kept copy
SMALL = ModelSpec("kf-small", 1, 1, 1, dtype_bytes=1, block_tokens=4)  # 8-byte blocks
NS = ("small", None)


def small_index(dram_blocks: int, ssd_blocks: int, rule: AdmissionRule, **kw) -> KVIndex:
    bb = SMALL.block_bytes
    return KVIndex(KVIndexParams(model=SMALL, dram_bytes=dram_blocks * bb,
                                 ssd_bytes=ssd_blocks * bb, admission=rule, **kw))


def request(ix: KVIndex, keys: list[int], now: float) -> tuple[Moves, Moves]:
    plan = ix.lookup(NS, keys, now)
    m1 = ix.begin(plan, now)
    return m1, ix.finish(plan, keys, now, tokens=[4] * len(keys))


def test_drop_then_readmit_in_one_call_is_a_keep_by_hand() -> None:
    # SSD only, 3 slots, every block written. Worked by hand:
    #   t0 [1,2,3]: write 1,2,3                      LRU 1,2,3
    #   t1 [1]:     SSD hit on 1 -> MRU              LRU 2,3,1
    #   t2 [7]:     write 7, drop 2                  LRU 3,1,7
    #   t3 [1,2,3]: plan = [1] (2 is gone), 1 -> MRU LRU 3,7,1
    #       store 2: write, drop 3 (LRU head)        LRU 7,1,2
    #       store 3: its bytes are still on disk (the drop is not applied yet): keep it,
    #                making room by dropping 7       LRU 1,2,3
    ix = small_index(0, 3, AdmissionRule(None, None, True))
    request(ix, [1, 2, 3], 0.0)
    request(ix, [1], 1.0)
    request(ix, [7], 2.0)
    assert ix.stats.ssd_writes == 4
    _, mv = request(ix, [1, 2, 3], 3.0)
    n = {k: ix.tree.match(NS, path)[-1] for k, path in
         ((1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (7, [7]))}
    assert mv.ssd_writes == [n[2]]
    assert mv.ssd_drops == [n[7]]         # 3's drop was withdrawn
    assert list(ix.ssd_lru) == [n[1], n[2], n[3]]
    assert ix.stats.ssd_writes == 5 and ix.stats.ssd_write_bytes == 5 * SMALL.block_bytes
    assert ix.stats.ssd_keeps == 1 and ix.stats.ssd_evictions == 2  # 2 at t2, 7 at t3


class Device:
    """A plain reference driver: the set of blocks physically on the SSD, updated by
    applying each call's Moves (drops, then writes), counting real writes."""

    def __init__(self) -> None:
        self.blocks: set = set()
        self.writes = 0

    def apply(self, mv: Moves) -> None:
        assert not set(mv.ssd_writes) & set(mv.ssd_drops), "a Moves must be net"
        assert set(mv.prewrites) <= set(mv.ssd_writes)
        for n in mv.ssd_drops:
            assert n in self.blocks, "dropped a copy the device does not have"
            self.blocks.remove(n)
        for n in mv.ssd_writes:
            assert n not in self.blocks, "rewrote a copy the device still has"
            self.blocks.add(n)
            self.writes += 1


RULES = [AdmissionRule(None, None, True), AdmissionRule(1), AdmissionRule(2),
         AdmissionRule(2, 2), AdmissionRule(None, 2)]


@settings(max_examples=150, deadline=None)
@given(dram=st.integers(0, 6), ssd=st.integers(1, 6), rule=st.sampled_from(RULES),
       promotion=st.sampled_from(list(PromotionMode)), prewrite=st.booleans(),
       lookup=st.sampled_from(list(LookupMode)),
       reqs=st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), min_size=1,
                                                           max_size=8),
                               st.booleans()), min_size=1, max_size=40))
def test_index_writes_equal_a_reference_devices_writes(dram, ssd, rule, promotion, prewrite,
                                                       lookup, reqs) -> None:
    """Whatever the system, every write the index counts is a write of a block the device
    does not hold, and after every call the device holds exactly the index's SSD set."""
    ix = small_index(dram, ssd, rule, prewrite=prewrite, lookup=lookup,
                     promotion=PromotionParams(mode=promotion, p_tau=1.0))
    dev = Device()
    open_plans: list = []
    for t, (prefix, tail, overlap) in enumerate(reqs):
        keys = [100 + prefix] + [prefix * 10 + x for x in tail]  # shared prefixes
        plan = ix.lookup(NS, keys, float(t))
        dev.apply(ix.begin(plan, float(t)))
        open_plans.append((plan, keys))
        if not overlap or len(open_plans) > 2:  # up to 3 requests in flight (pins)
            p0, k0 = open_plans.pop(0)
            dev.apply(ix.finish(p0, k0, float(t), tokens=[4] * len(k0)))
        assert dev.blocks == set(ix.ssd_lru)
        assert dev.writes == ix.stats.ssd_writes
        assert ix.ssd_used == len(dev.blocks) * SMALL.block_bytes <= ix.ssd_capacity
    for p0, k0 in open_plans:
        dev.apply(ix.finish(p0, k0, float(len(reqs)), tokens=[4] * len(k0)))
    assert dev.blocks == set(ix.ssd_lru) and dev.writes == ix.stats.ssd_writes
    assert ix.stats.ssd_write_bytes == dev.writes * SMALL.block_bytes
