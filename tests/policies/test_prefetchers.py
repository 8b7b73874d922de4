"""Prefetchers against hand-computed expectations and a plain reference for stride detection."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aicache.policies import PREFETCH
from aicache.policies.prefetch.neighborhood import NeighborhoodPrefetcher
from aicache.policies.prefetch.sfp import SFP128Prefetcher, SFPPrefetcher
from aicache.policies.prefetch.stride import (ReadaheadPrefetcher, ReadaheadStreamsPrefetcher,
                                              SampleRestPrefetcher, StreamsStridePrefetcher,
                                              StridePrefetcher)


def feed(p, blocks, unit="d"):
    return [list(p.on_access(unit, b, False, float(i))) for i, b in enumerate(blocks)]


def test_registry_names():
    for name in ("stride", "stride-fixed", "readahead", "sample-rest", "neighborhood", "sfp", "sfp-128",
                 "stride-streams", "readahead-streams"):
        assert PREFETCH.get(name).name == name


def test_unit_stride_then_one_new_block_per_access():
    out = feed(StridePrefetcher(adaptive=False, depth=4), range(0, 8))
    assert out[:3] == [[], [], []]  # three steps are needed as evidence (min_support=3)
    assert out[3] == [4, 5, 6, 7]
    assert out[4:] == [[8], [9], [10], [11]]  # the frontier avoids re-listing the window


def test_negative_and_non_unit_strides():
    out = feed(StridePrefetcher(adaptive=False, depth=3), [100, 97, 94, 91, 88])
    assert out[3] == [88, 85, 82]
    assert out[4] == [79]
    out = feed(StridePrefetcher(adaptive=False, depth=2), [0, 2, 4, 6])
    assert out[3] == [8, 10]
    # a reverse walk near zero never asks for negative ids
    out = feed(StridePrefetcher(adaptive=False, depth=4), [6, 5, 4, 3])
    assert out[3] == [2, 1, 0]


def test_jump_off_the_stride_resets_the_frontier():
    p = StridePrefetcher(adaptive=False, depth=2)
    feed(p, [0, 1, 2, 3])  # frontier at 5
    # a new pass from 0: +1 still dominates the history (3 of 4 steps) and the stale
    # frontier (5) must not suppress the blocks right after the jump
    assert list(p.on_access("d", 0, False, 9.0)) == [1, 2]
    assert list(p.on_access("d", 1, False, 10.0)) == [3]


def _reference_dominant(deltas, min_support=3):
    """Plain reference: the most common non-zero delta (latest on ties) if frequent enough."""
    c = Counter(d for d in deltas if d)
    if not c:
        return 0
    best = max(c.values())
    cand = [d for d in reversed(deltas) if c.get(d) == best][0]
    return cand if best >= max(min_support, (len(deltas) + 1) // 2) else 0


@given(st.lists(st.integers(0, 60), min_size=2, max_size=40), st.integers(1, 4))
def test_requests_follow_the_reference_step(blocks, depth):
    """Whatever the sequence: a non-empty answer is a tail of ``b+s, …, b+depth*s`` for the
    reference dominant step ``s`` (non-negative ids only), and none is given without one."""
    p = StridePrefetcher(adaptive=False, depth=depth, history=8)
    deltas: list[int] = []
    for i, b in enumerate(blocks):
        out = list(p.on_access("u", b, False, float(i)))
        if i:
            deltas.append(b - blocks[i - 1])
        step = _reference_dominant(deltas[-8:])
        if step == 0:
            assert out == []
            continue
        full = [b + step * j for j in range(1, depth + 1) if b + step * j >= 0]
        assert out == full[len(full) - len(out):]
        if deltas[-1] != step:  # just jumped onto/along a new position: the full window
            assert out == full


def test_adaptive_depth_grows_on_use_and_halves_on_waste():
    p = StridePrefetcher(adaptive=True, init_depth=4, max_depth=6)
    for _ in range(5):
        p.on_prefetch_used(0, 0.0)
    assert p.depth == 6  # +1 per use, capped
    p.on_prefetch_wasted(0, 0.0)
    assert p.depth == 3
    p.on_prefetch_wasted(0, 0.0)
    p.on_prefetch_wasted(0, 0.0)
    assert p.depth == 1  # never below min_depth
    p.reset()
    assert p.depth == 4


def test_readahead_only_follows_unit_steps():
    p = ReadaheadPrefetcher(init_depth=2)
    assert feed(p, [0, 2, 4, 6]) == [[], [], [], []]
    assert list(p.on_access("d", 7, False, 5.0)) == [8, 9]


def test_neighborhood_on_miss_only():
    p = NeighborhoodPrefetcher(after=2, before=1)
    assert list(p.on_access("d", 10, True, 0.0)) == []
    assert list(p.on_access("d", 10, False, 0.0)) == [11, 9, 12]
    assert list(NeighborhoodPrefetcher(after=1, before=3).on_access("d", 1, False, 0.0)) == [2, 0]


def test_sfp_markov_table_and_prediction():
    # files: a = blocks 0-1, b = 2-4, c = 5, d = 6; order a b a c a b
    p = SFPPrefetcher(init_window=16, successors=2)
    seq = [("a", 0), ("a", 1), ("b", 2), ("b", 3), ("b", 4), ("a", 0), ("c", 5), ("a", 0), ("b", 2)]
    outs = [list(p.on_access(f, b, False, 0.0)) for f, b in seq]
    # hand-computed table: a->b twice, a->c once, b->a once, c->a once
    assert p.table == {"a": {"b": 2, "c": 1}, "b": {"a": 1}, "c": {"a": 1}}
    assert p.predict("a") == ["b", "c"]
    # entering a (3rd time, from c): rest of a (block 1), then b's blocks 2-4, then c's block 5
    assert outs[7] == [1, 2, 3, 4, 5]
    # first visit of a: nothing learned yet
    assert outs[0] == []
    # reading inside a file does not re-trigger
    assert outs[1] == []


def test_sfp_ties_by_first_observation_and_window():
    p = SFPPrefetcher(init_window=2, successors=2)
    for f, b in [("x", 0), ("y", 1), ("x", 0), ("z", 2), ("x", 0)]:
        out = list(p.on_access(f, b, False, 0.0))
    assert p.predict("x") == ["y", "z"]  # 1-1 tie: y was seen first
    assert out == [1, 2]  # window of 2 blocks
    p.on_prefetch_wasted(1, 0.0)
    assert p.window == 1
    q = SFP128Prefetcher(init_window=200)
    assert q.window == 128
    for _ in range(10):
        q.on_prefetch_used(0, 0.0)
    assert q.window == 128


def _shuffled_samples(lengths: list[int], seed: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Samples of the given block counts at consecutive ranges, read whole in a shuffled
    order; returns the reads and the (start, length) of each sample in read order."""
    import random

    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    reads = [b for i in order for b in range(starts[i], starts[i] + lengths[i])]
    return reads, [(starts[i], lengths[i]) for i in order]


