"""Radix metadata tree: structure, namespaces, pinning, windowed reclamation, and the KV
index's residency invariants (property tests against plain references)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.kv.models import ModelSpec
from aicache.kv.radix import KVObject, RadixNode, RadixTree, Tier
from aicache.kv.admission import AdmissionRule
from aicache.kv.promotion import PromotionMode, PromotionParams
from aicache.kv.saria import KVIndex, KVIndexParams

A, B = ("m", None), ("m", "lora-1")


def test_node_has_no_dict() -> None:
    t = RadixTree()
    (n,) = t.insert(A, [1], 0.0)
    assert not hasattr(n, "__dict__")


def test_split_on_partial_match_branches_at_block_boundary() -> None:
    t = RadixTree()
    t.insert(A, [1, 2, 3, 4], 0.0)
    t.insert(A, [1, 2, 9], 0.0)  # diverges inside the known path -> branch under block 2
    assert len(t) == 5
    two = t.match(A, [1, 2])[-1]
    assert two.children is not None and sorted(two.children) == [3, 9]
    assert len(t.match(A, [1, 2, 3, 4])) == 4
    assert len(t.match(A, [1, 2, 9, 5])) == 3
    assert len(t.match(A, [1, 2, 7])) == 2
    assert t.match(A, [1, 2, 9])[-1].path() == [1, 2, 9]


def test_lookup_never_creates_nodes() -> None:
    t = RadixTree()
    t.insert(A, [1], 0.0)
    leaf = t.match(A, [1])[0]
    assert t.match(A, [1, 5, 6]) == [leaf]
    assert leaf.children is None and len(t) == 1
    assert t.match(("other", None), [1]) == [] and t.root(("other", None)) is None


def test_namespaces_isolated() -> None:
    t = RadixTree()
    t.insert(A, [1, 2], 0.0)
    assert t.match(B, [1, 2]) == []
    t.insert(B, [1], 0.0)
    assert t.match(A, [1])[0] is not t.match(B, [1])[0]
    assert len(t) == 3


def test_pinning_prevents_reclamation() -> None:
    t = RadixTree(window=100.0)
    path = t.insert(A, [1, 2, 3], 0.0)  # metadata only: no copy anywhere
    t.pin(path[-1])
    assert [n.pins for n in path] == [1, 1, 1]
    assert t.reclaim(1000.0) == 0 and len(t) == 3
    t.unpin(path[-1])
    assert t.reclaim(1000.0) == 3 and len(t) == 0


def test_resident_nodes_are_never_reclaimed_and_children_first() -> None:
    t = RadixTree(window=10.0)
    path = t.insert(A, [1, 2, 3], 0.0)
    t.set_location(path[0], KVObject.KV, Tier.SSD, True)
    assert t.reclaim(100.0) == 2          # 3 then 2 go; 1 keeps an SSD copy
    assert t.match(A, [1, 2]) == [path[0]]
    t.set_location(path[0], KVObject.KV, Tier.SSD, False)
    # the last touch was at 0, a window ago: it goes as soon as it has no copy left
    assert t.reclaim(105.0) == 1 and len(t) == 0


def test_metadata_survives_eviction_and_is_reclaimed_after_window() -> None:
    m = ModelSpec("tiny", 1, 1, 1, dtype_bytes=1, block_tokens=4)
    ix = KVIndex(KVIndexParams(model=m, dram_bytes=2 * m.block_bytes, ssd_bytes=0,
                               metadata_window=100.0))
    ns = ("tiny", None)

    def req(keys: list[int], now: float) -> None:
        plan = ix.lookup(ns, keys, now)
        ix.begin(plan, now)
        ix.finish(plan, keys, now, tokens=[4] * len(keys))

    req([1], 0.0)
    req([2], 5.0)
    req([3], 10.0)                        # evicts block 1 from DRAM
    (n1,) = ix.tree.match(ns, [1])
    assert n1.kv_loc == 0 and n1.E == 1   # history kept without residency
    req([4], 50.0)                        # 50 s after its last touch: still known
    assert ix.tree.match(ns, [1]) == [n1]
    req([5], 101.0)                       # a whole window after its last touch
    assert ix.tree.match(ns, [1]) == []
    assert ix.tree.match(ns, [5])         # resident blocks stay


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from([A, B]),
                          st.lists(st.integers(0, 3), min_size=0, max_size=6)),
                min_size=1, max_size=40))
def test_tree_agrees_with_dict_of_prefixes(ops: list[tuple[bool, object, list[int]]]) -> None:
    t = RadixTree()
    ref: dict[object, set[tuple[int, ...]]] = {A: set(), B: set()}
    for is_insert, ns, keys in ops:
        if is_insert:
            t.insert(ns, keys, 0.0)
            for i in range(1, len(keys) + 1):
                ref[ns].add(tuple(keys[:i]))
        want = max((i for i in range(len(keys) + 1) if i == 0 or tuple(keys[:i]) in ref[ns]),
                   default=0)
        got = t.match(ns, keys)
        assert len(got) == want
        assert [n.key for n in got] == keys[:want]
    assert len(t) == sum(len(v) for v in ref.values())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([A, B]),
                          st.lists(st.integers(0, 3), min_size=0, max_size=6)),
                min_size=1, max_size=30))
def test_insert_resuming_after_a_match_builds_the_same_tree(
        ops: list[tuple[object, list[int]]]) -> None:
    """``insert(known=match(...))`` walks each key once and gives the very nodes (and
    tree) a plain ``insert`` does; every node's namespace is its root's key."""
    plain, resumed = RadixTree(), RadixTree()
    for ns, keys in ops:
        want = plain.insert(ns, keys, 0.0)
        got = resumed.insert(ns, keys, 0.0, known=resumed.match(ns, keys))
        assert [n.path() for n in got] == [n.path() for n in want]
        assert len(resumed) == len(plain)
        assert all(RadixTree.namespace_of(n) == ns for n in got)
    for ns in (A, B):
        assert sorted(n.path() for n in resumed.nodes(ns)) == sorted(
            n.path() for n in plain.nodes(ns))


def test_attach_links_a_detached_node_and_respects_a_held_one() -> None:
    t = RadixTree()
    (old,) = t.insert(A, [5], 0.0)              # metadata only: superseded by attach
    mine = RadixNode(5, None, 1)
    mine.E, mine.R = 2, 3
    assert t.attach(A, mine) is mine
    assert t.match(A, [5]) == [mine] and old.parent is None and len(t) == 1
    assert RadixTree.namespace_of(mine) == A and mine.depth == 1
    assert t.attach(A, mine) is mine            # already there: nothing changes
    t.set_location(mine, KVObject.KV, Tier.SSD, True)
    other = RadixNode(5, None, 1)
    assert t.attach(A, other) is mine           # a node holding a copy is kept
    assert t.match(A, [5]) == [mine] and other.parent is None


def test_a_reclaimed_node_has_no_namespace() -> None:
    t = RadixTree(window=1.0)
    (n,) = t.insert(A, [1], 0.0)
    root = t.root(A)
    assert root is not None and root.key == A and RadixTree.namespace_of(root) == A
    assert RadixTree.namespace_of(n) == A
    assert t.reclaim(5.0) == 1
    assert RadixTree.namespace_of(n) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=5), min_size=1, max_size=30),
       st.sampled_from(["E2", "R2", "full-duplicate"]),
       st.sampled_from(list(PromotionMode)), st.integers(1, 4), st.integers(0, 6))
def test_index_residency_invariants(reqs: list[list[int]], rule: str, mode: PromotionMode,
                                    dram_blocks: int, ssd_blocks: int) -> None:
    m = ModelSpec("tiny", 1, 1, 1, dtype_bytes=1, block_tokens=4)
    ix = KVIndex(KVIndexParams(model=m, dram_bytes=dram_blocks * m.block_bytes,
                               ssd_bytes=ssd_blocks * m.block_bytes,
                               admission=AdmissionRule.parse(rule),
                               promotion=PromotionParams(mode, r=0.5, p_tau=1.0)))
    ns = ("tiny", None)
    for i, keys in enumerate(reqs):
        now = float(i * 10)
        plan = ix.lookup(ns, keys, now)
        # a plan is a prefix of the prompt, every block sourced from a tier that holds it
        assert [n.key for n in plan.nodes] == keys[:plan.hit_blocks]
        for n, src in zip(plan.nodes, plan.sources):
            assert n.kv_loc & src
        ix.begin(plan, now)
        ix.finish(plan, keys, now, tokens=[4] * len(keys))
        nodes = list(ix.tree.nodes())
        in_dram = {id(n) for n in nodes if n.kv_loc & Tier.DRAM}
        on_ssd = {id(n) for n in nodes if n.kv_loc & Tier.SSD}
        assert in_dram == {id(n) for n in ix.policy.candidates(now)}
        assert on_ssd == {id(n) for n in ix.ssd_lru}
        assert ix.dram_used == sum(4 * 2 for n in nodes if n.kv_loc & Tier.DRAM) <= ix.dram_capacity
        assert ix.ssd_used == sum(4 * 2 for n in nodes if n.kv_loc & Tier.SSD) <= ix.ssd_capacity
        assert all(n.pins == 0 for n in nodes)
        assert all(isinstance(n, RadixNode) for n in nodes)
