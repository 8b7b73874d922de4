"""The rules that make Chiron's ``ours`` executor set hold up on workflows nobody tuned on
(docs/design/chiron.md, "Where we depart from the seed"), each against a plain reference:

* fill: while the cache has free space, a miss also asks for the rest of its file (the
  extent from metadata), capped by the free space and a stride prefetcher's window; the
  executor's own prefetch is kept;
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
from aicache.adaptive.executors import EPOCH_COUNT_SPREAD, make_executor
from aicache.adaptive.gate import ConfidenceGate
from aicache.policies import PREFETCH
from aicache.policies.prefetch.neighborhood import NeighborhoodPrefetcher
from aicache.policies.prefetch.stride import ReadaheadPrefetcher, StridePrefetcher

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
        # no further than a stride prefetcher's window: the fetches share the remote
        pf = ours.prefetcher
        cap = min(free_blocks, pf.depth) if isinstance(pf, StridePrefetcher) else free_blocks
        rest = [x for x in range(b + 1, hi + 1)][:cap]
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


def _fill(sys_: ChironSystem, unit: str, blocks: tuple[int, ...], t: float) -> None:
    """Demand misses of ``blocks`` in ``unit`` at ``t``, each admitted and stored."""
    for b in blocks:
        sys_.on_access(unit, b, 1, False, t)
        assert sys_.admit(unit, b, 1, sys_.used, t)
        assert sys_.on_insert(unit, b, 1, t, False)


def _two_units(executors: str) -> ChironSystem:
    """A 4-block cache: unit ``ckpt`` under the sequential executor holding two read
    blocks, unit ``frames`` under the random executor holding two; the cache is full."""
    sys_ = ChironSystem(4, params=ChironParams(executors=executors))
    sys_.use_metadata({}.get)
    for unit, pattern, blocks in (("ckpt/s", "sequential", (0, 1)), ("frames/x", "random", (100, 101))):
        sys_._switch(sys_._unit(unit, 0.0), pattern, 0.0)
        _fill(sys_, unit, blocks, 0.0)
    assert sys_.used == 4
    return sys_


def test_a_refusing_unit_takes_the_place_of_consumed_blocks() -> None:
    ours = _two_units("ours")
    assert ours.admit("frames/x", 102, 1, 4, 1.0)  # ckpt's read blocks are room
    # and the victim that makes the room is one of them (eager: consumed data goes first)
    assert ours.victim(1.0) in (0, 1)
    seed = _two_units("seed")
    assert not seed.admit("frames/x", 102, 1, 4, 1.0)  # the seed's random executor refuses


def test_a_refusing_unit_takes_the_place_of_a_unit_idle_since_it_took_over() -> None:
    """A finished phase's blocks are room for a random unit whose executor took over after
    that phase's last read; a unit read since then keeps its blocks; the seed refuses."""
    for executors, idle, admitted in (("ours", True, True), ("ours", False, False),
                                      ("seed", True, False)):
        sys_ = ChironSystem(4, params=ChironParams(executors=executors))
        sys_.use_metadata({}.get)
        _fill(sys_, "old/f", (0, 1), 0.0)  # the old phase, under the default executor
        sys_._switch(sys_._unit("frames/x", 1.0), "random", 1.0)
        _fill(sys_, "frames/x", (100, 101), 1.5)
        if not idle:
            sys_.on_access("old/f", 0, 1, True, 1.8)  # the old phase goes on
        assert sys_.admit("frames/x", 102, 1, 4, 2.0) is admitted, (executors, idle)
        if admitted:
            assert sys_.victim(2.0) in (0, 1)  # the room is the idle unit's


def _files(n: int, blocks: int) -> tuple[dict[str, tuple[int, int]], dict[int, str]]:
    extents = {f"d/f{i:03d}": (i * blocks, i * blocks + blocks - 1) for i in range(n)}
    return extents, {b: f for f, (lo, hi) in extents.items() for b in range(lo, hi + 1)}


