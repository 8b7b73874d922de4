"""Prefix-cache eviction policies: the interface, LPC, and an adapter to the eviction registry.

A prefix cache keys KV blocks by chained hash. Its policies need more than (key, size):
SAECache routes by token type, session and position. So the simulator (and a real KV
store) tells a :class:`PrefixPolicy` about each request once (:meth:`PrefixPolicy.begin`,
with a :class:`RequestView`), then about each block by its index ``i`` into that view —
no per-block object is allocated on the hot path.

Event contract (same purity rules as :mod:`aicache.policies.base`: told ``now``, no clock,
no I/O, randomness only injected):

* ``begin(view, now)`` — a request arrived; ``view.hit_blocks`` is its cached prefix length.
* ``on_hit(key, i, now)`` — block ``i`` of the view is resident and was accessed.
* ``on_insert(key, tokens, i, now)`` — block ``i`` was stored.
* ``victim(now)`` — choose a resident key, forget it, return it.
* ``begin_decode(now)`` — the prompt's blocks were handled; the decode phase's follow.
* ``end(now)`` — the request's blocks were all handled.

For the decode phase the simulator sets ``view.decode = True`` and ``view.block_types``
to the decoded blocks' types, then calls ``begin_decode``; ``i`` then indexes those.

Invariant (tested): the keys a policy holds are exactly the keys the cache holds.
"""

from __future__ import annotations

import functools
import random
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Final

from aicache.compiled_abc import own_abc_caches
from aicache.kv.session_predictor import (ContinuationPredictor, LogNormalGaps,
                                          RequestFeatures, SessionTracker)
from aicache.native import mypyc_attr
from aicache.policies import make_eviction
from aicache.policies.base import EvictionPolicy
from aicache.registry import Registry