def test_sample_rest_fetches_the_caption_after_its_image_and_nothing_across_samples():
    reads, samples = _shuffled_samples([2] * 200, seed=1)  # image + caption sidecar
    out = feed(SampleRestPrefetcher(), reads)
    pos = 0
    for i, (start, n) in enumerate(samples):
        if i >= 2:  # after two completed runs the median run length (2) is known
            assert out[pos] == [start + 1], (i, start, out[pos])
        assert out[pos + 1] == []  # the caption itself asks for nothing (next sample unknown)
        pos += n


def test_sample_rest_never_prefetches_single_block_samples_and_follows_the_median():
    reads, _ = _shuffled_samples([1] * 300, seed=2)
    assert all(o == [] for o in feed(SampleRestPrefetcher(), reads))
    # mixed sample sizes: the median run length decides how much of a new sample to fetch
    lengths = [3, 3, 3, 5, 1] * 20
    reads, samples = _shuffled_samples(lengths, seed=3)
    p = SampleRestPrefetcher(history=len(lengths))
    feed(p, reads)
    assert p.rest("d") == sorted(lengths[:-1] + [lengths[-1]])[len(lengths) // 2] - 1 == 2
    # a plain sequential read is one long run: nothing asked beyond the stride prefetcher's job
    assert all(o == [] for o in feed(SampleRestPrefetcher(), range(100)))


@given(st.integers(1, 4), st.lists(st.integers(0, 7), min_size=1, max_size=300))
@settings(max_examples=150, deadline=None)
def test_sfp_incremental_top_matches_a_full_sort(k, files):
    """The incrementally kept successor list equals sorting each row by (-count, first seen)."""
    p = SFPPrefetcher(successors=k)
    for i, f in enumerate(files):
        p.on_access(f, i, False, 0.0)
    for f, row in p.table.items():
        ref = [g for _, (g, _) in sorted(enumerate(row.items()), key=lambda t: (-t[1][1], t[0]))[:k]]
        assert p.predict(f) == ref


@given(st.lists(st.sampled_from([0, 1, 1, 1, -1, 2, 5]), min_size=0, max_size=8),
       st.integers(1, 4), st.integers(1, 8))
@settings(max_examples=300, deadline=None)
def test_dominant_step_matches_a_plain_count(deltas, min_support, history):
    """The steady-stride fast path gives what counting every step gives."""
    from collections import deque

    p = StridePrefetcher(min_support=min_support, history=history)
    d = deque(deltas[-history:], maxlen=history)
    n = len(d)
    counts = Counter(x for x in d if x)
    best, best_count = 0, 0
    for x in reversed(d):  # ties go to the most recent step
        if counts.get(x, 0) > best_count:
            best, best_count = x, counts[x]
    need = max(min(min_support, history), (n + 1) // 2)
    assert p._dominant_step(d) == (best if n and best_count >= need else 0)


def _shard_walks(readers: int, length: int, rng) -> list[int]:
    """``readers`` sequential walks over their own ``length``-block shards of one unit
    (shard ``r`` owns ids ``r*length ..``), interleaved in a random order."""
    pos = [0] * readers
    out = []
    while any(p < length for p in pos):
        r = rng.choice([i for i in range(readers) if pos[i] < length])
        out.append(r * length + pos[r])
        pos[r] += 1
    return out


@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 10_000))
@example(3, 1, 276)  # a reader's first read 31 blocks past another's trained stream took it over
@settings(max_examples=60, deadline=None)
def test_streams_ask_only_for_the_blocks_of_their_own_walk(readers, depth, seed):
    """Interleaved shard walks in one unit: every answer of the per-stream prefetcher is a
    run of the next blocks of the walk that read (checked against the walk each read
    belongs to), and every read after a walk's first few is covered by a request up to
    ``depth`` blocks ahead of it."""
    import random as _r

    rng = _r.Random(seed)
    length = 40
    seq = _shard_walks(readers, length, rng)
    p = StreamsStridePrefetcher(adaptive=False, depth=depth, history=8, min_support=3)
    seen = [0] * readers
    asked = set()
    for i, b in enumerate(seq):
        r, k = divmod(b, length)
        out = list(p.on_access("u", b, False, float(i)))
        seen[r] += 1
        assert out == list(range(out[0], out[-1] + 1)) if out else True
        for x in out:
            assert b < x <= b + depth, (b, out)  # ahead of this read on its own walk's ids
        asked.update(out)
        if seen[r] > 4 and k + depth < length:
            assert b + depth in asked  # the window reaches depth ahead of every read