@pytest.mark.parametrize("pattern", ["random", "skewed"])
def test_a_diagnosed_unit_that_is_not_sequential_prefetches_inside_the_file_it_reads(pattern: str) -> None:
    """Its neighbour blocks past a file's edge are another file's, no likelier to be read
    than any other: every prefetch names a block of the file being read."""
    extents, file_of = _files(100, 3)
    sys_ = ChironSystem(1000, params=ChironParams())
    sys_.use_metadata(extents.get, file_of.get)
    sys_._switch(sys_._unit("d/f000", 0.0), pattern, 0.0)
    rng = random.Random(3)
    asked = 0
    for t in range(2000):
        # inside files 1..98: every neighbour block belongs to some file
        b = 3 + (min(int(rng.paretovariate(1.2)) - 1, 293) if pattern == "skewed" else rng.randrange(294))
        out = sys_.on_access(file_of[b], b, 1, False, t * 0.01)
        assert all(file_of.get(x) == file_of[b] for x in out), (b, list(out))
        asked += len(out)
        if sys_.admit(file_of[b], b, 1, sys_.used, t * 0.01):
            sys_.on_insert(file_of[b], b, 1, t * 0.01, False)
    assert asked > 0  # it does prefetch, inside the file


def test_a_sequential_unit_reads_ahead_into_the_next_file() -> None:
    extents, file_of = _files(20, 3)
    sys_ = ChironSystem(1000, params=ChironParams())
    sys_.use_metadata(extents.get, file_of.get)
    sys_._switch(sys_._unit("d/f000", 0.0), "sequential", 0.0)
    crossed = False
    for b in range(60):
        out = sys_.on_access(file_of[b], b, 1, b in sys_.sizes, b * 0.01)
        crossed |= any(file_of.get(x) not in (None, file_of[b]) for x in out)
        for x in (b, *out):
            if x not in sys_.sizes and sys_.admit(file_of.get(x, "d/f000"), x, 1, sys_.used, b * 0.01):
                sys_.on_insert(file_of.get(x, "d/f000"), x, 1, b * 0.01, x != b)
    assert crossed


def test_consumed_is_room_needs_consumed_blocks() -> None:
    """With no unit under eager eviction holding a read block, the refusal stands."""
    sys_ = ChironSystem(2, params=ChironParams())
    sys_.use_metadata({}.get)
    sys_._switch(sys_._unit("frames/x", 0.0), "random", 0.0)
    _fill(sys_, "frames/x", (100, 101), 0.0)
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


def _spread_brute_force(stream: list[int], window: int, items: int) -> int:
    """The largest difference between two items' read counts over any ``window``
    consecutive reads of ``stream`` (counting every item, read or not), by brute force."""
    worst = 0
    for end in range(window, len(stream) + 1):
        counts = [0] * items
        for b in stream[end - window:end]:
            counts[b] += 1
        worst = max(worst, max(counts) - min(counts))
    return worst


@pytest.mark.parametrize("items,window", [(7, 5), (7, 7), (7, 16), (30, 12), (30, 45)])
def test_epoch_count_spread_bounds_shuffled_epochs_and_passes(items: int, window: int) -> None:
    rng = random.Random(items * 100 + window)
    shuffled = [b for _ in range(8) for b in rng.sample(range(items), items)]
    passes = list(range(items)) * 8
    mixed = passes[: 2 * items] + shuffled  # a pass, then epochs (a W1 / W2 training start)
    for stream in (shuffled, passes, mixed):
        assert _spread_brute_force(stream, window, items) <= EPOCH_COUNT_SPREAD


def _random_unit(capacity: int, executors: str = "ours", window: int = 1000) -> ChironSystem:
    sys_ = ChironSystem(capacity, params=ChironParams(executors=executors, window=window))
    sys_.use_metadata({}.get)
    sys_._switch(sys_._unit("frames/x", 0.0), "random", 0.0)
    return sys_


