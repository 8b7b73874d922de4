"""SARIA's cache index: SSD admission bookkeeping, reload planning and lazy partial
promotion over one radix tree (:class:`KVIndex`). The rules it applies live beside it:
the admission rule and seam in :mod:`aicache.kv.admission`, the promotion formulas in
:mod:`aicache.kv.promotion`, bandwidth sharing and the multi-source reload scheduler in
:mod:`aicache.kv.transfer`. The design, its invariants and where we depart from the
published design ("the seed") are in ``docs/design/saria.md``.

Everything here is pure: told ``now``, no I/O, no clock, no randomness. The simulator
(``aicache.sim.kv``) and the real tiered store (DRAM slot pool + SSD slab files) drive the
*same* :class:`KVIndex`; the index says what to move and the driver moves bytes.

Driver protocol (one request)::

    plan = index.lookup(ns, block_keys, now)        # ReloadPlan: a source per block
    index.begin(plan, now)                          # pin path, count reuse, maybe prewrite
    coordinator.submit(job, plan.dram_bytes, plan.ssd_bytes, now)  # schedule the reads
    coordinator.advance(t) -> finished jobs         # (or coordinator.next_event())
    ... prefill of the uncached suffix ...
    moves = index.finish(plan, block_keys, now, tokens=..., attrs=...)  # store + promote
    # moves.ssd_writes / prewrites / dram_inserts / promotions / dram_drops / ssd_drops
    # say which copies to make or free; index.stats holds the admission counters.

Other entry points: ``index.store(ns, keys, now, tokens=...)`` offloads KV computed
outside a plan (``index.put`` also reclaims idle metadata, as ``finish`` does);
``index.make_dram_room(bytes, now)`` frees DRAM on the allocator's demand;
``index.drop_ssd(node, moves)`` frees an SSD copy. Driver events (a real store's, never
the simulator's): ``release`` aborts a begun request, ``recovered_path`` and ``adopt_ssd``
rebuild the chains and copies found on the device at recovery, ``lose_copy`` forgets a
copy the driver could not keep (returns the :class:`Moves` that free its slot),
``stop_ssd_admissions`` ends SSD writes (a full disk).

Decisions (where the seed is silent):
* ``R_b`` counts every later request whose prompt contains the block — served from a
  tier or recomputed after its copies were lost (popularity, not luck with residency).
* ``E_b`` is incremented when a block is chosen at a DRAM eviction boundary *before*
  the admission test, so ``E2`` persists a block at its second eviction (or, with
  prewrite, when it re-enters DRAM with ``E_b + 1 ≥ θ_E``).
* ``t_reuse`` for the P_τ guard is the last reuse *or (re)store* of the block: a block
  just computed is as "recently used" as one just reused.
* ``P_target`` is rounded down and capped at the number of SSD hits; the promoted blocks
  are the earliest SSD-sourced blocks of the prefix (the ones every later turn needs).
* A block that cannot get DRAM (everything pinned) is simply not cached in DRAM.
* Writes: by default a write is readable when issued (the real store writes before it
  applies the next call). With ``deferred_writes`` (the simulator) a write is queued — the
  block is a persistence candidate, served from DRAM — until the driver calls
  ``complete_write``; a block evicted meanwhile keeps its DRAM copy as the write's source
  ("write before reclaiming", *draining*) until then, and a DRAM copy dropped otherwise
  cancels the write (the block is lost from both tiers). Prewrites start only when the
  write queue drains within the block's DRAM lead time (``prewrite_write_bps``). The
  :class:`~aicache.kv.transfer.TransferCoordinator` runs the write queue beside the reloads,
  sharing the SSD.
* One call's :class:`Moves` is net, because a driver applies it only after the call: a
  block whose SSD copy the call dropped and then re-admits is *kept* (its bytes never
  left the device — ``stats.ssd_keeps``, not a write), and a block written and then
  dropped within the call is never written (``stats.ssd_writes_withdrawn``). So the
  simulator's ``ssd_write_bytes`` are exactly the bytes a real store writes. LRU order
  and capacity are those of a rewrite, so hits do not depend on this.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from aicache.errors import BadInput
from aicache.kv.admission import (
    AdmissionRule, HeldEvictionObserver, RuleAdmission, SSDAdmission,
)
from aicache.kv.eviction import BlockEvictionPolicy, make_dram_policy
from aicache.kv.models import BlockGeometry
from aicache.kv.promotion import PromotionMode, PromotionParams, promotion_target
from aicache.kv.radix import KVObject, Namespace, RadixNode, RadixTree, Tier
from aicache.kv.request_attrs import RequestAttrs as RequestAttrs  # re-exported: the index's API

#: weight of the newest eviction in the DRAM characteristic-time average (about the last
#: 32 evictions count)
_T_CHAR_GAIN = 1.0 / 32
_DRAM, _SSD, _HBM = int(Tier.DRAM), int(Tier.SSD), int(Tier.HBM)
_KV, _CK = KVObject.KV, KVObject.CHECKPOINT


# --------------------------------------------------------------------------- planning
class LookupMode(str, Enum):
    UNIFIED = "unified"          #: SARIA: longest prefix across tiers, sources interleave
    TIER_PREFIX = "tier-prefix"  #: LMCache: DRAM prefix, then SSD, stop at the next switch


@dataclass(slots=True)
class ReloadPlan:
    """Where every block of the reusable prefix comes from, in prompt order.

    ``nodes[i]`` is read from ``sources[i]``; ``checkpoint`` (hybrid models) is the node
    whose recurrent checkpoint resumes computation at the end of the prefix.
    ``known_blocks`` counts leading blocks the metadata knows (resident or not).
    """

    namespace: Namespace
    nodes: list[RadixNode]
    sources: list[Tier]
    hit_tokens: int = 0
    hbm_blocks: int = 0
    dram_blocks: int = 0
    ssd_blocks: int = 0
    dram_bytes: int = 0
    ssd_bytes: int = 0
    known_blocks: int = 0
    checkpoint: RadixNode | None = None
    checkpoint_source: Tier = Tier.NONE

    @property
    def hit_blocks(self) -> int:
        return len(self.nodes)


@dataclass(slots=True)
class Moves:
    """What a driver must do with bytes after an index call (the simulator only counts).

    ``ssd_writes``: copy the node's objects DRAM→SSD (``prewrites`` ⊆ those, started
    while the block stays in DRAM); ``dram_inserts``: keep the HBM copy in DRAM;
    ``promotions`` ⊆ dram_inserts; ``dram_drops`` / ``ssd_drops``: free those copies.
    Net: ``ssd_writes`` and ``ssd_drops`` never share a node (see :meth:`KVIndex._ssd_write`
    and :meth:`KVIndex.drop_ssd`), so a driver may apply them in any order.
    """

    ssd_writes: list[RadixNode] = field(default_factory=list)
    prewrites: list[RadixNode] = field(default_factory=list)
    dram_inserts: list[RadixNode] = field(default_factory=list)
    promotions: list[RadixNode] = field(default_factory=list)
    dram_drops: list[RadixNode] = field(default_factory=list)
    ssd_drops: list[RadixNode] = field(default_factory=list)
    #: queued writes (of earlier calls, :attr:`KVIndexParams.deferred_writes`) to abandon:
    #: their DRAM source is gone, so the block is lost from both tiers
    write_cancels: list[RadixNode] = field(default_factory=list)
    #: a store call's path, in key order (``finish``/``store``/``put``): the nodes the
    #: driver's payloads belong to, so it need not find them again
    stored: list[RadixNode] = field(default_factory=list)


@dataclass(slots=True)
class IndexStats:
    """Admission and traffic counters of one :class:`KVIndex`."""

    ssd_writes: int = 0
    ssd_write_bytes: int = 0
    prewrites: int = 0
    ssd_reads: int = 0
    ssd_read_bytes: int = 0
    dram_read_bytes: int = 0
    dram_evictions: int = 0
    ssd_evictions: int = 0
    admitted_at_eviction: int = 0
    rejected_at_eviction: int = 0
    promotions: int = 0
    promotions_blocked: int = 0
    dram_store_failures: int = 0
    #: copies the driver reported lost (:meth:`KVIndex.lose_copy`): failed writes, blocks
    #: that failed their checksum — not evictions
    copies_lost: int = 0
    #: re-admissions of a block whose SSD copy this same call had dropped: its bytes were
    #: never freed (the driver applies one call's Moves at once), so it is kept, not written
    ssd_keeps: int = 0
    ssd_keep_bytes: int = 0
    #: SSD writes cancelled because the same call dropped the copy again before the
    #: driver could write it (tiny SSD, long prompt)
    ssd_writes_withdrawn: int = 0
    #: deferred writes abandoned before completing (the DRAM source went first)
    ssd_writes_cancelled: int = 0
    #: prewrites not started: the write queue would not drain within the block's lead time
    prewrites_gated: int = 0
    #: deferred writes the driver reported complete
    ssd_writes_completed: int = 0


@dataclass(frozen=True)
class KVIndexParams:
    """Configuration of one :class:`KVIndex` (capacities in bytes; 0 disables a tier)."""

    model: BlockGeometry  #: a :class:`~aicache.kv.models.ModelSpec`, or an engine's chunks
    dram_bytes: int
    ssd_bytes: int
    admission: AdmissionRule = AdmissionRule()
    promotion: PromotionParams = PromotionParams()
    lookup: LookupMode = LookupMode.UNIFIED
    prewrite: bool = True
    dram_policy: str = "lru"
    dram_policy_params: dict[str, Any] = field(default_factory=dict)
    metadata_window: float = 3600.0
    #: replaces the E/R rule's decisions (``admission`` still names full-duplicate);
    #: ``None`` = the seed's rule
    admission_policy: SSDAdmission | None = None
    #: a write is on the SSD only when the driver calls :meth:`KVIndex.complete_write`
    #: (the simulator's write queue); until then the block is served from DRAM. False: a
    #: write is readable when issued (a driver that writes before it applies the next call)
    deferred_writes: bool = False
    #: write rate (bytes/s) the prewrite gate assumes: a prewrite starts only if the queued
    #: writes and this one drain within the block's expected DRAM lead time. None: no gate
    prewrite_write_bps: float | None = None


class KVIndex:
    """SARIA's cache manager over a :class:`RadixTree`: DRAM/SSD accounting, admission,
    reload planning and promotion. Capacity invariants: ``dram_used ≤ dram_capacity`` and
    ``ssd_used ≤ ssd_capacity`` after every call; the DRAM policy holds exactly the nodes
    with a DRAM copy that are not ``draining``; ``ssd_lru`` exactly those with an SSD copy
    or a queued write (``writing``)."""

    def __init__(self, params: KVIndexParams) -> None:
        self.p = params
        m = params.model
        self.kv_bpt = m.kv_bytes_per_token
        self.ck_bytes = m.checkpoint_bytes
        self.ck_every = (m.checkpoint_tokens // m.block_tokens) if m.hybrid else 0
        if m.hybrid and (self.ck_every < 1 or m.checkpoint_tokens % m.block_tokens):
            raise BadInput(f"model {m.name}: checkpoint_tokens must be a multiple of block_tokens")
        self.tree = RadixTree(params.metadata_window)
        self.dram_capacity = int(params.dram_bytes)
        self.ssd_capacity = int(params.ssd_bytes)
        self.dram_used = 0
        self.ssd_used = 0
        self.policy: BlockEvictionPolicy = make_dram_policy(
            params.dram_policy, max(1, self.dram_capacity // max(1, m.block_bytes)),
            **params.dram_policy_params)
        self.ssd_lru: OrderedDict[RadixNode, None] = OrderedDict()
        self.stats = IndexStats()
        self.adm: SSDAdmission = params.admission_policy or RuleAdmission(params.admission)
        self._held_observer = self.adm if isinstance(self.adm, HeldEvictionObserver) else None
        self._rule = params.admission
        self.prom = params.promotion
        #: False after :meth:`stop_ssd_admissions`: no SSD write is issued any more
        self.ssd_admitting = True
        # SSD copies dropped / written by the call whose Moves is ``_op_moves`` (not yet
        # applied by the driver); see :meth:`_ssd_write` and :meth:`drop_ssd`
        self._op_moves: Moves | None = None
        self._op_dropped: set[RadixNode] = set()
        self._op_written: set[RadixNode] = set()
        #: deferred writes issued and not complete (node -> bytes): SSD space reserved,
        #: not readable from SSD, never an SSD eviction victim
        self.writing: dict[RadixNode, int] = {}
        self.pending_write_bytes = 0
        #: evicted from DRAM while their write runs: out of the DRAM policy and of
        #: ``dram_used`` (the room is handed on), the DRAM copy serves reads until the
        #: write completes
        self.draining: set[RadixNode] = set()
        self._t_char = math.inf  # see dram_lead_time

    @property
    def rule(self) -> AdmissionRule:
        """The E/R rule (``everything`` = full duplicate). Setting it (the real store
        stops admissions on a full device this way) also replaces any admission policy."""
        return self._rule

    @rule.setter
    def rule(self, rule: AdmissionRule) -> None:
        self._rule = rule
        self.adm = RuleAdmission(rule)
        self._held_observer = None

    # ------------------------------------------------------------------ helpers
    def size(self, node: RadixNode) -> int:
        """Bytes of all objects of ``node`` (KV of its tokens + its checkpoint)."""
        return node.tokens * self.kv_bpt + (self.ck_bytes if node.has_ckpt else 0)

    def checkpoint_flags(self, n_blocks: int, start_depth: int = 0) -> list[bool]:
        """Which of ``n_blocks`` blocks (depth start+1..) end at a checkpoint boundary."""
        if not self.ck_every:
            return [False] * n_blocks
        e = self.ck_every
        return [(start_depth + i + 1) % e == 0 for i in range(n_blocks)]

    # ------------------------------------------------------------------ read path
    def lookup(self, ns: Namespace, keys: Sequence[Hashable], now: float) -> ReloadPlan:
        """The reload plan for a prompt's block keys. Read-only (changes no state)."""
        known = self.tree.match(ns, keys)
        nodes: list[RadixNode] = []
        sources: list[Tier] = []
        tier_prefix = self.p.lookup is LookupMode.TIER_PREFIX
        phase = 0  # tier-prefix: 0 = in the DRAM/HBM run, 1 = in the SSD run
        for n in known:
            loc = n.kv_loc
            if loc & _HBM:
                src = Tier.HBM
            elif loc & _DRAM:
                src = Tier.DRAM
            elif loc & _SSD:
                src = Tier.SSD
            else:
                break
            if tier_prefix:
                if phase == 0 and src is Tier.SSD:
                    phase = 1
                elif phase == 1:
                    if not loc & _SSD:
                        break
                    src = Tier.SSD
            nodes.append(n)
            sources.append(src)
        ck_node: RadixNode | None = None
        ck_src = Tier.NONE
        if self.ck_every:
            cut = 0
            for i in range(len(nodes) - 1, -1, -1):
                nd = nodes[i]
                if nd.has_ckpt and nd.ck_loc:
                    cut = i + 1
                    ck_node = nd
                    cl = nd.ck_loc
                    ck_src = Tier.HBM if cl & _HBM else Tier.DRAM if cl & _DRAM else Tier.SSD
                    break
            del nodes[cut:]
            del sources[cut:]
        plan = ReloadPlan(ns, nodes, sources, known_blocks=len(known))
        kv = self.kv_bpt
        tok = hbm = d = s = db = sb = 0
        for n, src in zip(nodes, sources):
            t = n.tokens
            tok += t
            if src is Tier.DRAM:
                d += 1
                db += t * kv
            elif src is Tier.SSD:
                s += 1
                sb += t * kv
            else:
                hbm += 1
        if ck_node is not None:
            if ck_src is Tier.DRAM:
                db += self.ck_bytes
            elif ck_src is Tier.SSD:
                sb += self.ck_bytes
        plan.hit_tokens, plan.hbm_blocks, plan.dram_blocks, plan.ssd_blocks = tok, hbm, d, s
        plan.dram_bytes, plan.ssd_bytes = db, sb
        plan.checkpoint, plan.checkpoint_source = ck_node, ck_src
        return plan

    def begin(self, plan: ReloadPlan, now: float, *, count_reuse: bool = True) -> Moves:
        """A request starts reading ``plan``: pin its path, count reuse (R_b), refresh
        recency, and start prewrites for blocks whose R_b reached θ_R. Without
        ``count_reuse`` R_b is left alone (a driver whose caller counts reuse itself: an
        engine tier's gate, whose counters these nodes are)."""
        moves = Moves()
        if not plan.nodes:
            return moves
        self.tree.pin(plan.nodes[-1])
        self.tree.touch(plan.nodes, now)
        st = self.stats
        st.ssd_read_bytes += plan.ssd_bytes
        st.dram_read_bytes += plan.dram_bytes
        st.ssd_reads += plan.ssd_blocks
        pol, ssd_lru = self.policy, self.ssd_lru
        adm, prewrite = self.adm, self.p.prewrite and self.ssd_capacity > 0
        for n, src in zip(plan.nodes, plan.sources):
            if count_reuse:
                n.R += 1
                adm.on_reference(n, now)
            n.t_reuse = now
            if src is Tier.DRAM:
                n.t_access = now
                self._dram_touch(n, now, moves)
                if (prewrite and not n.kv_loc & _SSD and n not in self.writing
                        and adm.prewrite_now(n, now) and self._prewrite_fits(n, now)):
                    if self._ssd_write(n, now, moves):
                        moves.prewrites.append(n)
                        st.prewrites += 1
            elif src is Tier.SSD:
                ssd_lru.move_to_end(n)
        return moves

    # ------------------------------------------------------------------ write path
    def finish(self, plan: ReloadPlan, keys: Sequence[Hashable], now: float, *,
               tokens: Sequence[int], attrs: RequestAttrs | None = None,
               known: Sequence[RadixNode] = ()) -> Moves:
        """Prefill is done: unpin, :meth:`store` the request's blocks past the reused
        prefix, then promote SSD hits per the promotion mode. ``known``: as for
        :meth:`store` (e.g. the plan's nodes, when ``keys`` extends them)."""
        if plan.nodes:
            self.tree.unpin(plan.nodes[-1])
        moves = self.store(plan.namespace, keys, now, tokens=tokens, attrs=attrs,
                           skip=plan.hit_blocks, reused=plan.known_blocks, known=known)
        if self.dram_capacity > 0 and plan.ssd_blocks:
            self._promote(plan, now, moves)
        self.tree.reclaim(now)
        return moves

    def store(self, ns: Namespace, keys: Sequence[Hashable], now: float, *,
              tokens: Sequence[int], attrs: RequestAttrs | None = None, skip: int = 0,
              reused: int = 0, moves: Moves | None = None,
              known: Sequence[RadixNode] = ()) -> Moves:
        """Offload a prompt's KV from HBM: every block from index ``skip`` on gets a DRAM
        copy (blocks already in DRAM are refreshed), evicting per the DRAM policy; blocks
        are written through to SSD under full duplicate, or prewritten when the admission
        rule says they would qualify at their next eviction. Without DRAM (``gds-only``)
        blocks go straight to SSD. The first ``reused`` blocks were known before this
        request (recomputed after losing their copies): the request reused their
        context, so their R_b grows as a hit's would — R_b measures popularity, not luck
        with residency. ``known``: :meth:`RadixTree.match` of ``keys`` just before (the
        path is walked once). The path is :attr:`Moves.stored`."""
        moves = moves if moves is not None else Moves()
        path = self.tree.insert(ns, keys, now, tokens,
                                self.checkpoint_flags(len(keys)) if self.ck_every else None,
                                known)
        moves.stored = path
        if attrs is not None:
            off = 0
            types = attrs.block_types
            for i, n in enumerate(path):
                if n.session is None:
                    n.session, n.turn, n.offset = attrs.session, attrs.turn, off
                    if types is not None and i < len(types):
                        n.token_type = types[i]
                off += n.tokens
        dram_on = self.dram_capacity > 0
        ssd_on = self.ssd_capacity > 0
        rule, adm = self.rule, self.adm
        adm.on_store(path, skip, now, attrs)
        prewrite = self.p.prewrite and ssd_on
        pol = self.policy
        for i in range(skip, len(path)):
            n = path[i]
            if i < reused:
                n.R += 1
                adm.on_reference(n, now)
            n.t_reuse = now
            n.t_access = now
            if dram_on:
                if n.kv_loc & _DRAM:
                    self._dram_touch(n, now, moves)
                elif not self._dram_insert(n, now, moves, guard=False):
                    self.stats.dram_store_failures += 1
                if ssd_on and not n.kv_loc & _SSD and n not in self.writing:
                    if rule.everything:
                        self._ssd_write(n, now, moves)
                    elif (prewrite and n.kv_loc & _DRAM and adm.prewrite_at_store(n, now)
                          and self._prewrite_fits(n, now)):
                        if self._ssd_write(n, now, moves):
                            moves.prewrites.append(n)
                            self.stats.prewrites += 1
            elif ssd_on and not n.kv_loc & _SSD and n not in self.writing:
                self._ssd_write(n, now, moves)  # gds-only: KV lives on SSD only
            elif ssd_on and n in self.ssd_lru:
                self.ssd_lru.move_to_end(n)
        return moves

    def _dram_touch(self, n: RadixNode, now: float, moves: Moves) -> None:
        """A hit on / re-store of a DRAM block. A draining one (evicted, write still
        running) is reused: it rejoins the DRAM policy if room can be made (its write goes
        on as a prewrite); otherwise its copy still goes when the write completes."""
        if n not in self.draining:
            self.policy.on_access(n, now)
            return
        size = self.size(n)
        if self.dram_used + size > self.dram_capacity and not self.make_dram_room(
                size, now, moves):
            return
        self.draining.discard(n)
        self.dram_used += size
        self.policy.on_insert(n, now)

    def dram_lead_time(self, now: float) -> float:
        """How long a block just used is expected to stay in DRAM: the DRAM's
        characteristic time, a moving average of the idle time of the blocks it evicted
        (``inf`` before the first eviction). The next victim's own idle time would not
        do: a victim stored by the same request has been idle for no time at all."""
        return self._t_char

    def _prewrite_fits(self, n: RadixNode, now: float) -> bool:
        """The seed's condition for a prewrite, "sufficient lead time and write
        bandwidth": the write queue, with this block, drains within the lead time."""
        bps = self.p.prewrite_write_bps
        if bps is None:
            return True
        if (self.pending_write_bytes + self.size(n)) / bps <= self.dram_lead_time(now):
            return True
        self.stats.prewrites_gated += 1
        return False

    def _promote(self, plan: ReloadPlan, now: float, moves: Moves) -> None:
        mode = self.prom.mode
        if mode is PromotionMode.ZERO:
            return
        ssd_hits = [n for n, s in zip(plan.nodes, plan.sources) if s is Tier.SSD]
        if mode is PromotionMode.FULL:
            target, guard = len(ssd_hits), False
        else:
            target, guard = promotion_target(self.prom.r, plan.dram_blocks, plan.ssd_blocks), True
        done = 0
        for n in ssd_hits:
            if done >= target:
                break
            if n.kv_loc & _DRAM:  # stored meanwhile by another request: already counts
                done += 1
                continue
            if not self._dram_insert(n, now, moves, guard=guard):
                self.stats.promotions_blocked += target - done
                break
            moves.promotions.append(n)
            self.stats.promotions += 1
            done += 1

    def _dram_insert(self, n: RadixNode, now: float, moves: Moves, *, guard: bool) -> bool:
        size = self.size(n)
        if size > self.dram_capacity:
            return False
        if self.dram_used + size > self.dram_capacity and not self.make_dram_room(
                size, now, moves, guard=guard):
            return False
        self.dram_used += size
        self.tree.set_location(n, _KV, Tier.DRAM, True)
        if n.has_ckpt:
            self.tree.set_location(n, _CK, Tier.DRAM, True)
        n.t_access = now
        self.policy.on_insert(n, now)
        moves.dram_inserts.append(n)
        return True

    def make_dram_room(self, need: int, now: float, moves: Moves | None = None, *,
                       guard: bool = False) -> bool:
        """DRAM pressure: evict until ``need`` more bytes fit. Each victim's E_b grows; an
        admitted, not-yet-persisted victim is written to SSD before its DRAM copy goes.
        With ``guard`` (promotion), only blocks idle for P_τ may be evicted. False when
        no evictable block is left (everything pinned or protected)."""
        moves = moves if moves is not None else Moves()
        cap = self.dram_capacity
        p_tau = self.prom.p_tau
        limit = self.prom.scan_limit
        while self.dram_used + need > cap:
            victim = None
            seen = 0
            for n in self.policy.candidates(now):
                if n.pins:
                    continue
                if guard and now - n.t_reuse < p_tau:
                    seen += 1
                    if seen >= limit:
                        break
                    continue
                victim = n
                break
            if victim is None:
                return False
            self.evict_dram(victim, now, moves)
        return True

    def evict_dram(self, n: RadixNode, now: float, moves: Moves) -> None:
        """Remove ``n``'s DRAM copy at an eviction boundary (E_b += 1, then admission)."""
        n.E += 1
        st = self.stats
        st.dram_evictions += 1
        idle = max(0.0, now - n.t_access)
        self._t_char = idle if math.isinf(self._t_char) else (
            self._t_char + _T_CHAR_GAIN * (idle - self._t_char))
        if self.ssd_capacity > 0 and self.ssd_admitting and not n.kv_loc & _SSD:
            if self._rule.everything or self.adm.at_eviction(n, now):
                st.admitted_at_eviction += 1
                if n not in self.writing:
                    self._ssd_write(n, now, moves)
            else:
                st.rejected_at_eviction += 1
                if n in self.writing:
                    self._cancel_write(n, moves)
        elif self._held_observer is not None and n.kv_loc & _SSD:
            self._held_observer.on_evict_held(n, now)
        self.policy.on_remove(n)
        self.dram_used -= self.size(n)
        if n in self.writing:
            # write before reclaiming: the DRAM copy is the write's source and serves
            # reads until :meth:`complete_write`; its room already goes to the block being
            # offloaded, which waits in HBM for the write (an offload stall, not a loss)
            self.draining.add(n)
            return
        self._free_dram(n, moves)

    def _ssd_write(self, n: RadixNode, now: float, moves: Moves) -> bool:
        """Admit ``n`` to SSD (making room by SSD LRU). True when a write was issued.

        A block whose SSD copy was dropped earlier in the *same* call (same ``moves``) is
        still physically on the device: a driver frees copies only when it applies the
        call's Moves. Writing it again would be pure drive wear, so it is *kept*: its
        drop is withdrawn from ``moves.ssd_drops``, it is re-linked at the MRU end (as a
        write would be) and counted in ``stats.ssd_keeps``, not ``ssd_writes``; False is
        returned. Capacity and LRU order are exactly those of a rewrite, so hits do not
        change — only the writes the simulator counts and the store performs, which
        therefore agree byte for byte."""
        size = self.size(n)
        cap = self.ssd_capacity
        if size > cap or not self.ssd_admitting:
            return False
        lru = self.ssd_lru
        writing = self.writing
        while self.ssd_used + size > cap:
            victim = None
            for v in lru:
                if not v.pins and v not in writing:
                    victim = v
                    break
            if victim is None:
                return False
            self.drop_ssd(victim, moves)
        self.ssd_used += size
        lru[n] = None
        st = self.stats
        self._scope(moves)
        if n in self._op_dropped or not self.p.deferred_writes:
            self.tree.set_location(n, _KV, Tier.SSD, True)
            if n.has_ckpt:
                self.tree.set_location(n, _CK, Tier.SSD, True)
        else:
            writing[n] = size
            self.pending_write_bytes += size
        if n in self._op_dropped:
            self._op_dropped.discard(n)
            moves.ssd_drops.remove(n)
            st.ssd_evictions -= 1
            st.ssd_keeps += 1
            st.ssd_keep_bytes += size
            return False
        self._op_written.add(n)
        st.ssd_writes += 1
        st.ssd_write_bytes += size
        moves.ssd_writes.append(n)
        self.adm.on_write(n, size, now)
        return True

    def complete_write(self, n: RadixNode, now: float) -> Moves:
        """The driver finished writing ``n`` (:attr:`KVIndexParams.deferred_writes`): its
        SSD copy becomes readable; a draining block's DRAM copy is freed now (listed in
        ``dram_drops``). A write that was cancelled meanwhile changes nothing."""
        moves = Moves()
        self._scope(moves)
        size = self.writing.pop(n, None)
        if size is None:
            return moves
        self.pending_write_bytes -= size
        self.tree.set_location(n, _KV, Tier.SSD, True)
        if n.has_ckpt:
            self.tree.set_location(n, _CK, Tier.SSD, True)
        self.stats.ssd_writes_completed += 1
        if n in self.draining:
            self.draining.discard(n)
            self._free_dram(n, moves)
        return moves

    def _free_dram(self, n: RadixNode, moves: Moves) -> None:
        """Clear ``n``'s DRAM copy (its bytes already left ``dram_used``)."""
        self.tree.set_location(n, _KV, Tier.DRAM, False)
        if n.has_ckpt:
            self.tree.set_location(n, _CK, Tier.DRAM, False)
        moves.dram_drops.append(n)

    def _cancel_write(self, n: RadixNode, moves: Moves) -> None:
        """Abandon ``n``'s queued write (its DRAM source goes): SSD space freed, the
        write uncounted; the driver drops it from its queue (``write_cancels``)."""
        size = self.writing.pop(n)
        self.pending_write_bytes -= size
        del self.ssd_lru[n]
        self.ssd_used -= size
        st = self.stats
        st.ssd_writes -= 1
        st.ssd_write_bytes -= size
        self._scope(moves)
        if n in self._op_written:  # issued by this same call: never reached the driver
            self._op_written.discard(n)
            moves.ssd_writes.remove(n)
            if n in moves.prewrites:
                moves.prewrites.remove(n)
                st.prewrites -= 1
            st.ssd_writes_withdrawn += 1
            return
        st.ssd_writes_cancelled += 1
        moves.write_cancels.append(n)

    def _scope(self, moves: Moves) -> None:
        """One driver call = one Moves: a new Moves means the previous one was applied."""
        if moves is not self._op_moves:
            self._op_moves = moves
            self._op_dropped.clear()
            self._op_written.clear()

    def drop_ssd(self, n: RadixNode, moves: Moves) -> None:
        """Free ``n``'s SSD copy (SSD capacity eviction); its metadata stays.

        A copy written earlier in this same call never reached the device (the driver has
        not applied the Moves yet): the write is withdrawn instead — it leaves
        ``moves.ssd_writes`` / ``prewrites`` and the write counters — so every write the
        index counts is one the driver performs."""
        size = self.size(n)
        del self.ssd_lru[n]
        self.ssd_used -= size
        self.tree.set_location(n, _KV, Tier.SSD, False)
        if n.has_ckpt:
            self.tree.set_location(n, _CK, Tier.SSD, False)
        st = self.stats
        self._scope(moves)
        if n in self._op_written:
            self._op_written.discard(n)
            moves.ssd_writes.remove(n)
            st.ssd_writes -= 1
            st.ssd_write_bytes -= size
            if n in moves.prewrites:
                moves.prewrites.remove(n)
                st.prewrites -= 1
            st.ssd_writes_withdrawn += 1
            return
        st.ssd_evictions += 1
        moves.ssd_drops.append(n)
        self._op_dropped.add(n)


    # ------------------------------------------------------------------ driver events
    def release(self, plan: ReloadPlan) -> None:
        """Abort a begun request: unpin its prefix, store nothing."""
        if plan.nodes:
            self.tree.unpin(plan.nodes[-1])

    def put(self, ns: Namespace, keys: Sequence[Hashable], now: float, *,
            tokens: Sequence[int], attrs: RequestAttrs | None = None,
            known: Sequence[RadixNode] = ()) -> Moves:
        """Save blocks outside a request (LMCache ``put``): :meth:`store` with no reuse
        counted, then reclaim idle metadata as :meth:`finish` does."""
        moves = self.store(ns, keys, now, tokens=tokens, attrs=attrs, known=known)
        self.tree.reclaim(now)
        return moves

    def recovered_path(self, ns: Namespace, keys: Sequence[Hashable],
                       tokens: Sequence[int]) -> list[RadixNode]:
        """Recovery: the nodes of a chain of blocks found on the SSD, created as metadata
        only (no copy, touched at time 0); :meth:`adopt_ssd` then attaches each copy."""
        return self.tree.insert(ns, keys, 0.0, tokens)

    def adopt_ssd(self, n: RadixNode, *, E: int = 0, R: int = 0) -> bool:
        """Recovery: ``n``'s bytes were found on the SSD, written by an earlier process.

        The copy joins the MRU end of the SSD LRU (adopt in write order to restore the
        LRU order) with no write counted — the bytes are already on the device — and the
        persisted counters are merged (``E``/``R`` never shrink). False, changing nothing,
        when ``n`` already has an SSD copy or the tier is full: the driver frees the slot.
        """
        size = self.size(n)
        if n.kv_loc & _SSD or self.ssd_used + size > self.ssd_capacity:
            return False
        self.ssd_used += size
        self.ssd_lru[n] = None
        self.tree.set_location(n, _KV, Tier.SSD, True)
        if n.has_ckpt:
            self.tree.set_location(n, _CK, Tier.SSD, True)
        n.E, n.R = max(n.E, E), max(n.R, R)
        return True

    def lose_copy(self, n: RadixNode, tier: Tier) -> Moves:
        """The driver could not keep ``n``'s copy in ``tier`` (a failed SSD write, a block
        that failed its checksum, bytes it could not stage): forget it.

        Not an eviction: ``E_b`` and the eviction counters stay, ``stats.copies_lost``
        grows. The returned Moves lists the copy in ``ssd_drops`` / ``dram_drops`` so the
        driver frees its slot as for any drop (a fresh Moves: it opens a new call scope,
        as every call does). Losing a copy ``n`` does not have returns an empty Moves.
        """
        moves = Moves()
        self._scope(moves)
        size = self.size(n)
        if tier is Tier.SSD and n.kv_loc & _SSD:
            del self.ssd_lru[n]
            self.ssd_used -= size
            self.tree.set_location(n, _KV, Tier.SSD, False)
            if n.has_ckpt:
                self.tree.set_location(n, _CK, Tier.SSD, False)
            moves.ssd_drops.append(n)
        elif tier is Tier.DRAM and n.kv_loc & _DRAM:
            if n in self.draining:
                self.draining.discard(n)
            else:
                self.policy.on_remove(n)
                self.dram_used -= size
            if n in self.writing:  # the write's source is gone: lost from both tiers
                self._cancel_write(n, moves)
            self._free_dram(n, moves)
        elif tier not in (Tier.SSD, Tier.DRAM):
            raise ValueError(f"lose_copy: {tier!r} is not a tier the index manages")
        else:
            return moves
        self.stats.copies_lost += 1
        return moves

    def stop_ssd_admissions(self) -> None:
        """No SSD write is issued from now on (the device is full); copies already on the
        SSD keep serving, keep their LRU order and can still be evicted or lost."""
        self.ssd_admitting = False
