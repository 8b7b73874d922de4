"""How close can an online admission get to vLLM's ``fs`` tier under vLLM's offload API?

``benchmarks/vllm_tier.py`` runs the real engine; this script replays the same request
sequence through a model of the scheduler side of vLLM 0.32's native offloading stack
(no model, no engine: seconds instead of ten minutes), so that many admission rules can be
compared, and bounds what any rule with a given feature set can reach.

The model (:class:`StackSim`), one request at a time as the benchmark runs them:

* the engine's prefix cache: ``--max-blocks`` + 15 usable blocks in one free queue; a
  finished request's blocks join its tail in reverse order; new blocks come from its head;
* the offload connector's lookup from the first block the engine cache misses: a chunk in
  the host-DRAM tier is a host hit; else the SSD tier is asked, and a HIT is promoted into
  DRAM (which may evict) and the request deferred; the scan stops at the first MISS, and
  repeats while promotions were started (a deferred request is looked up again);
* the store: after prefill, the request's chunks from the end of its hit range (from 0
  when it had no external hit, as vLLM 0.32's connector does) are offered to DRAM, which
  evicts its least recently used unpinned chunks (chunks a request loads are pinned, the
  request's own keys protected); every chunk newly stored in DRAM is cascaded to the SSD
  tier (the *offer*); with ``REQUEST_LEVEL`` the chunks already in DRAM are offered too;
* a finished request refreshes the recency of every chunk it loaded or stored, its first
  chunk most recent (``LRUCachePolicy.on_request_finished``).

The SSD tier is ``fs`` (writes every offer) or an admission (:class:`Rule`) fed the
events the real tier gets: offers (with the request's id, session and turn, the chunk's
position), lookups on DRAM misses, and, for rules that decide later than the offer, the
chunk's eviction from DRAM (the bytes exist until then) and its reuses while in DRAM —
what a tier could learn from a ``CachePolicy`` in the same process.

The model is checked against the engine's records (``docs/results/vllm-tier/*.json``):
``--check`` prints the model's writes and hits for ``none``, ``fs``, ``E2`` and the oracle
beside the engine's.

The bound. For a feature set F known when a rule must decide (at the chunk's offer, or
at its DRAM eviction), the best any deterministic rule on F can do is a fractional
knapsack over the cells of F: every chunk of a cell is written or none, a cell costs its
chunks' writes and gains the SSD loads ``fs`` served for them after that decision point.
Filling cells by gain per write up to the write budget gives an upper bound on the
external hits of every rule using F (it ignores that a load counts only in a run of
held chunks, which can only lower a rule's hits). ``--json`` prints rules and bounds.

    python benchmarks/vllm_admission_bound.py [--workload agent --seed 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_tier  # noqa: E402  (the replay the engine benchmark runs)

BLOCK = vllm_tier.BLOCK
Key = int


# ----------------------------------------------------------------------------- replay
@dataclass
class Req:
    """One request: its chunk keys (chained, one per full block), prompt length, and what
    a client knows about it."""

    idx: int
    keys: list[Key]
    tokens: int
    session: str
    turn: int
    time: float


def requests_of(rp: vllm_tier.Replay) -> list[Req]:
    out: list[Req] = []
    for i, p in enumerate(rp.prompts):
        keys: list[Key] = []
        prev = 0
        for j in range(len(p) // BLOCK):
            prev = hash((prev, tuple(p[j * BLOCK:(j + 1) * BLOCK])))
            keys.append(prev)
        out.append(Req(i, keys, len(p), rp.sessions[i], rp.turns[i], rp.times[i]))
    return out


# ----------------------------------------------------------------------------- SSD tier rules
@dataclass(slots=True)
class Ev:
    """What a tier can know about a chunk it has seen offered."""

    E: int = 0                #: re-offers (the chunk left DRAM and was recomputed)
    R: int = 0                #: requests that asked the tier for it (DRAM misses)
    dram_reuse: int = 0       #: requests that hit it in DRAM (what a CachePolicy sees)
    offers: int = 0
    first_req: int = -1
    first_turn: int = -1
    pos: int = -1             #: chunk index in the offering request
    req_chunks: int = -1      #: the offering request's full chunks
    req_hit: bool = False     #: the offering request had a hit before this chunk


@dataclass(slots=True)
class Offer:
    req: Req
    pos: int                  #: chunk index in the request
    prefix_hit: int           #: chunks of the request served from a cache (any level)
    in_dram: bool             #: a REQUEST_LEVEL re-offer of a chunk already in DRAM


class Rule:
    """An SSD tier's admission. ``offer`` returns True to write the chunk now;
    ``dram_evict`` (rules with ``at_eviction``) True to write it as DRAM evicts it."""

    name = "rule"
    at_eviction = False
    request_level = False
    async_lookup = False

    def offer(self, k: Key, ev: Ev, o: Offer) -> bool:
        return False

    def dram_evict(self, k: Key, ev: Ev) -> bool:
        return False

    def referenced(self, k: Key) -> None:
        """A request asked the SSD tier for ``k`` (once per request)."""


class FullDuplicate(Rule):
    """vLLM's ``fs`` tier: writes every offer; its lookups are asynchronous (a key's first
    lookup answers RETRY and the scan goes on; the answer comes a step later)."""

    name = "fs"
    async_lookup = True

    def offer(self, k: Key, ev: Ev, o: Offer) -> bool:
        return True


class Nothing(Rule):
    name = "none"


class TierAdmission(Rule):
    """The admission ``SariaSSDTier`` runs (``chunk_tier.make_admission(name)`` behind the
    tier's ``AdmissionGate``), fed the calls the tier gets: an offer per chunk newly stored
    in DRAM and not held, a reference per request asking the tier for a chunk.
    ``continues`` is the client hint a request carries (``hint``; None: not sent)."""

    def __init__(self, name: str, capacity: int,
                 continues: Callable[[Req], bool | None] | None = None,
                 label: str | None = None) -> None:
        from aicache.integrations.chunk_tier import AdmissionGate, make_admission
        self.gate = AdmissionGate(make_admission(name), capacity)
        self.name = label or name
        self.continues = continues

    @staticmethod
    def _sk(k: Key) -> tuple[str, bytes]:
        return "model", k.to_bytes(8, "big", signed=True)

    def offer(self, k: Key, ev: Ev, o: Offer) -> bool:
        from aicache.integrations.chunk_tier import Offer as TierOffer
        hint = self.continues(o.req) if self.continues is not None else None
        return self.gate.offer(self._sk(k), TierOffer(str(o.req.idx), (o.pos + 1) * BLOCK,
                                                      o.req.time, o.req.tokens, hint))

    def referenced(self, k: Key) -> None:
        self.gate.reference(self._sk(k))


class KeySet(Rule):
    """Writes exactly a fixed key set at its first offer (the oracle)."""

    def __init__(self, keys: set[Key], name: str = "oracle") -> None:
        self.keys = keys
        self.name = name

    def offer(self, k: Key, ev: Ev, o: Offer) -> bool:
        return k in self.keys


class AtEviction(Rule):
    """Decide when DRAM evicts the chunk (the bytes exist until then: SARIA's placement of
    admission), on its counters then: ``E`` re-offers, ``R`` SSD lookups plus reuses while
    in DRAM. ``saria``: SARIA's E2∨R8 as at a simulator eviction (this eviction counted);
    else write when the chunk was reused at least ``min_reuse`` times. E2 with prewrite
    still decides re-offers."""

    at_eviction = True

    def __init__(self, name: str, min_reuse: int = 1, saria: bool = False) -> None:
        self.name = name
        self.min_reuse = min_reuse
        self.saria = saria

    def offer(self, k: Key, ev: Ev, o: Offer) -> bool:
        return ev.E + 1 >= 2

    def dram_evict(self, k: Key, ev: Ev) -> bool:
        reuse = ev.R + ev.dram_reuse
        if self.saria:
            return ev.E + 1 >= 2 or reuse >= 8
        return reuse >= self.min_reuse


class AtOffer(Rule):
    """Write at an offer when ``pred(evidence, offer)``; E2 with prewrite decides the rest.
    ``request_level``: the tier asks for REQUEST_LEVEL offload, so a request that finds
    the chunk in DRAM offers it again (``Offer.in_dram``) — reuse seen while the bytes are
    still in DRAM."""

    def __init__(self, name: str, pred: Callable[[Ev, Offer], bool],
                 request_level: bool = False) -> None:
        self.name = name
        self.pred = pred
        self.request_level = request_level

    def offer(self, k: Key, ev: Ev, o: Offer) -> bool:
        return ev.E + 1 >= 2 or self.pred(ev, o)


# ----------------------------------------------------------------------------- the stack
@dataclass
class Counts:
    writes: int = 0           #: chunks written to the SSD tier
    ext_hits: int = 0         #: chunk loads served by the SSD tier (external hits)
    host_hits: int = 0
    device_hits: int = 0
    computed_chunks: int = 0
    offers: int = 0
    promote_fail: int = 0
    per_request: list[tuple[int, int, int]] = field(default_factory=list)  # (device, host, ext)


@dataclass
class Trace:
    """Per chunk, what happened under ``fs`` (the bound's input)."""

    offers: dict[Key, list[tuple[int, int, int]]] = field(default_factory=dict)  # req, pos, hit
    loads: dict[Key, list[int]] = field(default_factory=dict)               # req of each load
    evictions: dict[Key, list[int]] = field(default_factory=dict)           # req at eviction
    dram_hits: dict[Key, list[int]] = field(default_factory=dict)
    #: per chunk, its counters at each DRAM eviction: (request, E, R + reuses in DRAM)
    eviction_evidence: dict[Key, list[tuple[int, int, int]]] = field(default_factory=dict)


class StackSim:
    """The scheduler side of vLLM's offloading stack for one replay (module docstring)."""

    def __init__(self, reqs: Sequence[Req], gpu_blocks: int, dram_chunks: int, rule: Rule,
                 trace: Trace | None = None) -> None:
        self.reqs = reqs
        self.gpu_cap = gpu_blocks - 1  # block 0 is the null block
        self.dram_cap = dram_chunks
        self.rule = rule
        self.c = Counts()
        self.trace = trace
        # engine prefix cache: free queue of cached block hashes (LRU first); in-use blocks
        # are not in it. Uncached free blocks are counted, not named.
        self.gpu_free: OrderedDict[Key, None] = OrderedDict()
        self.gpu_cached: set[Key] = set()
        self.gpu_uncached_free = self.gpu_cap
        # DRAM tier: key -> rank (LRU order), pinned keys
        self.dram: dict[Key, int] = {}
        self.rank = 0
        self.ssd: set[Key] = set()
        self.ev: dict[Key, Ev] = {}
        self.cur = -1
        self.prev_stored: list[Key] = []
        self.reuse_seen: dict[Key, int] = {}
        self.prev_failed: tuple[Req, list[Key], int] | None = None
        self.prev_refresh: tuple[list[Key], list[Key]] | None = None

    # -- DRAM
    def _dram_insert(self, k: Key) -> None:
        self.rank += 1
        self.dram[k] = self.rank

    def _dram_make_room(self, n: int, protected: set[Key], pinned: set[Key]) -> bool:
        """Evict ``n`` least recent unpinned, unprotected chunks (all or none)."""
        free = self.dram_cap - len(self.dram)
        need = n - free
        if need <= 0:
            return True
        cands = sorted((r, k) for k, r in self.dram.items()
                       if k not in protected and k not in pinned)
        if len(cands) < need:
            return False
        for _, k in cands[:need]:
            del self.dram[k]
            self._evicted(k)
        return True

    def _evicted(self, k: Key) -> None:
        ev = self.ev.get(k)
        if self.trace is not None:
            self.trace.evictions.setdefault(k, []).append(self.cur)
            if ev is not None:
                self.trace.eviction_evidence.setdefault(k, []).append(
                    (self.cur, ev.E, ev.R + ev.dram_reuse))
        if self.rule.at_eviction and ev is not None and k not in self.ssd:
            if self.rule.dram_evict(k, ev):
                self.ssd.add(k)
                self.c.writes += 1

    def _reused_in_dram(self, r: Req, keys: Iterable[Key]) -> None:
        """Reuses a DRAM ``CachePolicy`` sees (a load from DRAM, or a store of a chunk
        already there), once per request."""
        for k in keys:
            if self.reuse_seen.get(k) == r.idx:
                continue
            self.reuse_seen[k] = r.idx
            ev = self.ev.get(k)
            if ev is not None:
                ev.dram_reuse += 1
            if self.trace is not None:
                self.trace.dram_hits.setdefault(k, []).append(r.idx)

    # -- the SSD tier
    def _tier_lookup(self, k: Key, seen: set[Key]) -> bool:
        if k not in seen:
            seen.add(k)
            self.rule.referenced(k)
            ev = self.ev.get(k)
            if ev is not None:
                ev.R += 1
        return k in self.ssd

    def _tier_offer(self, k: Key, o: Offer) -> None:
        self.c.offers += 1
        ev = self.ev.get(k)
        if ev is None:
            ev = self.ev[k] = Ev(first_req=o.req.idx, first_turn=o.req.turn, pos=o.pos,
                                 req_chunks=len(o.req.keys), req_hit=o.prefix_hit > 0)
        elif not o.in_dram:
            ev.E += 1
        ev.offers += 1
        if self.trace is not None:
            self.trace.offers.setdefault(k, []).append((o.req.idx, o.pos, o.prefix_hit))
        if k in self.ssd:
            return
        if self.rule.offer(k, ev, o):
            self.ssd.add(k)
            self.c.writes += 1

    # -- one request
    def run(self) -> Counts:
        for r in self.reqs:
            self.cur = r.idx
            self._request(r)
        return self.c

    def _request(self, r: Req) -> None:
        keys, n = r.keys, len(r.keys)
        g = 0
        while g < n and keys[g] in self.gpu_cached:
            g += 1
        for k in keys[:g]:  # touched: in use, out of the free queue
            self.gpu_free.pop(k, None)
        seen: set[Key] = set()
        probed: set[Key] = set()
        promoted: set[Key] = set()
        # In this request's first scheduler step the previous request's DRAM stores are
        # still write-pending (the worker reports them after this step's stores): not
        # evictable, and a lookup finding one defers the request, as a started promotion
        # does. That step also retries the previous request's failed store and applies its
        # recency refresh, after this request's own store if it runs in that step.
        pending = set(self.prev_stored)
        first = True
        while True:  # a deferred request is looked up again (a step later) until nothing defers it
            again = False
            h = 0
            for k in keys[g:]:
                if k in self.dram:
                    again |= k in pending
                    h += 1
                    continue
                if self.rule.async_lookup and k not in probed:
                    probed.add(k)  # RETRY: the scan goes on, the request is deferred
                    again = True
                    continue
                if not self._tier_lookup(k, seen):
                    break
                if not self._dram_make_room(1, {k}, pending):
                    self.c.promote_fail += 1
                    break
                self._dram_insert(k)
                pending.add(k)
                promoted.add(k)
                again = True
                h += 1
            if not again:
                break
            if first:
                self._finish_previous(pending)
                first = False
            pending = set()  # writes and promotions finished before the next lookup
        hit = keys[g:g + h]
        ext = sum(1 for k in hit if k in promoted)
        if self.trace is not None:
            for k in hit:
                if k in promoted:
                    self.trace.loads.setdefault(k, []).append(r.idx)
        self.c.ext_hits += ext
        self.c.host_hits += h - ext
        self.c.device_hits += g
        self.c.computed_chunks += n - g - h
        self.c.per_request.append((g, h - ext, ext))
        self._reused_in_dram(r, [k for k in hit if k not in promoted])
        self._gpu_alloc(math.ceil(r.tokens / BLOCK) - g)
        stored: list[Key] = []
        ok = True
        if h > 0:
            # hits are loaded asynchronously: this step pins them; the request computes
            # (and stores) a step later, once the loads completed
            if first:
                self._finish_previous(pending | set(hit))
                first = False
            cand = keys[0 if self.rule.request_level else g + h:]
            ok, stored = self._store(r, cand, set(), g + h)
        else:
            # no external hit: vLLM's connector stores from chunk 0 (GPU hits included)
            cand = keys
            ok, stored = self._store(r, cand, pending, g)
            if first:
                self._finish_previous(pending | set(stored))
        self.prev_stored = stored
        self.prev_failed = None if ok else (r, cand, g + h)
        self.prev_refresh = (keys, list(hit) + list(cand))
        self._gpu_free_request(keys, r.tokens)

    def _store(self, r: Req, cand: list[Key], pinned: set[Key], prefix_hit: int,
               ) -> tuple[bool, list[Key]]:
        """``prepare_store(cand)`` on DRAM, then the cascade of what it newly stored."""
        if not cand:
            return True, []
        keys = r.keys
        new = [k for k in cand if k not in self.dram]
        existing = [k for k in cand if k in self.dram]
        self._reused_in_dram(r, existing)  # prepare_store reports them reused to the policy
        if new and not self._dram_make_room(len(new), set(cand), pinned):
            return False, []
        for k in new:
            self._dram_insert(k)
        for k in new:  # complete_store cascades them to the SSD tier
            self._tier_offer(k, Offer(r, keys.index(k), prefix_hit, False))
        if self.rule.request_level:
            for k in existing:
                self._tier_offer(k, Offer(r, keys.index(k), prefix_hit, True))
        return True, new

    def _finish_previous(self, pinned: set[Key]) -> None:
        """The previous request's retried store (if its own failed) and recency refresh
        (``on_request_finished``: its first chunk most recent)."""
        if self.prev_failed is not None:
            r, cand, hit = self.prev_failed
            self.prev_failed = None
            self._store(r, cand, pinned, hit)
        if self.prev_refresh is not None:
            keys, recorded = self.prev_refresh
            self.prev_refresh = None
            pos = {k: i for i, k in enumerate(keys)}
            for k in sorted(set(recorded) & self.dram.keys(), key=pos.__getitem__, reverse=True):
                self._dram_insert(k)

    # -- engine cache
    def _gpu_alloc(self, nblocks: int) -> None:
        for _ in range(nblocks):
            if self.gpu_uncached_free > 0:
                self.gpu_uncached_free -= 1
                continue
            k, _ = self.gpu_free.popitem(last=False)
            self.gpu_cached.discard(k)

    def _gpu_free_request(self, keys: list[Key], tokens: int) -> None:
        nfull = len(keys)
        blocks = math.ceil(tokens / BLOCK)
        # the uncached tail block is reused first (vLLM prepends it to the free queue);
        # cached blocks join the queue's end in reverse order (the first block last)
        self.gpu_uncached_free += blocks - nfull
        for k in reversed(keys):
            if k in self.gpu_free:
                continue
            self.gpu_cached.add(k)
            self.gpu_free[k] = None


def simulate(reqs: Sequence[Req], a: argparse.Namespace, rule: Rule,
             trace: Trace | None = None) -> Counts:
    return StackSim(reqs, a.max_blocks + 16, a.dram_chunks, rule, trace).run()


class WriteAll(FullDuplicate):
    """Our tier writing every offer (synchronous lookups): the loads any admission of ours
    can serve, chunk by chunk."""

    name = "write-all"
    async_lookup = False


# ----------------------------------------------------------------------------- rules measured
def rules(reqs: Sequence[Req]) -> list[Rule]:
    """The candidates: online ones (no parameter fitted to a replay) and two with what a
    client could send (``hint:*``; ``hint:continues`` knows the conversation's future). E2
    and the hint run the tier's own admission objects."""
    last_turn: dict[str, int] = {}
    for r in reqs:
        last_turn[r.session] = max(last_turn.get(r.session, 0), r.turn)
    meta = 8 * len({k for r in reqs for k in r.keys})  # the tier's default: 8 × its SSD slots
    return [
        TierAdmission("E2", meta),
        AtEviction("evict:E2|R8", saria=True),
        AtEviction("evict:reused", min_reuse=1),
        AtOffer("request-level:reused", lambda ev, o: o.in_dram, request_level=True),
        AtOffer("offer:prefix-hit", lambda ev, o: o.prefix_hit > 0),
        AtOffer("hint:turn>=1", lambda ev, o: o.req.turn >= 1),
        TierAdmission("hint", meta, lambda r: r.turn < last_turn[r.session], "hint:continues"),
    ]


# ----------------------------------------------------------------------------- the bound
Cell = tuple[object, ...]
FEATURES: dict[str, Callable[["ChunkFacts"], object]] = {
    "prompt": lambda f: f.req_chunks // 8,        # the offering request's length (8-chunk bins)
    "position": lambda f: f.pos // 8,             # the chunk's place in it
    "turn0": lambda f: f.turn == 0,               # a first turn (a client can send it)
    "prefix-hit": lambda f: f.prefix_hit > 0,     # the request reused a cached prefix
    "reuse@evict": lambda f: min(f.reuse_at_evict, 2),  # reuses seen before DRAM evicted it
    "E@evict": lambda f: min(f.E_at_evict, 1),
    "continues": lambda f: f.continues,           # its conversation sends another turn
    "chunk": lambda f: f.key,                     # every chunk its own cell: the oracle
}
FEATURE_SETS: list[tuple[str, ...]] = [
    (), ("prompt",), ("prompt", "position"), ("prompt", "position", "turn0", "prefix-hit"),
    ("prompt", "position", "turn0", "prefix-hit", "reuse@evict", "E@evict"),
    ("continues",),
    ("prompt", "position", "turn0", "prefix-hit", "reuse@evict", "E@evict", "continues"),
    ("chunk",),
]


@dataclass(slots=True)
class ChunkFacts:
    key: Key
    loads: int            #: loads a write-everything tier of ours served
    req_chunks: int
    pos: int
    turn: int
    prefix_hit: int
    reuse_at_evict: int
    E_at_evict: int
    continues: bool


def chunk_facts(reqs: Sequence[Req], tr: Trace) -> list[ChunkFacts]:
    last_turn: dict[str, int] = {}
    for r in reqs:
        last_turn[r.session] = max(last_turn.get(r.session, 0), r.turn)
    out: list[ChunkFacts] = []
    for k, offers in tr.offers.items():
        ri, pos, hit = offers[0]
        r = reqs[ri]
        loads = tr.loads.get(k, [])
        evs = tr.eviction_evidence.get(k, [])
        if loads:  # the most a rule can know while its bytes exist and its first load is ahead
            before = [e for e in evs if e[0] < loads[0]] or [e for e in evs if e[0] <= loads[0]]
            E, reuse = (before[-1][1], before[-1][2]) if before else (0, 0)
        else:  # never loaded: its counters at its last eviction (counters only grow)
            E, reuse = (evs[-1][1], evs[-1][2]) if evs else (0, 0)
        out.append(ChunkFacts(k, len(loads), len(r.keys), pos, r.turn, hit, reuse, E,
                              r.turn < last_turn[r.session]))
    return out


def hit_bound(facts: Sequence[ChunkFacts], feats: Sequence[str], budget: float) -> float:
    """An upper bound on the loads any rule deciding on ``feats`` can serve with at most
    ``budget`` chunk writes. The rule decides while the chunk's bytes are in DRAM; a chunk
    read back is judged on its counters at its last DRAM eviction before its first load
    (the most it can show while that load can still be served), one never read back on
    its counters at its last eviction (counters only grow, so a rule writing once they
    reach a level writes it if ever then). A chunk not written in time may still be
    written at its re-offer by an oracle (serving all its loads but the first).

    The LP relaxation's dual: for a price λ per write, a cell either writes all its
    chunks early (gain Σ loads − λ·size) or leaves each chunk to the oracle (gain
    max(0, loads − 1 − λ) each); ``λ·budget + Σ_cells max(…)`` bounds every feasible
    rule for every λ ≥ 0, and is minimised over λ by bisection on its subgradient."""
    cells: dict[Cell, list[int]] = {}
    for f in facts:
        cells.setdefault(tuple(FEATURES[n](f) for n in feats), []).append(f.loads)
    groups = [(sum(v), len(v), sorted((x - 1 for x in v if x >= 2), reverse=True))
              for v in cells.values()]

    def dual(lam: float) -> tuple[float, float]:
        val, cost = lam * budget, 0.0
        for total, size, late in groups:
            early = total - lam * size
            lv = sum(b - lam for b in late if b > lam)
            if early >= lv:
                val += early
                cost += size
            else:
                val += lv
                cost += sum(1 for b in late if b > lam)
        return val, cost

    lo, hi = 0.0, float(max((f.loads for f in facts), default=1)) + 1.0
    best = min(dual(lo)[0], dual(hi)[0])
    for _ in range(60):
        mid = (lo + hi) / 2
        val, cost = dual(mid)
        best = min(best, val)
        if cost > budget:
            lo = mid
        else:
            hi = mid
    return best


def writes_needed(facts: Sequence[ChunkFacts], feats: Sequence[str], target: float) -> float:
    """The fewest chunk writes at which :func:`hit_bound` reaches ``target`` (bisection;
    ``inf`` if even writing everything does not)."""
    n = len(facts)
    if hit_bound(facts, feats, n) < target:
        return math.inf
    lo, hi = 0.0, float(n)
    for _ in range(40):
        mid = (lo + hi) / 2
        if hit_bound(facts, feats, mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


# ----------------------------------------------------------------------------- the engine's record
def engine_record(a: argparse.Namespace) -> dict | None:
    """The engine benchmark's records of this replay in ``docs/results/vllm-tier`` (their
    systems merged), if there are any."""
    names = {"mooncake": ("mooncake-512x4.json", "mooncake-hint-512x4.json"),
             "agent": ("agent-seed5-512x4.json",)}[a.workload]
    if (a.workload == "agent" and a.seed != 5) or a.max_blocks != 48 or a.dram_fraction != 0.1:
        return None
    out: dict | None = None
    for name in names:
        path = Path(__file__).resolve().parents[1] / "docs" / "results" / "vllm-tier" / name
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        if out is None:
            out = rec
        else:
            for k, v in rec["systems"].items():
                out["systems"].setdefault(k, v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=("mooncake", "agent"), default="mooncake")
    ap.add_argument("--trace", default=str(vllm_tier._default_trace()))
    ap.add_argument("--sample", type=int, default=None,
                    help="keep 1 conversation in N (default 8 on mooncake, 20 on agent)")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--max-blocks", type=int, default=48)
    ap.add_argument("--dram-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-bytes", type=int, default=65536,
                    help="payload bytes per chunk (the engine benchmark's 512x4 model: 65536)")
    ap.add_argument("--header-bytes", type=int, default=4096,
                    help="our slab store's header per chunk")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.sample is None:
        a.sample = 20 if a.workload == "agent" else 8
    if a.sample < 1 or a.max_blocks < 1 or not 0 < a.dram_fraction <= 1:
        sys.stderr.write("vllm_admission_bound: --sample and --max-blocks must be positive, "
                         "--dram-fraction in (0, 1]\n")
        sys.exit(2)
    from aicache.errors import BadInput
    try:
        rp = (vllm_tier.mooncake(Path(a.trace), a.sample, a.requests, a.max_blocks, a.seed)
              if a.workload == "mooncake" else
              vllm_tier.agent(a.seed, a.sample, a.requests, a.max_blocks))
    except BadInput as e:
        sys.stderr.write(f"vllm_admission_bound: {e}\n")
        sys.exit(2)
    reqs = requests_of(rp)
    a.working_set = rp.working_set
    a.dram_chunks = max(a.max_blocks + 1, round(a.dram_fraction * rp.working_set))

    fs_trace = Trace()
    fs = simulate(reqs, a, FullDuplicate(), fs_trace)
    all_trace = Trace()
    every = simulate(reqs, a, WriteAll(), all_trace)
    systems: dict[str, Counts] = {"none": simulate(reqs, a, Nothing()), "fs": fs,
                                  "write-all": every}
    for rule in rules(reqs):
        systems[rule.name] = simulate(reqs, a, rule)
    systems["oracle"] = simulate(reqs, a, KeySet(set(fs_trace.loads)))

    fs_bytes = fs.writes * a.chunk_bytes
    ours = a.chunk_bytes + a.header_bytes

    def row(name: str, c: Counts) -> dict[str, object]:
        b = c.writes * (a.chunk_bytes if name == "fs" else ours)
        return {"system": name, "chunks_written": c.writes, "external_hit_chunks": c.ext_hits,
                "host_hit_chunks": c.host_hits, "device_hit_chunks": c.device_hits,
                "computed_chunks": c.computed_chunks,
                "ssd_bytes_over_fs": b / fs_bytes if fs_bytes else None,
                "external_hits_over_fs": c.ext_hits / fs.ext_hits if fs.ext_hits else None,
                "computed_over_fs": c.computed_chunks / fs.computed_chunks
                if fs.computed_chunks else None}

    table = [row(n, c) for n, c in systems.items()]
    budget = 0.5 * fs_bytes / ours  # chunk writes within half of fs's bytes
    target = 0.95 * fs.ext_hits
    facts = chunk_facts(reqs, all_trace)
    bounds = []
    for fset in FEATURE_SETS:
        ub = hit_bound(facts, fset, budget)
        need = writes_needed(facts, fset, target)
        bounds.append({"features": list(fset), "hits_bound_over_fs": ub / fs.ext_hits,
                       "bytes_needed_for_0.95_over_fs":
                           need * ours / fs_bytes if math.isfinite(need) else None})
    residency = sorted(evs[0][0] - tr_off[0][0] for k, tr_off in all_trace.offers.items()
                       if (evs := all_trace.eviction_evidence.get(k)))
    gaps: list[int] = []
    last_of: dict[str, int] = {}
    for r in reqs:
        if r.session in last_of:
            gaps.append(r.idx - last_of[r.session])
        last_of[r.session] = r.idx
    gaps.sort()
    read_back = [f for f in facts if f.loads]
    structure = {
        "conversations": len({r.session for r in reqs}),
        "single_request_conversations": sum(1 for s_ in {r.session for r in reqs}
                                            if sum(1 for r in reqs if r.session == s_) == 1),
        "chunks": len(facts), "chunks_first_offered_by_turn0": sum(f.turn == 0 for f in facts),
        "chunks_read_back": len(read_back), "loads": sum(f.loads for f in read_back),
        "read_back_from_turn0": sum(f.turn == 0 for f in read_back),
        "read_back_reused_before_first_load": sum(f.reuse_at_evict > 0 for f in read_back),
        "read_back_in_continuing_conversations": sum(f.continues for f in read_back),
        "chunks_in_continuing_conversations": sum(f.continues for f in facts),
        "dram_residency_requests_median": residency[len(residency) // 2] if residency else None,
        "requests_between_turns_median": gaps[len(gaps) // 2] if gaps else None}
    check = None
    rec = engine_record(a)
    if rec is not None:
        check = {}
        for name, sim_name in (("none", "none"), ("fs", "fs"), ("saria:E2", "E2"),
                               ("saria:oracle", "oracle"), ("saria:hint", "hint:continues")):
            e = rec["systems"].get(name)
            if e is None:
                continue
            c = systems[sim_name]
            eng_written = e.get("chunks_written", e["ssd_bytes_written"] // max(1, a.chunk_bytes))
            check[name] = {"engine": [eng_written, e["external_hit_tokens"] // BLOCK,
                                      e["host_hit_tokens"] // BLOCK, e["device_hit_tokens"] // BLOCK],
                           "model": [c.writes, c.ext_hits, c.host_hits, c.device_hits]}
    out = {"workload": a.workload, "requests": len(reqs), "working_set_chunks": rp.working_set,
           "dram_chunks": a.dram_chunks, "write_budget_chunks": budget,
           "target_external_hit_chunks": target, "structure": structure,
           "systems": table, "bounds": bounds,
           "model_check": check}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{a.workload}: {len(reqs)} requests, W = {rp.working_set} chunks, DRAM "
          f"{a.dram_chunks}; goal: ≤ {budget:.0f} chunk writes (0.5× fs bytes), ≥ "
          f"{target:.0f} external hit chunks (0.95× fs)")
    print("structure: " + ", ".join(f"{k} {v}" for k, v in structure.items()))
    if check:
        print("model vs engine (writes, external hits, host hits, device hits):")
        for name, c in check.items():
            print(f"  {name:13} model {c['model']}  engine {c['engine']}")
    print(f"{'system':22} {'writes':>7} {'ext hits':>8} {'bytes/fs':>8} {'hits/fs':>8} "
          f"{'computed/fs':>11}")
    for r in table:
        print(f"{r['system']:22} {r['chunks_written']:7} {r['external_hit_chunks']:8} "
              f"{r['ssd_bytes_over_fs']:8.3f} {r['external_hits_over_fs']:8.3f} "
              f"{r['computed_over_fs']:11.3f}")
    print("bound on external hits / fs at 0.5× fs bytes, and bytes / fs needed for 0.95:")
    for bd in bounds:
        need = bd["bytes_needed_for_0.95_over_fs"]
        print(f"  {'+'.join(bd['features']) or '(none)':70} {bd['hits_bound_over_fs']:.3f} "
              f"{'unreachable' if need is None else f'{need:.3f}'}")


if __name__ == "__main__":
    main()