def _read(sys_: ChironSystem, block: int, t: float) -> bool:
    """One demand read of ``block`` through the system as the driver makes it; True if the
    block is (now) resident."""
    hit = block in sys_.sizes
    sys_.on_access("frames/x", block, 1, hit, t)
    if hit:
        return True
    if not sys_.admit("frames/x", block, 1, sys_.used, t):
        return False
    while sys_.used + 1 > sys_.capacity:
        sys_.victim(t)
    return sys_.on_insert("frames/x", block, 1, t, False)


def test_random_refusal_is_the_seeds_on_shuffled_epochs() -> None:
    """On shuffled epochs the resident set after the cache fills never changes: the
    faster-than-epoch rule never fires (the count spread of an epoch stream is <= 2)."""
    for window in (40, 1000):
        sys_ = _random_unit(10, window=window)
        rng = random.Random(window)
        t = 0.0
        for epoch in range(12):
            for b in rng.sample(range(25), 25):
                _read(sys_, b, t)
                t += 1.0
            if epoch == 0:
                frozen = set(sys_.sizes)
        assert len(frozen) == 10 and set(sys_.sizes) == frozen


def test_random_refusal_yields_to_reads_faster_than_an_epoch() -> None:
    """After shuffled epochs, a block re-read more than EPOCH_COUNT_SPREAD times beyond the
    resident LRU block's window count is admitted (replacing that block); one read fewer
    is refused, and the seed's random executor refuses it whatever its count."""
    for executors in ("ours", "seed"):
        sys_ = _random_unit(10, executors)
        rng = random.Random(5)
        t = 0.0
        for _ in range(4):
            for b in rng.sample(range(25), 25):
                _read(sys_, b, t)
                t += 1.0
        u = sys_.units["frames"]
        hot = next(b for b in range(25) if b not in sys_.sizes)
        lru = next(iter(u.executor.eviction.keys()))
        need = u.window.count(lru) + EPOCH_COUNT_SPREAD + 1  # counted afresh, not from u.counts
        while u.window.count(hot) < need - 1:
            assert not _read(sys_, hot, t)
            t += 1.0
        assert hot not in sys_.sizes
        admitted = _read(sys_, hot, t)
        assert admitted == (executors == "ours")
        if admitted:
            assert lru not in sys_.sizes and len(sys_.sizes) == 10


def test_readers_of_their_own_files_do_not_read_ahead_into_another_file() -> None:
    """Three readers, each front to back through its own file, interleaved: no prefetch
    names a block outside the file being read (the file after one reader's is another
    reader's, read already or being read), while a single reader crossing files in block
    order does read ahead into the next file (above)."""
    extents, file_of = _files(3, 12)
    for pattern in (None, "sequential"):
        sys_ = ChironSystem(8, params=ChironParams())  # smaller than the files: no fill
        sys_.use_metadata(extents.get, file_of.get)
        if pattern is not None:
            sys_._switch(sys_._unit("d/f000", 0.0), pattern, 0.0)
        asked = 0
        for k in range(36):
            b = (k % 3) * 12 + k // 3
            out = sys_.on_access(file_of[b], b, 1, b in sys_.sizes, k * 0.01)
            # an id past the last file is no file's: never granted (it would hold a share
            # of the cache's unread prefetches for good)
            assert all(file_of.get(x) == file_of[b] for x in out), (pattern, b, list(out))
            asked += sum(x in file_of for x in out)
            for x in (b, *out):
                if x not in sys_.sizes and sys_.admit(file_of[b], x, 1, sys_.used, k * 0.01):
                    while sys_.used + 1 > 8:
                        sys_.victim(k * 0.01)
                    sys_.on_insert(file_of[b], x, 1, k * 0.01, x != b)
        assert asked > 0, pattern  # it reads ahead, inside each file


