"""SIEVE (NSDI'24), as libCacheSim's ``Sieve.c``.

New objects enter at the head with the visited bit clear; a hit sets it. The hand walks from
the tail towards the head: a visited object has its bit cleared and stays where it is, an
unvisited one is evicted and the hand stops just head-wards of it. Past the head the hand
wraps to the tail (libCacheSim: a NULL pointer means "start at the tail").

Representation without a linked list or a hand pointer: the queue is cut at the hand into
two ``OrderedDict`` segments, both oldest first. ``_ahead`` holds the hand's object and
everything newer (not yet passed in this round; new objects are appended here), ``_behind``
the objects the hand already passed, all older than anything in ``_ahead``. Moving the hand
past an object moves it from the front of ``_ahead`` to the back of ``_behind``; wrapping is
swapping the two. Invariant: ``_ahead`` is empty only if ``_behind`` is too.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable
from itertools import chain

from aicache.native import mypyc_attr
from aicache.policies.base import EvictionPolicy, Key


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Sieve(EvictionPolicy):
    name = "sieve"
    owns_residency = True
    __slots__ = ("_ahead", "_behind")

    def __init__(self, capacity: int, *, rng: random.Random | None = None) -> None:
        super().__init__(capacity, rng=rng)
        self._ahead: OrderedDict[Key, int] = OrderedDict()
        self._behind: OrderedDict[Key, int] = OrderedDict()

    def on_hit(self, key: Key, size: int, now: float) -> None:
        if key in self._ahead:
            self._ahead[key] = 1
        else:
            self._behind[key] = 1

    def access(self, key: Key, now: float) -> bool:
        ahead = self._ahead
        v = ahead.get(key)
        if v is not None:
            if not v:
                ahead[key] = 1
            return True
        behind = self._behind
        if key in behind:
            behind[key] = 1
            return True
        return False

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._ahead[key] = 0

    def _wrap_if_empty(self) -> None:
        if not self._ahead:
            self._ahead, self._behind = self._behind, self._ahead

    def victim(self, now: float) -> Key:
        ahead, behind = self._ahead, self._behind
        while True:
            key, visited = ahead.popitem(last=False)
            if not visited:
                self._wrap_if_empty()
                return key
            behind[key] = 0
            if not ahead:
                ahead, behind = behind, ahead
                self._ahead, self._behind = ahead, behind

    def on_remove(self, key: Key) -> None:
        if key in self._ahead:
            del self._ahead[key]
            self._wrap_if_empty()
        else:
            del self._behind[key]

    def __contains__(self, key: object) -> bool:
        return key in self._ahead or key in self._behind

    def __len__(self) -> int:
        return len(self._ahead) + len(self._behind)

    def keys(self) -> Iterable[Key]:
        return chain(self._behind.keys(), self._ahead.keys())
