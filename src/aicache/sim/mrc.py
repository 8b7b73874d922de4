"""Miss-ratio curves: ``aicache sim mrc``.

Three methods, chosen by policy and ``sample_rate``:

* ``stack-distance`` (LRU, always): one pass computes every request's LRU stack distance
  (:mod:`aicache.traces.stackdist`); the hits at each size are the requests whose distance
  fits. Exact: each size equals ``sim cache --policy lru`` at that size, with the same
  accounting (:mod:`aicache.sim.cache`), in objects and bytes mode. In bytes mode an
  object larger than a size is never stored at that size and so is left out of the stack
  for it: sizes that exclude different sets of objects get one pass each (usually one in
  all). A bytes-mode trace where an object's size changes between requests has no exact
  one-pass curve (the cache keeps the size it stored), so it is simulated size by size.
* ``shards`` (any other policy, ``0 < sample_rate < 1``): SHARDS-style spatial sampling
  (Waldspurger et al., FAST'15; miniature simulations, ATC'17): keep the requests whose
  object id hashes below ``sample_rate``, replay that sample through the real policy at
  each size scaled by the rate, and report its miss ratios. A miniature cache of a few
  objects behaves unlike the full one, so a size whose scaled cache would hold fewer than
  :data:`MIN_SCALED_OBJECTS` objects is sampled at the rate that gives it that many (up to
  1, the whole trace); ``sample_rates`` reports the rate each size used. An estimate: the error against
  full simulation is measured by ``benchmarks/mrc_speed.py`` and bounded in
  ``tests/sim/test_sim_mrc.py``.
* ``simulation`` (``sample_rate=1``): the policy simulated at each size over the whole
  trace, exactly ``sim cache``.

The trace is read once and held in memory as numpy columns for the run (28 bytes per
request): its ids, turned into dense slot ids by :class:`aicache.policies.slotcore.SlotMap`
as ``sim cache`` does, sizes and times. The stack distances run over the slot ids in
compiled code (:func:`aicache.traces.stackdist.slot_distances`); a policy with a slot core
(:func:`aicache.sim.cache_sim.replayable`) replays the whole trace or its sample through
:func:`aicache.policies.slotcore.replay` as ``sim cache`` does, any other through
:class:`aicache.sim.cache.Cache`. SHARDS hashes each object's id once, not each request.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from aicache.errors import BadInput
from aicache.policies import EVICTION, make_eviction, slotcore
from aicache.policies.slotted import SlotPolicy
from aicache.sim.cache import Cache
from aicache.sim.cache_sim import SIZE_MODES, WorkingSet, _open, replayable, resolve_cache_size
from aicache.traces.stackdist import hits_at, slot_distances
from aicache.traces.formats._common import TraceSource
from aicache.traces.formats.oracle_general import next_access_times
from aicache.units import parse_size

#: keys of the ``--json`` object, in order (a stable contract)
JSON_KEYS = ("trace", "policy", "size_mode", "method", "sizes", "miss_ratios",
             "byte_miss_ratios", "requests", "working_set", "sample_rate", "sample_rates",
             "wall_seconds")
#: the sampling rate for policies without a one-pass curve, unless told otherwise
DEFAULT_SAMPLE_RATE = 0.1
#: the fewest objects a sampled (scaled) cache should hold, on average object sizes
MIN_SCALED_OBJECTS = 1000
_HASH_BITS = 24


@dataclass(slots=True)
class MRCResult:
    """One curve. ``sizes`` are absolute (objects or bytes, by ``size_mode``); the two ratio
    lists are parallel to it, in the order the sizes were given."""

    trace: str
    policy: str
    size_mode: str
    method: str
    sizes: list[int]
    miss_ratios: list[float]
    byte_miss_ratios: list[float]
    requests: int
    working_set: int
    sample_rate: float
    sample_rates: list[float]
    wall_seconds: float

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        return {k: d[k] for k in JSON_KEYS}


@dataclass(slots=True)
class _Trace:
    ids: np.ndarray  # uint64, the trace's
    slots: np.ndarray  # int32, dense ids 0 .. objects-1 in order of first appearance
    sizes: np.ndarray  # int64, as requested
    times: np.ndarray  # float64
    objects: int
    first_bytes: int  # the sum of each object's first-seen size

    def subset(self, keep: np.ndarray) -> _Trace:
        """The requests where ``keep`` is true (slot ids unchanged, so still < objects)."""
        return _Trace(self.ids[keep], self.slots[keep], self.sizes[keep], self.times[keep],
                      self.objects, self.first_bytes)


def parse_sizes(text: str) -> list[str]:
    """``"1%,2%,5%"`` → ``["1%", "2%", "5%"]``; an empty list or item is a BadInput."""
    items = [s.strip() for s in str(text).split(",")]
    if not items or any(not s for s in items):
        raise BadInput(f"--sizes {text!r} has an empty item; give comma-separated sizes "
                       "like 1%,2%,5% or 1000,2000")
    return items


def _load(src: TraceSource) -> _Trace:
    smap = slotcore.SlotMap()
    ids, slots, sizes, times = [], [], [], []
    for b in src.batches():
        n = len(b)
        if not n:
            continue
        bid = np.ascontiguousarray(b.obj_id, dtype=np.uint64)
        bsz = np.ascontiguousarray(b.obj_size, dtype=np.int64)
        dense = np.empty(n, dtype=np.int32)
        smap.map_sized(bid, bsz, dense)
        ids.append(bid)
        slots.append(dense)
        sizes.append(bsz)
        times.append(b.timestamp)
    if not ids:
        raise BadInput(f"trace {src.path!r} has no requests; check the file and --format")
    return _Trace(np.concatenate(ids), np.concatenate(slots), np.concatenate(sizes),
                  np.concatenate(times).astype(np.float64, copy=False),
                  int(smap.n), int(smap.first_bytes))


def _first_sizes(tr: _Trace) -> np.ndarray:
    """Each object's size at its first request, indexed by slot: slots are handed out in
    order of first appearance, so a request is its object's first iff its slot exceeds
    every earlier one."""
    first = np.ones(len(tr.slots), dtype=bool)
    first[1:] = tr.slots[1:] > np.maximum.accumulate(tr.slots)[:-1]
    out: np.ndarray = tr.sizes[first]
    return out


def _ratios(dist: np.ndarray, sizes: np.ndarray,
            caps: Sequence[int]) -> dict[int, tuple[float, float]]:
    """(miss ratio, byte miss ratio) of LRU at each capacity from the requests' stack
    distances (``-1``: a miss at every size), as ``sim cache`` computes them."""
    grid = np.asarray(sorted(set(caps)), dtype=np.int64)
    hits = np.zeros(len(grid), dtype=np.int64)
    bytes_hit = np.zeros(len(grid), dtype=np.int64)
    hits_at(dist, sizes, grid, hits, bytes_hit)
    n, total = len(dist), int(sizes.sum())
    return {int(c): (1.0 - int(h) / n if n else 0.0,
                     1.0 - int(b) / total if total else 0.0)
            for c, h, b in zip(grid.tolist(), hits.tolist(), bytes_hit.tolist())}


def lru_curve(tr: _Trace, caps: Sequence[int],
              size_mode: str) -> list[tuple[float, float]] | None:
    """(miss ratio, byte miss ratio) of LRU at each capacity, from stack distances; None
    when bytes mode meets an object whose size changes (no exact one-pass curve)."""
    sizes = tr.sizes
    dist = np.empty(len(sizes), dtype=np.int64)
    if size_mode == "objects":
        slot_distances(tr.slots, tr.objects, np.ones(len(sizes), dtype=np.int64), dist)
        by_cap = _ratios(dist, sizes, caps)
        return [by_cap[c] for c in caps]
    first_size = _first_sizes(tr)
    # one size per object: every request's size equals its object's first
    if np.any(sizes != first_size[tr.slots]):
        return None
    obj_sizes = np.sort(first_size)
    out: dict[int, tuple[float, float]] = {}
    groups: dict[int, list[int]] = {}  # objects no larger than the size -> the sizes
    for c in caps:
        groups.setdefault(int(np.searchsorted(obj_sizes, c, side="right")), []).append(c)
    for members in groups.values():
        fits = sizes <= members[0]  # the same objects fit every size of the group
        slot_distances(tr.slots, tr.objects, np.where(fits, sizes, 0).astype(np.int64), dist)
        dist[~fits] = -1  # never stored at these sizes: a miss
        out.update(_ratios(dist, sizes, members))
    return [out[c] for c in caps]


def shards_sample(ids: np.ndarray, rate: float) -> np.ndarray:
    """Mask of the requests whose object id hashes below ``rate`` (splitmix64's finaliser:
    a fixed hash, so the same objects are sampled on every run and every trace)."""
    with np.errstate(over="ignore"):
        h = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return (h >> np.uint64(64 - _HASH_BITS)) < np.uint64(round(rate * (1 << _HASH_BITS)))


def simulate_arrays(tr: _Trace, policy: str, cap: int, size_mode: str,
                    seed: int) -> tuple[float, float]:
    """``sim cache`` on in-memory columns: (miss ratio, byte miss ratio). A policy with a
    slot core replays the slot ids through it, as ``sim cache`` does (the same counts)."""
    pol = make_eviction(policy, cap, rng=random.Random(seed))
    if replayable(EVICTION.get(policy)):
        assert isinstance(pol, SlotPolicy)
        core = pol.core
        assert isinstance(core, slotcore.Core)  # replay drives the concrete core, not the protocol
        core.reserve(tr.objects)
        if size_mode == "objects":
            hits, bytes_hit, _, _, _ = slotcore.replay(core, tr.slots, tr.sizes, cap, 0)
        else:
            stored = np.zeros(tr.objects, dtype=np.int64)  # the cache's table of sizes
            hits, bytes_hit, _, _, _ = slotcore.replay_bytes(core, tr.slots, tr.sizes, cap, 0,
                                                             stored)
        n, total = len(tr.slots), int(tr.sizes.sum())
        return 1.0 - hits / n, (1.0 - bytes_hit / total if total else 0.0)
    cache = Cache(cap, pol, size_mode)
    nxt = next_access_times(tr.ids).tolist() if pol.needs_future else None
    cache.request_batch(tr.ids.tolist(), tr.sizes.tolist(), tr.times.tolist(), nxt)
    st = cache.stats
    return st.miss_ratio, st.byte_miss_ratio


def miss_ratio_curve(
    source_or_path: TraceSource | str | os.PathLike[str],
    policy: str,
    sizes: Sequence[str | int],
    size_mode: str = "objects",
    sample_rate: float | None = None,
    seed: int = 0,
    fmt: str = "auto",
    skip_bad: bool = False,
) -> MRCResult:
    """The miss-ratio curve of ``policy`` at ``sizes`` (see the module docstring for how).

    ``sample_rate`` applies to policies other than LRU (default
    :data:`DEFAULT_SAMPLE_RATE`; 1 = simulate every size over the whole trace).
    """
    if size_mode not in SIZE_MODES:
        raise BadInput(f"size mode {size_mode!r} is not one of {', '.join(SIZE_MODES)}")
    EVICTION.get(policy)  # an unknown name fails before any reading
    if not sizes:
        raise BadInput("no cache sizes given; pass --sizes like 1%,2%,5%")
    for s in sizes:
        if not str(s).strip().endswith("%"):
            parse_size(s, what="cache size")  # a typo fails before reading
    rate = DEFAULT_SAMPLE_RATE if sample_rate is None else float(sample_rate)
    if not 0.0 < rate <= 1.0:
        raise BadInput(f"sample rate {sample_rate!r} must be in (0, 1]; 1 simulates every size "
                       "over the whole trace")
    t0 = time.perf_counter()
    src = _open(source_or_path, fmt, skip_bad)
    tr = _load(src)
    ws = WorkingSet(requests=len(tr.ids), objects=tr.objects, bytes=tr.first_bytes)
    caps = [resolve_cache_size(s, ws, size_mode, src.path) for s in sizes]
    n = len(tr.ids)

    method = "simulation"
    rates = [1.0] * len(caps)
    points: list[tuple[float, float]] | None = None
    if policy == "lru":
        points = lru_curve(tr, caps, size_mode)
        method, rate = ("stack-distance", 1.0) if points is not None else ("simulation", 1.0)
    if points is None and rate < 1.0:
        mean_size = ws.size(size_mode) / ws.objects
        rates = [min(1.0, max(rate, MIN_SCALED_OBJECTS * mean_size / c)) for c in caps]
        method, points = "shards", []
        keys = np.empty(tr.objects, dtype=np.uint64)  # each slot's trace id
        keys[tr.slots] = tr.ids
        for c, r in zip(caps, rates):
            sample, scaled = tr, c
            if r < 1.0:
                sample = tr.subset(shards_sample(keys, r)[tr.slots])
                if len(sample.ids) == 0:
                    raise BadInput(f"sample rate {r} keeps no request of {src.path!r}; "
                                   "raise --sample-rate")
                scaled = max(1, round(c * r))
            try:
                mr, bmr = simulate_arrays(sample, policy, scaled, size_mode, seed)
            except BadInput as exc:
                if r >= 1.0:  # this size already runs unsampled: only a larger size helps
                    raise BadInput(f"{exc} (size {c}, not sampled); raise the size") from exc
                raise BadInput(f"{exc} (size {c} scaled by sample rate {r}); raise "
                               "--sample-rate or the size") from exc
            if r < 1.0:
                # SHARDS_adj: misses over the requests the rate should have sampled. A
                # sample's share of requests strays mostly through its few hottest objects,
                # whose requests are hits, so the misses are the better-estimated count.
                mr = min(1.0, mr * len(sample.ids) / (r * n))
                bmr = min(1.0, bmr * int(sample.sizes.sum()) / (r * int(tr.sizes.sum())))
            points.append((mr, bmr))
    if points is None:
        rate = 1.0
        points = [simulate_arrays(tr, policy, c, size_mode, seed) for c in caps]
    return MRCResult(
        trace=src.path, policy=policy, size_mode=size_mode, method=method, sizes=caps,
        miss_ratios=[p[0] for p in points], byte_miss_ratios=[p[1] for p in points],
        requests=n, working_set=ws.size(size_mode), sample_rate=rate, sample_rates=rates,
        wall_seconds=time.perf_counter() - t0,
    )


def plot(res: MRCResult, path: str) -> None:
    """A PNG of the curve (miss ratio against size; byte miss ratio too in bytes mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = np.argsort(res.sizes)
    xs = np.asarray(res.sizes)[order]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, np.asarray(res.miss_ratios)[order], marker="o", label="miss ratio")
    if res.size_mode == "bytes":
        ax.plot(xs, np.asarray(res.byte_miss_ratios)[order], marker="s", label="byte miss ratio")
    ax.set_xlabel(f"cache size ({res.size_mode})")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, 1)
    ax.set_title(f"{res.policy} on {os.path.basename(res.trace)} ({res.method})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
