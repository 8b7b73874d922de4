"""SAECache: semantic-adaptive eviction for prefix caches, the seed's priority.

Registered as ``saecache-priority`` (the default ``saecache`` is the reuse-probability
variant, :mod:`aicache.kv.saecache_reuse`). The design, its invariants and where
``saecache-priority`` departs from the published design ("the seed", which
``saecache-seed`` computes exactly) are in ``docs/design/saecache.md``.

Four queues (evict-first, structural, chat, agentic) with rule-based routing; within and
across the last three, the block with the lowest

    P(b) = α_q · w_τ(b) · p_q(b) / (Δt_b + δ)

is evicted; the evict-first queue is emptied before any other, in LRU order (its blocks
are already judged low-value, so scoring them buys nothing; P there is 1/(Δt + δ)).
``p_q`` is the log-normal survival ``1 − F_LN(Δt; μ_q, σ_q)`` for chat/agentic and the
position decay ``1 − ((o_b+1)/(o_max+2))^γ`` for structural (shifted by one so the last
block keeps a small non-zero value; δ = ``delta_s`` keeps P finite at Δt = 0).

Routing (no ground-truth label is consulted): reasoning blocks → evict-first; a block seen
by two sessions (a shared template/system prefix) → structural; blocks of a multi-turn
session → chat or agentic (agentic when the request carries tools); system/tool-schema
blocks of a single-turn session → structural; the rest → evict-first. A session is
multi-turn once its second request arrives; for its *first* request the online
continuation predictor (:mod:`aicache.kv.session_predictor`) decides. A request without a
session id is single-turn (there is no session to continue; ``saecache-seed`` asks the
predictor as for any first request).

Why the ordering can be kept without re-sorting as time passes
---------------------------------------------------------------
P depends on ``now`` through Δt, so a heap keyed by P goes stale every tick, and P-orders
of two blocks with different constants can cross. But group blocks by everything *except*
their last-access time — (queue, token type, offset bucket) — and every block in a group
shares the constant ``c = α_q · w_τ · posf(bucket)``; ``P = c · S(Δt)/(Δt + δ)`` is then
strictly decreasing in Δt (S is a survival function), so *within a group the least
recently used block always has the lowest P*, at any ``now`` and any parameter values.
Each group is therefore an LRU list (:class:`_Group`, linked through the blocks: O(1) touch
and removal), and a victim
is the minimum over the group *heads* only. Heads are kept in a heap valid for one
(``now``, parameter version) pair: rebuilt at most once per request (learning updates
parameters only at request boundaries), then each eviction pops one head and pushes that
group's next head, O(log G) with G ≲ 100 non-empty groups. Entries carry the head's touch
sequence number and are discarded when stale. Ties in P are broken by that sequence number
(older first), which is also the order inside a group, so the result equals "compute P for
every block and take the minimum (P, seq)" exactly — the reference the tests compare to.

Hot-path cost (measured by ``benchmarks/saecache_overhead.py``): a block record is one
``__slots__`` object created once per insert (queue, type and offset bucket are encoded in
its group id, not stored); a hit that stays in its group is one ``move_to_end``; routing is
inlined into ``on_hit``/``on_insert`` (the rule is written once, above ``on_hit``; the
victim-order tests check its outcome against a plain reference); the group constant ``α_q · w_τ · posf`` is
computed lazily, once per group and parameter version; the position factors are recomputed
only when γ or o_max move; the predictor's expiry horizon only at learning boundaries.

Online learning (one feedback loop; statistics are updated on every event, and the
parameters used by P move only at request boundaries, every ``update_every`` requests):
token-type weights are an EMA of "the block's next event was a reuse" (hit or
miss-after-eviction = 1, eviction = 0); μ/σ per multi-turn queue are the running MLE
(Welford on log inter-request gaps of sessions routed there); γ is the least-squares slope
of log(1 − reuse rate) on log relative position over the structural queue's offset
buckets, where a bucket's reuse rate = (hits + returns after eviction) / (hits +
evictions) of structural prompt blocks — every residency ends in a hit or an eviction, so
this counts each outcome once, whichever queue the block entered first (shared prefixes
reach the structural queue on their first cross-session *hit*, so counting inserts as the
opportunities would see only hits there and never fit γ); α_q is ``n · softmax(z_q / T)``
of each queue's hit tokens per resident token
(EMA), normalised by its mean so the temperature is scale-free.
"""

from __future__ import annotations

import copy
import math
import random
from collections import OrderedDict, defaultdict
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, Final, Protocol

import numpy as np

from aicache.compiled_abc import own_abc_caches
from aicache.kv.prefix_policies import PrefixPolicy, RequestView, request_features
from aicache.kv.session_predictor import (ContinuationPredictor, HiddenStateSource,
                                          LogNormalGaps, SessionTracker)
from aicache.native import mypyc_attr

Key = Hashable


class _TypeSeq(Protocol):
    """Token-type indices of a phase's blocks: a list, or one type for every index."""

    def __getitem__(self, i: int, /) -> int: ...

    def __len__(self) -> int: ...


class _GroupTable(Protocol):
    """Group id → its blocks, least recently touched first: a list over the dense ids of
    :class:`SAECache`, a ``defaultdict`` over the sparse ids of :class:`SAECacheSeed`."""

    def __getitem__(self, gid: int, /) -> _Group: ...


class Queue(IntEnum):
    EVICT_FIRST = 0
    STRUCTURAL = 1
    CHAT = 2
    AGENTIC = 3


TOKEN_TYPES: Final = ("system", "user", "assistant", "reasoning", "tool", "decode", "other")
NT: Final = len(TOKEN_TYPES)


class _TypeIndex(dict[str, int]):
    """Token type name → index; an unknown name is "other". ``__missing__`` lets the
    per-phase conversion run as ``map(_TYPE_INDEX.__getitem__, names)`` in C."""

    def __missing__(self, key: object) -> int:
        return NT - 1


_TYPE_INDEX: Final = _TypeIndex((t, i) for i, t in enumerate(TOKEN_TYPES))
NB: Final = 16  # offset buckets: floor(log2(offset + 1))
REASONING: Final = _TYPE_INDEX["reasoning"]
DECODE: Final = _TYPE_INDEX["decode"]
_STRUCTURE_TYPES: Final = frozenset({_TYPE_INDEX["system"], _TYPE_INDEX["tool"]})
_SQRT2: Final = math.sqrt(2.0)
_MULTI: Final = (Queue.CHAT, Queue.AGENTIC)


