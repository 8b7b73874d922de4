"""``KVIndex``'s driver events — adopt an SSD copy found at recovery, lose a copy, stop
SSD admissions — keep the index's own invariants (the DRAM policy holds exactly the DRAM
copies, ``ssd_lru`` exactly the SSD copies, used bytes = the sum of the copies' sizes,
within capacity) with no help from the driver: checked against a recount of the tree."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.kv.models import ModelSpec
from aicache.kv.radix import Tier
from aicache.kv.admission import AdmissionRule
from aicache.kv.promotion import PromotionMode, PromotionParams
from aicache.kv.saria import KVIndex, KVIndexParams

M = ModelSpec("tiny", 1, 1, 1, dtype_bytes=1, block_tokens=4)  # 8-byte blocks
NS = ("tiny", None)
BB = M.block_bytes


def make(dram_blocks: int, ssd_blocks: int, rule: str = "E2") -> KVIndex:
    return KVIndex(KVIndexParams(model=M, dram_bytes=dram_blocks * BB, ssd_bytes=ssd_blocks * BB,
                                 admission=AdmissionRule.parse(rule),
                                 promotion=PromotionParams(PromotionMode.PARTIAL, 0.5, 1.0)))


def request(ix: KVIndex, keys: list[int], now: float):  # type: ignore[no-untyped-def]
    plan = ix.lookup(NS, keys, now)
    ix.begin(plan, now)
    return ix.finish(plan, keys, now, tokens=[4] * len(keys))


def assert_invariants(ix: KVIndex, now: float) -> None:
    nodes = list(ix.tree.nodes())
    in_dram = {id(n) for n in nodes if n.kv_loc & Tier.DRAM}
    on_ssd = {id(n) for n in nodes if n.kv_loc & Tier.SSD}
    assert in_dram == {id(n) for n in ix.policy.candidates(now)}
    assert on_ssd == {id(n) for n in ix.ssd_lru}
    assert ix.dram_used == BB * len(in_dram) <= ix.dram_capacity
    assert ix.ssd_used == BB * len(on_ssd) <= ix.ssd_capacity


def test_adopt_rebuilds_ssd_copies_in_write_order_without_counting_writes() -> None:
    ix = make(0, 3, "full-duplicate")
    paths = [[1, 2], [1, 3]]
    nodes = [ix.tree.insert(NS, p, 0.0, [4, 4]) for p in paths]
    n1, n2, n3 = nodes[0][0], nodes[0][1], nodes[1][1]
    assert ix.adopt_ssd(n3, E=2, R=5) and ix.adopt_ssd(n1) and ix.adopt_ssd(n2, E=1)
    assert list(ix.ssd_lru) == [n3, n1, n2]
    assert (n3.E, n3.R, n2.E) == (2, 5, 1)
    assert ix.stats.ssd_writes == 0 and ix.ssd_used == 3 * BB
    assert not ix.adopt_ssd(n1)  # already held: nothing changes
    extra = ix.tree.insert(NS, [9], 0.0, [4])[0]
    assert not ix.adopt_ssd(extra) and not extra.kv_loc  # the tier is full
    plan = ix.lookup(NS, [1, 3], 1.0)
    assert plan.sources == [Tier.SSD, Tier.SSD]
    # the LRU order adopted is the one capacity eviction follows: n3 was written first
    ix.begin(plan, 1.0)
    ix.finish(plan, [1, 3], 1.0, tokens=[4, 4])
    moves = ix.store(NS, [7], 2.0, tokens=[4])
    assert moves.ssd_drops == [n2] and moves.ssd_writes == [ix.tree.match(NS, [7])[0]]
    assert_invariants(ix, 2.0)


def test_lose_copy_is_a_drop_the_driver_applies_not_an_eviction() -> None:
    ix = make(2, 4, "full-duplicate")
    request(ix, [1, 2], 0.0)
    n1, n2 = ix.tree.match(NS, [1, 2])
    assert n2.kv_loc == Tier.DRAM | Tier.SSD
    e_before, ev_before = n2.E, ix.stats.ssd_evictions
    moves = ix.lose_copy(n2, Tier.SSD)
    assert moves.ssd_drops == [n2] and not moves.ssd_writes and not moves.dram_drops
    assert n2.kv_loc == Tier.DRAM and n2.E == e_before
    assert ix.stats.ssd_evictions == ev_before and ix.stats.copies_lost == 1
    moves = ix.lose_copy(n2, Tier.DRAM)
    assert moves.dram_drops == [n2] and not n2.kv_loc
    assert ix.stats.dram_evictions == 0 and ix.stats.copies_lost == 2
    assert ix.lose_copy(n2, Tier.SSD).ssd_drops == []  # no copy left: nothing to free
    assert ix.lookup(NS, [1, 2], 1.0).hit_blocks == 1
    assert_invariants(ix, 1.0)


def test_stop_ssd_admissions_ends_writes_keeps_copies() -> None:
    for dram_blocks, rule in ((2, "full-duplicate"), (1, "E1"), (0, "E2")):  # 0: gds-only
        ix = make(dram_blocks, 8, rule)
        for t, keys in enumerate(([1, 2], [3, 4], [5, 6])):
            request(ix, keys, float(t))
        held = list(ix.ssd_lru)
        assert held
        writes = ix.stats.ssd_writes
        ix.stop_ssd_admissions()
        for t, keys in enumerate(([7, 8], [9, 10], [11, 12], [7, 8]), start=10):
            moves = request(ix, keys, float(t))
            assert not moves.ssd_writes and not moves.prewrites
        assert ix.stats.ssd_writes == writes
        first = held[0]
        plan = ix.lookup(NS, first.path(), 20.0)
        assert plan.sources[-1] in (Tier.SSD, Tier.DRAM) and plan.hit_blocks == len(first.path())
        ix.begin(plan, 20.0)
        if plan.sources[-1] is Tier.SSD:
            assert list(ix.ssd_lru)[-1] is first  # an SSD hit still refreshes the LRU
        ix.finish(plan, first.path(), 20.0, tokens=[4] * len(first.path()))
        assert_invariants(ix, 20.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=4),
                          st.integers(0, 7)), min_size=1, max_size=30),
       st.sampled_from(["E1", "E2", "R2", "full-duplicate"]), st.integers(0, 3),
       st.integers(1, 5))
def test_events_interleaved_with_requests_keep_the_invariants(
        ops: list[tuple[list[int], int]], rule: str, dram_blocks: int, ssd_blocks: int) -> None:
    """Requests with losses of random copies and a stop of admissions in between: the
    index alone keeps its invariants, and a lost copy is never planned as a source."""
    ix = make(dram_blocks, ssd_blocks, rule)
    for i, (keys, event) in enumerate(ops):
        now = float(i * 10)
        request(ix, keys, now)
        nodes = list(ix.tree.nodes())
        if nodes and event < 4:
            victim = nodes[event % len(nodes)]
            tier = Tier.SSD if event % 2 else Tier.DRAM
            had = bool(victim.kv_loc & tier)
            moves = ix.lose_copy(victim, tier)
            assert (victim in moves.ssd_drops or victim in moves.dram_drops) == had
            assert not victim.kv_loc & tier
        elif event == 7:
            ix.stop_ssd_admissions()
        assert_invariants(ix, now)
        plan = ix.lookup(NS, keys, now + 1)
        for n, src in zip(plan.nodes, plan.sources):
            assert n.kv_loc & src


def test_release_unpins_and_put_stores_without_a_reuse_then_reclaims() -> None:
    ix = make(2, 2, "full-duplicate")
    request(ix, [1, 2], 0.0)
    plan = ix.lookup(NS, [1, 2], 1.0)
    ix.begin(plan, 1.0)
    assert [n.pins for n in plan.nodes] == [1, 1]
    ix.release(plan)  # an aborted request: nothing stored, nothing stays pinned
    assert [n.pins for n in plan.nodes] == [0, 0]
    # metadata found at recovery whose copy was not adopted: idle since 0, no copy
    stale = ix.recovered_path(NS, [8, 9], [4, 4])
    assert [n.kv_loc for n in stale] == [0, 0]
    before = [n.R for n in plan.nodes]
    now = ix.tree.window + 10.0
    moves = ix.put(NS, [1, 2, 3], now, tokens=[4, 4, 4])
    # the known blocks keep their reuse count (a put is not a hit), the new one is written
    assert [n.R for n in ix.tree.match(NS, [1, 2])] == before
    assert ix.tree.match(NS, [1, 2, 3])[2] in moves.dram_inserts
    assert ix.tree.match(NS, [8]) == []  # reclaimed, as finish() would have
    assert_invariants(ix, now)
