"""SSD admission that follows the best of several rules, judged by shadow caches run online.

:class:`ShadowFollowAdmission` runs every competing rule (the field's peers, SARIA's seed
rule, the budgeted admission) as a *shadow*: the rule's own instance, fed the same events
the real index sends, deciding writes into a metadata-only SSD (block → bytes, LRU, the real
SSD's capacity; no bytes move). Each shadow counts the bytes it wrote (over the budget's
window, in a ring of buckets) and the tokens it would have served from SSD that the real
DRAM did not hold (a decayed sum: recent hits weigh most). The real admission *follows* one
shadow: it writes a block when the followed shadow holds it after the event (so the real
SSD converges on that shadow's contents), within the write budget.

Which shadow: among those whose writes over the last ``min(window, elapsed + pace)``
fit the budget's accrual over that span, the one with the most recent hits; a switch needs
``hysteresis`` more hits than the followed one (or the followed one no longer fitting).
When none fits, the one that wrote least. The governor: a real write must fit the window's
allowance (:class:`~aicache.kv.write_budget.WriteBudget`, the hard limit) and the same
schedule (written ≤ accrual since the start plus one ``pace`` of it), so a burst early in a
long window cannot spend what the rest of it needs.

Why it should hold against a peer ``P`` whose write volume is the budget: ``P``'s shadow
writes what ``P`` writes (same rule, same events), so it fits whenever ``P`` keeps to the
schedule, and the followed shadow has at least its hits. What breaks the argument, and is
measured rather than assumed: (a) the shadows see the real DRAM, not their own (a real SSD
hit is promoted into DRAM and changes later evictions); (b) a write a rule makes at store
while the index's bandwidth gate would hold it until eviction is booked at once; (c) switching leaves the real SSD holding a mix; (d) a peer front-loading its
writes beyond the schedule does not fit while it does.

Cost per request: the shadows' work is one pass over the request's stored blocks and its
references per shadow (dictionary look-ups, no allocation on a hit), plus an SSD insert per
shadow write; :meth:`ShadowFollowAdmission.stats` reports the counts.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aicache.kv.admission import SSDAdmission
from aicache.kv.radix import RadixNode, Tier
from aicache.kv.write_budget import WriteBudget

if TYPE_CHECKING:
    from aicache.kv.saria import RequestAttrs

BlockBytes = Callable[[RadixNode], int]

#: the span a follower's hits decay over, and the schedule's slack (seconds)
PACE = 600.0
#: ring buckets over the budget's window (the shadows' write sums; selection only)
BUCKETS = 64
#: which shadows fit (module docstring): ``project`` (default), ``pace``, ``window``
SCHEDULES = ("project", "pace", "window")
_DRAM = int(Tier.DRAM)
_NEAR = int(Tier.DRAM) | int(Tier.HBM)


class ShadowCache:
    """One rule and its metadata-only SSD (module docstring). ``hits``: decayed hit tokens
    (as of ``t_hits``); ``hit_tokens``/``written``: totals; ``ring``: bytes written per
    bucket of the budget's window."""

    __slots__ = ("rule", "ssd", "used", "capacity", "hits", "t_hits", "hit_tokens",
                 "written", "writes", "ring", "ring_t", "label")

    def __init__(self, rule: SSDAdmission, capacity: int) -> None:
        self.rule = rule
        self.label = rule.label
        self.ssd: OrderedDict[RadixNode, int] = OrderedDict()
        self.used = 0
        self.capacity = capacity
        self.hits = 0.0
        self.t_hits = 0.0
        self.hit_tokens = 0
        self.written = 0
        self.writes = 0
        self.ring = [0] * BUCKETS
        self.ring_t = 0  #: the bucket index (absolute) the ring's newest slot holds

    def roll(self, bucket: int) -> None:
        """Advance the ring to absolute bucket ``bucket``, zeroing the slots passed."""
        gap = bucket - self.ring_t
        if gap <= 0:
            return
        ring = self.ring
        for b in range(self.ring_t + 1, self.ring_t + 1 + min(gap, BUCKETS)):
            ring[b % BUCKETS] = 0
        self.ring_t = bucket

    def write(self, node: RadixNode, size: int, now: float, bucket: int) -> None:
        ssd = self.ssd
        if size > self.capacity:
            return
        while self.used + size > self.capacity:
            _, s = ssd.popitem(last=False)
            self.used -= s
        ssd[node] = size
        self.used += size
        self.written += size
        self.writes += 1
        self.roll(bucket)
        self.ring[bucket % BUCKETS] += size
        self.rule.on_write(node, size, now)

    def hit(self, node: RadixNode, now: float, tau: float) -> None:
        self.ssd.move_to_end(node)
        t = node.tokens
        self.hit_tokens += t
        self.hits = self.hits * math.exp(-(now - self.t_hits) / tau) + t if now > self.t_hits \
            else self.hits + t
        if now > self.t_hits:
            self.t_hits = now

    def recent_hits(self, now: float, tau: float) -> float:
        return self.hits * math.exp(-(now - self.t_hits) / tau) if now > self.t_hits else self.hits

    def window_bytes(self, bucket: int, span_buckets: int) -> int:
        """Bytes written in the last ``span_buckets`` buckets (this one included)."""
        self.roll(bucket)
        ring = self.ring
        return sum(ring[b % BUCKETS] for b in range(bucket - span_buckets + 1, bucket + 1))


