"""Unified context metadata: a radix tree of block-aligned prefixes (``docs/design/saria.md``).

Why a tree and not a dict of block hashes: SARIA's decisions are about *prefixes*. A
request can only reuse a block if every block before it is reusable too; a transfer must
pin the whole path up to the root; metadata is reclaimed leaf-first so that a prefix never
loses its middle. Keys are namespaced by ``(model, adapter)`` so two models never share KV.

Shape. One :class:`RadixNode` per *cache block* (``block_tokens`` tokens — the unit of
SSD admission, DRAM eviction and transfer in LMCache/SARIA). A node's key is the block's
hash; a child is found by ``parent.children[hash]``, so ids need not be globally unique
(two sessions may reuse a hash value under different parents). Edges are exactly one
block long — the page-granular radix tree of SGLang with ``page_size = block_tokens`` —
so a partial match of a path *splits* at a block boundary by branching there; there is
never a partially matched edge to cut.

Invariants
* Lookups never create nodes (``children`` is a plain dict, created lazily, never a
  ``defaultdict``): :meth:`RadixTree.match` is read-only.
* ``pins`` of a node = number of pinned paths through it; pinning walks to the root, so
  pinning the deepest node of a plan protects the whole prefix. A pinned node is never
  evicted by the index and never reclaimed here.
* Locations are per physical object (:class:`KVObject`): full-attention KV and, at a
  hybrid model's checkpoint boundaries, the recurrent checkpoint. Tiers are a
  :class:`Tier` bit-set; ``0`` means "no copy anywhere".
* Metadata outlives residency: a node with no copy keeps ``E``/``R``/``t_reuse`` until a
  whole ``window`` passes without reuse or recomputation (``t_touch``), then
  :meth:`RadixTree.reclaim` removes it — but only leaf-first, and never while pinned.
  Non-resident nodes sit in an intrusive list ordered by the time they became candidates;
  a node is reclaimed no earlier than ``window`` after its last touch.
* A namespace's root is a node whose ``key`` is the namespace (and whose ``parent`` is
  None), so a block's namespace is found by walking up (:meth:`RadixTree.namespace_of`).
* Logical time is always passed in (``now``); nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from enum import IntEnum, IntFlag
from typing import Any

Namespace = Hashable  #: e.g. ``(model_name, adapter_name)``


class Tier(IntFlag):
    """Where a copy of an object lives. A bit-set: an object may be in several tiers."""

    NONE = 0
    HBM = 1
    DRAM = 2
    SSD = 4


class KVObject(IntEnum):
    """The physical objects of one context node."""

    KV = 0          #: full-attention K/V of the block's tokens
    CHECKPOINT = 1  #: recurrent (linear-attention) state at the block's end boundary


class RadixNode:
    """One block of a context prefix: its key, tree links, SARIA counters and locations.

    Counters (the admission evidence of ``docs/design/saria.md``): ``E`` = times selected
    at a DRAM eviction boundary; ``R`` = request reuse count; ``t_reuse`` = last time a request reused it *or it was (re)stored*
    (the recency P_τ protects); ``t_touch`` = last reuse or recomputation (metadata window).
    Attributes an eviction policy may read: ``session``, ``turn``, ``token_type``,
    ``offset`` (token offset of the block in its prompt), ``t_access`` (last DRAM access).
    ``policy_slot`` is an opaque handle the DRAM eviction policy may use.
    """

    __slots__ = (
        "key", "parent", "children", "depth", "tokens", "has_ckpt",
        "kv_loc", "ck_loc", "E", "R", "t_reuse", "t_touch", "t_access", "pins",
        "session", "turn", "token_type", "offset", "policy_slot",
        "_prev", "_next", "_listed", "_parked", "__weakref__",
    )

    def __init__(self, key: Hashable, parent: RadixNode | None, tokens: int = 0,
                 has_ckpt: bool = False) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[Hashable, RadixNode] | None = None
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.tokens = tokens
        self.has_ckpt = has_ckpt
        self.kv_loc = 0
        self.ck_loc = 0
        self.E = 0
        self.R = 0
        self.t_reuse = 0.0
        self.t_touch = 0.0
        self.t_access = 0.0
        self.pins = 0
        self.session: str | None = None
        self.turn = -1
        self.token_type: str | None = None
        self.offset = 0
        self.policy_slot: Any = None
        self._prev: RadixNode | None = None
        self._next: RadixNode | None = None
        self._listed = False
        self._parked = False

    @property
    def resident(self) -> bool:
        """True when any object of the node has a copy in any tier."""
        return bool(self.kv_loc or self.ck_loc)

    def path(self) -> list[Hashable]:
        """Block keys from the root to this node."""
        out: list[Hashable] = []
        n: RadixNode | None = self
        while n is not None and n.parent is not None:
            out.append(n.key)
            n = n.parent
        out.reverse()
        return out

    def __repr__(self) -> str:
        return (f"RadixNode(key={self.key!r}, depth={self.depth}, kv={Tier(self.kv_loc)!r}, "
                f"E={self.E}, R={self.R}, pins={self.pins})")


class RadixTree:
    """Namespaced radix tree of block prefixes with pinning and windowed reclamation.

    ``window`` is the metadata sliding window in seconds of logical time.
    """

    __slots__ = ("window", "_roots", "_head", "_tail", "_size", "reclaimed")

    def __init__(self, window: float = 3600.0) -> None:
        if window <= 0:
            raise ValueError("metadata window must be positive")
        self.window = window
        self._roots: dict[Namespace, RadixNode] = {}
        self._head: RadixNode | None = None
        self._tail: RadixNode | None = None
        self._size = 0
        self.reclaimed = 0

    # -- structure -------------------------------------------------------------------
    def root(self, ns: Namespace) -> RadixNode | None:
        return self._roots.get(ns)

    def match(self, ns: Namespace, keys: Sequence[Hashable]) -> list[RadixNode]:
        """Existing nodes along ``keys`` from the root (the longest known prefix). Read-only."""
        out: list[RadixNode] = []
        node = self._roots.get(ns)
        if node is None:
            return out
        append = out.append
        for k in keys:
            ch = node.children
            if ch is None:
                break
            nxt = ch.get(k)
            if nxt is None:
                break
            append(nxt)
            node = nxt
        return out

    def insert(self, ns: Namespace, keys: Sequence[Hashable], now: float,
               tokens: Sequence[int] | None = None,
               ckpt: Sequence[bool] | None = None,
               known: Sequence[RadixNode] = ()) -> list[RadixNode]:
        """Nodes for every key of the path, creating missing ones (metadata only, no copy).

        ``tokens[i]`` / ``ckpt[i]`` give a new node's token count and whether it ends at a
        checkpoint boundary. Every node of the path is touched at ``now``. ``known``: what
        :meth:`match` just returned for these keys (nothing changed the tree since); the
        walk resumes after it, so a caller that matched first walks each key once.
        """
        out: list[RadixNode] = list(known)
        if out:
            node = out[-1]
        else:
            root = self._roots.get(ns)
            if root is None:
                root = self._roots[ns] = RadixNode(ns, None)
            node = root
        for i in range(len(out), len(keys)):
            k = keys[i]
            ch = node.children
            if ch is None:
                ch = node.children = {}
            nxt = ch.get(k)
            if nxt is None:
                nxt = RadixNode(k, node, tokens[i] if tokens is not None else 0,
                                bool(ckpt[i]) if ckpt is not None else False)
                nxt.t_reuse = now
                ch[k] = nxt
                self._size += 1
                self._list_append(nxt)
            out.append(nxt)
            node = nxt
        self.touch(out, now)
        return out

    def attach(self, ns: Namespace, node: RadixNode) -> RadixNode:
        """Link a detached node (no parent, no children: e.g. counters kept for a block
        before it is stored, or a node reclaimed earlier) under ``ns``'s root as block
        ``node.key``, and return the node now there. A node of that key already there
        that holds no copy, no pin and no child is unlinked first (``node``'s counters
        supersede its metadata); one that does is kept and returned instead."""
        root = self._roots.get(ns)
        if root is None:
            root = self._roots[ns] = RadixNode(ns, None)
        if node.parent is root:
            return node
        if node.parent is not None or node.children:
            raise ValueError(f"attach: {node!r} is already in a tree or has children")
        ch = root.children
        if ch is None:
            ch = root.children = {}
        old = ch.get(node.key)
        if old is not None:
            if old.resident or old.pins or old.children:
                return old
            if old._listed:
                self._list_unlink(old)
            old._parked = False
            del ch[old.key]
            old.parent = None
            self._size -= 1
        node.parent = root
        node.depth = 1
        node._parked = False
        ch[node.key] = node
        self._size += 1
        if not node.resident and not node._listed:
            self._list_append(node)
        return node

    def touch(self, path: Sequence[RadixNode], now: float) -> None:
        """Mark a path reused/recomputed at ``now`` (restarts its metadata window)."""
        for n in reversed(path):  # leaf first: parents end up later in the list
            n.t_touch = now
            if n._listed:
                self._list_unlink(n)
                self._list_append(n)
            elif n._parked:
                n._parked = False
                self._list_append(n)

    # -- pinning ---------------------------------------------------------------------
    @staticmethod
    def pin(node: RadixNode) -> None:
        """Pin ``node`` and every ancestor (a transfer in progress reads this prefix)."""
        n: RadixNode | None = node
        while n is not None:
            n.pins += 1
            n = n.parent

    def unpin(self, node: RadixNode) -> None:
        n: RadixNode | None = node
        while n is not None:
            if n.pins <= 0:
                raise ValueError(f"unpin of an unpinned node {n!r}")
            n.pins -= 1
            if n.pins == 0 and n._parked and n.parent is not None:
                n._parked = False
                self._list_append(n)
            n = n.parent

    # -- locations -------------------------------------------------------------------
    def set_location(self, node: RadixNode, obj: KVObject, tier: Tier, present: bool) -> None:
        """Add or remove a copy of ``obj`` in ``tier``; keeps the reclaim list current."""
        was = node.kv_loc or node.ck_loc
        t = int(tier)  # plain ints: IntFlag arithmetic runs the enum machinery per operation
        if obj is KVObject.KV:
            node.kv_loc = (node.kv_loc | t) if present else (node.kv_loc & ~t)
        else:
            node.ck_loc = (node.ck_loc | t) if present else (node.ck_loc & ~t)
        now_res = node.kv_loc or node.ck_loc
        if now_res and not was:
            if node._listed:
                self._list_unlink(node)
            node._parked = False
        elif was and not now_res and not node._listed:
            node._parked = False
            self._list_append(node)

    # -- reclamation -----------------------------------------------------------------
    def reclaim(self, now: float) -> int:
        """Remove metadata of nodes idle for a whole window with no copy; returns count."""
        limit = now - self.window
        n = 0
        while self._head is not None and self._head.t_touch <= limit:
            node = self._head
            self._list_unlink(node)
            if node.pins or node.children:
                node._parked = True  # re-listed when its last child goes or it is unpinned
                continue
            n += self._remove(node, limit)
        self.reclaimed += n
        return n

    def _remove(self, node: RadixNode, limit: float) -> int:
        """Unlink ``node``; then a parked parent left childless is reclaimed too (if old
        enough) or listed again."""
        count = 0
        while True:
            parent = node.parent
            assert parent is not None and parent.children is not None
            del parent.children[node.key]
            if not parent.children:
                parent.children = None
            node.parent = None
            self._size -= 1
            count += 1
            if (parent.parent is None or not parent._parked or parent.children
                    or parent.pins or parent.kv_loc or parent.ck_loc):
                return count
            parent._parked = False
            if parent.t_touch > limit:
                self._list_append(parent)
                return count
            node = parent

    # -- intrusive list of non-resident nodes ---------------------------------------
    def _list_append(self, n: RadixNode) -> None:
        n._prev = self._tail
        n._next = None
        if self._tail is None:
            self._head = n
        else:
            self._tail._next = n
        self._tail = n
        n._listed = True

    def _list_unlink(self, n: RadixNode) -> None:
        if n._prev is None:
            self._head = n._next
        else:
            n._prev._next = n._next
        if n._next is None:
            self._tail = n._prev
        else:
            n._next._prev = n._prev
        n._prev = n._next = None
        n._listed = False

    # -- inspection ------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of block nodes (roots excluded)."""
        return self._size

    def namespaces(self) -> list[Namespace]:
        return list(self._roots)

    @staticmethod
    def namespace_of(node: RadixNode) -> Namespace | None:
        """The namespace of ``node``'s tree (its root's key); None once ``node`` or an
        ancestor was reclaimed (unlinked: the walk ends at a block, depth > 0)."""
        n = node
        while n.parent is not None:
            n = n.parent
        return n.key if n.depth == 0 else None

    def nodes(self, ns: Namespace | None = None) -> Iterator[RadixNode]:
        """Every block node (depth-first), of one namespace or all."""
        roots = [self._roots[ns]] if ns is not None and ns in self._roots else (
            [] if ns is not None else list(self._roots.values()))
        stack = list(roots)
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            if n.parent is not None:
                yield n
