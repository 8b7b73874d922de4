"""The key-level face of the slot-array policies (:mod:`aicache.policies.slotcore`).

A :class:`SlotPolicy` is an :class:`~aicache.policies.base.EvictionPolicy` whose rules live
in a core that knows only dense slot ids. It maps each key to a slot with a dict (and back
with a list), gives a key a slot when the core first has to remember it (an insert), and
takes the slot back as soon as the core no longer refers to it (evicted without a ghost,
dropped from a ghost list, removed), so the slot space stays as large as the keys the
policy holds or remembers, however many distinct keys the engine sees.

The simulator bypasses this mapping: :func:`aicache.policies.slotcore.replay` drives the
same core over slot ids assigned once per trace (:mod:`aicache.sim.cache_sim`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import ClassVar, Protocol

from aicache.compiled_abc import own_abc_caches
from aicache.native import mypyc_attr
from aicache.policies.base import EvictionPolicy, Key


class Core(Protocol):
    """What :class:`SlotPolicy` uses of a :class:`aicache.policies.slotcore.Core` (the
    contract is that module's)."""

    @property
    def count(self) -> int: ...
    @property
    def slots(self) -> int: ...
    track_dropped: bool

    def reserve(self, n: int) -> None: ...
    def access(self, i: int) -> bool: ...
    def resident(self, i: int) -> bool: ...
    def alive(self, i: int) -> bool: ...
    def on_miss(self, i: int, size: int) -> bool: ...
    def insert(self, i: int, size: int) -> bool: ...
    def prefetch_insert(self, i: int, size: int) -> bool: ...
    def victim(self) -> int: ...
    def remove(self, i: int) -> None: ...
    def order(self) -> list[int]: ...
    def first(self) -> int: ...
    def take_dropped(self) -> list[int]: ...


# Compiled (aicache.native); the six policies subclass it in plain Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class SlotPolicy(EvictionPolicy):
    """An eviction policy over a :class:`slotcore.Core` (a subclass builds it in
    :meth:`_make_core`). Invariant: ``_slot[k] == s`` iff ``_keys[s] == k``, and every
    slot the core is alive for has a key."""

    owns_residency = True
    #: the core drops ghost entries on its own (S3-FIFO, ARC): release their slots
    has_ghosts: ClassVar[bool] = False
    __slots__ = ("core", "_slot", "_keys", "_free")

    def __init__(self, capacity: int, *, rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        self.core: Core = self._make_core()
        self.core.track_dropped = self.has_ghosts
        self._slot: dict[Key, int] = {}
        self._keys: list[Key] = []
        self._free: list[int] = []

    def _make_core(self) -> Core:
        raise NotImplementedError

    # -- slots --------------------------------------------------------------------------
    def _assign(self, key: Key) -> int:
        s = self._slot.get(key)
        if s is not None:
            return s
        if self._free:
            s = self._free.pop()
            self._keys[s] = key
        else:
            s = len(self._keys)
            self._keys.append(key)
            self.core.reserve(s + 1)
        self._slot[key] = s
        return s

    def _release(self, s: int) -> None:
        """Forget slot ``s``'s key if the core no longer refers to ``s``."""
        if not self.core.alive(s):
            del self._slot[self._keys[s]]
            self._keys[s] = None
            self._free.append(s)

    def _release_dropped(self) -> None:
        for s in self.core.take_dropped():
            self._release(s)

    # -- events -------------------------------------------------------------------------
    def access(self, key: Key, now: float) -> bool:
        s = self._slot.get(key)
        return s is not None and self.core.access(s)

    def on_hit(self, key: Key, size: int, now: float) -> None:
        self.core.access(self._slot[key])

    def on_miss(self, key: Key, size: int, now: float) -> bool:
        s = self._slot.get(key)
        if s is None:
            return self.core.on_miss(-1, size)
        ok = self.core.on_miss(s, size)
        self._release(s)
        return ok

    def on_insert(self, key: Key, size: int, now: float) -> bool:
        s = self._assign(key)
        ok = self.core.insert(s, size)
        if not ok:
            self._release(s)
        return ok

    def on_prefetch_insert(self, key: Key, size: int, now: float) -> bool:
        s = self._assign(key)
        ok = self.core.prefetch_insert(s, size)
        if not ok:
            self._release(s)
        return ok

    def victim(self, now: float) -> Key:
        s = self.core.victim()
        key = self._keys[s]
        self._release(s)
        if self.has_ghosts:
            self._release_dropped()
        return key

    def on_remove(self, key: Key) -> None:
        s = self._slot[key]
        self.core.remove(s)
        self._release(s)

    # -- inspection ---------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        s = self._slot.get(key)
        return s is not None and self.core.resident(s)

    def __len__(self) -> int:
        return int(self.core.count)

    def keys(self) -> Iterable[Key]:
        keys = self._keys
        return [keys[s] for s in self.core.order()]

    def first_key(self) -> Key | None:
        s = self.core.first()
        return None if s < 0 else self._keys[s]


# compiled classes share one ABC cache unless given their own (aicache.compiled_abc)
own_abc_caches(Core, SlotPolicy)
