"""vLLM host-DRAM ``CachePolicy`` classes ordered by aicache's DRAM eviction policies.

vLLM builds a policy as ``cls(cache_capacity=num_chunks)`` from
``"eviction_policy": "<ClassName>", "cache_policy_module_path":
"aicache.integrations.vllm.policy"``. Each class here wraps one policy of aicache's DRAM
registry (:data:`aicache.kv.eviction.DRAM_POLICIES`) — the same objects the simulator and
the tiered store drive — over one :class:`~aicache.kv.radix.RadixNode` per resident chunk:

* :class:`SessionAdaptiveHostPolicy` — SAECache (``saecache``); named apart from vLLM's
  own proposed ``SAECachePolicy``;
* :class:`SariaLRUHostPolicy` — SARIA's default DRAM order (``lru``), with vLLM's recency
  convention (a request's chunks are touched tail first, so a prefix head outlives its
  tail); it evicts exactly what vLLM's ``LRUCachePolicy`` evicts (tested in lockstep).

Request information. A client may send, in the request's ``kv_transfer_params``::

    {"aicache": {"session": "chat-42", "turn": 3, "tools": false,
                 "block_types": ["system", "system", "user", "assistant", ...]}}

``session`` (str) groups a conversation's turns, ``turn`` (int) is informational,
``block_types`` (one of SAECache's token types per chunk, in prompt order: ``system``,
``tool``, ``user``, ``assistant``, ``reasoning``, ``other``) and ``tools: true`` (an
agentic session) steer SAECache's routing. Without it, the session is inferred from the
request's first chunk (a conversation's turns share it) and every chunk is ``other``.

``evict(n, protected)`` is atomic: it collects ``n`` evictable victims (not protected,
no transfer in flight) in the policy's order before changing anything, and returns None
with no state change when there are fewer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from vllm.v1.kv_offload.base import OffloadKey, ReqContext
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus, order_request_keys

from aicache.kv.eviction import BlockEvictionPolicy, make_dram_policy
from aicache.kv.radix import RadixNode

PARAMS_KEY = "aicache"  #: the key of our object inside ``kv_transfer_params``


@dataclass(slots=True)
class RequestInfo:
    """What a request says (or what is inferred) about its chunks."""

    session: str | None = None
    turn: int = -1
    tools: bool = False
    block_types: Sequence[str] | None = None
    index: dict[OffloadKey, int] = field(default_factory=dict)

    @classmethod
    def of(cls, ctx: ReqContext | None) -> RequestInfo | None:
        """Parsed once per request (cached in the context's state)."""
        if ctx is None:
            return None
        info = ctx.get_state(cls)
        if info is None:
            info = cls()
            raw: Any = (ctx.kv_transfer_params or {}).get(PARAMS_KEY)
            if isinstance(raw, dict):
                s = raw.get("session")
                info.session = str(s) if s is not None else None
                t = raw.get("turn")
                info.turn = int(t) if isinstance(t, int) else -1
                info.tools = bool(raw.get("tools", False))
                bt = raw.get("block_types")
                if isinstance(bt, list) and all(isinstance(x, str) for x in bt):
                    info.block_types = bt
            ctx.set_state(info)
        return info

    def position(self, key: OffloadKey) -> int:
        """The chunk's index in the request, in the order the request first shows it."""
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.index)
        return i


class AicacheHostPolicy(CachePolicy):
    """A vLLM ``CachePolicy`` ordered by the DRAM policy named :attr:`dram_policy`."""

    dram_policy: ClassVar[str] = "lru"

    def __init__(self, cache_capacity: int, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(cache_capacity)
        self._clock = clock
        self._chunks: dict[OffloadKey, tuple[RadixNode, ChunkStatus]] = {}
        # the request about to insert each missed key (0.32's insert does not carry it)
        self._incoming: dict[OffloadKey, ReqContext] = {}
        self._order: BlockEvictionPolicy = self._new_order()

    def _new_order(self) -> BlockEvictionPolicy:
        return make_dram_policy(self.dram_policy, max(1, self.cache_capacity))

    # ------------------------------------------------------------------ annotation
    def _annotate(self, node: RadixNode, key: OffloadKey, ctx: ReqContext | None) -> None:
        info = RequestInfo.of(ctx)
        if info is None:
            return
        i = info.position(key)
        node.offset = i
        if info.session is None:  # inferred: turns of a conversation share the first chunk
            first = next(iter(info.index))
            info.session = f"prefix:{first.hex()[:16]}"
        if node.session is None:
            node.session, node.turn = info.session, info.turn
        types = info.block_types
        if types is not None and i < len(types):
            node.token_type = types[i]
        elif info.tools and node.token_type is None:
            node.token_type = "tool"

    # ------------------------------------------------------------------ CachePolicy
    def get(self, key: OffloadKey) -> ChunkStatus | None:
        e = self._chunks.get(key)
        return None if e is None else e[1]

    def on_store_miss(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        """vLLM reports a request's misses just before inserting them: remember which
        request each key belongs to (bounded: an allocation that fails inserts nothing)."""
        if len(self._incoming) > 2 * self.cache_capacity:
            self._incoming.clear()
        for key in keys:
            self._incoming[key] = req_context

    def insert(self, key: OffloadKey, chunk: ChunkStatus,
               req_context: ReqContext | None = None) -> None:
        # vLLM 0.33 passes req_context; 0.32 does not: on_store_miss said whose it is
        ctx = self._incoming.pop(key, None)
        node = RadixNode(key, None, tokens=1)
        self._annotate(node, key, req_context if req_context is not None else ctx)
        self._chunks[key] = (node, chunk)
        self._order.on_insert(node, self._clock())

    def remove(self, key: OffloadKey) -> None:
        e = self._chunks.pop(key, None)
        if e is not None:
            self._order.on_remove(e[0])

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        now = self._clock()
        for key in reversed(list(keys)):  # tail first: the prefix head ends most recent
            e = self._chunks.get(key)
            if e is not None:
                self._annotate(e[0], key, req_context)
                self._order.on_access(e[0], now)

    def on_request_finished(self, key_groups: Sequence[Sequence[OffloadKey]],
                            insertion_only_keys: set[OffloadKey],
                            reused_keys: set[OffloadKey], req_context: ReqContext) -> None:
        self.touch(order_request_keys(key_groups, req_context), req_context)

    def evict(self, n: int, protected: set[OffloadKey]
              ) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        if n <= 0:
            return []
        chunks = self._chunks
        victims: list[OffloadKey] = []
        for node in self._order.candidates(self._clock()):
            key = cast(OffloadKey, node.key)  # the nodes this policy inserts carry vLLM's keys
            if key in protected or chunks[key][1].ref_cnt != 0:
                continue
            victims.append(key)
            if len(victims) == n:
                break
        if len(victims) < n:
            return None  # atomic: nothing changed
        out: list[tuple[OffloadKey, ChunkStatus]] = []
        for key in victims:
            node, chunk = chunks.pop(key)
            self._order.on_remove(node)
            out.append((key, chunk))
        return out

    def clear(self) -> None:
        self._chunks.clear()
        self._incoming.clear()
        self._order = self._new_order()

    def __len__(self) -> int:
        return len(self._chunks)


class SariaLRUHostPolicy(AicacheHostPolicy):
    """SARIA's default DRAM order (least recently used) for vLLM's host tier."""

    dram_policy = "lru"


class SessionAdaptiveHostPolicy(AicacheHostPolicy):
    """SAECache's semantic-adaptive order for vLLM's host tier (module docstring)."""

    dram_policy = "saecache"
