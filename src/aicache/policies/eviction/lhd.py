"""LHD, Least Hit Density (NSDI'18), as libCacheSim's ``LHD/`` (Beckmann's code) runs it.

Each resident object has a tag: the time of its last access, its last two hit ages and
its size. Tags fall into classes by the sum of the last two hit ages (16 log-spaced
classes; one application). Each class keeps, per coarsened age (``age >> 10`` accesses,
up to ``MAX_AGE`` = 20000), a hit-density estimate ``E[hits] / E[lifetime]``; an
object's rank is its class's density at its age divided by its size. Eviction samples 8
random tags (32 after 50 reconfigurations) plus the last 8 admitted objects that ranked
below the running victim average, and evicts the lowest rank. Every ``2**20`` accesses the
densities are recomputed from the hits and evictions seen at each age (EWMA-decayed),
and after the 5th and 25th recomputation the age coarsening adapts to the object count.
New objects are sometimes *explorers* (1 in 32, within a budget of 1% of the cache), whose
rank is raised by 1 so that rare classes get observed.

What is kept from libCacheSim to give the same decisions:

* The random draws are libCacheSim's ``next_rand``: Lemire's lehmer64, a 128-bit state
  multiplied by ``0xda942042e4dd58b5`` per draw, whose high 64 bits are the draw.
  ``rand_seed`` is the start state (libCacheSim starts every thread at ``0xdeadbeef``,
  ``set_rand_seed(s)`` sets it to ``s``; its randomised policies in one thread share it).
  It is the policy's only randomness; ``rng`` is not used.
* Ranks, densities and their accumulations are 32-bit floats (``float`` in C++), every
  operation rounded to single precision as the C++ code does.
* Tags live in an array with swap-with-last removal, so which tag a draw picks is the same.
* Densities start at ``(class + 1) / (age + 1)`` until the first recomputation.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aicache.native import mypyc_attr
from aicache.policies.base import EvictionPolicy, Key

if TYPE_CHECKING:  # numpy is imported where the recomputation runs
    import numpy as np

_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1
_LEHMER = 0xDA942042E4DD58B5
#: libCacheSim's start state of its per-thread generator
RAND_SEED = 0xDEADBEEF

ASSOCIATIVITY = 32
ADMISSIONS = 8
HIT_AGE_CLASSES = 16
APP_CLASSES = 16
NUM_CLASSES = HIT_AGE_CLASSES * APP_CLASSES
MAX_AGE = 20000
ACCS_PER_RECONFIGURATION = 1 << 20
EXPLORE_INVERSE_PROBABILITY = 32
DEFAULT_APP_ID = 1
_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """``x`` rounded to the nearest 32-bit float (C++ ``float``)."""
    return float(_F32.unpack(_F32.pack(x))[0])


EWMA_DECAY = f32(0.9)
ONE_MINUS_DECAY = f32(1.0 - EWMA_DECAY)
EXPLORER_BUDGET_FRACTION = f32(0.01)
AGE_COARSENING_ERROR_TOLERANCE = f32(0.01)
LOWEST = -3.4028234663852886e38  # std::numeric_limits<float>::lowest()


def hit_age_class(age: int) -> int:
    if age == 0:
        return HIT_AGE_CLASSES - 1
    log = 0
    while age < MAX_AGE and log < HIT_AGE_CLASSES - 1:
        age <<= 1
        log += 1
    return log


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LHD(EvictionPolicy):
    name = "lhd"
    __slots__ = ("_ids", "_ts", "_last_hit", "_last_last_hit", "_size", "_explorer",
                 "_index", "_rand", "_timestamp", "_next_reconf", "_n_reconf", "_shift",
                 "_ewma_objects", "_ewma_objects_mass", "_recent", "_recent_head",
                 "_ewma_victim", "_explorer_budget", "_hits", "_evictions", "_densities",
                 "_sizes")

    def __init__(self, capacity: int, *, rand_seed: int = RAND_SEED,
                 rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        # tags, as parallel arrays (libCacheSim's vector<Tag>, swap-with-last removal)
        self._ids: list[Key] = []
        self._ts: list[int] = []
        self._last_hit: list[int] = []
        self._last_last_hit: list[int] = []
        self._size: list[float] = []
        self._explorer: list[bool] = []
        self._index: dict[Key, int] = {}
        self._sizes: dict[Key, int] = {}
        self._rand = rand_seed & _M128
        self._timestamp = 0
        self._next_reconf = ACCS_PER_RECONFIGURATION
        self._n_reconf = 0
        self._shift = 10
        self._ewma_objects = 0.0
        self._ewma_objects_mass = 0.0
        self._recent: list[Key | None] = [None] * ADMISSIONS
        self._recent_head = 0
        self._ewma_victim = 0.0
        self._explorer_budget = int(f32(f32(float(capacity)) * EXPLORER_BUDGET_FRACTION))
        # per class and age, flattened (class * MAX_AGE + age); sparse until the first
        # recomputation, whose densities then replace the initial (c + 1) / (a + 1)
        self._hits: dict[int, float] = {}
        self._evictions: dict[int, float] = {}
        self._densities: list[float] | None = None

    @property
    def rand_state(self) -> int:
        """The generator's state now (to continue a libCacheSim thread's sequence)."""
        return self._rand

    def _next_rand(self) -> int:
        self._rand = (self._rand * _LEHMER) & _M128
        return self._rand >> 64

    # -- ranking ------------------------------------------------------------------------
    def _age(self, i: int) -> int:
        age = ((self._timestamp - self._ts[i]) & _M64) >> self._shift
        return MAX_AGE - 1 if age >= MAX_AGE else age

    def _class(self, i: int) -> int:
        return DEFAULT_APP_ID % APP_CLASSES * HIT_AGE_CLASSES + hit_age_class(
            self._last_hit[i] + self._last_last_hit[i])

    def _density(self, c: int, age: int) -> float:
        if self._densities is None:
            return f32(1.0 * (c + 1) / (age + 1))
        return self._densities[c * MAX_AGE + age]

    def _hit_density(self, i: int) -> float:
        age = self._age(i)
        if age == MAX_AGE - 1:
            return LOWEST
        d = f32(self._density(self._class(i), age) / self._size[i])
        if self._explorer[i]:
            d = f32(d + 1.0)
        return d

    def _rank(self) -> Key:
        victim = -1
        victim_rank = 3.4028234663852886e38
        n = len(self._ids)
        for _ in range(ASSOCIATIVITY if self._n_reconf > 50 else 8):
            i = self._next_rand() % n
            r = self._hit_density(i)
            if r < victim_rank:
                victim, victim_rank = i, r
        for key in self._recent:
            i2 = self._index.get(key) if key is not None else None
            if i2 is None:
                continue
            r = self._hit_density(i2)
            if r < victim_rank:
                victim, victim_rank = i2, r
        self._ewma_victim = f32(f32(EWMA_DECAY * self._ewma_victim)
                                + f32(ONE_MINUS_DECAY * victim_rank))
        return self._ids[victim]

    # -- libCacheSim's update / replaced ---------------------------------------------------
    def _update(self, key: Key, size: int) -> None:
        i = self._index.get(key)
        insert = i is None
        if i is None:
            i = len(self._ids)
            self._index[key] = i
            self._ids.append(key)
            self._ts.append(0)
            self._last_hit.append(0)
            self._last_last_hit.append(MAX_AGE)
            self._size.append(0.0)
            self._explorer.append(False)
        else:
            age = self._age(i)
            slot = self._class(i) * MAX_AGE + age
            self._hits[slot] = f32(self._hits.get(slot, 0.0) + 1.0)
            if self._explorer[i]:
                self._explorer_budget = int(f32(self._explorer_budget + self._size[i]))
            self._last_last_hit[i] = self._last_hit[i]
            self._last_hit[i] = age
        self._ts[i] = self._timestamp
        self._size[i] = f32(float(size))
        explore = self._next_rand() % EXPLORE_INVERSE_PROBABILITY == 0
        if explore and self._explorer_budget > 0 and self._n_reconf < 50:
            self._explorer[i] = True
            self._explorer_budget = int(f32(self._explorer_budget - self._size[i]))
        else:
            self._explorer[i] = False
        if insert and not explore and self._hit_density(i) < self._ewma_victim:
            self._recent[self._recent_head % ADMISSIONS] = key
            self._recent_head += 1
        self._timestamp += 1
        self._next_reconf -= 1
        if self._next_reconf == 0:
            self._reconfigure()
            self._next_reconf = ACCS_PER_RECONFIGURATION
            self._n_reconf += 1

    def _drop_tag(self, key: Key) -> None:
        i = self._index.pop(key)
        last = len(self._ids) - 1
        self._ids[i] = self._ids[last]
        self._ts[i] = self._ts[last]
        self._last_hit[i] = self._last_hit[last]
        self._last_last_hit[i] = self._last_last_hit[last]
        self._size[i] = self._size[last]
        self._explorer[i] = self._explorer[last]
        for arr in (self._ids, self._ts, self._last_hit, self._last_last_hit, self._size,
                    self._explorer):
            arr.pop()
        if i < last:
            self._index[self._ids[i]] = i

    def _replaced(self, key: Key) -> None:
        i = self._index[key]
        slot = self._class(i) * MAX_AGE + self._age(i)
        self._evictions[slot] = f32(self._evictions.get(slot, 0.0) + 1.0)
        if self._explorer[i]:
            self._explorer_budget = int(f32(self._explorer_budget + self._size[i]))
        self._drop_tag(key)

    # -- recomputation (every 2**20 accesses) ---------------------------------------------
    def _reconfigure(self) -> None:
        import numpy as np

        decay = np.float32(EWMA_DECAY)
        hits = np.zeros(NUM_CLASSES * MAX_AGE, dtype=np.float32)
        evictions = np.zeros(NUM_CLASSES * MAX_AGE, dtype=np.float32)
        for slot, v in self._hits.items():
            hits[slot] = v
        for slot, v in self._evictions.items():
            evictions[slot] = v
        hits *= decay
        evictions *= decay
        hits2 = hits.reshape(NUM_CLASSES, MAX_AGE)
        ev2 = evictions.reshape(NUM_CLASSES, MAX_AGE)
        self._adapt_age_coarsening(hits2, ev2)
        # modelHitDensity: from the oldest age down, in float32, sequentially
        rev_h = hits2[:, ::-1]
        rev_e = ev2[:, ::-1]
        total_hits = np.cumsum(rev_h, axis=1, dtype=np.float32)
        total_events = np.cumsum(np.add(rev_h, rev_e, dtype=np.float32), axis=1,
                                 dtype=np.float32)
        lifetime = np.cumsum(total_events, axis=1, dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            dens = np.where(total_events > 1e-5, total_hits / lifetime, np.float32(0.0))
        dens = dens.astype(np.float32)[:, ::-1]
        if self._densities is None:
            base = np.array([[f32(1.0 * (c + 1) / (a + 1)) for a in (MAX_AGE - 1,)]
                             for c in range(NUM_CLASSES)], dtype=np.float32)
        else:
            base = np.array(self._densities, dtype=np.float32).reshape(
                NUM_CLASSES, MAX_AGE)[:, MAX_AGE - 1:]
        dens[:, MAX_AGE - 1] = base[:, 0]  # the oldest age is never recomputed
        self._densities = dens.reshape(-1).tolist()
        self._hits = {int(s): float(hits[s]) for s in np.flatnonzero(hits)}
        self._evictions = {int(s): float(evictions[s]) for s in np.flatnonzero(evictions)}

    def _adapt_age_coarsening(self, hits: np.ndarray, evictions: np.ndarray) -> None:
        self._ewma_objects = f32(f32(self._ewma_objects * EWMA_DECAY) + len(self._sizes))
        self._ewma_objects_mass = f32(f32(self._ewma_objects_mass * EWMA_DECAY) + 1.0)
        num_objects = f32(self._ewma_objects / self._ewma_objects_mass)
        optimal = f32(1.0 * num_objects / f32(AGE_COARSENING_ERROR_TOLERANCE * MAX_AGE))
        if self._n_reconf not in (5, 25):
            return
        log2 = 1
        while (1 << log2) < optimal:
            log2 += 1
        delta = log2 - self._shift
        self._shift = log2
        self._ewma_objects = f32(self._ewma_objects * 8)
        self._ewma_objects_mass = f32(self._ewma_objects_mass * 8)
        for arr in (hits, evictions):
            a = arr  # (classes, MAX_AGE) float32, modified in place
            if delta < 0:
                s = -delta
                a[:, MAX_AGE - 1] += a[:, MAX_AGE >> s:MAX_AGE - 1].sum(
                    axis=1, dtype="float32")
                for age in range(MAX_AGE - 2, -1, -1):
                    a[:, age] = a[:, age >> s] / (1 << s)
            elif delta > 0:
                width = 1 << delta
                for age in range(MAX_AGE >> delta):
                    a[:, age] = a[:, age << delta:(age << delta) + width].sum(
                        axis=1, dtype="float32")
                a[:, MAX_AGE >> delta:MAX_AGE - 1] = 0

    # -- events -----------------------------------------------------------------------
    def on_hit(self, key: Key, size: int, now: float) -> None:
        self._sizes[key] = size
        self._update(key, size)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._sizes[key] = size
        self._update(key, size)

    def victim(self, now: float) -> Key:
        key = self._rank()
        self._replaced(key)
        del self._sizes[key]
        return key

    def on_remove(self, key: Key) -> None:
        """libCacheSim's ``LHD_remove``: the tag goes, no eviction is recorded."""
        del self._sizes[key]
        self._drop_tag(key)

    # -- inspection ---------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def keys(self) -> Iterable[Key]:
        return self._sizes.keys()