def type_index(name: str | None) -> int:
    return _TYPE_INDEX.get(name or "other", NT - 1)


#: offset → bucket for offsets below the last bucket's start (a bytes lookup is cheaper on
#: the per-block path than bit_length arithmetic); larger offsets are all bucket NB − 1
_NOB: Final = (1 << (NB - 1)) - 1
_OB: Final = bytes((i + 1).bit_length() - 1 for i in range(_NOB))


def offset_bucket(offset: int) -> int:
    return min(NB - 1, (offset + 1).bit_length() - 1)


def bucket_start(ob: int) -> int:
    """Smallest offset in bucket ``ob`` (its representative)."""
    return (1 << ob) - 1


def lognormal_survival(dt: float, mu: float, sigma: float) -> float:
    """``1 − F_LN(dt; mu, sigma)``; 1 at dt ≤ 0."""
    if dt <= 0.0:
        return 1.0
    return 0.5 * math.erfc((math.log(dt) - mu) / (sigma * _SQRT2))


def softmax_weights(eff: list[float], temperature: float) -> list[float]:
    """``n · softmax(z / T)`` with ``z = eff / mean(eff)``: mean 1, order kept, T→∞ uniform."""
    n = len(eff)
    if n == 0:
        return []
    m = sum(eff) / n
    if m <= 0.0:
        return [1.0] * n
    z = [e / m / max(temperature, 1e-9) for e in eff]
    top = max(z)
    ex = [math.exp(v - top) for v in z]
    s = sum(ex)
    return [n * v / s for v in ex]


def fit_gamma(offsets: list[float], reuse: list[float], o_max: float) -> float | None:
    """Least-squares γ in ``reuse(o) = 1 − ((o+1)/(o_max+2))^γ`` (slope through the origin
    of log(1 − reuse) on log relative position); None without usable points.

    The model only describes reuse that falls with position; when position and reuse are
    positively correlated (later blocks reused more) the magnitude is returned negated, so
    the sign says which way the data lean (the policy clamps γ to a small positive floor).
    """
    pts = [(math.log((o + 1.0) / (o_max + 2.0)), h) for o, h in zip(offsets, reuse) if 0.0 < h < 1.0]
    if len(pts) < 2:
        return None
    sxy = sum(x * math.log(1.0 - h) for x, h in pts)
    sxx = sum(x * x for x, _ in pts)
    if sxx <= 0.0:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    mh = sum(h for _, h in pts) / len(pts)
    cov = sum((x - mx) * (h - mh) for x, h in pts)
    g = abs(sxy / sxx)
    return -g if cov > 0 else g


@dataclass(slots=True)
class SAEParams:
    """Knobs. None are fitted to a workload; the learning rates are generic defaults."""

    delta_s: float = 1.0  #: δ in P's denominator (seconds)
    type_rate: float = 0.01  #: EMA rate of the token-type reuse estimate
    type_floor: float = 0.05  #: w_τ = floor + reuse estimate (never zero)
    alpha_rate: float = 0.05  #: EMA rate of per-queue hit tokens
    temperature: float = 1.0  #: softmax temperature of α_q
    update_every: int = 4  #: move μ, σ, α, w into the score every this many requests
    gamma_every: int = 64  #: refit γ every this many requests
    continue_threshold: float = 0.5  #: P(continue) above which a first request is multi-turn
    #: "online" (the learned classifier) or "oracle": the trace's own session label
    #: (``session_type != "single"``) — a diagnostic upper bound for what a perfect
    #: first-request predictor (the seed's hidden-state MLP at its best) could add; never a
    #: policy to deploy, since it reads the future
    predictor: str = "online"
    ghost_factor: float = 2.0  #: ghost list length, in resident blocks
    learn: bool = True  #: online learning on (False = parameters stay as given)
    token_types: bool = True  #: ablation switches: each False removes one factor of P
    queue_weights: bool = True
    lognormal: bool = True
    position: bool = True


