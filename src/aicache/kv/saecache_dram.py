"""SAECache as the DRAM eviction order of the tiered KV index (``--dram-policy saecache``).

The KV index (:mod:`aicache.kv.saria`) reports block events one radix node at a time and
asks for victims lazily (:meth:`candidates`). A node carries the session and turn of the
request that *created* it, its token type and its token offset — not the identity of the
request touching it now. So this driver does not replay SAECache's per-request context;
it sets the routing context per node:

* session = the node's creator session; multi-turn when it has one (the index only keeps
  blocks of sessions it serves; there is no first-request signal here); a session is
  agentic from its first tool block on (sticky), else chat;
* inter-request gaps per session are learned from the times the session's new blocks are
  stored (one store per request), feeding the same per-queue log-normal MLE;
* every ``on_access`` is a reuse (hit tokens for α, type-weight feedback); ``on_remove``
  after an offered candidate is an eviction (ghost list, type-weight feedback);
* parameters move every ``update_every`` stores, as they do per request in the simulator.

Candidates are SAECache's victim order (:meth:`SAECache.order`), lazily. They are not
restricted to leaves (SGLang's rule): on agent sessions most DRAM nodes are interior, so a
scan for a leaf would make each eviction O(resident).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from aicache.kv.eviction import BlockEvictionPolicy
from aicache.kv.radix import RadixNode
from aicache.kv.saecache import Queue, SAECache


class SAECacheBlocks(BlockEvictionPolicy):
    """SAECache ordering DRAM-resident radix nodes (see module docstring)."""

    name = "saecache"

    def __init__(self, capacity_blocks: int, **params: Any) -> None:
        super().__init__(capacity_blocks)
        # Token-type weights are off unless asked for: the index touches a path root first,
        # so SAECache's prefix inheritance (which needs tail-first touches) is unavailable
        # and type weights would evict interior blocks before their descendants.
        params.setdefault("token_types", False)
        self.sae = SAECache(capacity_blocks, **params)
        v = self.sae.view
        v.block_types, v.hash_ids = [], []
        v.hit_blocks = 1 << 62  # every on_access is a request reusing the block
        self._last_store: dict[object, float] = {}
        self._session_q: dict[object, Queue] = {}
        self._stores = 0

    def _queue(self, node: RadixNode) -> Queue:
        """A session's queue: agentic from the first tool block it stores on (sticky), so
        one session's prefix never straddles the chat and agentic queues."""
        s = node.session
        q = self._session_q.get(s)
        if q is None or (q is Queue.CHAT and node.token_type == "tool"):
            q = Queue.AGENTIC if node.token_type == "tool" else Queue.CHAT
            if s is not None:
                self._session_q[s] = q
        return q

    def _context(self, node: RadixNode) -> None:
        self.sae.set_context(node.session, node.session is not None, self._queue(node))

    def _touch(self, node: RadixNode, now: float) -> None:
        self._context(node)
        tokens = max(1, int(node.tokens))
        self.sae.touch(node, tokens, node.token_type, int(node.offset) // tokens, now)

    def on_insert(self, node: RadixNode, now: float) -> None:
        sae = self.sae
        s = node.session
        if s is not None and sae.p.learn:
            last = self._last_store.get(s)
            if last is not None and now > last:
                sae.gaps[self._queue(node)].add(now - last)
            self._last_store[s] = now
        self._touch(node, now)
        self._stores += 1
        if sae.p.learn and self._stores % (16 * sae.p.update_every) == 0:
            sae.end(now)
            sae._learn_boundary()

    def on_access(self, node: RadixNode, now: float) -> None:
        self._touch(node, now)

    def on_remove(self, node: RadixNode) -> None:
        self.sae.forget(node)

    def candidates(self, now: float) -> Iterator[RadixNode]:
        # the keys this adapter gives SAECache are the nodes themselves (see _touch)
        return cast(Iterator[RadixNode], self.sae.order(now))

    def __len__(self) -> int:
        return len(self.sae)

    def __contains__(self, node: object) -> bool:
        return node in self.sae
