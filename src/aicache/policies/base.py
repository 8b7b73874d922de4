"""The policy core: the eviction and prefetch interfaces.

Policies are pure: they never read a clock, never do I/O and never draw randomness that
was not injected. The caller (simulator or real engine) tells them ``now`` and the event.
The *cache* (``aicache.sim.cache.Cache`` in simulation, the block stores in the real
engines) owns storage and byte accounting; an eviction policy only keeps an order and names
a victim — the shape cachetools and libCacheSim share.

Event contract for an :class:`EvictionPolicy` (keys are hashable, usually ``int``):

* ``on_hit(key, size, now)``   — a resident key was requested.
* ``on_insert(key, size, now)`` — the cache stored ``key`` (after a miss, or a prefetch
  with ``prefetch=True`` via :meth:`EvictionPolicy.on_prefetch_insert`).
* ``victim(now)`` — choose a resident key, forget it, return it. The cache removes its
  bytes. Called only while the policy holds at least one key.
* ``on_remove(key)`` — the cache dropped ``key`` for its own reasons (invalidated, corrupt,
  eager eviction); forget it without choosing.

Two optional hooks exist because libCacheSim's ``find``/``insert`` give some algorithms
more than the four events above, and matching libCacheSim exactly needs them:

* ``on_miss(key, size, now)`` — called on every demand miss, *before* the cache checks
  whether the object fits, when the class sets ``sees_misses = True``. Ghost-list policies
  (ARC, S3-FIFO, LeCaR) learn here: a ghost hit adapts ARC's target ``p`` and LeCaR's
  weights even when the object is then too large to store, and the insert that follows
  goes to the frequent queue. ARC's eviction also depends on the incoming object's size.
  Returning ``False`` refuses the object before any eviction (libCacheSim's per-algorithm
  ``can_insert``; S3-FIFO refuses objects larger than its small queue) — one call instead
  of ``on_miss`` + ``admit`` on the hot path. A driver that never calls ``on_miss`` still
  keeps a consistent policy (it just never sees a ghost hit), but one that calls it must
  not store an object it refused.
* ``on_insert`` may return ``False`` to *decline* the object after the cache has already
  made room (libCacheSim's ``insert`` returning NULL; S3-FIFO does this for an object as
  large as its small queue). The cache then does not store it. Policies that can do this
  set ``may_decline = True``; every driver must honour it (``Cache`` does).
* A policy with ``self_evicting = True`` may drop resident keys on its own inside
  ``on_hit``, ``on_miss``, ``on_insert`` and ``victim`` (LIRS demotes and prunes on a hit,
  W-TinyLFU's segmented main cache evicts when a hit overflows a segment, one eviction may
  drop several keys). It keeps them resident in its own view (``keys``, ``__contains__``)
  until the driver takes them with :meth:`EvictionPolicy.drain_evicted` and drops them
  (:class:`SelfEvicting` keeps that pending list for such a policy);
  ``Cache`` drains after every call, which is libCacheSim's behaviour. A driver that never
  drains stays consistent: ``victim`` hands pending keys out first.

Invariant (tested over the whole registry): the set of keys a policy holds equals the set
the cache holds, at every step.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from aicache.compiled_abc import own_abc_caches
from aicache.native import mypyc_attr

Key = Hashable


# Compiled (see aicache.native): policies outside the compiled set subclass it in plain
# Python; __getstate__ below lets copy/pickle see such a subclass's slots too.
@mypyc_attr(allow_interpreted_subclasses=True)
class EvictionPolicy(ABC):
    """Keeps an order over resident keys and names victims.

    ``capacity`` is the cache's capacity in the cache's unit (objects or bytes); policies
    that size internal queues by it (S3-FIFO, ARC) need it. ``rng`` is the only source of
    randomness a policy may use.
    """

    __slots__ = ("capacity", "rng")
    name: ClassVar[str] = ""
    #: True when the policy needs the next access time of every request (Belady).
    needs_future: ClassVar[bool] = False
    #: True when the policy may refuse to insert (``admit`` is consulted on a miss).
    may_reject: ClassVar[bool] = False
    #: True when the cache must call :meth:`on_miss` on every demand miss.
    sees_misses: ClassVar[bool] = False
    #: True when :meth:`on_insert` may return ``False`` (object declined after eviction).
    may_decline: ClassVar[bool] = False
    #: True when the policy may drop keys on its own (see :meth:`drain_evicted`).
    self_evicting: ClassVar[bool] = False
    #: True when :meth:`access` is implemented: the policy's own table answers "is it
    #: resident?" and applies the hit in the same lookup, so a cache counting objects
    #: keeps no table of its own (one hash lookup per hit instead of two or three).
    owns_residency: ClassVar[bool] = False

    def __init__(self, capacity: int, *, rng: random.Random | None = None, **params: Any) -> None:
        if params:
            raise TypeError(f"{type(self).__name__} got unknown parameters: {sorted(params)}")
        self.capacity = capacity
        self.rng = rng if rng is not None else random.Random(0)

    def __getstate__(self) -> dict[str, object]:
        """Every set attribute, for copy and pickle, whichever classes are compiled: a
        plain class lists its attributes in ``__slots__``, a compiled one (mypyc) in
        ``__mypyc_attrs__``, and a plain subclass of a compiled class has both."""
        names: dict[str, None] = {}
        for cls in type(self).__mro__:
            for attr in ("__slots__", "__mypyc_attrs__"):
                slots = cls.__dict__.get(attr, ())
                names.update(dict.fromkeys((slots,) if isinstance(slots, str) else slots))
        names.pop("__dict__", None)
        return {n: getattr(self, n) for n in names if hasattr(self, n)}

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    # -- events -----------------------------------------------------------------------
    @abstractmethod
    def on_hit(self, key: Key, size: int, now: float) -> None: ...

    @abstractmethod
    def on_insert(self, key: Key, size: int, now: float) -> bool | None:
        """Store ``key``. Return ``False`` only if :attr:`may_decline` and it was declined."""

    @abstractmethod
    def victim(self, now: float) -> Key: ...

    @abstractmethod
    def on_remove(self, key: Key) -> None: ...

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> bool | None:
        """A prefetched block was stored. Not an access; default: insert like a miss."""
        return self.on_insert(key, size, now)

    def adopt_many(self, keys: Sequence[Key], sizes: Mapping[Key, int], now: float) -> None:
        """Take over ``keys`` (oldest candidate first) from another policy, as if each were
        inserted in that order — not accesses. Chiron hands a unit's resident blocks to a
        new executor this way on every switch, so list-backed policies override it with
        one bulk update (a switch of a 1 TB run moves tens of thousands of blocks)."""
        for k in keys:
            self.on_insert(k, sizes[k], now)

    def access(self, key: Key, now: float) -> bool:
        """If ``key`` is resident, do what ``on_hit(key, 1, now)`` does and return True;
        else change nothing and return False (only if :attr:`owns_residency`)."""
        if key in self:
            self.on_hit(key, 1, now)
            return True
        return False

    def fast_hit(self) -> Callable[[Key], object] | None:
        """Optionally, a callable taking only the key that does exactly what ``on_hit``
        does (for any size and time) — e.g. a C method — so the cache's hit path skips a
        Python frame. ``None`` (the default) means "call ``on_hit``"."""
        return None

    def on_miss(self, key: Key, size: int, now: float) -> bool | None:
        """A demand miss on ``key``, before any size check (only if :attr:`sees_misses`).

        Return ``False`` to refuse storing ``key`` (nothing is evicted for it).
        """
        return None

    def admit(self, key: Key, size: int, used: int, now: float) -> bool:
        """Whether to store ``key`` after a miss; ``used`` is the cache's occupancy."""
        return True

    def drain_evicted(self) -> Sequence[Key]:
        """The keys the policy dropped on its own since the last call, oldest first, and
        forgets them (only if :attr:`self_evicting`; the driver drops them from storage)."""
        return ()

    def set_next_access(self, next_vtime: int) -> None:
        """Told before each request when :attr:`needs_future` (virtual time, -1 = never)."""

    # -- inspection ---------------------------------------------------------------------
    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def keys(self) -> Iterable[Key]:
        """The resident keys the policy tracks (for invariant checks; may be slow)."""

    def first_key(self) -> Key | None:
        """The first key :meth:`keys` yields (the oldest candidate), or None when empty;
        cheap enough for a hot path where :meth:`keys` is a lazy iterator or overridden."""
        return next(iter(self.keys()), None)


