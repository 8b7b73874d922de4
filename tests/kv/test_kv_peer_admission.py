"""The field's SSD admission rules, each against its source's worked behaviour: unit
sequences computed by hand from the source's rule, and tiny traces through the simulator
where the rules differ from each other and from SARIA's E2."""

from __future__ import annotations

import pytest

from aicache.errors import BadInput
from aicache.kv.admissions import SSD_ADMISSIONS, AdmissionContext, make_ssd_admission
from aicache.kv.peer_admission import (
    KVBMFrequency, LMCacheGate, MooncakeOnEvict, SGLangSelective, VLLMReuseFilter,
)
from aicache.kv.radix import RadixNode
from aicache.sim.kv import KVSimParams, simulate_kv
from aicache.traces.base import KVRequest

PEERS = ("sglang-selective", "vllm-reuse-filter", "lmcache-gate", "kvbm-frequency",
         "mooncake-on-evict")


def _node(key: int, tokens: int = 512) -> RadixNode:
    return RadixNode(key, None, tokens)


def _req(ts: float, blocks: list[int]) -> KVRequest:
    return KVRequest(timestamp=ts, input_length=512 * len(blocks), output_length=1,
                     hash_ids=blocks, block_tokens=512)


# DRAM holds two blocks (LRU). r2 reuses 1, 2 from DRAM; r3 evicts them; r4 asks for them
# again: an SSD hit if they were written, else a recomputation (a re-store).
REUSE_THEN_EVICT = [_req(0, [1, 2]), _req(10, [1, 2]), _req(20, [3, 4]), _req(30, [1, 2])]


def _run(admission: str, trace: list[KVRequest] = REUSE_THEN_EVICT) -> dict:
    return simulate_kv(list(trace), KVSimParams(admission=admission, dram_tokens=1024,
                                                ssd_tokens=10**6, in_flight=1,
                                                ssd_writes="instant")).metrics


def test_every_peer_is_registered_by_name_and_unknown_names_list_them() -> None:
    for name in PEERS:
        assert name in SSD_ADMISSIONS
        assert make_ssd_admission(name, AdmissionContext()).label == name
    with pytest.raises(BadInput) as e:
        make_ssd_admission("sglang", AdmissionContext())
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in PEERS)


def test_sglang_selective_backs_up_on_the_first_reuse() -> None:
    """hit_count = 1 on the creating insert, 2 on the first reuse: threshold 2 backs the
    node up at that reuse; threshold 1 (write_through) at creation."""
    sel, wt = SGLangSelective(2), SGLangSelective(1)
    n = _node(1)
    assert not sel.prewrite_at_store(n, 0.0) and wt.prewrite_at_store(n, 0.0)
    n.R = 1  # a later request's insert matched it
    assert sel.prewrite_now(n, 1.0) and sel.prewrite_at_store(n, 1.0)
    # through the simulator: r2's hits write 1 and 2 at once, so r4 reads them from SSD;
    # E2 waits for an eviction, loses r4's reuse and writes them when recomputed
    s, e2 = _run("sglang-selective"), _run("E2")
    assert (s["ssd_write_blocks"], s["hit_blocks"], s["ssd_read_blocks"]) == (2, 4, 2)
    assert (e2["ssd_write_blocks"], e2["hit_blocks"], e2["ssd_read_blocks"]) == (2, 2, 0)


def test_vllm_reuse_filter_counts_lookups_and_stores_only_what_is_recomputed() -> None:
    """Every request's lookup records each of its blocks; a store is kept at ≥ 2 records.
    A hit is not stored again, so r2's hits are never written; r4's recomputation is."""
    f = VLLMReuseFilter(store_threshold=2, max_tracker_size=2)
    a, b, c = _node(1), _node(2), _node(3)
    f.on_store([a, b], 0, 0.0, None)
    assert not f.prewrite_at_store(a, 0.0)          # its own lookup: 1 record
    f.on_store([a], 1, 1.0, None)
    assert f.prewrite_at_store(a, 1.0) and not f.prewrite_now(a, 1.0)
    f.on_store([c], 0, 2.0, None)                   # LRU-bounded: b (least recent) forgotten
    assert f.lookups(b) == 0 and f.lookups(a) == 2 and f.lookups(c) == 1
    m = _run("vllm-reuse-filter")
    assert (m["ssd_write_blocks"], m["hit_blocks"], m["ssd_read_blocks"]) == (2, 2, 0)


