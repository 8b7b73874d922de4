"""The cache template shared by the simulator and the real engines.

``Cache.request`` is libCacheSim's ``cache_get_base``: look up → hit; else (if the object
can fit at all and the policy admits it) evict until it fits → insert. The cache owns the
byte accounting; the policy only orders keys and names victims.

Accounting that matches libCacheSim (documented because it differs from the "obvious" one):

* Every request counts, including the first access to an object (compulsory misses).
* In objects mode every object has size 1, whatever the trace says.
* An object larger than the whole cache is a miss and is *not* inserted (libCacheSim's
  ``can_insert``); nothing is evicted for it.
* A hit on an object whose size changed keeps the stored size (libCacheSim does not
  re-size on hit).

Two policy hooks mirror what libCacheSim's ``find``/``insert`` let an algorithm do (see
:mod:`aicache.policies.base`): a policy with ``sees_misses`` is told of every demand miss
before the size check (libCacheSim's ``find`` runs before ``can_insert``; ``on_miss``
returning False is the policy's ``can_insert`` saying no), and a policy with
``may_decline`` may refuse the object in ``on_insert`` after room was made (libCacheSim's
``insert`` returning NULL) — the evictions stand, the object is not stored, and
``stats.rejected`` counts it. A ``self_evicting`` policy (LIRS, W-TinyLFU) may drop keys
inside any call, a hit included, and one ``victim`` call may drop several; ``Cache``
takes them with ``drain_evicted`` right after each call and counts them as evictions, as
libCacheSim's nested caches do. Policies without these flags cost nothing extra.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aicache.policies.base import EvictionPolicy, Key


@dataclass(slots=True)
class CacheStats:
    requests: int = 0
    hits: int = 0
    bytes_requested: int = 0
    bytes_hit: int = 0
    evictions: int = 0
    rejected: int = 0

    @property
    def miss_ratio(self) -> float:
        return 1.0 - self.hits / self.requests if self.requests else 0.0

    @property
    def byte_miss_ratio(self) -> float:
        return 1.0 - self.bytes_hit / self.bytes_requested if self.bytes_requested else 0.0


def _access_is_current(cls: type) -> bool:
    """Whether ``cls.access`` comes from the class that defines its ``on_hit`` (or a
    subclass of it): a subclass that changes ``on_hit`` but inherits ``access`` would
    have its hits skip the change, so such a policy is driven through ``on_hit``."""
    def owner(name: str) -> type:
        return next(c for c in cls.__mro__ if name in c.__dict__)
    return issubclass(owner("access"), owner("on_hit"))


class Cache:
    """Capacity accounting around an eviction policy.

    ``capacity`` is in objects (``size_mode="objects"``: every size counts as 1) or bytes.
    Invariant: ``used <= capacity`` after every call, and ``policy``'s keys == ``sizes``'
    keys.

    Counters are plain slots (read them through :attr:`stats`), split by hit and miss so a
    request updates two of them, not four. A policy may offer :meth:`EvictionPolicy.fast_hit`
    — a C-level callable taking only the key (e.g. a bound C method) — which
    ``request`` then calls on hits instead of ``on_hit``; the result is the same.
    """

    __slots__ = ("capacity", "policy", "objects_mode", "_sizes", "used", "_on_miss", "_hit",
                 "n_hits", "n_misses", "n_bytes_hit", "n_bytes_missed", "n_evictions",
                 "n_rejected", "_sees_misses", "_may_reject", "_self_evicting", "_owned")

    def __init__(self, capacity: int, policy: EvictionPolicy, size_mode: str = "objects") -> None:
        if size_mode not in ("objects", "bytes"):
            raise ValueError(f"size_mode must be 'objects' or 'bytes', not {size_mode!r}")
        self.capacity = int(capacity)
        self.policy = policy
        self.objects_mode = size_mode == "objects"
        self._sizes: dict[Key, int] = {}
        self.used = 0
        self.n_hits = self.n_misses = self.n_bytes_hit = self.n_bytes_missed = 0
        self.n_evictions = self.n_rejected = 0
        # the policy's class flags, read once: an instance slot is a C field when compiled
        self._sees_misses = bool(policy.sees_misses)
        self._may_reject = bool(policy.may_reject)
        self._self_evicting = bool(policy.self_evicting)
        self._hit = policy.fast_hit() if not self._self_evicting else None
        # objects mode over a policy whose table is the resident set: no table here
        self._owned = (self.objects_mode and bool(policy.owns_residency)
                       and not self._self_evicting and _access_is_current(type(policy)))

    @property
    def sizes(self) -> dict[Key, int]:
        """Resident key -> stored size (a copy when the policy owns the table)."""
        if self._owned:
            return dict.fromkeys(self.policy.keys(), 1)
        return self._sizes

    @property
    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        return CacheStats(self.n_hits + self.n_misses, self.n_hits,
                          self.n_bytes_hit + self.n_bytes_missed, self.n_bytes_hit,
                          self.n_evictions, self.n_rejected)

    def request(self, key: Key, size: int, now: float) -> bool:
        """A demand access. Returns True on a hit. Inserts on a miss when possible."""
        if self._owned:
            return self._request_owned(key, size, now)
        sizes = self._sizes
        if key in sizes:
            self.n_hits += 1
            self.n_bytes_hit += size
            hit = self._hit
            if hit is not None:
                hit(key)
            else:
                self.policy.on_hit(key, 1 if self.objects_mode else size, now)
                if self._self_evicting:
                    self._drain()
            return True
        self.n_misses += 1
        self.n_bytes_missed += size
        if self.objects_mode:
            size = 1
        policy = self.policy
        if self._sees_misses:
            refused = policy.on_miss(key, size, now) is False
            if self._self_evicting:
                self._drain()
            if refused:
                self.n_rejected += 1
                return False
        if size > self.capacity:
            return False
        if self._may_reject and not policy.admit(key, size, self.used, now):
            self.n_rejected += 1
            return False
        cap = self.capacity - size
        while self.used > cap:
            # index + del rather than pop(): both compile to direct dict calls
            victim = policy.victim(now)
            self.used -= sizes[victim]
            del sizes[victim]
            self.n_evictions += 1
            if self._self_evicting:
                self._drain()
        stored = policy.on_insert(key, size, now) is not False
        if self._self_evicting:
            self._drain()
        if not stored:
            self.n_rejected += 1
            return False
        sizes[key] = size
        self.used += size
        return False

    def _request_owned(self, key: Key, size: int, now: float) -> bool:
        """:meth:`request` in objects mode when the policy owns the resident set: the
        same steps, with ``used`` counting objects and no table of the cache's own."""
        policy = self.policy
        if policy.access(key, now):
            self.n_hits += 1
            self.n_bytes_hit += size
            return True
        self.n_misses += 1
        self.n_bytes_missed += size
        if self._sees_misses and policy.on_miss(key, 1, now) is False:
            self.n_rejected += 1
            return False
        if self.capacity < 1:
            return False
        if self._may_reject and not policy.admit(key, 1, self.used, now):
            self.n_rejected += 1
            return False
        cap = self.capacity - 1
        while self.used > cap:
            policy.victim(now)
            self.used -= 1
            self.n_evictions += 1
        if policy.on_insert(key, 1, now) is False:
            self.n_rejected += 1
            return False
        self.used += 1
        return False

    def _drain(self) -> None:
        """Drop what a ``self_evicting`` policy evicted on its own."""
        sizes = self._sizes
        for victim in self.policy.drain_evicted():
            self.used -= sizes[victim]
            del sizes[victim]
            self.n_evictions += 1

    def request_batch(self, keys: list[Key], sizes: list[int], times: list[float],
                      next_access: list[int] | None = None) -> None:
        """:meth:`request` for each ``(keys[i], sizes[i], times[i])`` in order (equal
        lengths). With ``next_access`` (a policy that ``needs_future``) the policy is told
        each request's next access first.

        This is the simulator's replay loop. Compiled (:mod:`aicache.native`) it runs in C
        and calls :meth:`request` and the policy's methods directly, with no Python frame
        per request; the loop is indexed because that is what compiles to plain C.
        """
        n = len(keys)
        if next_access is None:
            for i in range(n):
                self.request(keys[i], sizes[i], times[i])
            return
        policy = self.policy
        for i in range(n):
            policy.set_next_access(next_access[i])
            self.request(keys[i], sizes[i], times[i])

    def insert(self, key: Key, size: int, now: float, prefetch: bool = True) -> bool:
        """Store ``key`` without counting an access (prefetch). False if it cannot fit or
        the policy declines it."""
        if self.objects_mode:
            size = 1
        if key in self or size > self.capacity:
            return False
        policy = self.policy
        if self._may_reject and not policy.admit(key, size, self.used, now):
            return False
        owned = self._owned
        sizes = self._sizes
        cap = self.capacity - size
        while self.used > cap:
            victim = policy.victim(now)
            self.used -= 1 if owned else sizes.pop(victim)
            self.n_evictions += 1
            if self._self_evicting:
                self._drain()
        if prefetch:
            stored = policy.on_prefetch_insert(key, size, now)
        else:
            stored = policy.on_insert(key, size, now)
        if self._self_evicting:
            self._drain()
        if stored is False:
            return False
        if not owned:
            sizes[key] = size
        self.used += size
        return True

    def remove(self, key: Key) -> bool:
        """Drop ``key`` for the cache's own reasons (not a policy choice)."""
        if self._owned:
            if key not in self.policy:
                return False
            self.used -= 1
            self.policy.on_remove(key)
            return True
        size = self._sizes.pop(key, None)
        if size is None:
            return False
        self.used -= size
        self.policy.on_remove(key)
        if self._self_evicting:
            self._drain()
        return True

    def __contains__(self, key: object) -> bool:
        if self._owned:
            return key in self.policy
        return key in self._sizes

    def __len__(self) -> int:
        return self.used if self._owned else len(self._sizes)

    def keys(self) -> Iterable[Key]:
        return self.policy.keys() if self._owned else self._sizes.keys()
