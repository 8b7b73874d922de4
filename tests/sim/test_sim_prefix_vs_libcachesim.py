"""The prefix simulator's block-level baselines against libCacheSim on the same block stream.

The simulator touches a request's prompt blocks tail first, then its decode blocks tail
first; a resident block is a hit, a missing one is inserted, evicting until it fits. That is
a plain cache replay of the block stream, so libCacheSim's ``get`` on the same stream (with
the block's token count as its size) must hit exactly the same blocks.

On prefix streams LFU and SIEVE often tie exactly: SIEVE's hand only wraps once no unvisited
block is left ahead of it, and while it has not wrapped it evicts the oldest never-hit block —
libCacheSim's LFU victim (oldest object of frequency 1). The last test builds a stream where
the hand wraps, to show the two are different policies behind the adapter.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from aicache.kv.prefix_policies import EvictionAdapter
from aicache.sim.prefix import (_output, _output_sizes, block_sizes, load_requests, simulate,
                                working_set_tokens)
from aicache.traces.base import KVRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lcs_oracle import lcs_run  # noqa: E402


def _block_stream(reqs: list[KVRequest]) -> tuple[np.ndarray, np.ndarray]:
    """(block ids, tokens) in the simulator's touch order."""
    ids: list[int] = []
    sizes: list[int] = []
    for r in reqs:
        s = block_sizes(r)
        for i in range(len(r.hash_ids) - 1, -1, -1):
            ids.append(r.hash_ids[i])
            sizes.append(s[i])
        out, _ = _output(r)
        osz = _output_sizes(r, len(out))
        for j in range(len(out) - 1, -1, -1):
            ids.append(out[j])
            sizes.append(osz[j])
    return np.array(ids), np.array(sizes)


class _Recording(EvictionAdapter):
    """The registry's adapter, noting each block event's outcome (hit or insert) in order."""

    def __init__(self, cap: int, policy: str) -> None:
        super().__init__(cap, policy=policy)
        self.hits: list[bool] = []

    def on_hit(self, key: object, i: int, now: float) -> None:
        self.hits.append(True)
        super().on_hit(key, i, now)

    def on_insert(self, key: object, tokens: int, i: int, now: float) -> None:
        self.hits.append(False)
        super().on_insert(key, tokens, i, now)


def _sim_hits(reqs: list[KVRequest], policy: str, cap: int) -> tuple[np.ndarray, int]:
    rec = _Recording(cap, policy)
    res = simulate(reqs, rec, cap)
    assert res.hit_tokens == simulate(reqs, policy, cap).hit_tokens  # the registry's path
    return np.array(rec.hits), res.hit_tokens


@pytest.mark.parametrize("policy", ["lfu", "sieve", "lru"])
@pytest.mark.parametrize("frac", [0.05, 0.3])
def test_prefix_baselines_equal_libcachesim(policy: str, frac: float) -> None:
    reqs, _ = load_requests(workload="chat", sessions=120, seed=3)
    ids, sizes = _block_stream(reqs)
    # one size per block id in these streams (the stream check below keeps it honest)
    first: dict[int, int] = {}
    for k, t in zip(ids.tolist(), sizes.tolist()):
        assert first.setdefault(k, t) == t
    cap = int(working_set_tokens(reqs) * frac)
    ours, _ = _sim_hits(reqs, policy, cap)
    assert np.array_equal(ours, lcs_run(policy, ids, sizes, cap, "bytes").hits)


def _req(n: int, ids: list[int]) -> KVRequest:
    return KVRequest(timestamp=float(n), input_length=len(ids), output_length=0,
                     hash_ids=ids, block_tokens=1, session_id=n, turn=1,
                     block_types=["user"] * len(ids))


def test_lfu_and_sieve_differ_once_the_hand_wraps() -> None:
    # capacity 3 (1-token blocks): 1, 2, 3 inserted, then all hit (visited, frequency 2).
    # 4 evicts 1 in both (SIEVE's hand clears every bit, wraps, takes 1; LFU takes the
    # oldest of frequency 2). 5: SIEVE's hand stands at 2, now unvisited, and takes it; LFU
    # takes 4 (frequency 1). So the final 2 hits in LFU only: 4 hit tokens against 3.
    seq = [[1], [2], [3], [1], [2], [3], [4], [5], [2]]
    reqs = [_req(n, ids) for n, ids in enumerate(seq)]
    ids, sizes = _block_stream(reqs)
    out = {}
    for name in ("lfu", "sieve"):
        hits, out[name] = _sim_hits(reqs, name, 3)
        assert np.array_equal(hits, lcs_run(name, ids, sizes, 3, "bytes").hits)
    assert out["lfu"] == 4 and out["sieve"] == 3
