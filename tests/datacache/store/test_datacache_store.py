"""BlockStore against a plain reference: an ordered dict evicting oldest-first (the store's
own order when no policy names a victim). Random puts, removals, corrupting writes and
restarts; after every step the stored set, the bytes and the budget must agree."""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.datacache.keys import BlockKey

from aicache.datacache.store import ALLOC_UNIT, HEADER_SIZE, BlockStore, stored_size

CAP = 10_000
BLOCK = 4096

ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 30), st.integers(0, BLOCK)),
    st.tuples(st.just("remove"), st.integers(0, 30), st.just(0)),
    st.tuples(st.just("corrupt"), st.integers(0, 30), st.just(0)),
    st.tuples(st.just("restart"), st.just(0), st.just(0)),
), min_size=1, max_size=60)


def payload(i: int, n: int) -> bytes:
    return bytes((i * 31 + j) % 251 for j in range(n))


@settings(max_examples=40)
@given(ops=ops)
def test_store_matches_fifo_reference(ops) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = BlockStore(d, CAP, BLOCK)
        ref: OrderedDict[int, bytes] = OrderedDict()
        try:
            for op, i, n in ops:
                key = BlockKey(f"/data/f{i}", "v1", 0)
                if op == "put":
                    data = payload(i, n)
                    ok = store.put(key, data)
                    assert ok == (stored_size(n) <= CAP)
                    if ok and i not in ref:
                        while sum(stored_size(len(v)) for v in ref.values()) + stored_size(n) > CAP:
                            ref.popitem(last=False)
                        ref[i] = data
                elif op == "remove":
                    assert store.remove(key) == (i in ref)
                    ref.pop(i, None)
                elif op == "corrupt" and i in ref:
                    with open(store.block_path(key), "r+b") as f:
                        f.seek(HEADER_SIZE // 2)  # inside the header's length/checksum
                        f.write(b"\xff\xfe")
                    assert store.get(key) is None  # never served; dropped
                    del ref[i]
                elif op == "restart":
                    store.close()
                    store = BlockStore(d, CAP, BLOCK)
                stored = {k.path for k in store.keys()}
                assert stored == {f"/data/f{j}" for j in ref}
                assert store.stats().used_bytes == sum(stored_size(len(v)) for v in ref.values()) <= CAP
                for j, v in ref.items():
                    assert store.get(BlockKey(f"/data/f{j}", "v1", 0)) == v
            files = [os.stat(os.path.join(r, f)) for r, _d, fs in os.walk(os.path.join(d, "blocks"))
                     for f in fs]
            assert sum(stored_size(st.st_size - HEADER_SIZE) for st in files) == store.stats().used_bytes
            assert sum(st.st_blocks * 512 for st in files) <= store.stats().used_bytes  # what the disk holds
            assert store.verify().bad == 0
        finally:
            store.close()


def test_blocks_of_other_versions_and_block_sizes_never_alias(tmp_path) -> None:
    a = BlockStore(tmp_path / "c", 1 << 20, BLOCK)
    a.put(BlockKey("/x", "etag:1", 0), b"old")
    assert a.get(BlockKey("/x", "etag:2", 0)) is None  # the remote file changed
    a.close()
    b = BlockStore(tmp_path / "c", 1 << 20, 2 * BLOCK)  # same dir, other block size
    assert b.get(BlockKey("/x", "etag:1", 0)) is None
    assert b.stats().blocks == 1  # still counted against the budget until evicted
    b.close()


def test_the_budget_covers_what_small_blocks_take_on_disk(tmp_path) -> None:
    """Many blocks of a few hundred bytes (small files, one block each): each file takes a
    whole allocation unit on disk, and the budget counts that, so the blocks' disk usage
    (st_blocks) stays within the capacity; charging only the bytes written would let it
    grow to ~ALLOC_UNIT / 300 times the budget."""
    cap = 64 * ALLOC_UNIT
    store = BlockStore(str(tmp_path / "c"), cap, 1 << 20)
    try:
        for i in range(500):
            assert store.put(BlockKey(f"/d/f{i}", "v1", 0), bytes([i % 251]) * (200 + i % 300))
        files = [os.stat(os.path.join(r, f)) for r, _d, fs in os.walk(os.path.join(str(tmp_path / "c"), "blocks"))
                 for f in fs]
        assert len(files) == store.stats().blocks == cap // stored_size(500)  # all one unit each
        assert sum(st.st_blocks * 512 for st in files) <= store.stats().used_bytes <= cap
    finally:
        store.close()


def test_the_engines_driver_charges_what_the_store_charges() -> None:
    """The policy's budget arithmetic (the engine's and the daemon's driver) is the store's:
    else the store runs out first and evicts behind the policy's back."""
    from aicache.datacache.daemon import store_driver
    from aicache.datacache.policy.registry import make_system
    from aicache.datacache.store import block_budget

    cap = 64 << 20
    d = store_driver(make_system("lru", cap, 1 << 20), 1 << 20, cap)
    assert d.capacity == block_budget(cap)
    assert all(d.cost(n) == stored_size(n) for n in (0, 1, 4096 - HEADER_SIZE, 4097, 1 << 20, 12345))