@mypyc_attr(allow_interpreted_subclasses=True)
class SelfEvicting(EvictionPolicy):
    """The base of a ``self_evicting`` policy: the keys it dropped on its own, oldest first,
    which it still counts as resident until :meth:`drain_evicted` hands them to the driver.
    A subclass appends to ``_evicted`` when it drops a key, and hands pending keys out first
    from ``victim`` (so a driver that never drains stays consistent)."""

    self_evicting: ClassVar[bool] = True
    __slots__ = ("_evicted",)

    def __init__(self, capacity: int, *, rng: random.Random | None = None, **params: Any) -> None:
        super().__init__(capacity, rng=rng, **params)
        self._evicted: list[Key] = []

    def drain_evicted(self) -> Sequence[Key]:
        if not self._evicted:
            return ()
        out = self._evicted
        self._evicted = []
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class PrefetchPolicy(ABC):
    """Told of every demand access; returns the blocks it wants fetched next.

    ``unit`` is the cache unit (file or dataset directory) and ``block`` a block id whose
    neighbours within a unit are consecutive integers. Prefetched blocks that arrive are
    reported with :meth:`on_prefetch_used` / :meth:`on_prefetch_wasted` so adaptive
    prefetchers can grow or shrink their window.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]: ...

    def on_prefetch_used(self, block: int, now: float) -> None:
        """A prefetched block was read before it was evicted."""

    def on_prefetch_wasted(self, block: int, now: float) -> None:
        """A prefetched block was evicted unread."""

    def reset(self) -> None:
        """Forget learned state (an executor switch)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class NoPrefetch(PrefetchPolicy):
    name = "none"
    _EMPTY: tuple[int, ...] = ()

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        return self._EMPTY


# compiled classes share one ABC cache unless given their own (aicache.compiled_abc)
own_abc_caches(EvictionPolicy, SelfEvicting, PrefetchPolicy, NoPrefetch)