@pytest.mark.parametrize("seed", range(4))
def test_unread_prefetches_stay_within_the_share_the_eviction_protects(seed: int) -> None:
    """A driver whose prefetches land a few reads after they are granted (several in
    flight at once), three streams filling and reading ahead in parallel under the default
    executor: after every event, the prefetches granted and not read (in flight or stored
    unread), counted by a brute-force ledger, take at most half the capacity, and the
    controller's running byte counts equal the ledger's; each grant leaves the file that
    asked with at most its part of that half (split between the files read lately), and
    the per-file counts equal a recount of the blocks granted for each file."""
    rng = random.Random(seed)
    extents, file_of = _files(6, 10)
    cap = 16
    sys_ = ChironSystem(cap, params=ChironParams())
    sys_.use_metadata(extents.get, file_of.get)
    flying: list[tuple[int, int]] = []  # (lands at step, block)
    granted: set[int] = set()  # the ledger: granted, not yet read or gone
    pos = {0: 0, 1: 20, 2: 40}
    split = 0  # grants made while several files were being read
    for step in range(400):
        for t, x in [f for f in flying if f[0] <= step]:
            flying.remove((t, x))
            if x in sys_.sizes:
                continue
            if sys_.admit(file_of[x], x, 1, sys_.used, step):
                while sys_.used + 1 > cap:
                    v = sys_.victim(step)
                    granted.discard(v)
                sys_.on_insert(file_of[x], x, 1, step, True)
            else:
                granted.discard(x)
        s = rng.randrange(3)
        b = pos[s]
        pos[s] = b + 1 if b + 1 < s * 20 + 20 else s * 20
        hit = b in sys_.sizes
        granted.discard(b)
        before = sys_._owned.get(file_of[b], 0)
        out = sys_.on_access(file_of[b], b, 1, hit, step)
        readers = len(set(sys_._recent))  # the files of the latest reads
        if sys_._owned.get(file_of[b], 0) > before and readers > 1:
            # a grant leaves its file at most its part of the share (one block at least)
            assert sys_._owned[file_of[b]] <= max(1, (cap // 2) // readers), (step, b)
            split += 1
        if not hit and all(f[1] != b for f in flying):
            if sys_.admit(file_of[b], b, 1, sys_.used, step):
                while sys_.used + 1 > cap:
                    granted.discard(sys_.victim(step))
                sys_.on_insert(file_of[b], b, 1, step, False)
        for x in out:
            if x in file_of and x not in sys_.sizes and all(f[1] != x for f in flying):
                flying.append((step + rng.randrange(1, 4), x))
                granted.add(x)
        pending = {x for x in granted if x not in sys_.sizes} | (granted & sys_.unread)
        assert len(pending) <= cap // 2, (step, sorted(pending))
        assert sys_._unread_bytes == len(sys_.unread)
        assert sys_._flying_bytes == len(sys_._flying)
        # the per-file ledger, recounted: each entry a block in flight or unread
        assert all(x in sys_._flying or x in sys_.unread for x in sys_._owner), step
        recount: dict[str, int] = {}
        for f in sys_._owner.values():
            recount[f] = recount.get(f, 0) + 1
        assert sys_._owned == recount, step
    assert split > 0


def test_unread_last_eviction_takes_read_blocks_first_up_to_half() -> None:
    from aicache.policies import EVICTION

    ev = EVICTION.get("2-random-unread-last")(10, rng=random.Random(1))
    for k in range(4):
        ev.on_insert(k, 1, float(k))  # read (demand) blocks 0..3
    for k in range(4, 9):
        ev.on_prefetch_insert(k, 1, float(k))  # unread prefetches 4..8: 5 of 10, half
    assert {ev.victim(9.0) for _ in range(4)} == {0, 1, 2, 3}  # every read block first
    gone = ev.victim(9.0)
    assert gone in range(4, 9)  # then an unread one, no read one left
    read = min(k for k in range(4, 9) if k != gone)
    ev.on_hit(read, 1, 10.0)  # read: a candidate like any read block
    for k in range(9, 15):
        ev.on_prefetch_insert(k, 1, float(k))  # unread now 9 > half of 10
    v = ev.victim(15.0)
    assert v != read and v in range(4, 15)  # past half an unread one goes, not the read one
    assert len(ev) == 9 and read in ev
