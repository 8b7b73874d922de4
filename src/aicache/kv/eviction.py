"""Pluggable DRAM eviction order for the KV index (``--dram-policy NAME``).

Why a separate, tiny interface instead of :class:`aicache.policies.base.EvictionPolicy`:
the KV index must sometimes *skip* a candidate (pinned by a transfer, or protected from
promotion-induced eviction by SARIA's P_τ guard) and look at the next one, so a policy
exposes its order lazily through :meth:`BlockEvictionPolicy.candidates` instead of
committing to a single victim. It sees the whole :class:`~aicache.kv.radix.RadixNode`
(session id, turn, token type, offset in the prompt, last access, E/R counters), which
is what semantic policies such as SAECache need.

Contract (the KV index is the only caller):
* ``on_insert(node, now)`` — ``node`` got a DRAM copy; ``on_access(node, now)`` — a
  request read or re-stored it; ``on_remove(node)`` — its DRAM copy is gone (evicted by
  the index after the policy offered it, or dropped for another reason).
* ``candidates(now)`` — resident nodes, best victim first. The index stops iterating
  before it changes anything, so an implementation may iterate its live structure.
* The set of nodes a policy holds equals the set of nodes with a DRAM copy, always.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, ClassVar

from aicache.kv.radix import RadixNode
from aicache.registry import Registry


class BlockEvictionPolicy(ABC):
    """Orders the DRAM-resident blocks of a KV index. ``params`` are policy-specific."""

    name: ClassVar[str] = ""

    def __init__(self, capacity_blocks: int, **params: Any) -> None:
        if params:
            raise TypeError(f"{type(self).__name__} got unknown parameters: {sorted(params)}")
        self.capacity_blocks = capacity_blocks

    @abstractmethod
    def on_insert(self, node: RadixNode, now: float) -> None: ...

    @abstractmethod
    def on_access(self, node: RadixNode, now: float) -> None: ...

    @abstractmethod
    def on_remove(self, node: RadixNode) -> None: ...

    @abstractmethod
    def candidates(self, now: float) -> Iterator[RadixNode]: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, node: object) -> bool: ...


class LRUBlocks(BlockEvictionPolicy):
    """Least recently used first (LMCache's default local-CPU eviction)."""

    name = "lru"
    __slots__ = ("_od",)

    def __init__(self, capacity_blocks: int, **params: Any) -> None:
        super().__init__(capacity_blocks, **params)
        self._od: OrderedDict[RadixNode, None] = OrderedDict()

    def on_insert(self, node: RadixNode, now: float) -> None:
        self._od[node] = None
        self._od.move_to_end(node)

    def on_access(self, node: RadixNode, now: float) -> None:
        self._od.move_to_end(node)

    def on_remove(self, node: RadixNode) -> None:
        self._od.pop(node, None)

    def candidates(self, now: float) -> Iterator[RadixNode]:
        return iter(self._od)

    def __len__(self) -> int:
        return len(self._od)

    def __contains__(self, node: object) -> bool:
        return node in self._od


class FIFOBlocks(LRUBlocks):
    """Insertion order; accesses do not refresh a block."""

    name = "fifo"

    def on_access(self, node: RadixNode, now: float) -> None:
        pass


#: name -> BlockEvictionPolicy subclass. SAECache registers itself here as ``saecache``.
DRAM_POLICIES: Registry[type[BlockEvictionPolicy]] = Registry("DRAM eviction policy")
DRAM_POLICIES.register("lru", "aicache.kv.eviction:LRUBlocks", "least recently used")
DRAM_POLICIES.register("fifo", "aicache.kv.eviction:FIFOBlocks", "first in, first out")
DRAM_POLICIES.register("saecache", "aicache.kv.saecache_dram:SAECacheBlocks", "SAECache semantic-adaptive order")


def make_dram_policy(name: str, capacity_blocks: int, **params: Any) -> BlockEvictionPolicy:
    return DRAM_POLICIES.get(name)(capacity_blocks, **params)
