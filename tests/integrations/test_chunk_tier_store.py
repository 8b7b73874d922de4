"""The engine tiers' chunk store (:class:`SlabChunkStore`) against a plain reference: an
SSD of ``n_slots`` chunks kept in LRU order (an ``OrderedDict``; a write or a read moves a
chunk to the MRU end, a write into a full SSD evicts the LRU chunk). Every write's
``ok``/``failed``/``dropped``, every read's bytes and every chunk's residency must match
it — the write's outcome comes from the store's own report, never from asking again."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicache.integrations.chunk_tier import (
    AdmissionGate, ChunkGeometry, Offer, SlabChunkStore, StoreKey, make_admission,
)
from aicache.kv.models import BlockGeometry

NAMESPACES = ("a-one", "a-two", "b-other")  # the tier's prefix is "a-"


def chunk(sk: StoreKey, size: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(repr(sk).encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def key(ns: int, k: int) -> StoreKey:
    return NAMESPACES[ns], bytes([k]) * 4


class ReferenceSSD:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.lru: OrderedDict[StoreKey, None] = OrderedDict()

    def write(self, items: list[StoreKey], prefix: str) -> tuple[list, list, list]:  # type: ignore[type-arg]
        evicted: list[StoreKey] = []
        for sk in items:
            if sk in self.lru:
                self.lru.move_to_end(sk)
                continue
            if len(self.lru) >= self.slots:
                old, _ = self.lru.popitem(last=False)
                if old[0].startswith(prefix):
                    evicted.append(old)
            self.lru[sk] = None
        ok = [sk for sk in items if sk in self.lru]
        failed = [sk for sk in items if sk not in self.lru]
        return ok, failed, [sk for sk in evicted if sk not in self.lru]

    def read(self, sk: StoreKey) -> bool:
        if sk not in self.lru:
            return False
        self.lru.move_to_end(sk)
        return True


op = st.one_of(
    st.tuples(st.just("write"), st.lists(st.tuples(st.integers(0, 2), st.integers(0, 7)),
                                         min_size=1, max_size=6, unique=True)),
    st.tuples(st.just("read"), st.tuples(st.integers(0, 2), st.integers(0, 7))))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25), slots=st.integers(1, 4),
       size=st.sampled_from([100, 101, 4096]))
def test_chunk_store_agrees_with_a_reference_lru(tmp_path_factory, ops, slots, size) -> None:  # type: ignore[no-untyped-def]
    """Batches may be longer than the SSD (a chunk written early in a batch is evicted by a
    later one: failed and dropped, as the tiers expect); odd chunk sizes are fine."""
    store = SlabChunkStore(tmp_path_factory.mktemp("chunks"), slots * 8192, size,
                           io_threads=2, slab_bytes=8192)
    ref = ReferenceSSD(store.n_slots)
    assert store.n_slots == slots
    try:
        for kind, arg in ops:
            if kind == "write":
                items = [key(*p) for p in arg]
                out = store.write([(sk, chunk(sk, size)) for sk in items], "a-")
                assert (out.ok, out.failed, out.dropped) == ref.write(items, "a-")
            else:
                sk = key(*arg)
                dst = np.zeros(size, np.uint8)
                got = store.read(sk, dst)
                assert got == ref.read(sk)
                if got:
                    assert np.array_equal(dst, chunk(sk, size))
            for ns in range(3):
                for k in range(8):
                    sk = key(ns, k)
                    assert store.holds(sk) == (sk in ref.lru)
            store.store.check()
    finally:
        store.close()


def test_recovered_chunks_are_those_left_under_the_prefix(tmp_path) -> None:  # type: ignore[no-untyped-def]
    items = [key(0, 1), key(1, 2), key(2, 3)]
    store = SlabChunkStore(tmp_path, 4 * 8192, 100, slab_bytes=8192)
    out = store.write([(sk, chunk(sk, 100)) for sk in items], "a-")
    assert out.ok == items and not out.failed and not out.dropped
    store.close()
    again = SlabChunkStore(tmp_path, 4 * 8192, 100, slab_bytes=8192)
    try:
        assert sorted(sk for sk, _ in again.recovered("a-")) == sorted(items[:2])
        dst = np.zeros(100, np.uint8)
        assert again.read(items[0], dst) and np.array_equal(dst, chunk(items[0], 100))
    finally:
        again.close()


def test_chunk_geometry_is_a_block_geometry() -> None:
    g: BlockGeometry = ChunkGeometry(101)
    assert (g.block_tokens, g.kv_bytes_per_token, g.block_bytes, g.hybrid) == (1, 101, 101, False)
    assert not hasattr(g, "__dict__")


def test_the_gates_counters_are_the_stores_node_and_survive_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One home for E/R: the gate's node becomes the store's node when the chunk is
    written, reads do not count a reuse on it (the gate does), and the slab header gives
    the counters back after a restart (as of the write)."""
    sk = key(0, 9)
    store = SlabChunkStore(tmp_path, 4 * 8192, 100, slab_bytes=8192)
    gate = AdmissionGate(make_admission("E2"), 100)
    assert not gate.offer(sk, Offer(now=0.0))  # first offer: E = 0, E2 declines
    gate.reference(sk, 1.0)
    gate.reference(sk, 2.0)
    assert gate.offer(sk, Offer(now=3.0))      # offered again: E = 1, E + 1 ≥ 2
    ev = gate.evidence(sk)
    assert ev is not None and (ev.E, ev.R) == (1, 2)
    out = store.write([(sk, chunk(sk, 100))], "a-", {sk: ev})
    assert out.ok == [sk]
    assert store.store.index.tree.match(sk[0], [sk[1]]) == [ev]
    dst = np.zeros(100, np.uint8)
    assert store.read(sk, dst) and store.read(sk, dst)
    assert (ev.E, ev.R) == (1, 2)               # reads counted nothing
    store.close()
    again = SlabChunkStore(tmp_path, 4 * 8192, 100, slab_bytes=8192)
    try:
        ((got_sk, got_ev),) = again.recovered("a-")
        assert got_sk == sk and (got_ev.E, got_ev.R) == (1, 2)
        gate2 = AdmissionGate(make_admission("E2"), 100)
        gate2.learn(got_sk, got_ev)
        assert gate2.reference(sk, 0.0) and gate2.evidence(sk) is got_ev and got_ev.R == 3
    finally:
        again.close()
