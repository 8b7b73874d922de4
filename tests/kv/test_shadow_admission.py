"""The shadow-following admission against the rules it shadows.

Reference: each rule replayed on its own (``sim kv --admission RULE``). Following a single
shadow under a budget that never binds must write exactly the bytes the rule writes and hit
exactly as often — the shadow sees what the rule would see; with several shadows, each
shadow's own count of writes must equal its rule's run where the followed rule is that rule
(same DRAM)."""

from __future__ import annotations

import pytest

from aicache.kv import admissions
from aicache.kv.shadow_admission import ShadowCache, ShadowFollowAdmission
from aicache.sim.kv import KVSimParams, prepare, simulate_kv
from aicache.traces.gen_agent import generate_agent

RULES = ("sglang-selective", "vllm-reuse-filter", "lmcache-gate", "kvbm-frequency",
         "mooncake-on-evict", "E2")
KW = dict(dram_tokens=100_000, ssd_tokens=2_000_000, session_window=1800.0)


@pytest.fixture(scope="module")
def reqs() -> list:
    return prepare(generate_agent(8, seed=3), 512)


@pytest.mark.parametrize("rule", RULES)
def test_one_shadow_unbounded_is_the_rule_itself(monkeypatch, reqs, rule: str) -> None:
    """Exact for the rules that decide from the node and the event alone. The others keep
    state the index updates only for blocks it asks about: a write the index's bandwidth
    gate holds back until eviction is one the shadow books at once (KVBM then counts one
    registration fewer), and vLLM's and LMCache's reference runs withdraw writes their SSD
    evicts within the same call; there the real writes what its shadow wrote."""
    monkeypatch.setattr(admissions, "SHADOW_RULES", (rule,))
    ref = simulate_kv(reqs, KVSimParams(admission=rule, **KW)).metrics
    assert ref["ssd_write_bytes"] > 0
    m = simulate_kv(reqs, KVSimParams(admission="shadow-follow", ssd_write_budget="1TB/s",
                                      ssd_write_window=ref["duration_s"], **KW)).metrics
    assert m["admission"] == "shadow-follow"
    assert m["shadow_switches"] == 0 and m["shadow_refused"] == 0
    assert m["ssd_write_bytes"] == m["shadows"][rule]["written_bytes"]
    if rule in ("sglang-selective", "mooncake-on-evict", "E2"):
        assert m["ssd_write_bytes"] == ref["ssd_write_bytes"]
        assert m["char"] == ref["char"]


def test_slots_only() -> None:
    for cls in (ShadowCache, ShadowFollowAdmission):
        assert "__dict__" not in dir(cls) and cls.__slots__


def test_index_tells_an_observer_of_evictions_of_blocks_already_on_ssd() -> None:
    """The index asks ``at_eviction`` only for blocks without an SSD copy; an admission that
    is a ``HeldEvictionObserver`` hears the other evictions too, each block's at its own
    eviction (reference: the index's own eviction count)."""
    from aicache.kv.admission import AdmissionRule, HeldEvictionObserver, IgnoresEvents
    from aicache.kv.models import ModelSpec
    from aicache.kv.promotion import PromotionMode, PromotionParams
    from aicache.kv.radix import RadixNode, Tier
    from aicache.kv.saria import KVIndex, KVIndexParams

    class WriteAllAndListen(IgnoresEvents):
        label = "write-all"

        def __init__(self) -> None:
            self.asked: list[RadixNode] = []
            self.held: list[RadixNode] = []

        def at_eviction(self, node: RadixNode, now: float) -> bool:
            assert not node.kv_loc & Tier.SSD
            self.asked.append(node)
            return True

        def prewrite_now(self, node: RadixNode, now: float) -> bool:
            return False

        def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
            return False

        def on_evict_held(self, node: RadixNode, now: float) -> None:
            assert node.kv_loc & Tier.SSD
            self.held.append(node)

    m = ModelSpec("tiny", 1, 1, 1, dtype_bytes=1, block_tokens=4)
    adm = WriteAllAndListen()
    assert isinstance(adm, HeldEvictionObserver)
    ix = KVIndex(KVIndexParams(model=m, dram_bytes=2 * m.block_bytes,
                               ssd_bytes=100 * m.block_bytes,
                               admission=AdmissionRule(None, None, False),
                               admission_policy=adm,
                               promotion=PromotionParams(PromotionMode.FULL, 1.0, 0.0)))
    ns = ("tiny", None)
    for t, keys in enumerate(([1, 2], [3, 4], [1, 2], [3, 4], [5, 6], [1, 2])):
        plan = ix.lookup(ns, keys, float(t))
        ix.begin(plan, float(t))
        ix.finish(plan, keys, float(t), tokens=[4] * len(keys))
    assert adm.held, "blocks promoted back from SSD were evicted again"
    assert len(adm.asked) + len(adm.held) == ix.stats.dram_evictions
