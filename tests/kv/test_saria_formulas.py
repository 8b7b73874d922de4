"""SARIA's formulas against hand-computed cases (docs/design/saria.md)."""

from __future__ import annotations

import math

import pytest

from aicache.errors import BadInput
from aicache.kv.models import ModelSpec
from aicache.kv.radix import KVObject, Tier
from aicache.kv.admission import AdmissionRule
from aicache.kv.promotion import (
    PromotionMode, PromotionParams, promotion_allowed, promotion_target, r_star,
)
from aicache.kv.saria import KVIndex, KVIndexParams, LookupMode
from aicache.kv.transfer import GB, IDEAL_SHARING, Bandwidths, TransferCoordinator, b_pace, schedule

# 1 layer x 1 head x dim 1 x (K,V) x 1 byte = 2 bytes/token; 4-token blocks = 8 bytes
TINY = ModelSpec("tiny", 1, 1, 1, dtype_bytes=1, block_tokens=4)
NS = ("tiny", None)


def make_index(dram_blocks: int, ssd_blocks: int, *, rule: AdmissionRule = AdmissionRule(2),
               promotion: PromotionParams = PromotionParams(), model: ModelSpec = TINY,
               lookup: LookupMode = LookupMode.UNIFIED) -> KVIndex:
    return KVIndex(KVIndexParams(model=model, dram_bytes=dram_blocks * model.block_bytes,
                                 ssd_bytes=ssd_blocks * model.block_bytes, admission=rule,
                                 promotion=promotion, lookup=lookup))


def run_request(ix: KVIndex, keys: list[int], now: float):
    plan = ix.lookup(NS, keys, now)
    ix.begin(plan, now)
    ix.finish(plan, keys, now, tokens=[ix.p.model.block_tokens] * len(keys))
    return plan


# ----------------------------------------------------------------------- admission
def test_admit_rule_by_hand() -> None:
    e2 = AdmissionRule(2, None)
    assert [e2.admit(e, 0) for e in range(4)] == [False, False, True, True]
    assert not e2.admit(1, 100)  # reuse does not count without θ_R
    r4 = AdmissionRule(None, 4)
    assert [r4.admit(9, r) for r in (3, 4)] == [False, True]
    both = AdmissionRule(2, 8)
    assert both.admit(2, 0) and both.admit(0, 8) and not both.admit(1, 7)
    assert AdmissionRule(None, None, True).admit(0, 0)


def test_admission_names_parse() -> None:
    assert AdmissionRule.parse("E3") == AdmissionRule(3, None)
    assert AdmissionRule.parse("R48") == AdmissionRule(None, 48)
    assert AdmissionRule.parse("E2∨R8") == AdmissionRule(2, 8)
    assert AdmissionRule.parse("e2|r24") == AdmissionRule(2, 24)
    assert AdmissionRule.parse("full-duplicate").everything
    with pytest.raises(BadInput):
        AdmissionRule.parse("X9")


def test_prewrite_trigger_uses_next_eviction() -> None:
    e2 = AdmissionRule(2, None)
    assert not e2.prewrite_due(0, 0)   # 0 + 1 < 2
    assert e2.prewrite_due(1, 0)       # would qualify at its next eviction
    assert AdmissionRule(None, 4).prewrite_due(0, 4)


def test_e2_writes_at_second_eviction_or_prewrites_on_return() -> None:
    # DRAM 2 blocks; block 1 is evicted (E=1, rejected), recomputed (prewrite: E+1 = 2)
    ix = make_index(2, 10)
    run_request(ix, [1], 0.0)
    run_request(ix, [2], 1.0)
    run_request(ix, [3], 2.0)           # evicts 1: E=1, not admitted
    n1 = ix.tree.match(NS, [1])[0]
    assert n1.E == 1 and n1.kv_loc == 0 and ix.stats.ssd_writes == 0
    assert ix.stats.rejected_at_eviction == 1
    run_request(ix, [1], 3.0)           # recomputed and stored: E+1 >= 2 -> prewrite
    assert ix.stats.prewrites == 1 and n1.kv_loc == int(Tier.DRAM | Tier.SSD)
    assert ix.stats.ssd_write_bytes == TINY.block_bytes


def test_reuse_threshold_prewrites_when_r_reaches_theta() -> None:
    ix = make_index(4, 10, rule=AdmissionRule(None, 2))
    run_request(ix, [1], 0.0)
    run_request(ix, [1], 1.0)           # R = 1
    assert ix.stats.ssd_writes == 0
    run_request(ix, [1], 2.0)           # R = 2 = θ_R while in DRAM -> prewrite
    assert ix.stats.prewrites == 1
    assert ix.tree.match(NS, [1])[0].kv_loc & Tier.SSD