class ShadowFollowAdmission:
    """The shadow-following admission (module docstring)."""

    __slots__ = ("shadows", "budget", "size_of", "pace", "hysteresis", "cur", "t0",
                 "bucket_s", "_prerefd", "label", "switches", "followed_s", "_t_sel",
                 "shadow_events", "refused", "_alive", "schedule", "slack")

    def __init__(self, rules: Sequence[SSDAdmission], budget: WriteBudget, size_of: BlockBytes,
                 ssd_bytes: int, *, pace: float = PACE, hysteresis: float = 0.02,
                 schedule: str = "project", slack: float = 0.25) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")
        if not rules:
            raise ValueError("shadow-follow needs at least one rule to follow")
        cap = ssd_bytes if ssd_bytes > 0 else 1 << 62
        self.shadows = [ShadowCache(r, cap) for r in rules]
        self.budget = budget
        self.size_of = size_of
        self.pace = min(pace, budget.window)
        self.hysteresis = hysteresis
        self.cur = 0
        self.t0: float | None = None
        self.bucket_s = budget.window / BUCKETS
        #: blocks of the pending store whose reference the shadows already took
        self._prerefd: set[RadixNode] = set()
        self.label = "shadow-follow"
        self.switches = 0
        self.followed_s = [0.0] * len(self.shadows)  #: seconds each shadow was followed
        self._t_sel = 0.0
        self.shadow_events = 0  #: per-shadow event calls (the shadows' cost)
        self.refused = 0        #: followed decisions the governor refused
        self._alive = [True] * len(self.shadows)  #: per shadow: still serving the prompt
        self.schedule = schedule
        self.slack = slack

    # ------------------------------------------------------------------ selection
    def _bucket(self, now: float) -> int:
        return int(now // self.bucket_s)

    def _span(self, now: float) -> float:
        """The span the schedule holds over: the window, or the time so far plus a pace."""
        t0 = self.t0 if self.t0 is not None else now
        return min(self.budget.window, now - t0 + self.pace)

    def _select(self, now: float) -> None:
        if self.t0 is None:
            self.t0 = self._t_sel = now
        W = self.budget.window
        span = self._span(now) if self.schedule != "window" else W
        allow = self.budget.bytes_per_s * span
        if self.schedule == "project":  # the span's rate over the window, with a slack
            full = self.budget.bytes_per_s * W
            allow = min(full, full * (span / W) * (1.0 + self.slack * (1.0 - span / W)))
        nb = max(1, min(BUCKETS, math.ceil(span / self.bucket_s)))
        b = self._bucket(now)
        best, best_h, cheapest, least = -1, -1.0, 0, math.inf
        cur_fits, cur_h = False, 0.0
        for i, s in enumerate(self.shadows):
            w = s.window_bytes(b, nb)
            h = s.recent_hits(now, self.pace)
            if w < least:
                cheapest, least = i, w
            if w <= allow:
                if h > best_h:
                    best, best_h = i, h
                if i == self.cur:
                    cur_fits, cur_h = True, h
        pick = self.cur
        if best < 0:
            pick = cheapest
        elif not cur_fits or best_h > cur_h * (1.0 + self.hysteresis):
            pick = best
        self.followed_s[self.cur] += now - self._t_sel
        self._t_sel = now
        if pick != self.cur:
            self.cur = pick
            self.switches += 1

    def _governed(self, node: RadixNode, now: float) -> bool:
        """The followed shadow holds ``node``: write it if the budget allows."""
        if node not in self.shadows[self.cur].ssd:
            return False
        size = self.size_of(node)
        b = self.budget
        ok = ((self.schedule != "pace" or b.spent(now) + size <= b.bytes_per_s * self._span(now))
              and b.fits(size, now))
        self.refused += not ok
        return ok

    # ------------------------------------------------------------------ the index's events
    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        """Each shadow replays the request on its own SSD, with prefix semantics: it
        serves the prompt's blocks while each is in the real DRAM (or HBM) or on its SSD
        (an SSD hit); from its first miss on, every block is recomputed and (re)stored,
        so the rule is asked for a write at store. Blocks of the real miss known before
        this request (copies, or evicted or reused before) are referenced first (``R_b``
        as the index will count it; the index's own reference is then not passed on)."""
        self._select(now)
        shadows = self.shadows
        for s in shadows:
            s.rule.on_store(path, skip, now, attrs)
        pre = self._prerefd
        pre.clear()
        alive = self._alive
        for k in range(len(alive)):
            alive[k] = True
        b = self._bucket(now)
        size_of = self.size_of
        pace = self.pace
        for i in range(len(path)):
            n = path[i]
            cached = n.kv_loc & _NEAR
            known = i >= skip and (n.kv_loc != 0 or n.E > 0 or n.R > 0)
            if known:
                pre.add(n)
                n.R += 1
            for k, s in enumerate(shadows):
                if known:
                    s.rule.on_reference(n, now)
                if alive[k]:
                    if cached and (i < skip or known):
                        continue
                    if n in s.ssd:
                        s.hit(n, now, pace)
                        continue
                    alive[k] = False
                elif cached and i < skip and n in s.ssd:
                    continue
                if n not in s.ssd and s.rule.prewrite_at_store(n, now):
                    s.write(n, size_of(n), now, b)
            if known:
                n.R -= 1
            self.shadow_events += len(shadows)

    def on_reference(self, node: RadixNode, now: float) -> None:
        """A block the real cache serves (its shadows' hits are counted at the store, with
        the prompt), or a store's known block (already taken)."""
        if node in self._prerefd:
            self._prerefd.discard(node)
            return
        in_dram = node.kv_loc & _DRAM
        b = self._bucket(now)
        for s in self.shadows:
            s.rule.on_reference(node, now)
            if in_dram and node not in s.ssd and s.rule.prewrite_now(node, now):
                s.write(node, self.size_of(node), now, b)
        self.shadow_events += len(self.shadows)

    def on_evict_held(self, node: RadixNode, now: float) -> None:
        """The real DRAM evicts a block the real SSD holds: the shadows that lack it decide
        as at any eviction."""
        b = self._bucket(now)
        for s in self.shadows:
            if node not in s.ssd and s.rule.at_eviction(node, now):
                s.write(node, self.size_of(node), now, b)
        self.shadow_events += len(self.shadows)

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        self.on_evict_held(node, now)
        return self._governed(node, now)

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return self._governed(node, now)

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return self._governed(node, now)

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        self.budget.charge(size, now)

    # ------------------------------------------------------------------ report
    def stats(self) -> dict[str, object]:
        """Per shadow: bytes written, hit tokens, seconds followed; switches, refusals and
        the shadows' event calls."""
        return {"shadow_switches": self.switches, "shadow_refused": self.refused,
                "shadow_events": self.shadow_events,
                "shadows": {s.label: {"written_bytes": s.written, "hit_tokens": s.hit_tokens,
                                      "followed_s": round(self.followed_s[i], 3)}
                            for i, s in enumerate(self.shadows)}}