@given(st.lists(st.integers(0, 60), min_size=2, max_size=40), st.integers(1, 4))
def test_one_stream_at_a_time_is_the_single_stream_prefetcher(blocks, depth):
    """With one session the per-stream prefetcher is :class:`StridePrefetcher` (the
    reference) on any sequence whose steps stay within its reach."""
    p = StreamsStridePrefetcher(adaptive=False, depth=depth, history=8, sessions=1, reach=10_000)
    q = StridePrefetcher(adaptive=False, depth=depth, history=8)
    for i, b in enumerate(blocks):
        assert list(p.on_access("u", b, False, float(i))) == list(q.on_access("u", b, False, float(i)))


def test_readahead_streams_follow_two_interleaved_files():
    p = ReadaheadStreamsPrefetcher(init_depth=2)
    got = [list(p.on_access("d", b, False, float(i))) for i, b in enumerate([0, 100, 1, 101, 2, 102])]
    assert got == [[], [], [2, 3], [102, 103], [4], [104]]
    single = ReadaheadPrefetcher(init_depth=2)
    assert all(not list(single.on_access("d", b, False, float(i)))
               for i, b in enumerate([0, 100, 1, 101, 2, 102]))


@pytest.mark.parametrize("cls", [ReadaheadStreamsPrefetcher, StreamsStridePrefetcher])
def test_readers_starting_together_on_neighbouring_files_keep_their_own_streams(cls):
    """Three readers start on three 8-block files of one unit (ids 16.., 8.., 0.., the
    order the first reads arrived in the peers benchmark), then take turns. Each read's
    prefetches stay ahead of it inside its own file's walk, and every walk is read ahead
    (a stream that took in the others' first reads would see no stride)."""
    p = cls(init_depth=2)
    starts = [16, 8, 0]
    reads = starts + [s + k for k in range(1, 6) for s in starts]
    asked: dict[int, set[int]] = {s: set() for s in starts}
    for i, b in enumerate(reads):
        s = max(x for x in starts if x <= b)
        out = list(p.on_access("d", b, False, float(i)))
        assert all(b < x <= s + 7 for x in out), (b, out)
        asked[s].update(out)
    assert all(asked[s] for s in starts), asked


@pytest.mark.parametrize("cls", [ReadaheadPrefetcher, ReadaheadStreamsPrefetcher])
def test_a_withheld_block_is_asked_for_again_on_the_next_read(cls):
    """The cache withheld the window's last blocks: the stream's next read asks for them
    again (before, its frontier had moved past them and they were never asked for)."""
    p = cls(init_depth=4, min_depth=4, max_depth=4)
    for i, b in enumerate([0, 1]):
        out = list(p.on_access("d", b, False, float(i)))
    assert out == [2, 3, 4, 5]
    for x in (4, 5):
        p.withheld("d", x)
    assert list(p.on_access("d", 2, False, 2.0)) == [4, 5, 6]
    ref = cls(init_depth=4, min_depth=4, max_depth=4)  # nothing withheld: one new block
    for i, b in enumerate([0, 1, 2]):
        got = list(ref.on_access("d", b, False, float(i)))
    assert got == [6]
    p.withheld("other", 7)  # another unit's stream: no effect
    p.withheld("d", 99)  # not in the window: no effect
    assert list(p.on_access("d", 3, False, 3.0)) == [7]