@dataclass
class SAEState:
    """Learned parameters, exportable so a fixed-parameter SAECache can be fitted on one
    trace and replayed on another (the mismatch experiment)."""

    type_reuse: list[float] = field(default_factory=lambda: [0.5] * NT)
    mu: list[float] = field(default_factory=lambda: [math.log(60.0)] * 4)
    sigma: list[float] = field(default_factory=lambda: [1.0] * 4)
    gamma: float = 1.0
    alpha: list[float] = field(default_factory=lambda: [1.0] * 4)
    o_max: int = 1
    predictor_w: list[float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _ConstTypes:
    """Every index has the same token type (one block given at a time)."""

    __slots__ = ("tau",)

    def __init__(self, tau: int) -> None:
        self.tau = tau

    def __getitem__(self, i: int) -> int:
        return self.tau

    def __len__(self) -> int:
        return 1 << 62


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _Blk:
    """One resident block. Its group id encodes (queue, effective type, offset bucket):
    ``gid = (q·NT + effective type)·NB + offset bucket``, so those are not stored
    separately (the effective type is the request's running arg-max of w, see the routing
    rule above :meth:`SAECache.on_hit`)."""

    __slots__ = ("key", "tokens", "tau", "q", "last", "seq", "gid", "sid", "shared",
                 "prev", "nxt")

    def __init__(self, key: Key, tokens: int, tau: int = 0, sid: Hashable = None,
                 q: int = -1, gid: int = 0, seq: int = 0, last: float = 0.0) -> None:
        self.key = key
        self.tokens = tokens
        self.tau = tau
        self.q = q  # -1: not in a group yet
        self.last = last
        self.seq = seq
        self.gid = gid
        self.sid = sid
        self.shared = False
        # neighbours in its group's list (None at the ends and outside any group)
        self.prev: _Blk | None = None
        self.nxt: _Blk | None = None


class _Group:  # not mypyc-serializable: that skips __init__ on a zero-argument call
    """One group's blocks, least recently touched first: a doubly linked list through the
    blocks' ``prev``/``nxt``. Append, removal and touch are a few pointer writes (no hash
    of the key, unlike an ``OrderedDict``), and the head — the group's lowest-P block, see
    the module docstring — is one attribute read. Invariant: ``n`` blocks are linked from
    ``head`` to ``tail``; a block outside every group has ``prev is nxt is None``."""

    __slots__ = ("head", "tail", "n")

    def __init__(self) -> None:
        self.head: _Blk | None = None
        self.tail: _Blk | None = None
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def append(self, b: _Blk) -> None:
        """Link ``b`` (in no group) at the tail (most recently touched)."""
        t = self.tail
        b.prev = t
        b.nxt = None
        if t is None:
            self.head = b
        else:
            t.nxt = b
        self.tail = b
        self.n += 1

    def remove(self, b: _Blk) -> None:
        """Unlink ``b`` (in this group)."""
        p = b.prev
        nx = b.nxt
        if p is None:
            self.head = nx
        else:
            p.nxt = nx
        if nx is None:
            self.tail = p
        else:
            nx.prev = p
        b.prev = None
        b.nxt = None
        self.n -= 1

    def move_to_end(self, b: _Blk) -> None:
        """``b`` (in this group) becomes the most recently touched."""
        if b is not self.tail:
            self.remove(b)
            self.append(b)

    def __iter__(self) -> Iterator[_Blk]:
        b = self.head
        while b is not None:
            yield b
            b = b.nxt



@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class SAECache(PrefixPolicy):
    """The SAECache prefix-eviction policy (see module docstring)."""

    name = "saecache-priority"

    def __init__(self, capacity_tokens: int, *, rng: random.Random | None = None,
                 params: SAEParams | None = None, state: SAEState | Mapping[str, Any] | None = None,
                 hidden: HiddenStateSource | None = None, **overrides: Any) -> None:
        super().__init__(capacity_tokens, rng=rng)
        p = params or SAEParams()
        if overrides:
            p = SAEParams(**{**asdict(p), **overrides})
        if p.predictor not in ("online", "oracle"):
            raise ValueError(f"predictor {p.predictor!r}: choose 'online' or 'oracle'")
        self.p = p
        self._oracle = p.predictor == "oracle"
        st = state if isinstance(state, SAEState) or state is None else SAEState(**dict(state))
        # a private copy: learning updates it in place, the caller's object stays as given
        self.state = copy.deepcopy(st) if st is not None else SAEState()
        self._blocks: dict[Key, _Blk] = {}
        self._groups: _GroupTable = [_Group() for _ in range(4 * NT * NB)]
        self._res_tokens = [0] * 4
        self._res_count = [0] * 4
        self._ghost: OrderedDict[Key, int] = OrderedDict()
        # Records of evicted blocks, reused by the next inserts: an eviction is almost
        # always followed by an insert, so this stays a few entries long and an insert
        # sets nine slots instead of running a constructor (STYLE: no allocation per event).
        self._free: list[_Blk] = []
        self._seq = 0
        # learning state
        self.gaps = [LogNormalGaps(self.state.mu[q], self.state.sigma[q]) for q in range(4)]
        pred = ContinuationPredictor(hidden=hidden)
        if self.state.predictor_w is not None:
            pred.w = np.array(self.state.predictor_w, dtype=float)
        self.tracker = SessionTracker(pred)
        self._hit_ema = [0.0] * 4
        self._hit_now = [0.0] * 4
        self._pos_acc = [0.0] * NB
        self._pos_reuse = [0.0] * NB
        self._o_max_seen = self.state.o_max
        self._requests = 0
        self._anon = 0
        # per-request routing context
        self._sid: Hashable = None
        self._multi = False
        self._sq = int(Queue.CHAT)
        self._mq = 0
        self._run_tau = -1
        self._run_decode = False
        self._hb = 0
        self._pos_on = False
        # derived factors (recomputed at request boundaries)
        self._w = [1.0] * NT
        self._alpha = [1.0] * 4
        self._posf = [1.0] * NB
        self._posf_key: tuple[float, int] | None = None
        self._mu = [0.0] * 4
        self._sig = [1.0] * 4
        self._version = 0
        self._derive()
        # Heap of the non-empty structural/chat/agentic group heads, valid for one
        # (now, parameter version); evict-first is one LRU list (group 0).
        self._heap: list[tuple[float, int, int]] = []
        self._hnow = math.nan
        self._hver = -1
        self._nonempty: set[int] = set()
        self._learn = p.learn
        self._type_rate = p.type_rate
        self._delta = p.delta_s
        self._lognormal = p.lognormal
        self._reuse = self.state.type_reuse
        self._tcache: _TypeSeq | None = None
        self._ghost_limit = 256

    # -- parameters ---------------------------------------------------------------------
    def _derive(self) -> None:
        st, p = self.state, self.p
        self._w = [p.type_floor + r for r in st.type_reuse] if p.token_types else [1.0] * NT
        self._alpha = list(st.alpha) if p.queue_weights else [1.0] * 4
        if p.position:
            g, om = st.gamma, st.o_max
            if (g, om) != self._posf_key:  # γ is refitted rarely: skip 16 pows otherwise
                self._posf_key = (g, om)
                self._posf = [1.0 - (min(bucket_start(b) + 1, om + 1) / (om + 2.0)) ** g
                              for b in range(NB)]
        else:
            self._posf = [1.0] * NB
        self._mu = list(st.mu)
        self._sig = list(st.sigma)
        # Per-group constants of P, filled lazily by _group_const (a victim search touches
        # ~10 groups per parameter version; building all 4·NT·NB eagerly cost more).
        self._gc: dict[int, float] = {}
        self._horizon = max(self.gaps[Queue.CHAT].quantile(), self.gaps[Queue.AGENTIC].quantile())
        self._version += 1

    def export_state(self) -> SAEState:
        """A copy of the learned parameters (for a fixed-parameter replay elsewhere)."""
        st = copy.deepcopy(self.state)
        st.predictor_w = [float(x) for x in self.tracker.predictor.w]
        return st

    def priority(self, key: Key, now: float) -> float:
        """P(b) of a resident block at ``now`` (the score the victim minimises)."""
        return self._prio(self._blocks[key], now)

    def _prio(self, b: _Blk, now: float) -> float:
        q = b.q
        dt = now - b.last
        if q == 0:  # evict-first is plain LRU: its blocks are already judged low-value
            return 1.0 / (dt + self._delta)
        c = self._gc.get(b.gid)  # α_q · w_τ (· posf for structural)
        if c is None:
            c = self._group_const(b.gid)
        if q > 1 and self._lognormal and dt > 0.0:
            c *= 0.5 * math.erfc((math.log(dt) - self._mu[q]) / (self._sig[q] * _SQRT2))
        return c / (dt + self._delta)

    def _group_const(self, gid: int) -> float:
        """``α_q · w_τ`` (times ``posf(ob)`` for structural) of group ``gid``, cached until
        the parameters move."""
        q, rest = divmod(gid, NT * NB)
        t, ob = divmod(rest, NB)
        c = self._alpha[q] * self._w[t]
        if q == 1:
            c *= self._posf[ob]
        self._gc[gid] = c
        return c

    def queue_of(self, key: Key) -> Queue:
        return Queue(self._blocks[key].q)

    def touch_seq(self, key: Key) -> int:
        return self._blocks[key].seq

    def resident(self) -> list[Key]:
        return list(self._blocks)

    # -- request boundaries: routing context and learning -------------------------------
    def begin(self, view: RequestView, now: float) -> None:
        super().begin(view, now)
        learn = self.p.learn
        anonymous = view.session_id is None
        if anonymous:
            self._anon += 1
            sid: Hashable = ("#req", self._anon)
        else:
            sid = view.session_id
        is_tool = view.is_tool
        sq = 3 if is_tool else 2  # Queue.AGENTIC / Queue.CHAT
        gap, _ = self.tracker.observe(sid, now, sq, learn)
        multi = gap is not None or (view.turn is not None and view.turn > 1)
        if gap is not None and learn:
            self.gaps[sq].add(gap)
        x = None
        if not multi and anonymous and self._ANON_SINGLE:
            # no session id: there is no session to continue, so no continuation to
            # predict; a later request's reuse of these blocks is cross-request sharing,
            # which routes them to the structural queue (the DRAM adapter's rule too)
            pass
        elif not multi:  # the predictor's job: will this first request's session continue?
            if self._oracle:
                multi = view.session_type not in (None, "single")
            else:
                x = self.tracker.predictor.vector(request_features(view, gap, is_tool), view)
                multi = self.tracker.predictor.predict(x) >= self.p.continue_threshold
        self.tracker.record(sid, now, sq, x if learn else None)
        self.tracker.expire(now, self._horizon, learn)
        self.set_context(sid, multi, sq)
        self._tcache = None
        self._ghost_limit = max(256, int(self.p.ghost_factor * len(self._blocks)))
        self._requests += 1
        if learn and self._requests % self.p.update_every == 0:
            self._learn_boundary()

    def begin_decode(self, now: float) -> None:
        self._tcache = None  # the per-block paths convert the decode phase's types once

    def end(self, now: float) -> None:
        if not self.p.learn:
            return
        r = self.p.alpha_rate
        for q in range(4):
            self._hit_ema[q] += r * (self._hit_now[q] - self._hit_ema[q])
            self._hit_now[q] = 0.0

    def _learn_boundary(self) -> None:
        st = self.state
        for mq in _MULTI:
            st.mu[mq] = self.gaps[mq].mu
            st.sigma[mq] = self.gaps[mq].sigma
        rt = self._res_tokens
        qs = [q for q in (1, 2, 3) if rt[q] > 0]  # structural, chat, agentic
        if len(qs) > 1:
            eff = [self._hit_ema[q] / rt[q] for q in qs]
            for q, a in zip(qs, softmax_weights(eff, self.p.temperature)):
                st.alpha[q] = a
        if self._o_max_seen > st.o_max:
            st.o_max = self._o_max_seen
        pa = self._pos_acc
        if max(pa) > 5000:
            for k in range(NB):
                if pa[k] > 5000:  # forget slowly: halve the bucket's counts
                    pa[k] *= 0.5
                    self._pos_reuse[k] *= 0.5
        if self._requests % self.p.gamma_every < self.p.update_every:
            offs, reuse = [], []
            for b in range(NB):
                if self._pos_acc[b] >= 20:
                    offs.append(float(bucket_start(b)))
                    reuse.append(self._pos_reuse[b] / self._pos_acc[b])
            g = fit_gamma(offs, reuse, st.o_max)
            if g is not None:
                st.gamma = min(10.0, max(0.1, g))
        self._derive()

    def _learn_position(self, offset: int, reused: bool) -> None:
        b = offset_bucket(offset)
        self._pos_acc[b] += 1.0
        if reused:
            self._pos_reuse[b] += 1.0
        if offset > self._o_max_seen:
            self._o_max_seen = offset

    # -- routing ------------------------------------------------------------------------
    def set_context(self, sid: Hashable, multi: bool, sq: int) -> None:
        """The routing context of the blocks that follow: their session, whether it is
        multi-turn, and its chat/agentic queue (``begin`` sets it; the DRAM adapter sets it
        per block)."""
        self._sid = sid
        self._multi = multi
        self._sq = int(sq)
        self._mq = int(sq) if multi else 0  # queue of an unshared, non-reasoning block
        self._run_tau = -1

    def _phase(self, types: _TypeSeq, decode: bool) -> None:
        """Start a phase (prefill or decode) whose block ``i`` has type ``types[i]``; the
        per-block paths read these per-phase facts instead of re-deriving them."""
        self._tcache = types
        self._run_decode = decode
        self._run_tau = -1
        self._hb = -1 if decode else self.view.hit_blocks  # i < _hb: a prefix-hit block
        self._pos_on = self._learn and not decode  # structural position statistics

    def _types(self) -> _TypeSeq:
        """Token-type indices of the current phase's blocks (converted once per phase)."""
        v = self.view
        types = self._tcache
        if v.decode != self._run_decode or types is None:
            types = list(map(_TYPE_INDEX.__getitem__, v.block_types))
            self._phase(types, v.decode)
        return types

    #: a request without a session id is single-turn (True), or is left to the
    #: continuation predictor like any first request (the seed variant: False)
    _ANON_SINGLE = True

    # The lowest queue whose groups are kept in ``_nonempty`` (and so in the heap): here
    # evict-first (queue 0) is popped LRU from its one group instead; the seed variant
    # heaps every queue (0).
    _QMIN = 1

    def _push_head(self, b: _Blk, now: float, gid: int) -> None:
        """Enter group ``gid``, whose head is now ``b``, into the valid heap: ordered by P,
        then age."""
        heappush(self._heap, (self._prio(b, now), b.seq, gid))

    def _move(self, b: _Blk, q: int, gid: int, now: float) -> None:
        """Put ``b`` (not in group ``gid``) at the tail of group ``gid``."""
        if b.q >= 0:
            self._unplace(b)
        b.q = q
        b.gid = gid
        g = self._groups[gid]
        g.append(b)
        self._res_tokens[q] += b.tokens
        self._res_count[q] += 1
        if q >= self._QMIN and g.n == 1:
            self._nonempty.add(gid)
            if self._hnow == now and self._hver == self._version:
                self._push_head(b, now, gid)

    def _unplace(self, b: _Blk) -> None:
        g = self._groups[b.gid]
        g.remove(b)
        q = b.q
        self._res_tokens[q] -= b.tokens
        self._res_count[q] -= 1
        if q >= self._QMIN and not g.n:
            self._nonempty.discard(b.gid)

    # -- events -------------------------------------------------------------------------
    # Routing, in on_hit / on_insert (once per block, so written inline; a hit that stays
    # in its group is a single _Group.move_to_end): reasoning → evict-first; shared
    # across sessions → structural; a multi-turn session → its chat/agentic queue; a
    # single-turn session's system/tool-schema prompt blocks → structural; the rest →
    # evict-first. Prefix inheritance: the simulator touches a request's blocks tail
    # first, so the running arg-max of w over the blocks touched so far (``_run_tau``) is
    # the most valuable type among the block's descendants in this request. Grouping the
    # block under that type keeps a prefix at least as valuable as its tail, so type
    # weights never punch holes into a cached prefix.
    def on_hit(self, key: Key, i: int, now: float) -> None:
        b = self._blocks[key]
        types = self._tcache  # None at each phase start (begin, begin_decode)
        if types is None:
            types = self._types()
        tau = b.tau
        if self._learn:
            r = self._reuse
            r[tau] += self._type_rate * (1.0 - r[tau])
        if i < len(types):
            b.tau = tau = types[i]
        sid = self._sid
        if b.sid != sid:
            b.shared = True
            b.sid = sid
        # routing (see above)
        ob = 0
        if tau == REASONING:
            q = gid = 0
        else:
            q = 1 if b.shared else self._mq
            if not q and tau in _STRUCTURE_TYPES and not self._run_decode:
                q = 1
            if q:
                w = self._w
                rt = self._run_tau
                if rt < 0 or w[tau] > w[rt]:
                    self._run_tau = rt = tau
                if q == 1 and not self._run_decode:
                    ob = _OB[i] if i < _NOB else NB - 1
                gid = (q * NT + rt) * NB + ob
            else:
                gid = 0
        self._seq = seq = self._seq + 1
        b.seq = seq
        b.last = now
        if b.gid == gid:  # stays in its group: a touch (the common hit: O(1), no heap work)
            self._groups[gid].move_to_end(b)
        else:
            self._move(b, q, gid, now)
        if i < self._hb:
            self._hit_now[q] += b.tokens
        if q == 1 and self._pos_on:  # a structural prompt block reused (ob = its bucket)
            self._pos_acc[ob] += 1.0
            self._pos_reuse[ob] += 1.0
            if i > self._o_max_seen:
                self._o_max_seen = i

    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None:
        types = self._tcache  # None at each phase start (begin, begin_decode)
        if types is None:
            types = self._types()
        tau = types[i] if i < len(types) else NT - 1
        ghost = self._ghost.pop(key, None) if self._ghost else None
        if ghost is not None and self._learn:  # a miss after eviction: that type was undervalued
            r = self._reuse
            r[ghost] += self._type_rate * (1.0 - r[ghost])
        # routing (see above) of a block no other session has touched yet
        ob = 0
        q = self._mq if tau != REASONING else 0
        if not q and tau in _STRUCTURE_TYPES and not self._run_decode:
            q = 1
        if q:
            w = self._w
            rt = self._run_tau
            if rt < 0 or w[tau] > w[rt]:
                self._run_tau = rt = tau
            if q == 1 and not self._run_decode:
                ob = _OB[i] if i < _NOB else NB - 1
            gid = (q * NT + rt) * NB + ob
        else:
            gid = 0
        self._seq = seq = self._seq + 1
        free = self._free
        if free:
            b = free.pop()
            b.key = key
            b.tokens = tokens
            b.tau = tau
            b.sid = self._sid
            b.q = q
            b.gid = gid
            b.seq = seq
            b.last = now
            b.shared = False
        else:
            b = _Blk(key, tokens, tau, self._sid, q, gid, seq, now)
        self._blocks[key] = b
        g = self._groups[gid]
        g.append(b)
        self._res_tokens[q] += tokens
        self._res_count[q] += 1
        if q:
            if g.n == 1:
                self._nonempty.add(gid)
                if self._hnow == now and self._hver == self._version:
                    heappush(self._heap, (self._prio(b, now), seq, gid))
            if q == 1 and self._pos_on:
                if ghost is not None:  # its eviction was counted as "not reused": it was
                    self._pos_reuse[ob] += 1.0
                if i > self._o_max_seen:
                    self._o_max_seen = i

    def victim(self, now: float) -> Key:
        if self._res_count[0]:  # evict-first: emptied first, LRU order
            g = self._groups[0]
            h = g.head
            assert h is not None  # _res_count[0] blocks are linked in group 0
            b = h
            g.remove(b)
            self._res_tokens[0] -= b.tokens
            self._res_count[0] -= 1
        else:
            # the minimum-P block of the structural/chat/agentic queues: the minimum over
            # group heads, kept in a heap valid for one (now, parameter version) (see the
            # module docstring); written inline, as this runs once per scored eviction
            if now != self._hnow or self._version != self._hver:
                self._rebuild(now)
            heap = self._heap
            groups = self._groups
            while heap:
                _, seq, gid = heap[0]
                g = groups[gid]
                h = g.head
                if h is None:
                    heappop(heap)
                    continue
                b = h
                if b.seq != seq:  # stale head: re-enter the group with its current head
                    heapreplace(heap, (self._prio(b, now), b.seq, gid))
                    continue
                break
            else:
                raise LookupError("victim() on an empty SAECache")
            g.remove(b)  # = _unplace(b), inlined
            q = b.q
            self._res_tokens[q] -= b.tokens
            self._res_count[q] -= 1
            h = g.head
            if h is not None:
                nb = h
                # = self._prio(nb, now), inlined (nb is in the same group as b: same q, gid)
                dt = now - nb.last
                c = self._gc.get(gid)
                if c is None:
                    c = self._group_const(gid)
                if q > 1 and self._lognormal and dt > 0.0:
                    c *= 0.5 * math.erfc((math.log(dt) - self._mu[q]) / (self._sig[q] * _SQRT2))
                heapreplace(heap, (c / (dt + self._delta), nb.seq, gid))
            else:
                heappop(heap)
                self._nonempty.discard(gid)
        key = b.key
        del self._blocks[key]
        if self._learn:
            r = self._reuse
            tau = b.tau
            r[tau] -= self._type_rate * r[tau]
            if b.q == 1 and tau != DECODE:  # a structural residency that ended unreused
                self._pos_acc[b.gid % NB] += 1.0
        ghost = self._ghost
        ghost[key] = b.tau
        if len(ghost) > self._ghost_limit:
            ghost.popitem(last=False)
            if len(ghost) > self._ghost_limit:
                ghost.popitem(last=False)
        free = self._free
        if len(free) < 64:
            b.sid = None  # the record is reused by a later insert; keep no session alive
            free.append(b)
        return key

    def _rebuild(self, now: float) -> None:
        """The heap of group heads at ``now`` (``_prio`` inlined: this runs once per
        request that evicts from the scored queues, over every non-empty group)."""
        groups = self._groups
        gc = self._gc
        delta = self._delta
        lognormal = self._lognormal
        mu, sig = self._mu, self._sig
        erfc, log = math.erfc, math.log
        heap = []
        for gid in self._nonempty:
            h = groups[gid].head
            assert h is not None  # _nonempty holds the non-empty groups
            b = h
            dt = now - b.last
            c = gc.get(gid)
            if c is None:
                c = self._group_const(gid)
            q = b.q
            if q > 1 and lognormal and dt > 0.0:
                c *= 0.5 * erfc((log(dt) - mu[q]) / (sig[q] * _SQRT2))
            heap.append((c / (dt + delta), b.seq, gid))
        heapify(heap)
        self._heap = heap
        self._hnow = now
        self._hver = self._version

    # -- driving without a simulator's request view (tiered KV store) ------------------
    def touch(self, key: Key, tokens: int, token_type: str | None, offset_blocks: int,
              now: float) -> None:
        """Access or insert one block whose type is given directly (the caller has already
        called :meth:`begin` for its request). Used by the DRAM-tier adapter."""
        # blocks arrive one by one here: no prefix inheritance (_phase resets the run)
        self._phase(_ConstTypes(_TYPE_INDEX.get(token_type or "other", NT - 1)), self.view.decode)
        if key in self._blocks:
            self.on_hit(key, offset_blocks, now)
        else:
            self.on_insert(key, tokens, offset_blocks, now)

    def forget(self, key: Key) -> None:
        """The store dropped ``key`` after it was offered by :meth:`order` (an eviction)."""
        b = self._blocks.pop(key, None)
        if b is None:
            return
        self._unplace(b)
        if self.p.learn:
            r = self.state.type_reuse
            r[b.tau] += self.p.type_rate * (0.0 - r[b.tau])
            if b.q == 1 and b.tau != DECODE:  # as in victim(): an unreused structural residency
                self._pos_acc[b.gid % NB] += 1.0
        self._ghost[key] = b.tau
        while len(self._ghost) > self._ghost_limit:
            self._ghost.popitem(last=False)

    def order(self, now: float) -> Iterator[Key]:
        """Resident keys in victim order (what successive :meth:`victim` calls would return
        if nothing changed in between), without changing anything."""
        if self._QMIN:  # queue 0 is outside the heap: it goes first, in LRU order
            yield from (b.key for b in self._groups[0])
        # (not evict-first, P, seq, gid, head): the victim heaps' order (the first field is
        # constant where evict-first is not heaped); seq is unique, so the head is never
        # compared
        heap: list[tuple[bool, float, int, int, _Blk]] = []
        iters: dict[int, Iterator[_Blk]] = {}
        for gid in self._nonempty:
            it = iter(self._groups[gid])
            b = next(it)
            iters[gid] = it
            heap.append((b.q > 0, self._prio(b, now), b.seq, gid, b))
        heapify(heap)
        while heap:
            _, _, _, gid, b = heappop(heap)
            yield b.key
            nb = next(iters[gid], None)
            if nb is not None:
                heappush(heap, (nb.q > 0, self._prio(nb, now), nb.seq, gid, nb))

    def __contains__(self, key: object) -> bool:
        return key in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class SAECacheSeed(SAECache):
    """The seed's priority exactly (registered as ``saecache-seed``; ``saecache-priority`` is the
    engineered variant above, whose departures are listed in its docstring):

        P(b) = α_q · w_τ(b) · p_q(b) / Δt_b

    * w from the block's **own** token type τ(b) (the type its latest request gave it), not
      the request's running arg-max;
    * p_q for structural is ``1 − (o_b / o_max)^γ`` on the block's exact offset (blocks,
      0-based; o_max = the largest offset seen so far, so p ∈ [0, 1]; o_max = 0 gives 1);
      for chat/agentic the log-normal survival ``1 − F_LN(Δt; μ_q, σ_q)``; evict-first has
      no p in the seed and is scored with p = 1 (the seed scores blocks "within each queue");
    * no δ: **Δt = 0 is guarded as P = +∞** (the formula's limit as Δt → 0⁺ for a positive
      numerator): a block touched at this very instant is evicted only after every block
      with Δt > 0 in the same queue class; ties in a finite positive P go to the oldest
      touch first; among blocks at P = 0 (o_b = o_max, a survival that underflowed) or
      P = +∞ any one may go (the heap compares a group's P from when it was pushed, and at
      those values the formula itself no longer orders them);
    * routing as the seed states it: **decode-phase blocks → evict-first** (any session),
      reasoning → evict-first, the rest as in :class:`SAECache`;
    * the evict-first queue is emptied first, scored by the same P; structural/chat/agentic
      compete on P (α_q makes them comparable, as in the seed).

    The victim search is the grouped-LRU/heap of :class:`SAECache` with groups keyed by
    (queue, τ, exact offset): P is non-increasing in Δt within a group, so each group's
    least recently touched block is its minimum and only group heads are compared. The
    learning loop is SAECache's (same statistics, same request boundaries); γ is fitted to
    the seed's form ``reuse(o) = 1 − (o/o_max)^γ``. A rise of o_max moves every structural
    p, so it bumps the parameter version (the heap is rebuilt at the next victim).
    """

    name = "saecache-seed"
    _OM = 1 << 24  #: offsets per (queue, type) in a group id

    def __init__(self, capacity_tokens: int, *, rng: random.Random | None = None,
                 params: SAEParams | None = None, state: SAEState | Mapping[str, Any] | None = None,
                 hidden: HiddenStateSource | None = None, **overrides: Any) -> None:
        # the base's keywords spelled out: mypyc mis-binds a bare ``**kw`` forwarded to a
        # compiled ``__init__`` that has keyword-only parameters
        super().__init__(capacity_tokens, rng=rng, params=params, state=state, hidden=hidden,
                         **overrides)
        self._groups = defaultdict(_Group)
        #: the victim heap: (not evict-first, P, seq, gid) of every non-empty group's head
        self._sheap: list[tuple[bool, float, int, int]] = []
        self._omax = max(0, int(self.state.o_max))
        self._derive()

    # -- factors ------------------------------------------------------------------------
    def _derive(self) -> None:
        super()._derive()
        self._gc = {}

    def _group_const(self, gid: int) -> float:
        q, rest = divmod(gid, NT * self._OM)
        t, o = divmod(rest, self._OM)
        c = self._alpha[q] * self._w[t] if q else self._w[t]
        if q == 1 and self.p.position:
            om = getattr(self, "_omax", 0)
            c *= 1.0 - (o / om) ** self.state.gamma if om > 0 else 1.0
        self._gc[gid] = c
        return c

    def _prio(self, b: _Blk, now: float) -> float:
        dt = now - b.last
        if dt <= 0.0:
            return math.inf
        c = self._gc.get(b.gid)
        if c is None:
            c = self._group_const(b.gid)
        q = b.q
        if q > 1 and self._lognormal:
            c *= 0.5 * math.erfc((math.log(dt) - self._mu[q]) / (self._sig[q] * _SQRT2))
        return c / dt

    def factors(self) -> dict[str, Any]:
        """The parameters P uses right now (for a reference implementation to recompute P)."""
        return {"alpha": [1.0] + list(self._alpha[1:]), "w": list(self._w), "mu": list(self._mu),
                "sigma": list(self._sig), "gamma": self.state.gamma, "o_max": self._omax,
                "lognormal": self._lognormal, "position": self.p.position}

    def block_info(self, key: Key) -> tuple[int, int, int, float, int]:
        """(queue, token type index, offset, last access, touch seq) of a resident block."""
        b = self._blocks[key]
        return b.q, b.tau, (b.gid % self._OM), b.last, b.seq

    # -- routing and events -------------------------------------------------------------
    def _seed_gid(self, b: _Blk, tau: int, i: int) -> tuple[int, int]:
        decode = self._run_decode
        if tau == REASONING or decode:
            q = 0
        elif b.shared:
            q = 1
        elif self._mq:
            q = self._mq
        elif tau in _STRUCTURE_TYPES:
            q = 1
        else:
            q = 0
        o = i if q == 1 else 0
        if o > self._omax and q == 1:
            self._omax = o  # every structural p moves: new parameter version
            self._gc = {}
            self._version += 1
        return q, (q * NT + tau) * self._OM + o

    def on_hit(self, key: Key, i: int, now: float) -> None:
        b = self._blocks[key]
        types = self._tcache
        if types is None or self.view.decode != self._run_decode:
            types = self._types()
        if self._learn:
            r = self._reuse
            r[b.tau] += self._type_rate * (1.0 - r[b.tau])
        if i < len(types):
            b.tau = types[i]
        if b.sid != self._sid:
            b.shared = True
            b.sid = self._sid
        q, gid = self._seed_gid(b, b.tau, i)
        self._seq += 1
        b.seq = self._seq
        b.last = now
        if b.gid == gid and b.q == q:
            self._groups[gid].move_to_end(b)
        else:
            self._move(b, q, gid, now)
        if i < self._hb:
            self._hit_now[q] += b.tokens
        if q == 1 and self._pos_on:
            ob = offset_bucket(i)
            self._pos_acc[ob] += 1.0
            self._pos_reuse[ob] += 1.0

    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None:
        types = self._tcache
        if types is None or self.view.decode != self._run_decode:
            types = self._types()
        tau = types[i] if i < len(types) else NT - 1
        ghost = self._ghost.pop(key, None) if self._ghost else None
        if ghost is not None and self._learn:
            r = self._reuse
            r[ghost] += self._type_rate * (1.0 - r[ghost])
        self._seq += 1
        b = _Blk(key, tokens, tau, self._sid, -1, 0, self._seq, now)
        q, gid = self._seed_gid(b, tau, i)
        self._blocks[key] = b
        self._move(b, q, gid, now)
        if q == 1 and self._pos_on and ghost is not None:
            self._pos_reuse[offset_bucket(i)] += 1.0

    _QMIN = 0  # every queue's groups are heaped; evict-first ones sort first
    _ANON_SINGLE = False  # routing of anonymous requests as before: the predictor decides

    def _entry(self, b: _Blk, now: float, gid: int) -> tuple[bool, float, int, int]:
        return (b.q > 0, self._prio(b, now), b.seq, gid)

    def _push_head(self, b: _Blk, now: float, gid: int) -> None:
        heappush(self._sheap, self._entry(b, now, gid))

    def _rebuild(self, now: float) -> None:
        heap = []
        for gid in self._nonempty:
            h = self._groups[gid].head
            assert h is not None  # _nonempty holds the non-empty groups
            heap.append(self._entry(h, now, gid))
        heapify(heap)
        self._sheap = heap
        self._hnow = now
        self._hver = self._version

    def victim(self, now: float) -> Key:
        if now != self._hnow or self._version != self._hver:
            self._rebuild(now)
        heap = self._sheap
        while heap:
            _, _, seq, gid = heap[0]
            g = self._groups[gid]
            h = g.head
            if h is None:
                heappop(heap)
                continue
            b = h
            if b.seq != seq:  # stale head
                heapreplace(heap, self._entry(b, now, gid))
                continue
            self._unplace(b)
            nh = g.head
            if nh is not None:
                heapreplace(heap, self._entry(nh, now, gid))
            else:
                heappop(heap)
            break
        else:
            raise LookupError("victim() on an empty SAECache")
        key = b.key
        del self._blocks[key]
        self._forgotten(b)
        return key

    def _forgotten(self, b: _Blk) -> None:
        if self._learn:
            r = self._reuse
            r[b.tau] -= self._type_rate * r[b.tau]
            if b.q == 1:
                self._pos_acc[offset_bucket(b.gid % self._OM)] += 1.0
        ghost = self._ghost
        ghost[b.key] = b.tau
        while len(ghost) > self._ghost_limit:
            ghost.popitem(last=False)

    def forget(self, key: Key) -> None:
        b = self._blocks.pop(key, None)
        if b is None:
            return
        self._unplace(b)
        self._forgotten(b)

    def _learn_boundary(self) -> None:
        st = self.state
        st.o_max = self._omax
        # the base fits γ to 1 − ((o+1)/(o_max+2))^γ on bucket starts; the seed's form is
        # 1 − (o/o_max)^γ: refit below after the base's update (which also calls _derive)
        g_before = st.gamma
        super()._learn_boundary()
        st.gamma = g_before
        if self._requests % self.p.gamma_every < self.p.update_every and self._omax > 0:
            offs, reuse = [], []
            for b in range(1, NB):  # offset 0 has log(0/o_max) = −∞: not a usable point
                o = bucket_start(b)
                if self._pos_acc[b] >= 20 and o <= self._omax:
                    offs.append(float(o - 1))  # fit_gamma's (o'+1)/(o_max'+2) = o/o_max
                    reuse.append(self._pos_reuse[b] / self._pos_acc[b])
            g = fit_gamma(offs, reuse, float(self._omax - 2))
            if g is not None:
                st.gamma = min(10.0, max(0.1, g))
        st.o_max = self._omax
        self._derive()


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class _MiniSim:
    """A miniature cache fed a sample of the block events: its policy, resident set and an
    exponentially decayed count of the tokens it hit (its recent value)."""

    __slots__ = ("pol", "res", "used", "cap", "score")

    def __init__(self, pol: PrefixPolicy, cap: int) -> None:
        self.pol = pol
        self.res: dict[Key, int] = {}
        self.used = 0
        self.cap = cap
        self.score = 0.0

    def access(self, key: Key, tokens: int, i: int, now: float, decay: float) -> None:
        self.score *= decay
        if key in self.res:
            self.pol.on_hit(key, i, now)
            self.score += tokens
            return
        if tokens > self.cap:
            return
        while self.used + tokens > self.cap:
            self.used -= self.res.pop(self.pol.victim(now))
        self.pol.on_insert(key, tokens, i, now)
        self.res[key] = tokens
        self.used += tokens


@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class SAECacheDuel(SAECache):
    """SAECache guarded against losing to recency (registered as ``saecache-duel``).

    Two miniature simulations run beside the cache on a spatial sample of the block keys
    (one key in ``2**sample_shift`` by a multiplicative hash, capacity scaled by the same
    factor — the miniature-simulation method of SHARDS-style sampling): one with SAECache's
    order, one with LRU's. Each keeps its hit tokens, decayed per sampled event by
    ``1 − 1/n`` with ``n`` its resident block count (a window of about one cache's worth of
    events, so the comparison follows the workload's phase without a tuned horizon). The
    real cache evicts in SAECache's order while that simulation leads and in LRU's order
    (a recency list over every resident block) while LRU's leads. So where the learned
    order loses to recency on the current traffic, the cache becomes LRU; where it wins, it
    stays SAECache. SAECache's own statistics keep learning either way (an LRU-order
    eviction is reported to it as :meth:`forget`).

    The sample uses ``hash(key)``: deterministic for the simulator's integer block ids. The
    miniature SAECache sees the real request view (its ``hit_blocks`` is the real cache's).
    """

    name = "saecache-duel"

    def __init__(self, capacity_tokens: int, *, rng: random.Random | None = None,
                 sample_shift: int = 4, params: SAEParams | None = None,
                 state: SAEState | Mapping[str, Any] | None = None,
                 hidden: HiddenStateSource | None = None, **overrides: Any) -> None:
        super().__init__(capacity_tokens, rng=rng, params=params, state=state, hidden=hidden,
                         **overrides)
        from aicache.kv.prefix_policies import LRUPrefix

        scap = max(1, capacity_tokens >> sample_shift)
        self._mask = (1 << sample_shift) - 1
        self._recency: OrderedDict[Key, None] = OrderedDict()
        self._mini_sae = SAECache(scap, rng=random.Random(self.rng.random()), params=params,
                                  state=state, hidden=hidden, **overrides)
        self._mini_lru = LRUPrefix(scap)
        self._sims = (_MiniSim(self._mini_sae, scap), _MiniSim(self._mini_lru, scap))

    def _sampled(self, key: Key) -> bool:
        return not ((hash(key) * 0x9E3779B1) >> 16) & self._mask

    def lru_leads(self) -> bool:
        """Whether the next victim is taken in LRU order."""
        return self._sims[1].score > self._sims[0].score

    def begin(self, view: RequestView, now: float) -> None:
        super().begin(view, now)
        self._mini_sae.begin(view, now)
        self._mini_lru.begin(view, now)

    def begin_decode(self, now: float) -> None:
        super().begin_decode(now)
        self._mini_sae.begin_decode(now)

    def end(self, now: float) -> None:
        super().end(now)
        self._mini_sae.end(now)

    def _sample(self, key: Key, tokens: int, i: int, now: float) -> None:
        decay = 1.0 - 1.0 / max(64, len(self._sims[0].res))
        for s in self._sims:
            s.access(key, tokens, i, now, decay)

    def on_hit(self, key: Key, i: int, now: float) -> None:
        super().on_hit(key, i, now)
        self._recency.move_to_end(key)
        if self._sampled(key):
            self._sample(key, self._blocks[key].tokens, i, now)

    def on_insert(self, key: Key, tokens: int, i: int, now: float) -> None:
        super().on_insert(key, tokens, i, now)
        self._recency[key] = None
        if self._sampled(key):
            self._sample(key, tokens, i, now)

    def victim(self, now: float) -> Key:
        if self.lru_leads():
            key = next(iter(self._recency))
            self.forget(key)
        else:
            key = super().victim(now)
        del self._recency[key]
        return key


# compiled classes share one ABC cache unless given their own (aicache.compiled_abc)
own_abc_caches(_TypeSeq, _GroupTable, SAECache, SAECacheSeed, SAECacheDuel)