def test_lmcache_gate_needs_reads_since_the_last_write_and_a_minimum_size() -> None:
    g = LMCacheGate(lambda n: n.tokens * 10, min_access_count=1, min_size_bytes=5000)
    big, small = _node(1, 512), _node(2, 100)
    assert not g.prewrite_at_store(big, 0.0)        # never read: frequency veto
    g.on_reference(big, 1.0)
    g.on_reference(small, 1.0)
    assert g.prewrite_at_store(big, 2.0)            # read once: the put is written
    assert not g.prewrite_at_store(small, 2.0)      # 1,000 B < 5,000 B: length veto
    g.on_write(big, 5120, 2.0)                      # a write resets the read count
    assert g.reads(big) == 0 and not g.prewrite_at_store(big, 3.0)
    assert not g.prewrite_now(big, 3.0)             # a hit is not a put
    m = _run("lmcache-gate")                        # r2's hits are reads; r4's put writes
    assert (m["ssd_write_blocks"], m["hit_blocks"]) == (2, 2)


def test_kvbm_frequency_doubles_on_registration_and_decays_each_step() -> None:
    f = KVBMFrequency(threshold=2, decay_every=600.0)
    a = _node(1)
    assert not f.prewrite_at_store(a, 0.0)          # new: 1
    assert f.prewrite_at_store(a, 599.0)            # same step: 2
    assert f.prewrite_at_store(a, 610.0)            # one decay (2 -> 1), doubled: 2
    assert f.frequency(a, 610.0) == 2
    assert f.frequency(a, 1800.0) == 0              # two more steps: pruned
    assert not f.prewrite_at_store(a, 1800.0)       # starts again at 1
    b = _node(2)
    f.prewrite_at_store(b, 0.0)
    f.prewrite_at_store(b, 1.0)
    f.prewrite_at_store(b, 2.0)                     # 1, 2, 4
    assert f.frequency(b, 2.0) == 4 and f.frequency(b, 1200.0) == 2
    assert not f.prewrite_now(b, 3.0)               # a host hit is not a registration
    # r4's re-registration comes 10 s after r1's: frequency 2, written; r2's hits count not
    m = _run("kvbm-frequency")
    assert (m["ssd_write_blocks"], m["hit_blocks"]) == (2, 2)


def test_mooncake_on_evict_persists_evictions_up_to_the_cycle_cap() -> None:
    mc = MooncakeOnEvict(cap_ratio=0.5, queue_limit=4)  # 2 offloads per eviction cycle
    ns = [_node(i) for i in range(4)]
    assert [mc.at_eviction(n, 5.0) for n in ns[:3]] == [True, True, False]
    assert mc.over_cap == 1
    assert mc.at_eviction(ns[3], 6.0)               # a new cycle
    assert not mc.prewrite_at_store(ns[0], 6.0) and not mc.prewrite_now(ns[0], 6.0)
    # r3 evicts 1, 2: written, so r4 reads them from SSD
    m = _run("mooncake-on-evict")
    assert (m["ssd_write_blocks"], m["hit_blocks"], m["ssd_read_blocks"]) == (2, 4, 2)


def test_peer_options_are_checked() -> None:
    with pytest.raises(BadInput, match="sglang-selective"):
        make_ssd_admission("sglang-selective", AdmissionContext(args={"threshold": 0}))
    with pytest.raises(BadInput, match="not a number"):
        make_ssd_admission("kvbm-frequency", AdmissionContext(args={"decay_every": "soon"}))