Key = Hashable
TOOL_REQUEST_TYPES: Final = frozenset({"tool", "search", "agent", "agentic", "function"})


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class RequestView:
    """The request-level facts a prefix policy may use (reused across requests)."""

    __slots__ = ("timestamp", "session_id", "turn", "request_type", "input_length",
                 "output_length", "block_tokens", "hash_ids", "block_types", "hit_blocks", "hit_tokens",
                 "decode", "session_type")

    def __init__(self) -> None:
        self.timestamp = 0.0
        self.session_id: Hashable | None = None
        self.turn: int | None = None
        self.request_type: str | None = None
        self.input_length = 0
        #: tokens the request decoded; known once it has finished, so a policy may read it
        #: in ``end`` only (it is set before ``begin`` for simplicity; 0 = unknown)
        self.output_length = 0
        self.block_tokens = 1
        self.hash_ids: list[int] = []
        self.block_types: list[str] = []
        self.hit_blocks = 0
        self.hit_tokens = 0
        self.decode = False
        #: Ground-truth label when the trace has one. Policies must not route on it (it
        #: is the answer the session predictor tries to learn); it is here for analysis.
        self.session_type: str | None = None

    @property
    def is_tool(self) -> bool:
        if self.request_type is not None and self.request_type.lower() in TOOL_REQUEST_TYPES:
            return True
        return "tool" in self.block_types


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class PrefixPolicy(ABC):
    """Keeps an order over resident blocks and names victims (see module docstring)."""

    # class-level defaults; the eviction adapter sets them per instance (one class, many
    # wrapped policies)
    name: str = ""
    needs_future: bool = False

    def __init__(self, capacity_tokens: int, *, rng: random.Random | None = None) -> None:
        self.capacity = capacity_tokens
        self.rng = rng if rng is not None else random.Random(0)
        self.view = RequestView()

    def begin(self, view: RequestView, now: float) -> None:
        self.view = view

    def begin_decode(self, now: float) -> None:
        """The view now describes the request's decode phase (see module docstring)."""

    def end(self, now: float) -> None:
        pass

    @abstractmethod
    def on_hit(self, key: Key, i: int, now: float) -> None: ...

    @abstractmethod
    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None: ...

    @abstractmethod
    def victim(self, now: float) -> Key: ...

    def set_next_access(self, next_vtime: int) -> None:
        """Told before each block event when :attr:`needs_future` (-1 = never)."""

    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class EvictionAdapter(PrefixPolicy):
    """Any registered :class:`EvictionPolicy` as a prefix policy (key = block, size = tokens).

    Block-level policies (LRU, LFU, S3-FIFO, SIEVE, Belady) see only (key, tokens, now),
    which is exactly the information they are defined on.
    """

    def __init__(self, capacity_tokens: int, *, policy: str, rng: random.Random | None = None,
                 **params: Any) -> None:
        super().__init__(capacity_tokens, rng=rng)
        self.inner: EvictionPolicy = make_eviction(policy, capacity_tokens, rng=self.rng, **params)
        self.name = policy
        self.needs_future = type(self.inner).needs_future
        self._sizes: dict[Key, int] = {}

    def on_hit(self, key: Key, i: int, now: float) -> None:
        self.inner.on_hit(key, self._sizes[key], now)

    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None:
        self._sizes[key] = tokens
        self.inner.on_insert(key, tokens, now)

    def victim(self, now: float) -> Key:
        key = self.inner.victim(now)
        del self._sizes[key]
        return key

    def set_next_access(self, next_vtime: int) -> None:
        self.inner.set_next_access(next_vtime)

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LRUPrefix(PrefixPolicy):
    """Plain LRU over blocks (vLLM's default order), kept here without the adapter hop so
    the overhead comparison measures LRU itself."""

    name = "lru"

    def __init__(self, capacity_tokens: int, *, rng: random.Random | None = None) -> None:
        super().__init__(capacity_tokens, rng=rng)
        self._order: OrderedDict[Key, None] = OrderedDict()

    def on_hit(self, key: Key, i: int, now: float) -> None:
        self._order.move_to_end(key)

    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None:
        self._order[key] = None

    def victim(self, now: float) -> Key:
        return self._order.popitem(last=False)[0]

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def __len__(self) -> int:
        return len(self._order)


def request_features(view: RequestView, gap: float | None,
                     is_tool: bool | None = None) -> RequestFeatures:
    """The predictor's raw inputs for ``view`` (``is_tool`` when the caller already knows
    it: ``view.is_tool`` scans the block types)."""
    n = max(1, len(view.hash_ids))
    return RequestFeatures(
        input_tokens=view.input_length,
        tool_request=view.is_tool if is_tool is None else is_tool,
        template_match=view.hit_blocks / n, system_match=view.hit_blocks > 0,
        turn=view.turn if view.turn is not None else (1 if gap is None else 2),
        gap_s=gap or 0.0, hit_tokens=view.hit_tokens)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class LPC(PrefixPolicy):
    """Learned Prefix Caching, reduced to its idea: among the least recently used blocks,
    evict those of conversations least likely to continue.

    The continuation probability comes from the same online classifier SAECache's session
    predictor uses (so the comparison isolates SAECache's other mechanisms). A victim is the
    block with the lowest predicted continuation among the ``window`` least recently used
    (oldest first on ties): O(window) per decision, and it keeps LRU's forgetting of stale
    sessions (a pure probability order would keep old high-probability blocks forever).
    """

    name = "lpc"

    def __init__(self, capacity_tokens: int, *, rng: random.Random | None = None,
                 window: int = 16) -> None:
        super().__init__(capacity_tokens, rng=rng)
        self.window = window
        self._order: OrderedDict[Key, float] = OrderedDict()
        self.gaps = LogNormalGaps()
        self.tracker = SessionTracker(ContinuationPredictor())
        self._p = 0.0
        self._anon = 0

    def begin(self, view: RequestView, now: float) -> None:
        super().begin(view, now)
        if view.session_id is None:
            self._anon += 1
        sid = view.session_id if view.session_id is not None else ("#req", self._anon)
        gap, _ = self.tracker.observe(sid, now, 0, True)
        if gap is not None:
            self.gaps.add(gap)
        self.tracker.expire(now, self.gaps.quantile(), True)
        x = self.tracker.predictor.vector(request_features(view, gap), view)
        self._p = self.tracker.predictor.predict(x)
        self.tracker.record(sid, now, 0, x)

    def on_hit(self, key: Key, i: int, now: float) -> None:
        self._order.move_to_end(key)
        self._order[key] = self._p

    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None:
        self._order[key] = self._p

    def victim(self, now: float) -> Key:
        best: Key = None
        best_p = 2.0
        for n, (key, p) in enumerate(self._order.items()):
            if n >= self.window:
                break
            if p < best_p:
                best, best_p = key, p
        del self._order[best]
        return best

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def __len__(self) -> int:
        return len(self._order)


