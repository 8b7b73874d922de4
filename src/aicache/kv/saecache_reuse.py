"""SAECache-Reuse: prefix eviction by a reuse probability learned online per block class.
Registered as ``saecache``, the default SAECache (``saecache-reuse`` is its old name).

``saecache-priority`` (:mod:`aicache.kv.saecache`) scores a block by ``α·w·S(Δt)/(Δt+δ)``; inside one queue and token type that is
LRU's order, and its queues and type weights are set by rules and by reuse averaged over
whole queues, so what it learns barely shows in the victim order. Here every block has a
class (what a server knows of it, below), every class a learned probability ``p_c`` that
a block of it is referenced again (before the cache would have forgotten it), and the
evicted block is the evictable one with the lowest

    V(b) = p_c(b) / (age_b + 1)

the expected reuses per event of waiting, with ``age`` in block events since its last
touch (logical, so nothing depends on a trace's clock). A class twice as likely to be
reused is kept twice as long; within a class V is LRU's order.

* **Only leaves are evicted.** A block serves a hit only while every block before it in the
  prompt is cached; evicting an inner block strands its cached descendants. Eviction takes
  a resident block with no resident child (SGLang's evictable-leaf rule), so a chain is
  given up from its tail. Links come from the touch order: the simulator touches a
  request's blocks tail first, so the block touched just before a block, in the same
  request phase, is its child.
* **Classes**, fixed at a block's last touch: its hits so far (0, 1, 2+); whether it was
  the last block of its prompt (a partial tail, whose hash changes when a conversation
  grows); its token-type group (system/tool, reasoning, decode, the rest: the seed's
  semantic factor); its conversation's turn (the session's turn where the trace names
  sessions; otherwise 1 + the requests already seen to start with the same first block,
  which is what a prefix cache knows of a continuation), capped at 3+; and, once the request
  has finished (:meth:`end`), its prompt length (1, < 16, ≥ 16 blocks) and decoded length
  (≤ 1/8, ≤ 1, > 1 block): how a conversation's request looks says whether it goes on.
  Before ``end`` the output group is "unknown".
* **Learning from the stream only.** An evicted block is remembered as a ghost (its class
  and last touch) for ``ghost_factor`` resident blocks' worth of evictions. A residency
  interval ends in a hit or an eviction; an eviction counts as a reuse after all when its
  ghost is requested again (the miss a larger cache would have hit), so ``p_c = (hits_c +
  ghost hits_c + k·p̄) / (hits_c + evictions_c + k)`` with ``k = prior`` pseudo-intervals
  of the pooled rate ``p̄``. Counters decay by ``decay`` at each
  reconfiguration, every cache's worth of block events (at least ``min_interval``); the
  order uses the ``p`` of the last reconfiguration, so it changes only there. Until the
  first, every class has the same ``p``: LRU over leaves.
* **Export and freeze** (the mismatch experiment): :meth:`export_state` copies what it has
  learned (the ``p_c`` the order uses and the decayed counters) as a :class:`ReuseState`; a
  policy built with ``state=`` starts from it, and with ``learn=False`` as well it neither
  counts nor reconfigures, so its order is the imported ``p_c`` for the whole replay (the
  same rule with constant ``p_c``) and its export is the imported state.

Invariant (tested against a brute force): the victim is the minimum of ``(V, last touch)``
over every evictable block (last touches are distinct event numbers). Within a class V
falls with age, so the class's least recently touched leaf is its minimum: each class keeps
a heap of its leaves by last touch, and a victim costs one heap look-up per non-empty
class. Deterministic: no random choice.

Hot path (compiled with mypyc, :mod:`aicache.native`; ``benchmarks/saecache_overhead.py
--policy saecache`` measures it): a class is one object holding its heap, leaf count,
``p_c`` and counters (unboxed floats, so counting an outcome allocates nothing); heap
entries carry the node, so checking a class's top needs no table look-up; a victim scans
only the classes that have a leaf; the evicted node is its own ghost record. A block that
gains a child in the same event never enters its class's heap (leaves are decided after
linking), and a leaf touched again in its class gets a newer entry, the old one left stale.
``tests/kv/test_saecache_reuse.py`` checks every victim and every learned ``p_c`` against a
plain reference that keeps none of this bookkeeping.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass, field
from heapq import heappop, heappush
from typing import Any, Final

from aicache.compiled_abc import own_abc_caches
from aicache.kv.prefix_policies import PrefixPolicy, RequestView
from aicache.native import mypyc_attr

Key = Hashable

_REFS: Final = 3  #: hits so far: 0, 1, 2+
_TYPES: Final = {"system": 0, "tool": 0, "reasoning": 1, "decode": 2}  #: other types → group 3
_TG: Final = 4
_TURNS: Final = 3  #: turn 1, 2, 3+
_SIZES: Final = 3 * 4  #: prompt (1, < 16, ≥ 16 blocks) × output (unknown, ≤ 1/8, ≤ 1, > 1 block)
NCLASS: Final = _REFS * 2 * _TG * _TURNS * _SIZES


def class_of(refs: int, last: bool, type_group: int, turn: int, size_group: int) -> int:
    """Dense class id of the features in the module docstring (``turn`` ≥ 1)."""
    t = turn - 1 if turn <= _TURNS else _TURNS - 1
    r = refs if refs < _REFS else _REFS - 1
    return (((r * 2 + last) * _TG + type_group) * _TURNS + t) * _SIZES + size_group


def size_group(prompt_blocks: int, output_tokens: int | None, block_tokens: int) -> int:
    """Prompt-length × output-length group; ``output_tokens`` None = not known yet."""
    pg = 0 if prompt_blocks <= 1 else (1 if prompt_blocks < 16 else 2)
    if output_tokens is None:
        og = 0
    elif output_tokens * 8 <= block_tokens:
        og = 1
    else:
        og = 2 if output_tokens <= block_tokens else 3
    return pg * 4 + og


@dataclass(slots=True)
class ReuseParams:
    """Knobs; generic defaults, none fitted to a workload."""

    ghost_factor: float = 8.0  #: evicted blocks remembered, in resident blocks
    prior: float = 4.0  #: pseudo-intervals of the pooled reuse rate in each class
    decay: float = 0.9  #: counter decay per reconfiguration
    min_interval: int = 4096  #: reconfiguration interval floor, in block events
    output_length: bool = True  #: use the finished request's lengths (False: ablation)
    learn: bool = True  #: False: ``p_c`` and counters stay as given (frozen)


@dataclass
class ReuseState:
    """What the policy learns, per class: the ``p_c`` its order uses and the decayed
    counters they are estimated from (the module docstring). Exportable, so a frozen
    policy can be fitted on one trace and replayed on another."""

    prob: list[float] = field(default_factory=lambda: [0.5] * NCLASS)
    reused: list[float] = field(default_factory=lambda: [0.0] * NCLASS)
    ended: list[float] = field(default_factory=lambda: [0.0] * NCLASS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Node:
    """One block: key, class, last touch, hits, parent, resident-child count, and whether
    it is in its class's leaf set. A resident block is a leaf exactly when it has no
    resident child (``leaf == (kids == 0)``); an evicted one keeps its fields unchanged
    (``leaf`` False) and is its own ghost record."""

    __slots__ = ("key", "last", "cls", "refs", "parent", "kids", "leaf")

    def __init__(self, key: Key) -> None:
        self.key = key
        self.last = 0
        self.cls = 0
        self.refs = 0
        self.parent: Key = None
        self.kids = 0
        self.leaf = False


class _Class:
    """One class: its leaves by last touch, its ``p_c`` and its decayed outcome counters.

    ``heap`` holds ``(last touch, node)`` entries, stale ones (a node touched again,
    reclassed, no longer a leaf or evicted) dropped when they reach the top; ``n`` counts
    the valid ones. An entry is valid when its node is a leaf of this class with that last
    touch; last touches are distinct event numbers, so two entries with equal touches hold
    the same node and the heap never compares nodes."""

    __slots__ = ("cid", "heap", "n", "prob", "reused", "ended")

    def __init__(self, cid: int) -> None:
        self.cid = cid
        self.heap: list[tuple[int, _Node]] = []
        self.n = 0
        self.prob = 0.5
        self.reused = 0.0  #: residency intervals that ended in a reuse (hit or ghost hit)
        self.ended = 0.0  #: residency intervals that ended (hit or eviction)


# subclassable from Python: the tests' brute-force check wraps ``victim``
@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class SAECacheReuse(PrefixPolicy):
    """Class reuse probability first, LRU inside a class, leaves only (module docstring)."""

    name = "saecache"

    def __init__(self, capacity_tokens: int, *, rng: random.Random | None = None,
                 params: ReuseParams | None = None,
                 state: ReuseState | Mapping[str, Any] | None = None, **overrides: Any) -> None:
        super().__init__(capacity_tokens, rng=rng)
        p = params or ReuseParams()
        if overrides:
            p = ReuseParams(**{**asdict(p), **overrides})
        if p.ghost_factor <= 0 or p.prior <= 0 or not 0.0 < p.decay <= 1.0 or p.min_interval < 1:
            raise ValueError(f"bad ReuseParams {p!r}")
        self.p = p
        self._nodes: dict[Key, _Node] = {}
        self._classes = [_Class(c) for c in range(NCLASS)]
        #: the classes with a valid leaf (``n > 0``), the only ones a victim looks at
        self._active: dict[int, _Class] = {}
        #: evicted blocks, oldest first; a ghost's record is its evicted node
        self._ghost: OrderedDict[Key, _Node] = OrderedDict()
        self.prob = [0.5] * NCLASS  #: p_c used by the order until the next reconfiguration
        self._learn = p.learn
        if state is not None:
            st = state if isinstance(state, ReuseState) else ReuseState(**dict(state))
            if not len(st.prob) == len(st.reused) == len(st.ended) == NCLASS:
                raise ValueError(f"ReuseState needs {NCLASS} values per field; give one that "
                                 "export_state() of this version wrote")
            for cl in self._classes:
                c = cl.cid
                cl.prob, cl.reused, cl.ended = float(st.prob[c]), float(st.reused[c]), float(st.ended[c])
            self.prob = [cl.prob for cl in self._classes]
        self._t = 0  # logical clock: block events
        self._next_cfg = p.min_interval
        self._prev: _Node | None = None  # block touched just before, in this request phase
        self._droot: Key = None  # prompt block the decoded chain hangs under
        self._t0 = 0  # clock at the request's start
        self._turn = 1
        self._size_g = 0
        self._last_i = -1
        self._types: list[str] = []

    # ---------------------------------------------------------------- request context
    def begin(self, view: RequestView, now: float) -> None:
        super().begin(view, now)
        self._prev = None
        self._t0 = self._t
        if view.session_id is not None:
            self._turn = view.turn or 1
        else:
            self._turn = 1 + self.root_requests(view.hash_ids[0]) if view.hash_ids else 1
        self._size_g = size_group(len(view.hash_ids), None, view.block_tokens)
        self._types = view.block_types
        self._last_i = len(view.hash_ids) - 1

    def root_requests(self, root: Key) -> int:
        """Earlier requests known to have started with block ``root`` (its references while
        resident or remembered as a ghost; 0 when forgotten)."""
        nd = self._nodes.get(root)
        if nd is not None:
            return nd.refs + 1
        g = self._ghost.get(root)
        return g.refs + 1 if g is not None else 0

    def begin_decode(self, now: float) -> None:
        v = self.view
        first = v.input_length // max(1, v.block_tokens)
        # the decoded chain hangs under the prompt's last full block (the simulator's rule)
        self._droot = v.hash_ids[first - 1] if 0 < first <= len(v.hash_ids) else None
        self._prev = None
        self._types = v.block_types
        self._last_i = len(self._types) - 1

    def end(self, now: float) -> None:
        """The request finished: its prompt blocks touched by it take the class with its
        output length known (a leaf among them goes to the back of its new class: it was just touched)."""
        if self._droot is not None:  # link the decoded chain's first block to its root
            root = self._nodes.get(self._droot)
            if root is not None and self._prev is not None:
                self._adopt(self._droot, root)
                if root.leaf and root.kids:
                    self._unleaf(root)
            self._droot = None
        v = self.view
        if not self.p.output_length or not v.hash_ids or v.output_length <= 0:
            return  # 0: the driver does not know the output length
        sg = size_group(len(v.hash_ids), v.output_length, v.block_tokens)
        if sg == self._size_g:
            return
        d = sg - self._size_g
        nodes, t0 = self._nodes, self._t0
        for k in v.hash_ids:
            nd = nodes.get(k)
            if nd is None or nd.last < t0:
                continue
            if nd.leaf:
                self._unleaf(nd)
                nd.cls += d
                self._push(nd)
            else:
                nd.cls += d

    def _class(self, refs: int, i: int) -> int:
        ty = self._types
        tg = _TYPES.get(ty[i], 3) if i < len(ty) else 3
        return class_of(refs, i == self._last_i, tg, self._turn, self._size_g)

    # ---------------------------------------------------------------- leaf heaps
    def _push(self, nd: _Node) -> None:
        """``nd`` is an evictable leaf of class ``nd.cls`` with last touch ``nd.last``."""
        cl = self._classes[nd.cls]
        heappush(cl.heap, (nd.last, nd))
        if cl.n == 0:
            self._active[cl.cid] = cl
        cl.n += 1
        nd.leaf = True

    def _unleaf(self, nd: _Node) -> None:
        """``nd`` leaves its class's leaf set (its heap entry goes stale)."""
        cl = self._classes[nd.cls]
        cl.n -= 1
        if cl.n == 0:
            del self._active[cl.cid]
            cl.heap.clear()
        nd.leaf = False

    def _head(self, cl: _Class) -> tuple[int, _Node]:
        """The least recently touched valid leaf of ``cl`` (stale entries dropped)."""
        h = cl.heap
        while True:
            last, nd = h[0]
            if nd.leaf and nd.cls == cl.cid and nd.last == last:
                return last, nd
            heappop(h)

    def _adopt(self, key: Key, nd: _Node) -> None:
        """The block touched just before ``key`` in this phase becomes its child, unless it
        has a parent already (``nd.kids`` counts it; the caller updates ``nd``'s leaf state)."""
        c = self._prev
        self._prev = nd
        if c is None or c.parent is not None:
            return
        c.parent = key
        nd.kids += 1

    # ---------------------------------------------------------------- learning
    def _tick(self) -> None:
        self._t += 1
        if self._t >= self._next_cfg:
            self.reconfigure()

    def reconfigure(self) -> None:
        """Move the learned ``p_c`` into the order, then decay the counters (frozen: nothing
        changes)."""
        if not self._learn:
            self._next_cfg = self._t + max(self.p.min_interval, len(self._nodes))
            return
        classes = self._classes
        tr = tn = 0.0
        for cl in classes:  # summed in class order, the same on every path
            tr += cl.reused
            tn += cl.ended
        if tn > 0:
            pool = tr / tn
            k = self.p.prior
            for cl in classes:
                cl.prob = (cl.reused + k * pool) / (cl.ended + k)
            self.prob = [cl.prob for cl in classes]
        d = self.p.decay
        for cl in classes:
            cl.reused *= d
            cl.ended *= d
        self._next_cfg = self._t + max(self.p.min_interval, len(self._nodes))

    def export_state(self) -> ReuseState:
        """A copy of what has been learned: the order's ``p_c`` (of the last
        reconfiguration) and the counters as they stand."""
        cs = self._classes
        return ReuseState(prob=list(self.prob), reused=[cl.reused for cl in cs],
                          ended=[cl.ended for cl in cs])

    # ---------------------------------------------------------------- events
    def on_hit(self, key: Key, i: int, now: float) -> None:
        nd = self._nodes[key]
        cl = self._classes[nd.cls]
        if self._learn:
            cl.reused += 1.0
            cl.ended += 1.0
        nd.refs += 1
        c = self._class(nd.refs, i)
        t = self._t
        self._adopt(key, nd)
        if not nd.leaf:
            nd.cls, nd.last = c, t
        elif nd.kids:  # the block touched before it became its child: no longer a leaf
            self._unleaf(nd)
            nd.cls, nd.last = c, t
        elif c == nd.cls:  # a leaf staying in its class: a newer entry, the old goes stale
            nd.last = t
            heappush(cl.heap, (t, nd))
        else:
            self._unleaf(nd)
            nd.cls, nd.last = c, t
            self._push(nd)
        self._tick()

    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None:
        nd = _Node(key)
        g = self._ghost.pop(key, None)
        if g is not None:  # a miss that a larger cache would have hit
            if self._learn:
                self._classes[g.cls].reused += 1.0
            nd.refs = g.refs + 1
        nd.cls = self._class(nd.refs, i)
        nd.last = self._t
        self._nodes[key] = nd
        self._adopt(key, nd)
        if not nd.kids:
            self._push(nd)
        self._tick()

    def victim(self, now: float) -> Key:
        best: _Node | None = None
        bv, bl = float("inf"), 0
        t1 = self._t + 1
        for cl in self._active.values():
            last, nd = cl.heap[0]
            if not nd.leaf or nd.cls != cl.cid or nd.last != last:
                last, nd = self._head(cl)  # the top is stale: drop stale entries (rare)
            v = cl.prob / (t1 - last)
            if v < bv or (v == bv and last < bl):
                best, bv, bl = nd, v, last
        if best is None:
            raise KeyError("victim() on an empty cache")
        key = best.key
        nodes = self._nodes
        del nodes[key]
        self._unleaf(best)
        ghost = self._ghost
        ghost[key] = best
        if self._learn:
            self._classes[best.cls].ended += 1.0
        limit = max(64, int(self.p.ghost_factor * len(nodes)))
        while len(ghost) > limit:
            ghost.popitem(last=False)
        par = best.parent
        if par is not None:
            pn = nodes.get(par)
            if pn is not None:
                pn.kids -= 1
                if pn.kids == 0:
                    self._push(pn)
        if self._prev is best:
            self._prev = None
        return key

    def evictable(self) -> list[tuple[float, int, Key]]:
        """Every evictable block as ``(V, last touch, key)``, lowest first: what the
        brute-force check ranks."""
        t1 = self._t + 1
        return sorted((self.prob[nd.cls] / (t1 - nd.last), nd.last, k)
                      for k, nd in self._nodes.items() if nd.leaf)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)


# compiled classes share one ABC cache unless given their own (aicache.compiled_abc)
own_abc_caches(SAECacheReuse)
