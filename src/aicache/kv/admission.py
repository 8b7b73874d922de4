"""SSD admission: the seed's E/R rule (:class:`AdmissionRule`, :class:`RuleAdmission`), the
:class:`SSDAdmission` seam of :class:`~aicache.kv.saria.KVIndex`, and policies beyond the
seed's rule.

* :class:`OracleAdmission` — the offline frontier: it knows the whole trace.
* :class:`LearnedAdmission` — online: the seed's rule, plus blocks persisted at their
  first eviction when their learned chance of being read back is at least the average
  evicted block's, within a write budget (:class:`ReuseEstimator`, engine-neutral).
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from aicache.errors import BadInput
from aicache.kv.radix import RadixNode
from aicache.kv.request_attrs import RequestAttrs


@dataclass(frozen=True, slots=True)
class AdmissionRule:
    """``admit(b) = [E_b ≥ θ_E] ∨ [R_b ≥ θ_R]`` (either threshold may be off), or admit
    everything (``full-duplicate``)."""

    theta_e: int | None = 2
    theta_r: int | None = None
    everything: bool = False

    _PAT = re.compile(r"^(?:e(\d+))?(?:\s*(?:\||∨|v|\+|or)\s*)?(?:r(\d+))?$")

    @classmethod
    def parse(cls, text: str) -> AdmissionRule:
        """``full-duplicate``, ``E3``, ``R8``, ``E2∨R8`` (also ``E2|R8``, ``E2+R8``)."""
        t = text.strip().lower()
        if t in ("full-duplicate", "fd", "all"):
            return cls(None, None, True)
        m = cls._PAT.match(t.replace(" ", ""))
        if not t or not m or not (m.group(1) or m.group(2)):
            raise BadInput(f"admission {text!r} is not full-duplicate, E<n>, R<n> or E<n>∨R<m>")
        e = int(m.group(1)) if m.group(1) else None
        r = int(m.group(2)) if m.group(2) else None
        if (e is not None and e < 1) or (r is not None and r < 1):
            raise BadInput(f"admission {text!r}: thresholds must be at least 1")
        return cls(e, r, False)

    @property
    def label(self) -> str:
        if self.everything:
            return "full-duplicate"
        parts = ([f"E{self.theta_e}"] if self.theta_e else []) + (
            [f"R{self.theta_r}"] if self.theta_r else [])
        return "∨".join(parts) or "none"

    def admit(self, e: int, r: int) -> bool:
        if self.everything:
            return True
        return (self.theta_e is not None and e >= self.theta_e) or (
            self.theta_r is not None and r >= self.theta_r)

    def prewrite_due(self, e: int, r: int) -> bool:
        """Would the block qualify now or at its next eviction (``E_b + 1``)?"""
        return self.admit(e + 1, r)


class SSDAdmission(Protocol):
    """The SSD admission decision of a :class:`KVIndex`, by node (the seam for policies
    that read more than ``E_b``/``R_b``: an offline oracle, a learned predictor).

    ``at_eviction``: the node is leaving DRAM (``E_b`` already counted) and has no SSD
    copy — write it first? ``prewrite_now``: a request just reused the node from DRAM
    (``R_b`` counted) — start its write while it stays in DRAM? ``prewrite_at_store``:
    the node was just (re)stored in DRAM — start its write? ``on_reference``: a request
    reused the node (``R_b`` just grew), served or recomputed; ``on_write``: the index
    issued an SSD write of ``size`` bytes; ``on_store``: a prompt's blocks ``path`` were
    stored, those from ``skip`` on offloaded now (before any of the per-node calls), by
    a request with ``attrs`` (None: unknown)."""

    label: str

    def at_eviction(self, node: RadixNode, now: float) -> bool: ...
    def prewrite_now(self, node: RadixNode, now: float) -> bool: ...
    def prewrite_at_store(self, node: RadixNode, now: float) -> bool: ...
    def on_reference(self, node: RadixNode, now: float) -> None: ...
    def on_write(self, node: RadixNode, size: int, now: float) -> None: ...
    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None: ...


@runtime_checkable
class HeldEvictionObserver(Protocol):
    """An admission that also hears of DRAM evictions of blocks that already have an SSD
    copy (the index asks :meth:`SSDAdmission.at_eviction` only for blocks without one):
    shadow caches of rules that write at eviction need every eviction."""

    def on_evict_held(self, node: RadixNode, now: float) -> None: ...


class IgnoresEvents:
    """The :class:`SSDAdmission` event hooks for a policy that decides from the node alone
    (``E_b``/``R_b``, or an oracle's counts fixed in advance): it learns nothing from
    references, writes or stores."""

    __slots__ = ()

    def on_reference(self, node: RadixNode, now: float) -> None:
        return None

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        return None

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        return None


class RuleAdmission(IgnoresEvents):
    """The seed's rule as an :class:`SSDAdmission`: at eviction ``admit(E_b, R_b)``;
    prewrite when ``R_b`` reached θ_R or ``E_b + 1`` would qualify."""

    __slots__ = ("rule", "label")

    def __init__(self, rule: AdmissionRule) -> None:
        self.rule = rule
        self.label = rule.label

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        return self.rule.admit(node.E, node.R)

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return self.rule.admit(node.E, node.R)

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return self.rule.prewrite_due(node.E, node.R)


class OracleAdmission(IgnoresEvents):
    """Persist exactly the blocks some later request will reference.

    At a block's DRAM eviction the oracle writes it to SSD iff a request that has not
    started yet references it (its prefix path, counted over the whole trace in advance):
    that request will find it on SSD instead of recomputing it. A block no later request
    references is never written; nothing is prewritten (a block still in DRAM serves its
    readers, and writing it before its eviction could only add writes). The counts are
    by prefix path, not by radix node, so metadata reclaimed and rebuilt is still known.

    It is a frontier, not a bound on every policy: with the SSD full, an admitted block
    may still be dropped (SSD LRU) before its reader comes. The driver calls
    :meth:`started` with each request's block keys when the request starts.
    """

    label = "oracle"
    __slots__ = ("_ids", "_remaining", "_memo")

    def __init__(self, prompts: Iterable[Sequence[Hashable]]) -> None:
        self._ids: dict[tuple[int, Hashable], int] = {}
        self._remaining: list[int] = [0]  # path id 0 = the root
        ids, rem = self._ids, self._remaining
        for keys in prompts:
            pid = 0
            for k in keys:
                nxt = ids.get((pid, k))
                if nxt is None:
                    nxt = ids[(pid, k)] = len(rem)
                    rem.append(0)
                rem[nxt] += 1
                pid = nxt
        self._memo: dict[RadixNode, int] = {}

    def started(self, keys: Sequence[Hashable]) -> None:
        """A request referencing ``keys`` started: it is no longer a future reader."""
        ids, rem = self._ids, self._remaining
        pid = 0
        for k in keys:
            pid = ids[(pid, k)]
            rem[pid] -= 1

    def future_references(self, node: RadixNode) -> int:
        """Requests not yet started whose prompts contain ``node``'s prefix."""
        pid = self._pid(node)
        return self._remaining[pid] if pid >= 0 else 0

    def _pid(self, node: RadixNode) -> int:
        memo = self._memo
        pid = memo.get(node)
        if pid is not None:
            return pid
        chain = []
        n: RadixNode | None = node
        while n is not None and n.parent is not None and n not in memo:
            chain.append(n)
            n = n.parent
        pid = memo[n] if n is not None and n.parent is not None else 0
        for m in reversed(chain):
            pid = self._ids.get((pid, m.key), -1) if pid >= 0 else -1
            memo[m] = pid
        return pid

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        pid = self._pid(node)
        return pid >= 0 and self._remaining[pid] > 0

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return False


# ----------------------------------------------------------------- learned admission
#: bucket prefixes an estimate backs off through (see :meth:`ReuseEstimator.bucket`)
_LEVELS = (0, 2, 3, 4, 5)


class ReuseEstimator:
    """Online probability that an evicted block is referenced again, by feature bucket;
    engine-neutral (keys are any hashables, time is the caller's clock).

    Events: :meth:`evicted` — a block not on the SSD leaves memory with the bucket of
    :meth:`bucket`; it returns the decision (persist it?) and opens a label.
    :meth:`referenced` — a request asked for a key: its open label closes *reused*.
    A label still open ``horizon`` seconds after its eviction closes *not reused*.

    The probability is a Kaplan–Meier estimate: the horizon is cut into ``bins`` age
    steps; per bucket and step, the labels that reached the step still open and the
    reuses during it give the step's hazard, and P(reused) = 1 − Π(1 − hazard). Open
    labels thus count only for the ages they have lived through, so the estimate is
    not inflated by quick reuses (a reuse is known at once, a non-reuse only after the
    horizon), nor frozen until the first horizon has passed. It backs off from coarse
    to fine buckets: each step's hazard is smoothed toward the coarser bucket's
    (weight ``prior_weight``); the pooled one (all buckets) toward the hazard that
    makes P = ½, and a step no label has reached yet has no hazard (nothing is known
    of it). Before the first eviction the estimate is ½.

    Decision: persist iff the estimate is at least ``threshold`` (½: a block more likely
    than not to be read back), or with ``threshold=None`` at least the pooled estimate
    over all buckets (a block at least as likely as the average evicted block). The
    relative form needs no calibration: an estimate still short of its horizon is low
    for every bucket alike.
    """

    __slots__ = ("threshold", "horizon", "prior_weight", "_w", "_bins", "_h0", "_stats",
                 "_open", "_log", "_cur", "_mean_idle", "decisions", "admitted", "reused",
                 "expired")

    def __init__(self, threshold: float | None = 0.5, horizon: float = 3600.0,
                 prior_weight: float = 2.0, bins: int = 16) -> None:
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be a probability")
        if horizon <= 0 or prior_weight <= 0 or bins < 1:
            raise ValueError("horizon, prior_weight and bins must be positive")
        self.threshold = threshold
        self.horizon = horizon
        self.prior_weight = prior_weight
        self._bins = bins
        self._w = horizon / bins
        self._h0 = 1.0 - 0.5 ** (1.0 / bins)  # per-step hazard of P = ½
        #: bucket prefix -> [reached step k still open (k < bins)] + [reused in step k]
        self._stats: dict[tuple[int, ...], list[int]] = {}
        #: key -> (finest bucket, eviction time) of its open label
        self._open: dict[Hashable, tuple[tuple[int, ...], float]] = {}
        #: (eviction time, key) in eviction order; ``_cur[k]``: the first entry not yet
        #: aged past step k + 1 (k = bins − 1: past the horizon)
        self._log: list[tuple[float, Hashable]] = []
        self._cur = [0] * bins
        self._mean_idle = -1.0
        self.decisions = self.admitted = self.reused = self.expired = 0

    # -- features ----------------------------------------------------------------
    def bucket(self, r: int, e: int, output_tokens: int, length: int,
               idle: float) -> tuple[int, ...]:
        """The finest bucket of an eviction, coarse to fine: ``min(R_b, 3)``,
        ``min(E_b, 2)``; the tokens the storing request generated, in octaves (how the
        request ended: a short answer invites a follow-up more often than a long one,
        or the other way round — the rates say which); the length in blocks of the prompt
        that stored the block, in half octaves (what kind of request it came from); its
        idle time against the running mean idle time of evicted blocks, in octaves from
        ½× to 2× (a block idle far longer than its peers was abandoned sooner). No cut
        point is fitted to a trace: the rate behind each bucket is learned as the
        workload runs. Updates the running mean."""
        m = self._mean_idle
        m = idle if m < 0 else m + (idle - m) / 64.0
        self._mean_idle = m
        ob = int(math.log2(output_tokens)) if output_tokens > 0 else -1
        lb = int(2.0 * math.log2(length)) if length > 0 else -1
        rel = idle / m if m > 0 else 1.0
        ib = 0 if rel < 0.5 else 1 if rel < 1.0 else 2 if rel < 2.0 else 3
        return (min(r, 3), min(e, 2), ob, lb, ib)

    def estimate(self, b: tuple[int, ...], now: float) -> float:
        """P(reused within the horizon) for finest bucket ``b``."""
        self.age(now)
        return self._estimate(b)

    def _estimate(self, b: tuple[int, ...]) -> float:
        n = self._bins
        a = self.prior_weight
        stats = self._stats
        root = stats.get(())
        if root is None:
            return 0.5
        h0 = self._h0
        # steps no label has reached yet carry no hazard: nothing is known about them
        haz = [(root[n + k] + a * h0) / (root[k] + a) if root[k] else 0.0 for k in range(n)]
        for lvl in _LEVELS[1:]:
            s = stats.get(b[:lvl]) if lvl <= len(b) else None
            if s is None:
                break
            for k in range(n):
                haz[k] = (s[n + k] + a * haz[k]) / (s[k] + a)
        surv = 1.0
        for h in haz:
            surv *= 1.0 - h
        return 1.0 - surv

    # -- events ------------------------------------------------------------------
    def evicted(self, key: Hashable, b: tuple[int, ...], now: float) -> bool:
        """``key`` leaves memory unpersisted with bucket ``b``: persist it?"""
        self.age(now)
        self.decisions += 1
        p = self._estimate(b)
        ok = p >= (self.threshold if self.threshold is not None else self._estimate(()))
        self.admitted += ok
        old = self._open.pop(key, None)
        if old is not None:  # evicted again unreferenced (e.g. promoted, never read)
            self.expired += 1
        self._open[key] = (b, now)
        self._log.append((now, key))
        stats, n = self._stats, self._bins
        for lvl in _LEVELS:
            s = stats.get(b[:lvl])
            if s is None:
                s = stats[b[:lvl]] = [0] * (2 * n)
            s[0] += 1
        return ok

    def referenced(self, key: Hashable, now: float) -> None:
        """A request asked for ``key``: its open label, if any, closes *reused*."""
        if key not in self._open:
            return
        self.age(now)  # a label past the horizon closes *not reused* first
        lab = self._open.pop(key, None)
        if lab is None:
            return
        self.reused += 1
        b, t = lab
        n = self._bins
        k = min(n - 1, int((now - t) // self._w))
        stats = self._stats
        for lvl in _LEVELS:
            stats[b[:lvl]][n + k] += 1

    def age(self, now: float) -> None:
        """Move open labels into the age steps they reached; close those past the
        horizon as *not reused*."""
        log, cur, opened, stats = self._log, self._cur, self._open, self._stats
        n, w, end = self._bins, self._w, len(self._log)
        for k in range(n):
            limit = now - (k + 1) * w
            i = cur[k]
            while i < end and log[i][0] <= limit:
                t, key = log[i]
                lab = opened.get(key)
                if lab is not None and lab[1] == t:
                    if k == n - 1:
                        del opened[key]
                        self.expired += 1
                    else:
                        bb = lab[0]
                        for lvl in _LEVELS:
                            stats[bb[:lvl]][k + 1] += 1
                i += 1
            cur[k] = i
        done = cur[n - 1]
        if done > 4096 and done * 2 > end:  # drop entries every step has passed
            del log[:done]
            for k in range(n):
                cur[k] -= done


class LearnedRule:
    """Learned first-eviction admission on top of the seed's E/R rule; engine-neutral
    (keys are any hashables, sizes in any unit used consistently, time the caller's).

    The seed's rule persists a block at its ``θ_E``-th eviction (or prewrites it when
    it comes back to DRAM one eviction short), so it always loses a block's first reuse
    after its first eviction. That costs little where blocks are reused many times,
    and most of their value where they are reused once or twice (short conversations).
    This rule keeps the seed's decisions and adds the earlier evictions' through a
    :class:`ReuseEstimator`: a block is persisted at an eviction the seed's rule
    declines iff its bucket is reused at least as often as the average evicted block
    (``threshold=None``; a number: that probability) and the writes so far stay within
    ``write_budget`` of what full duplicate would have written (every block the first
    time it is stored). Persisting a block that is read back later costs no write the
    seed's rule would not have made (it writes the block when it is recomputed); one
    that is not read back costs one. The budget is the operator's share of full
    duplicate's endurance, not a constant fitted to a trace; the seed's own writes are
    never held back by it.

    Events: :meth:`stored` (sizes of blocks stored for the first time),
    :meth:`evicted` (a block without an SSD copy leaves memory: persist it?),
    :meth:`referenced` (a request asked for a block), :meth:`wrote` (a write was
    issued); :meth:`prewrite_due` is the seed's prewrite test.
    """

    __slots__ = ("est", "rule", "write_budget", "offered", "written", "over_budget")

    def __init__(self, threshold: float | None = None, horizon: float = 3600.0, *,
                 write_budget: float = 0.5, theta_e: int = 2) -> None:
        if write_budget < 0:
            raise ValueError("write_budget is a share of full duplicate's writes (≥ 0)")
        self.est = ReuseEstimator(threshold, horizon)
        self.rule = AdmissionRule(theta_e, None, False)
        self.write_budget = write_budget
        self.offered = 0
        self.written = 0
        self.over_budget = 0

    def stored(self, size: int) -> None:
        self.offered += size

    def wrote(self, size: int) -> None:
        self.written += size

    def evicted(self, key: Hashable, e: int, r: int, output_tokens: int, length: int,
                idle: float, now: float) -> bool:
        """A block without an SSD copy leaves memory with ``E_b = e`` (this eviction
        counted), ``R_b = r``, stored by a request of ``length`` blocks that generated
        ``output_tokens`` (−1 unknown), idle for ``idle``: persist it?"""
        if self.rule.admit(e, r):
            return True
        est = self.est
        if not est.evicted(key, est.bucket(r, e, output_tokens, length, idle), now):
            return False
        if self.written > self.write_budget * self.offered:
            self.over_budget += 1
            return False
        return True

    def referenced(self, key: Hashable, now: float) -> None:
        self.est.referenced(key, now)

    def prewrite_due(self, e: int, r: int) -> bool:
        return self.rule.prewrite_due(e, r)


class LearnedAdmission:
    """:class:`LearnedRule` as a :class:`~aicache.kv.saria.KVIndex` admission (sizes in
    tokens). A block's request features are those of the prompt that first stored it
    (:meth:`on_store`); labels close on any reference — a hit, or the recomputation of
    a block whose copies were lost."""

    label = "learned"
    __slots__ = ("lr", "_req")

    def __init__(self, threshold: float | None = None, horizon: float = 3600.0, *,
                 write_budget: float = 0.5, theta_e: int = 2) -> None:
        self.lr = LearnedRule(threshold, horizon, write_budget=write_budget, theta_e=theta_e)
        #: per block, (output tokens, prompt blocks) of the request that first stored it
        self._req: weakref.WeakKeyDictionary[RadixNode, tuple[int, int]] = (
            weakref.WeakKeyDictionary())

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        req, n = self._req, len(path)
        out = attrs.output_tokens if attrs is not None else -1
        new = 0
        for i in range(skip, n):
            nd = path[i]
            if nd not in req:
                req[nd] = (out, n)
                new += nd.tokens
        self.lr.stored(new)

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        out, length = self._req.get(node, (-1, node.depth))
        return self.lr.evicted(node, node.E, node.R, out, length,
                               max(0.0, now - node.t_access), now)

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return self.lr.rule.admit(node.E, node.R)

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return self.lr.prewrite_due(node.E, node.R)

    def on_reference(self, node: RadixNode, now: float) -> None:
        self.lr.referenced(node, now)

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        self.lr.wrote(node.tokens)