#: Prefix-cache policies by name. Block-level baselines go through the eviction registry.
PREFIX_POLICIES: Registry[Callable[..., PrefixPolicy]] = Registry("prefix-cache policy")
# ``saecache`` is the variant that held on held-out traffic (never > 0.5 pt below LRU at
# 5-50% capacity on every trace measured, docs/results/saecache-default); the seed's
# formula stays one flag away as ``saecache-seed``, the engineered seed priority as
# ``saecache-priority`` (the default before), ``saecache-reuse`` is the default's old name.
PREFIX_POLICIES.register("saecache", "aicache.kv.saecache_reuse:SAECacheReuse",
                         "SAECache (default): leaves of the prefix tree evicted by class reuse probability "
                         "learned online with ghosts, LRU inside a class")
PREFIX_POLICIES.register("saecache-seed", "aicache.kv.saecache:SAECacheSeed",
                         "SAECache with the seed's priority exactly (own-type w, exact offset, no δ, decode → evict-first)")
PREFIX_POLICIES.register("saecache-priority", "aicache.kv.saecache:SAECache",
                         "the seed's priority α·w·p/Δt with the engineered departures (the default before saecache)")
PREFIX_POLICIES.register("saecache-duel", "aicache.kv.saecache:SAECacheDuel",
                         "saecache-priority that evicts in LRU order while a sampled miniature LRU beats a sampled "
                         "miniature saecache-priority")
PREFIX_POLICIES.register("saecache-reuse", "aicache.kv.saecache_reuse:SAECacheReuse",
                         "the same policy as saecache (its name before it became the default)")
PREFIX_POLICIES.register("lru", LRUPrefix, "least recently used (vLLM default)")
PREFIX_POLICIES.register("lpc", LPC, "LPC stand-in (SAECache's online continuation classifier over an LRU "
                         "window: of the 16 least recently used blocks, the least likely to continue goes)")
for _name, _help in (("lfu", "least frequently used"), ("s3fifo", "S3-FIFO (SOSP'23)"),
                     ("sieve", "SIEVE (NSDI'24)"), ("belady", "offline optimum bound (needs the future)")):
    # a partial, not a closure over the loop variable: mypyc (aicache.native) compiles this
    # module and cannot compile a lambda at module level that captures one
    PREFIX_POLICIES.register(_name, functools.partial(EvictionAdapter, policy=_name), _help)


def make_prefix_policy(name: str, capacity_tokens: int, *, seed: int = 0, **params: Any) -> PrefixPolicy:
    """Instantiate the prefix policy ``name`` with an injected ``random.Random(seed)``."""
    factory = PREFIX_POLICIES.get(name)
    return factory(capacity_tokens, rng=random.Random(seed), **params)


# compiled classes share one ABC cache unless given their own (aicache.compiled_abc)
own_abc_caches(PrefixPolicy, EvictionAdapter, LRUPrefix, LPC)