# ----------------------------------------------------------------------- promotion
def test_r_star_and_p_target_by_hand() -> None:
    assert r_star(20, 48) == pytest.approx(1 - 20 / 48)
    assert r_star(10, 24) == pytest.approx(7 / 12)
    assert r_star(60, 48) == 0.0
    assert promotion_target(0.4, 2, 8) == 2      # 0.4·10 − 2
    assert promotion_target(0.4, 5, 5) == 0      # DRAM share already above r
    assert promotion_target(0.5, 1, 4) == 1      # 2.5 − 1 = 1.5, rounded down
    assert promotion_target(1.0, 0, 3) == 3
    assert promotion_target(0.6, 0, 10) == 6


def test_p_tau_guard_blocks_then_allows_promotion() -> None:
    assert not promotion_allowed(110.0, 100.0, 60.0)
    assert promotion_allowed(160.0, 100.0, 60.0)
    ix = make_index(2, 10, rule=AdmissionRule(None, None, True),
                    promotion=PromotionParams(PromotionMode.PARTIAL, r=1.0, p_tau=60.0))
    run_request(ix, [1], 0.0)
    run_request(ix, [2], 1.0)
    run_request(ix, [3], 2.0)           # 1 leaves DRAM, stays on SSD (full duplicate)
    run_request(ix, [2], 100.0)
    run_request(ix, [3], 100.0)         # both DRAM blocks reused at t=100
    plan = run_request(ix, [1], 110.0)  # SSD hit; P_target = 1 but candidates are 10 s old
    assert plan.ssd_blocks == 1 and ix.stats.promotions == 0 and ix.stats.promotions_blocked == 1
    assert not ix.tree.match(NS, [1])[0].kv_loc & Tier.DRAM
    run_request(ix, [1], 200.0)         # 100 s later the LRU candidate may be displaced
    assert ix.stats.promotions == 1
    assert ix.tree.match(NS, [1])[0].kv_loc & Tier.DRAM
    assert not ix.tree.match(NS, [2])[0].kv_loc & Tier.DRAM  # 2 was least recently used


def test_zero_and_full_promotion() -> None:
    for mode, expect in ((PromotionMode.ZERO, 0), (PromotionMode.FULL, 3)):
        ix = make_index(3, 10, rule=AdmissionRule(None, None, True),
                        promotion=PromotionParams(mode, r=0.1))
        run_request(ix, [1, 2, 3], 0.0)
        run_request(ix, [7, 8, 9], 1.0)  # pushes 1..3 out of DRAM
        plan = run_request(ix, [1, 2, 3], 500.0)
        assert plan.ssd_blocks == 3
        assert ix.stats.promotions == expect


# -------------------------------------------------------------------- coordination
def test_b_pace_by_hand() -> None:
    assert b_pace(Bandwidths(48 * GB, 20 * GB, 48 * GB)) == 28 * GB
    assert b_pace(Bandwidths(24 * GB, 10 * GB, 24 * GB)) == 14 * GB
    assert b_pace(Bandwidths(24 * GB, 23.9 * GB, 24 * GB)) == pytest.approx(0.1 * GB)
    assert b_pace(Bandwidths(100 * GB, 20 * GB, 48 * GB)) == 48 * GB


# the spec's formulas alone (no overlap share, free coordinator); the SSD model's
# defaults are checked in tests/sim/test_sim_kv_ssd.py
IDEAL = IDEAL_SHARING


def test_coordinator_single_mixed_plan() -> None:
    job = [(48 * GB, 20 * GB)]
    assert schedule(job, "serial", sharing=IDEAL) == [pytest.approx(2.0)]        # 48/48 + 20/20
    assert schedule(job, "overlap", sharing=IDEAL) == [pytest.approx(2.0)]       # DRAM burst starves GDS
    assert schedule(job, "coordinated", sharing=IDEAL) == [pytest.approx(68 / 48)]  # ideal V / B_GPU


def test_coordinator_two_requests_by_hand() -> None:
    jobs = [(48 * GB, 20 * GB), (10 * GB, 0.0)]
    # serial: both DRAM parts share 48 -> B done at 10/24; A's 38 GB DRAM at 48; then SSD 1 s
    s = schedule(jobs, "serial", sharing=IDEAL)
    assert s == [pytest.approx(10 / 24 + 38 / 48 + 1.0), pytest.approx(10 / 24)]
    # coordinated: DRAM paced to 28 (14 each) while A's SSD runs at 20
    #   B done at 10/14; A's SSD (20 − 20·10/14 left) at 20 -> t = 1.0; then A's DRAM
    #   (48 − 10 − 8 = 30 GB) unthrottled at 48 -> 1.625
    c = schedule(jobs, "coordinated", sharing=IDEAL)
    assert c == [pytest.approx(1.0 + 30 / 48), pytest.approx(10 / 14)]


