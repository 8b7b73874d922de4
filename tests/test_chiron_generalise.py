"""The rules that make Chiron's ``ours`` executor set hold up on workflows nobody tuned on
(docs/design/chiron.md, "Where we depart from the seed"), each against a plain reference:

* fill: while the cache has free space, a miss also asks for the rest of its file (the
  extent from metadata), capped by the free space; the executor's own prefetch is kept;
  never in the ``seed`` set or under a fixed micro-benchmark prefetcher;
* consumed data is room: a unit that refuses new blocks when full (random executor) still
  admits one while another unit holds read blocks under eager eviction; the seed's does not;
* ``neighborhood+readahead`` asks for exactly what a neighbourhood and a readahead
  prefetcher fed the same stream ask for together;
* the statistical advisor lets a sequential tail overturn a skewed window on a stale
  review even when the tail is too short to show the window's hot set (a shuffled tail
  still cannot).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from aicache.adaptive.advisor.statistical import StatisticalAdvisor, could_show_skew, score_sequence
from aicache.adaptive.controller import ChironParams, ChironSystem
from aicache.adaptive.executors import make_executor
from aicache.adaptive.gate import ConfidenceGate
from aicache.policies import PREFETCH
from aicache.policies.prefetch.neighborhood import NeighborhoodPrefetcher
from aicache.policies.prefetch.stride import ReadaheadPrefetcher

EXTENTS = {"d/a": (0, 9), "d/b": (10, 29), "d/c": (30, 30)}
TAU = ConfidenceGate().tau


@pytest.mark.parametrize("pattern", ["default", "sequential", "random", "skewed"])
@pytest.mark.parametrize("free_blocks", [0, 3, 100])
def test_fill_asks_for_the_rest_of_the_file_up_to_the_free_space(pattern: str, free_blocks: int) -> None:
    size = 4
    ours = make_executor(pattern, 1000, random.Random(0), extent_of=EXTENTS.get)
    plain = make_executor(pattern, 1000, random.Random(0))  # the same executor without metadata
    for t, (f, b) in enumerate([("d/b", 14), ("d/b", 22), ("d/a", 3), ("d/c", 30), ("d/b", 29)]):
        got = list(ours.on_access("d", b, size, False, float(t), f, free_blocks * size))
        own = list(plain.on_access("d", b, size, False, float(t), f, free_blocks * size))
        lo, hi = EXTENTS[f]
        rest = [x for x in range(b + 1, hi + 1)][:free_blocks]
        assert got == own + rest
    # a hit fetches nothing extra (the block is resident, so its file was seen)
    ours.on_insert(15, size, 9.0, False)
    plain.on_insert(15, size, 9.0, False)
    assert list(ours.on_access("d", 15, size, True, 9.0, "d/b", 100 * size)) == list(
        plain.on_access("d", 15, size, True, 9.0, "d/b", 100 * size))


@pytest.mark.parametrize("kw", [{"executors": "seed"}, {"prefetch": "none"}, {"prefetch": "stride"}])
def test_no_fill_in_the_seed_set_or_under_a_fixed_prefetcher(kw: dict[str, str]) -> None:
    for pattern in ("default", "sequential", "random", "skewed"):
        with_meta = make_executor(pattern, 1000, random.Random(0), extent_of=EXTENTS.get, **kw)
        without = make_executor(pattern, 1000, random.Random(0), **kw)
        for t, b in enumerate([12, 13, 20, 11]):
            assert list(with_meta.on_access("d", b, 4, False, float(t), "d/b", 400)) == list(
                without.on_access("d", b, 4, False, float(t), "d/b", 400))


def _two_units(executors: str) -> ChironSystem:
    """A 4-block cache: unit ``ckpt`` under the sequential executor holding two read
    blocks, unit ``frames`` under the random executor holding two; the cache is full."""
    sys_ = ChironSystem(4, params=ChironParams(executors=executors))
    sys_.use_metadata({}.get)
    for unit, pattern, blocks in (("ckpt/s", "sequential", (0, 1)), ("frames/x", "random", (100, 101))):
        u = sys_._unit(unit, 0.0)
        sys_._switch(u, pattern, 0.0)
        for b in blocks:
            sys_.on_access(unit, b, 1, False, 0.0)
            assert sys_.admit(unit, b, 1, sys_.used, 0.0)
            assert sys_.on_insert(unit, b, 1, 0.0, False)
    assert sys_.used == 4
    return sys_


def test_a_refusing_unit_takes_the_place_of_consumed_blocks() -> None:
    ours = _two_units("ours")
    assert ours.admit("frames/x", 102, 1, 4, 1.0)  # ckpt's read blocks are room
    # and the victim that makes the room is one of them (eager: consumed data goes first)
    assert ours.victim(1.0) in (0, 1)
    seed = _two_units("seed")
    assert not seed.admit("frames/x", 102, 1, 4, 1.0)  # the seed's random executor refuses


def test_consumed_is_room_needs_consumed_blocks() -> None:
    """With no unit under eager eviction holding a read block, the refusal stands."""
    sys_ = ChironSystem(2, params=ChironParams())
    sys_.use_metadata({}.get)
    u = sys_._unit("frames/x", 0.0)
    sys_._switch(u, "random", 0.0)
    for b in (100, 101):
        sys_.on_access("frames/x", b, 1, False, 0.0)
        assert sys_.admit("frames/x", b, 1, sys_.used, 0.0)
        sys_.on_insert("frames/x", b, 1, 0.0, False)
    assert not sys_.admit("frames/x", 102, 1, 2, 1.0)


def test_neighborhood_readahead_is_the_union_of_its_parts() -> None:
    both = PREFETCH.get("neighborhood+readahead")()
    near, ahead = NeighborhoodPrefetcher(), ReadaheadPrefetcher()
    rng = random.Random(3)
    b = 500
    for t in range(400):
        b = b + 1 if rng.random() < 0.6 else rng.randrange(1000)  # runs broken by jumps
        hit = rng.random() < 0.3
        want = [*near.on_access("u", b, hit, float(t)), *ahead.on_access("u", b, hit, float(t))]
        assert list(both.on_access("u", b, hit, float(t))) == want
        if t % 7 == 0:  # feedback reaches the readahead's adaptive depth
            both.on_prefetch_used(b, float(t))
            ahead.on_prefetch_used(b, float(t))
        if t % 11 == 0:
            both.on_prefetch_wasted(b, float(t))
            ahead.on_prefetch_wasted(b, float(t))


def _skewed_then(tail: list[int]) -> list[int]:
    """800 draws, 60% from a hot tenth of 4,000 IDs (skewed, but too weakly for a 200-read
    tail to show it), then ``tail``."""
    rng = np.random.default_rng(1)
    hot = rng.choice(4000, 400, replace=False)
    draws = np.where(rng.random(800) < 0.6, hot[rng.integers(0, hot.size, 800)], rng.integers(0, 4000, 800))
    return [int(x) for x in draws] + tail


def test_a_sequential_tail_overturns_a_weakly_skewed_window_on_a_stale_review() -> None:
    window = _skewed_then(list(range(20000, 20200)))
    ws = score_sequence(window)
    assert ws.pattern == "skewed" and not could_show_skew(ws, 200)  # the case the rule is about
    adv = StatisticalAdvisor()
    stale = adv.diagnose(window, stale_prefix=True)
    assert stale is not None and stale.pattern == "sequential" and stale.confidence >= TAU
    fresh = adv.diagnose(window, stale_prefix=False)  # no anomaly: the window is not overturned...
    assert fresh is not None and not (fresh.pattern == "sequential" and fresh.confidence >= TAU)
    assert fresh.confidence < TAU  # ...nor kept with confidence: the gate retries early


def test_a_shuffled_tail_too_short_to_show_the_hot_set_does_not_overturn_it() -> None:
    rng = np.random.default_rng(2)
    window = _skewed_then([int(x) for x in rng.permutation(np.arange(20000, 20200))])
    adv = StatisticalAdvisor()
    for stale in (False, True):
        a = adv.diagnose(window, stale_prefix=stale)
        assert a is not None and a.pattern != "sequential"