def test_coordination_beats_serial_on_one_ssd_fig16_shape() -> None:
    p = 9.28125 * 2**30
    for disk, expect in ((8.0, 1 - (p / 8) / (p / 24 + p / 8)), (12.0, None)):
        bw = Bandwidths(24 * GB, disk * GB, 24 * GB)
        serial = schedule([(p, p)], "serial", bw, sharing=IDEAL)[0]
        coord = schedule([(p, p)], "coordinated", bw, sharing=IDEAL)[0]
        assert serial == pytest.approx(p / (24 * GB) + p / (disk * GB))
        assert coord < serial
        if expect is not None:
            assert 1 - coord / serial == pytest.approx(expect)


def test_coordinator_incremental_submission() -> None:
    c = TransferCoordinator("coordinated", Bandwidths(48 * GB, 20 * GB, 48 * GB),
                            sharing=IDEAL)
    c.submit("a", 0.0, 20 * GB, 0.0)           # SSD only: 1 s at 20
    assert c.advance(0.5) == []
    c.submit("b", 14 * GB, 0.0, 0.5)           # DRAM paced to 28 while a's SSD runs
    done = c.run_until_idle()
    assert done["b"] == pytest.approx(1.0) and done["a"] == pytest.approx(1.0)


# ------------------------------------------------------------------------ planning
def _place(ix: KVIndex, keys: list[int], tiers: list[Tier]) -> None:
    nodes = ix.tree.insert(NS, keys, 0.0, tokens=[TINY.block_tokens] * len(keys))
    for n, t in zip(nodes, tiers):
        for bit in (Tier.DRAM, Tier.SSD):
            if t & bit:
                ix.tree.set_location(n, KVObject.KV, bit, True)


def test_interleaved_prefix_unified_vs_tier_prefix() -> None:
    layout = [Tier.DRAM, Tier.SSD, Tier.DRAM, Tier.NONE]
    uni = make_index(10, 10)
    _place(uni, [1, 2, 3, 4], layout)
    plan = uni.lookup(NS, [1, 2, 3, 4], 0.0)
    assert plan.sources == [Tier.DRAM, Tier.SSD, Tier.DRAM]
    assert (plan.dram_blocks, plan.ssd_blocks) == (2, 1)
    assert (plan.dram_bytes, plan.ssd_bytes) == (16, 8)
    lmc = make_index(10, 10, lookup=LookupMode.TIER_PREFIX)
    _place(lmc, [1, 2, 3, 4], layout)
    cut = lmc.lookup(NS, [1, 2, 3, 4], 0.0)
    assert cut.sources == [Tier.DRAM, Tier.SSD]  # cannot switch back to DRAM
    both = make_index(10, 10, lookup=LookupMode.TIER_PREFIX)
    _place(both, [1, 2, 3, 4], [Tier.DRAM, Tier.SSD, Tier.DRAM | Tier.SSD, Tier.NONE])
    assert both.lookup(NS, [1, 2, 3, 4], 0.0).sources == [Tier.DRAM, Tier.SSD, Tier.SSD]


def test_hybrid_prefix_only_reusable_to_last_checkpoint() -> None:
    hyb = ModelSpec("hyb", 1, 1, 1, dtype_bytes=1, block_tokens=4, checkpoint_tokens=8,
                    checkpoint_bytes=100)  # checkpoint every 2 blocks
    ix = make_index(20, 20, model=hyb)
    keys = [1, 2, 3, 4, 5]
    nodes = ix.tree.insert(NS, keys, 0.0, tokens=[4] * 5, ckpt=ix.checkpoint_flags(5))
    assert [n.has_ckpt for n in nodes] == [False, True, False, True, False]
    for n in nodes:
        ix.tree.set_location(n, KVObject.KV, Tier.DRAM, True)
    ix.tree.set_location(nodes[1], KVObject.CHECKPOINT, Tier.SSD, True)
    plan = ix.lookup(NS, keys, 0.0)
    assert plan.hit_blocks == 2 and plan.checkpoint is nodes[1]   # block 4's checkpoint missing
    assert (plan.dram_bytes, plan.ssd_bytes) == (2 * 8, 100)
    ix.tree.set_location(nodes[3], KVObject.CHECKPOINT, Tier.DRAM, True)
    plan = ix.lookup(NS, keys, 0.0)
    assert plan.hit_blocks == 4 and plan.hit_tokens == 16          # block 5 is past the last
    assert (plan.dram_bytes, plan.ssd_bytes) == (4 * 8 + 100, 0)
    assert math.isclose(plan.dram_bytes, 132)


def test_reuse_count_includes_recomputed_requests() -> None:
    # R_b counts requests that reuse the context, even when its copies were lost
    ix = make_index(1, 0, rule=AdmissionRule(None, 3))
    run_request(ix, [1], 0.0)
    run_request(ix, [2], 1.0)           # evicts 1 (DRAM holds one block)
    plan = run_request(ix, [1], 2.0)    # miss: recomputed, but a reuse of block 1
    assert plan.hit_blocks == 0 and plan.known_blocks == 1
    run_request(ix, [1], 3.0)           # DRAM hit
    assert ix.tree.match(NS, [1])[0].R == 2
