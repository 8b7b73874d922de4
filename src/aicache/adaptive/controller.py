"""Chiron's controller: advisory switching control over per-unit executors.

Per cache unit (a dataset directory: the first ``unit_depth`` components of a file's path)
the controller keeps a recent window of block ids, the active executor, a review schedule
and a feedback reflector. Reads never wait on the advisor:

1. every demand read appends to the unit's window and goes through the active executor;
2. when a review is due (first review — as soon as the window holds ``min_window``
   accesses —, routine interval, early retry after a rejected or missing answer, backing
   off geometrically towards the routine interval while answers stay below tau, or an
   anomaly flagged by feedback reflection: a jump in the round's CHR, or in its access
   shape — small-step share, reuse share — which CHR misses when the active executor
   cannot exploit the new pattern) the controller
   *snapshots* the window and the review context and hands them to an
   :class:`AdvisorRunner`; reads continue under the active executor;
3. when the runner has an answer, the gate judges it (:mod:`aicache.adaptive.gate`: the
   confidence threshold, and in the default ``aicache`` gate mode the evidence check on
   the same snapshot, which may reject the advice or adopt the evidence's own diagnosis
   instead); only an adopted pattern that differs from the active one switches the
   executor. A pending diagnosis never changes anything.

Runners: :class:`VirtualDelayRunner` (simulation: the answer becomes visible ``delay``
virtual seconds after the snapshot; deterministic) and :class:`ThreadRunner` (real engine:
a background thread calls the advisor; the caller only ever enqueues and polls).

Shared byte budget across units (units with different executors compete for one cache):
``victim`` takes, in this order, (1) a *read* block of a unit under the sequential
executor (eager eviction: consumed data goes first, whatever unit it is in); (2) the
victim of the unit whose last access is the oldest among units whose executor evicts
(LRU across units, then the unit's own policy inside it); (3) if only units that reject
when full remain, the oldest unit's fallback order. Admission asks the executor of the
block's own unit; one that refuses when full still admits while (1) has a block to give
(consumed data is room, in the ``ours`` executor set), and, in that set, a block re-read
faster than a shuffled epoch allows (told the unit's window counts; see
:meth:`aicache.adaptive.executors.Executor.admit`). Each read tells the executor the
free bytes (the controller's ``used``) and the read's file, for the fill rule of
:meth:`aicache.adaptive.executors.Executor.on_access` (file extents from the driver's
metadata, :meth:`ChironSystem.use_metadata`).

The controller only decides. It holds no ground truth and grades nothing: diagnosis
accuracy, confusion, recovery time and per-answer logs come from observers
(:mod:`aicache.adaptive.observer`) attached with :meth:`ChironSystem.add_observer`; the
simulator attaches its grader (:class:`aicache.sim.grading.ChironGrader`).
"""

from __future__ import annotations

import heapq
import queue
import random
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from aicache.adaptive.advisor.base import (
    TRIGGER_CHR_ANOMALY,
    Advice,
    Advisor,
    DiagnosisRequest,
    ReviewContext,
)
from aicache.adaptive.advisor.registry import make_advisor
from aicache.adaptive.analyzer import analyze, tail_length
from aicache.adaptive.executors import EXECUTOR_SETS, Executor, make_executor
from aicache.adaptive.feedback import FeedbackReflector, ReviewParams, ReviewScheduler
from aicache.adaptive.gate import DEFAULT_GATE_MODE, ConfidenceGate, Verdict, check_gate_mode, weigh_evidence
from aicache.adaptive.observer import ChironObserver, Judgement
from aicache.adaptive.scan import SCAN_FILL, EpochScan, unit_firsts
from aicache.adaptive.unit import UnitMapper
from aicache.policies.system import DataCacheSystem
from aicache.policies.prefetch.credit import PrefetchCredit
from aicache.errors import BadInput

_EMPTY: tuple[int, ...] = ()
#: a "small" step, as in the analyzer's small jump ratio (0 < |delta| <= 5)
SMALL_STEP = 5
#: the files of this many latest reads are the readers the unread share is split between
RECENT_READS = 64

#: demand misses awaiting their insert that the controller tracks at most (see ``_pending``)
MAX_PENDING = 1 << 16

_K = TypeVar("_K")


def _forget_oldest(window: deque[_K], counts: dict[_K, int]) -> None:
    """Before an append to the full bounded ``window``: take its oldest item (the one the
    append pushes out) off ``counts``, the multiset of ``window``'s items."""
    if len(window) == window.maxlen:
        old = window[0]
        c = counts[old] - 1
        if c:
            counts[old] = c
        else:
            del counts[old]


@dataclass(frozen=True, slots=True)
class ChironParams:
    """Every knob of the controller; defaults are the seed's (window 1,000, tau 0.70,
    alpha 0.35, theta 0.18, routine review 30 s / 45 s with reflection)."""

    window: int = 1000
    tau: float = 0.70
    #: False: no gate at all (every parsed answer is adopted; the gate ablation)
    gate: bool = True
    #: ``aicache`` (the default): the confidence gate plus the evidence check on the
    #: snapshot (:mod:`aicache.adaptive.gate`); ``seed``: the seed's confidence gate alone
    gate_mode: str = DEFAULT_GATE_MODE
    reflection: bool = True
    alpha: float = 0.35
    theta: float = 0.18
    routine_interval_s: float = 30.0
    reflection_interval_s: float = 45.0
    early_retry_s: float = 5.0
    #: once the same pattern has been rejected (below tau) on a wholly fresh window — a
    #: stationary, ambiguous stream rather than a transition — each further such rejection
    #: multiplies the early-retry delay by this factor, capped at the routine interval
    #: (1.0 = the seed's fixed early retry)
    retry_backoff: float = 2.0
    #: latest first review of a fresh unit; it is reviewed as soon as its window holds
    #: ``min_window`` accesses (the default policy is only a guess until then)
    first_review_s: float = 5.0
    #: the executor set (:data:`aicache.adaptive.executors.EXECUTOR_SETS`): ``ours`` or
    #: ``seed`` (the seed's executor table as written, docs/design/chiron.md; it also turns
    #: shape reflection off unless ``shape_reflection`` is given)
    executors: str = "ours"
    #: feedback reflection also watches the access *shape* of each round — the share of
    #: small steps (the analyzer's small jump ratio) and the share of re-reads of an ID
    #: still in the window (its reuse ratio) — with the same alpha / theta as CHR: a
    #: change the active executor cannot exploit does not move CHR (random -> sequential
    #: under no prefetch; random -> skewed while the random executor rejects new blocks).
    #: None = the executor set's choice (ours: on, seed: off, as in the seed)
    shape_reflection: bool | None = None
    #: length of a feedback round (CHR per round feeds the EWMA)
    round_s: float = 5.0
    min_round_accesses: int = 50
    #: do not diagnose a window shorter than this (too little evidence)
    min_window: int = 100
    #: include the structured statistics in the advisor's input (ablation switch)
    statistics: bool = True
    #: virtual advisor delay in simulation; None = the advisor's expected latency
    advisor_delay_s: float | None = None
    unit_depth: int = 1
    #: bound each unit's speculation by what its prefetches earn
    #: (:class:`~aicache.policies.prefetch.credit.PrefetchCredit`: a unit whose prefetches
    #: are not read stops prefetching, so it never fetches much more than plain LRU would).
    #: None = the executor set's choice (ours: on; seed: off, the seed's prefetchers as written)
    prefetch_credit: bool | None = None
    #: the most scan fill prefetches (``ours``: files an epoch scan has not read yet, see
    #: :mod:`aicache.adaptive.scan`) in flight at once: as many as the engine fetches at
    #: once by default (``EngineParams.max_prefetch``); 0 turns scan fill off
    scan_in_flight: int = 8
    #: override every executor's prefetcher / eviction policy by registry name (the
    #: seed's micro-benchmarks: "prefetching disabled" = "none", "LRU in all arms" = "lru")
    prefetch: str | None = None
    eviction: str | None = None

    def __post_init__(self) -> None:
        if self.scan_in_flight < 0:
            raise BadInput(f"scan_in_flight={self.scan_in_flight!r} must be >= 0 (0: no scan fill)")
        if self.window < 1 or self.min_window < 1:
            raise BadInput(f"window={self.window} and min_window={self.min_window} must be >= 1")
        if self.round_s <= 0:
            raise BadInput(f"round_s={self.round_s!r} must be positive seconds")
        if not self.retry_backoff >= 1.0:
            raise BadInput(f"retry_backoff={self.retry_backoff!r} must be >= 1 (1 = no back-off)")
        check_gate_mode(self.gate_mode)
        if self.executors not in EXECUTOR_SETS:
            raise BadInput(f"executors={self.executors!r}: valid executor sets: "
                           f"{', '.join(EXECUTOR_SETS.names())}")
        if self.shape_reflection is None:  # resolved here, so the params always say what ran
            object.__setattr__(self, "shape_reflection", self.executors == "ours")
        if self.prefetch_credit is None:
            object.__setattr__(self, "prefetch_credit", self.executors == "ours")


# -- runners ----------------------------------------------------------------------------------
class AdvisorRunner(ABC):
    """Runs diagnoses off the read path. ``submit`` never blocks; ``poll(now)`` returns the
    answers that are available at ``now`` as (request, advice-or-None) pairs."""

    @abstractmethod
    def submit(self, request: DiagnosisRequest, now: float) -> None: ...

    @abstractmethod
    def poll(self, now: float) -> list[tuple[DiagnosisRequest, Advice | None]]: ...

    def next_ready(self) -> float:
        """Earliest time an answer may be available (``inf`` if none pending; ``-inf`` if
        unknown, e.g. a thread — then poll on every tick)."""
        return float("-inf")

    def close(self) -> None:
        pass


class VirtualDelayRunner(AdvisorRunner):
    """Simulation: the advisor answers at submission, the answer is released ``delay``
    virtual seconds later. Deterministic (no threads, no clock)."""

    def __init__(self, advisor: Advisor, delay_s: float) -> None:
        self.advisor = advisor
        self.delay_s = max(0.0, float(delay_s))
        self._pending: deque[tuple[float, DiagnosisRequest, Advice | None]] = deque()

    def submit(self, request: DiagnosisRequest, now: float) -> None:
        try:
            advice = self.advisor.advise(request)
        except Exception:  # noqa: BLE001 - an advisor must never break the read path
            advice = None
        self._pending.append((now + self.delay_s, request, advice))

    def poll(self, now: float) -> list[tuple[DiagnosisRequest, Advice | None]]:
        out = []
        p = self._pending
        while p and p[0][0] <= now:
            _, req, adv = p.popleft()
            out.append((req, adv))
        return out

    def next_ready(self) -> float:
        return self._pending[0][0] if self._pending else float("inf")


class ThreadRunner(AdvisorRunner):
    """Real engine: one daemon thread calls the advisor; the caller only enqueues (never
    blocks, even if the advisor hangs) and polls finished answers."""

    def __init__(self, advisor: Advisor) -> None:
        self.advisor = advisor
        self._in: queue.SimpleQueue[DiagnosisRequest | None] = queue.SimpleQueue()
        self._out: queue.SimpleQueue[tuple[DiagnosisRequest, Advice | None]] = queue.SimpleQueue()
        self._pending = 0  # submitted, not yet polled (only the controller's caller touches it)
        self._thread = threading.Thread(target=self._loop, name="chiron-advisor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            req = self._in.get()
            if req is None:
                return
            try:
                advice = self.advisor.advise(req)
            except Exception:  # noqa: BLE001
                advice = None
            self._out.put((req, advice))

    def submit(self, request: DiagnosisRequest, now: float) -> None:
        self._pending += 1
        self._in.put(request)

    def poll(self, now: float) -> list[tuple[DiagnosisRequest, Advice | None]]:
        out = []
        while True:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                self._pending -= len(out)
                return out

    def next_ready(self) -> float:
        """Unknown (``-inf``: poll on every tick) while a request is with the thread;
        ``inf`` when none is, so that an idle advisor costs the read path nothing."""
        return float("-inf") if self._pending > 0 else float("inf")

    def close(self) -> None:
        self._in.put(None)
        self._thread.join(timeout=0.05)  # a hung advisor stays behind as a daemon thread


# -- per-unit state ---------------------------------------------------------------------------
class _Unit:
    __slots__ = ("name", "window", "executor", "pattern", "state", "scheduler", "reflector",
                 "shape", "round_start", "round_hits", "round_reads", "round_small", "round_reuse",
                 "counts", "last_access", "last_block", "reads", "streak", "streak_start",
                 "backoff", "open_anomaly", "anomaly_reads", "submitted_reads", "review_at_reads",
                 "left_pattern", "switch_reads", "flaps", "index", "credit", "since",
                 "prev_file", "prev_bid", "crossing")

    def __init__(self, name: str, executor: Executor, window: int, scheduler: ReviewScheduler,
                 reflector: FeedbackReflector,
                 shape: tuple[FeedbackReflector, FeedbackReflector] | None, now: float) -> None:
        self.name = name
        self.window: deque[int] = deque(maxlen=window)
        self.executor = executor
        self.pattern: str | None = None  # committed pattern (None = default executor)
        self.state = "default"  # default | stable | transition
        self.scheduler = scheduler
        self.reflector = reflector
        self.shape = shape  # reflectors of the small-step and reuse shares (None = off)
        self.round_start = now
        self.round_hits = 0
        self.round_reads = 0
        self.round_small = 0  # accesses 0 < |step| <= SMALL_STEP from the unit's previous one
        self.round_reuse = 0  # accesses to an ID already in the window
        self.counts: dict[int, int] = {}  # ID -> occurrences in the window (when tracked)
        self.last_access = now
        self.last_block = -(1 << 62)
        self.reads = 0  # demand reads of this unit
        self.streak: str | None = None  # pattern of the current run of rejected answers
        self.streak_start = 0  # ``reads`` when that run began
        self.backoff = 0  # early-retry back-off level (0 = plain early retry)
        self.open_anomaly = False  # a flagged anomaly not yet resolved by an accepted diagnosis
        self.anomaly_reads = 0  # ``reads`` when the open anomaly was flagged
        self.submitted_reads = 0  # ``reads`` when the last diagnosis was submitted
        self.review_at_reads = -1  # a review is due when ``reads`` reaches this (-1 = none)
        self.left_pattern: str | None = None  # the pattern the last switch left
        self.switch_reads = 0  # ``reads`` at the last switch
        self.flaps = 0  # switch-backs (A -> B -> A) since the last switch to a new pattern
        self.index = 0  # creation order: units due together are handled in this order
        #: the bound on this unit's prefetches (None: unbounded); a new one per executor
        self.credit: PrefetchCredit | None = None
        #: when the unit's current executor took over (its creation, or its last switch)
        self.since = now
        #: the file and block of the unit's previous read, and whether its latest change
        #: of file went on in block order (the first block of a file right after the last
        #: of the one before it): only then may a read ahead go past the file being read
        self.prev_file = ""
        self.prev_bid = -(1 << 62)
        self.crossing = False


def _resolve_advisor(advisor: Advisor | str, seed: int) -> Advisor:
    """An :class:`Advisor` instance, or a spec string for the advisor registry."""
    if isinstance(advisor, Advisor):
        return advisor
    return make_advisor(advisor, seed=seed)


class ChironSystem(DataCacheSystem):
    """Chiron as a :class:`DataCacheSystem` (see the module docstring)."""

    name = "chiron"

    def __init__(self, capacity_bytes: int, *, advisor: Advisor | str = "statistical",
                 params: ChironParams | None = None, seed: int = 0,
                 runner: AdvisorRunner | str | None = None) -> None:
        self.params = p = params or ChironParams()
        self.capacity = capacity_bytes
        self.advisor = _resolve_advisor(advisor, seed)
        if runner is None or runner == "virtual":
            delay = p.advisor_delay_s if p.advisor_delay_s is not None else self.advisor.expected_latency_s
            self.runner: AdvisorRunner = VirtualDelayRunner(self.advisor, delay)
        elif runner == "thread":
            self.runner = ThreadRunner(self.advisor)
        elif isinstance(runner, AdvisorRunner):
            self.runner = runner
        else:
            raise BadInput(f"unknown advisor runner {runner!r}; valid: virtual, thread")
        self.gate = ConfidenceGate(p.tau if p.gate else 0.0)
        self._evidence = p.gate and p.gate_mode == "aicache"
        self._review = ReviewParams(p.routine_interval_s, p.reflection_interval_s,
                                    p.early_retry_s, p.first_review_s, p.reflection)
        self.rng = random.Random(seed)
        self.units_of = UnitMapper(p.unit_depth)
        #: each unit's window counts (ID -> reads in its window) are kept for shape
        #: reflection and for an executor set whose random refusal reads them
        self._track_counts = bool(p.shape_reflection) or EXECUTOR_SETS.get(p.executors)["random"].admits_frequent
        self.units: dict[str, _Unit] = {}
        self.block_unit: dict[int, _Unit] = {}
        self.sizes: dict[int, int] = {}
        self.used = 0  # bytes of the blocks in ``sizes``
        #: file -> (first, last) block id, from the driver's metadata (None = not given)
        self._extent_of: Callable[[str], tuple[int, int] | None] | None = None
        #: block id -> its file, from the driver's metadata (None = not given)
        self._file_of: Callable[[int], str | None] | None = None
        #: prefetched blocks not read yet: only so that a switch hands them to the new
        #: executor as unread (used/wasted feedback comes from the driver's ledger)
        self.unread: set[int] = set()
        #: prefetches granted and not yet inserted (in flight) -> bytes they will take.
        #: Fill asks for *free* space; free space is what neither stored blocks nor
        #: fetches already granted will take, so that several streams filling at once
        #: ask for it once between them, not once each (the overflow would evict their
        #: own unread prefetches). An entry leaves on insert, refusal, removal or a
        #: demand read of its block; one the driver dropped stays until its block is
        #: read, which only makes fill more cautious.
        self._flying: dict[int, int] = {}
        self._flying_bytes = 0
        self._unread_bytes = 0  # bytes of the blocks in ``unread``
        #: bound what prefetches not read yet may take (``_within_share``): the ``ours``
        #: executor set's rule, with or without the prefetch credit; the seed's set never
        self._unread_share = p.executors == "ours"
        #: the files of the last ``RECENT_READS`` reads and how often each appears: the
        #: readers the unread share is split between (``_within_share``)
        self._recent: deque[str] = deque(maxlen=RECENT_READS)
        self._recent_count: dict[str, int] = {}
        #: unit -> its epoch scan (:meth:`_scan_fill`): the ``ours`` executor set's rule
        self._scans: dict[str, EpochScan] | None = {} if p.executors == "ours" else None
        #: demand misses not inserted (nor refused) yet -> bytes they will take: a driver
        #: that stores behind the read (the engine's writer) inserts them later, and the
        #: free space scan fill asks for is what they will not take (its rule only)
        self._opens = False  # the driver tells opens (:meth:`on_open`): scans count them
        self._pending: dict[int, int] | None = {} if self._scans is not None else None
        self._pending_bytes = 0
        self._largest = 0  # the largest block read so far (what a scan fill block is charged)
        #: bytes the budget held besides this system's blocks at the last ``admit`` (the
        #: store's index reserve, other writers' blocks): not free space
        self._outside = 0
        #: scan fill blocks asked for and (perhaps) still in flight: at most
        #: ``scan_in_flight`` of them at once
        self._scan_asked: set[int] = set()
        #: a granted prefetch still in flight or unread -> the file whose read asked for
        #: it, and how many such blocks each file has (the share rule only)
        self._owner: dict[int, str] = {}
        self._owned: dict[str, int] = {}
        self._victim = -1  # the last block ``victim`` named, and its unit
        self._victim_unit: _Unit | None = None
        self._next_tick = float("-inf")
        #: (time, unit index, unit name): when a unit may next have something due; lazy
        #: (an entry may be early — the unit is then looked at and re-queued — never late)
        self._wake: list[tuple[float, int, str]] = []
        self.unit_visits = 0  # units looked at by ``tick`` (its cost)
        # counters
        self.advisor_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.no_advice = 0
        self.rejected_advice = 0
        self.contradicted_advice = 0  # rejected by the evidence check (part of rejected_advice)
        self.evidence_adopted = 0  # decisions that adopted the evidence's diagnosis instead
        self.switches = 0
        self.flaps_suppressed = 0  # switch-backs held by the oscillation back-off
        self.observers: list[ChironObserver] = []

    def add_observer(self, observer: ChironObserver) -> None:
        """Attach ``observer`` (see :mod:`aicache.adaptive.observer`); it is told of every
        later submission, judgement and switch. Attaching one twice has no effect."""
        if observer not in self.observers:
            self.observers.append(observer)

    # -- helpers -------------------------------------------------------------------------------
    def _unit(self, file_unit: str, now: float) -> _Unit:
        name = self.units_of(file_unit)
        u = self.units.get(name)
        if u is None:
            u = _Unit(name, self._executor("default"), self.params.window,
                      ReviewScheduler(self._review, now), self._make_reflector(),
                      (self._make_reflector(), self._make_reflector())
                      if self.params.shape_reflection else None, now)
            u.index = len(self.units)
            if self.params.prefetch_credit:
                u.credit = PrefetchCredit()
            self.units[name] = u
            self._wake_at(u, now)
        return u

    def _make_reflector(self) -> FeedbackReflector:
        p = self.params
        return FeedbackReflector(p.alpha, p.theta, p.min_round_accesses)

    def _executor(self, pattern: str) -> Executor:
        p = self.params
        return make_executor(pattern, self.capacity, self.rng, prefetch=p.prefetch, eviction=p.eviction,
                             executors=p.executors, extent_of=self._extent_of)

    # -- DataCacheSystem ------------------------------------------------------------------------
    def on_access(self, unit: str, block: int, size: int, hit: bool, now: float) -> Sequence[int]:
        u = self._unit(unit, now)
        w = u.window
        if self._track_counts:
            counts = u.counts
            _forget_oldest(w, counts)
            c = counts.get(block, 0)
            u.round_reuse += c > 0
            counts[block] = c + 1
            step = block - u.last_block
            u.last_block = block
            if step and -SMALL_STEP <= step <= SMALL_STEP:
                u.round_small += 1
        if unit != u.prev_file:
            u.crossing = block == u.prev_bid + 1
            u.prev_file = unit
        u.prev_bid = block
        w.append(block)
        u.reads += 1
        u.round_reads += 1
        u.round_hits += hit
        u.last_access = now
        if (u.reads == u.review_at_reads or u.pattern is None and not u.scheduler.requests
                and len(w) == self.params.min_window):
            # enough evidence: the first review (to replace the default guess), or the
            # re-check of an anomaly once its tail holds only accesses made after it
            u.scheduler.next_at = min(u.scheduler.next_at, now)
            self._wake_at(u, now)
        if hit:
            self._was_read(block)
        flying = self._flying
        if flying:
            self._land(block)
        pending = self._pending
        if pending is not None:
            if size > self._largest:
                self._largest = size
            if not hit and block not in pending:
                if len(pending) >= MAX_PENDING:  # misses never stored (failed reads) leak
                    pending.clear()  # here; clearing makes scan fill bolder, once
                    self._pending_bytes = 0
                pending[block] = size
                self._pending_bytes += size
        if self._unread_share:
            self._note_reader(unit)
        out = u.executor.on_access(u.name, block, size, hit, now, unit,
                                   self.capacity - self.used - self._flying_bytes)
        file_of = self._file_of
        if out and file_of is not None and any(file_of(b) is None for b in out):
            # a block of no file (past the last file's blocks, say) is never fetched nor
            # read, so a grant of it would hold its bytes in flight, and out of the unread
            # share, for good
            out = [b for b in out if file_of(b) is not None]
        extra = self._scan_fill(u, unit, block, size) if self._scans is not None else ()
        if extra:  # other files' blocks: charged at the largest block read, not this one's
            size = self._largest
        cr = u.credit
        if cr is None:
            if extra:
                out = [*out, *extra]
            if out and self._unread_share:
                asked = out
                out = self._within_share(out, size, u.executor.unread_share, unit)
                if out is not asked:
                    self._withheld(u, asked, out)
            return self._fly(out, size, unit)
        if not hit:
            cr.missed(block)
        if not out and not extra:
            return out
        if file_of is not None:
            if (u.pattern is None or u.pattern == "sequential") and u.crossing:
                # reads ahead inside its unit: past the last file of a dataset folder come
                # another folder's files, which its pattern says nothing about (undiagnosed:
                # the credit bounds it). Only while its reads cross files in block order:
                # readers that each read their own file (parallel shards) do not read the
                # next file after this one, another reader already has
                units_of = self.units_of
                name = u.name
                out = [b for b in out if (f := file_of(b)) is None or units_of(f) == name]
            else:  # diagnosed random or skewed: the file after this one in block order is
                # no likelier to be read than any other (files read whole in shuffled
                # order, a hot set), so prefetch stays inside the file being read; so does
                # a unit whose reads have not crossed files in order
                out = [b for b in out if (f := file_of(b)) is None or f == unit]
        if extra:
            out = [*out, *extra]
        if self._unread_share:
            asked = out
            out = self._within_share(out, size, u.executor.unread_share, unit)
            if out is not asked:
                self._withheld(u, asked, out)
        if extra:  # the scan test is a scan fill's evidence, not the credit: a file the
            # scan has not read is certain to be read, but at any time up to the epoch's end,
            # long after the credit's window would have closed on it
            scan_blocks = set(extra)
            guesses = [b for b in out if b not in scan_blocks]
            return self._fly([*cr.grant(guesses, self.sizes), *(b for b in out if b in scan_blocks)],
                             size, unit)
        return self._fly(cr.grant(out, self.sizes), size, unit)

    def on_open(self, unit: str, block: int, now: float) -> None:
        """A reader opened file ``unit`` (first block ``block``): from the first open on,
        the epoch scans count opens instead of first-block reads. Behind a mount the
        kernel's page cache serves re-reads of a file it holds, so only the first read of
        each file reaches the engine and a hot set would look like a scan without
        replacement; its opens still reach the mount."""
        if self._scans is None:
            return
        self._opens = True
        self._note_scan(self._unit(unit, now), unit, block)

    def _note_scan(self, u: _Unit, file: str, block: int) -> None:
        """Count a read (or an open) of ``file``, whose first block is ``block``, in ``u``'s
        epoch scan; once its run passes the test, count the unit's files again (a folder
        is listed after its first file is read, so the count grows)."""
        extent_of, file_of, scans = self._extent_of, self._file_of, self._scans
        if extent_of is None or file_of is None or scans is None:
            return
        name = u.name
        scan = scans.get(name)
        if scan is None:
            scan = scans[name] = EpochScan(unit_firsts(block, name, file_of, extent_of, self.units_of) or [])
        scan.note(block)
        if scan.scanning() and not scan.confirmed:
            scan.recount(unit_firsts(block, name, file_of, extent_of, self.units_of) or [])

    def _scan_fill(self, u: _Unit, file: str, block: int, size: int) -> Sequence[int]:
        """Count a read of ``file``'s first block in ``u``'s epoch scan (unless opens are
        counted, :meth:`on_open`); while the scan test holds (:mod:`aicache.adaptive.scan`)
        and ``u`` is diagnosed random, the first blocks of up to :data:`SCAN_FILL` files
        the scan has not read yet, into free space only. Only under the random executor:
        it refuses new blocks once full and evicts none of its own, so a file fetched ahead
        stays until the scan reads it (under an evicting executor a later demand read could
        evict it unread, and its file would be fetched twice)."""
        extent_of, scans = self._extent_of, self._scans
        if extent_of is None or scans is None:
            return ()
        if not self._opens:
            ext = extent_of(file)
            if ext is not None and ext[0] == block:
                self._note_scan(u, file, block)
        scan = scans.get(u.name)
        if scan is None or not scan.scanning():
            return ()
        if u.pattern != "random" or u.executor.extent_of is None:  # (None: a fixed prefetcher)
            return ()
        flying, sizes = self._flying, self.sizes
        asked = self._scan_asked
        if asked:  # those landed, refused or withheld are no longer in flight
            asked.intersection_update(flying)
        free = self.capacity - self.used - self._outside - self._flying_bytes - self._pending_bytes
        k = min(SCAN_FILL, free // max(self._largest, size, 1), self.params.scan_in_flight - len(asked))
        if k <= 0:
            return ()
        got = scan.unread(k, lambda b: b in flying or b in sizes)
        asked.update(got)
        return got

    def _withheld(self, u: _Unit, asked: Sequence[int], granted: Sequence[int]) -> None:
        """Tell ``u``'s executor which of the blocks it asked for the share withheld."""
        kept = set(granted)
        u.executor.withheld(u.name, [b for b in asked if b not in kept])

    def _note_reader(self, file: str) -> None:
        """Count ``file`` among the files of the last ``RECENT_READS`` reads."""
        recent, count = self._recent, self._recent_count
        _forget_oldest(recent, count)
        recent.append(file)
        count[file] = count.get(file, 0) + 1

    def _within_share(self, blocks: Sequence[int], size: int, share: float,
                      file: str) -> Sequence[int]:
        """The part of ``blocks`` that keeps the prefetches not read yet (stored unread,
        in flight, of every unit) within ``share`` of the capacity: the share the
        executor's eviction keeps from being evicted before read blocks
        (:attr:`~aicache.adaptive.executors.Executor.unread_share`), so that a grant is
        not a fetch made twice. Blocks already held or in flight pass. Free space is no
        exception: concurrent streams' demand reads take it, and then evict.

        The reads of one file hold at most the share over the number of files read lately
        (at least one block) of these grants: readers of several files split the share
        instead of the first to ask taking all of it, which would leave the others' reads
        waiting on their own fetches while its prefetches wait to be read."""
        total = int(self.capacity * share)
        room = total - self._unread_bytes - self._flying_bytes
        readers = len(self._recent_count)
        if readers > 1:
            room = min(room, max(size, total // readers) - self._owned.get(file, 0) * size)
        flying, sizes = self._flying, self.sizes
        out: list[int] | None = None
        for i, b in enumerate(blocks):
            if b in flying or b in sizes:
                keep = True
            elif room >= size:
                room -= size
                keep = True
            else:
                keep = False
            if not keep and out is None:
                out = list(blocks[:i])
            elif keep and out is not None:
                out.append(b)
        return blocks if out is None else out

    def _fly(self, blocks: Sequence[int], size: int, file: str = "") -> Sequence[int]:
        """Charge ``blocks`` (granted prefetches) as in flight at ``size`` bytes each (the
        size of the block read: its file's block size; a file's last block may be smaller,
        so free space is under-, never over-stated), asked for by a read of ``file``."""
        if blocks:
            flying, sizes = self._flying, self.sizes
            own = self._unread_share and file
            for b in blocks:
                if b not in flying and b not in sizes:
                    flying[b] = size
                    self._flying_bytes += size
                    if own and b not in self._owner:
                        self._owner[b] = file
                        self._owned[file] = self._owned.get(file, 0) + 1
        return blocks

    def _release(self, block: int) -> None:
        """``block`` no longer counts for the file that asked for it once it is neither in
        flight nor unread. Invariant: ``_owned[f]`` is the number of ``_owner`` entries
        naming ``f``, each a block in ``_flying`` or ``unread``."""
        f = self._owner.get(block)
        if f is not None and block not in self._flying and block not in self.unread:
            del self._owner[block]
            c = self._owned[f] - 1
            if c:
                self._owned[f] = c
            else:
                del self._owned[f]

    def _was_read(self, block: int) -> None:
        """``block`` leaves ``unread`` (read, evicted or removed; call before ``sizes``
        forgets it)."""
        if block in self.unread:
            self.unread.discard(block)
            self._unread_bytes -= self.sizes[block]
            if self._owner:
                self._release(block)

    def _land(self, block: int, release: bool = True) -> None:
        s = self._flying.pop(block, None)
        if s is not None:
            self._flying_bytes -= s
            if release and self._owner:
                self._release(block)

    def use_metadata(self, extent_of: Callable[[str], tuple[int, int] | None],
                     file_of: Callable[[int], str | None] | None = None) -> None:
        """File extents for the executors' fill rule (none under a fixed ``prefetch``), and
        each block's file, so that a unit's prefetches stay inside the unit (with the
        prefetch credit, see :attr:`ChironParams.prefetch_credit`)."""
        self._extent_of = extent_of
        self._file_of = file_of
        fill = self.params.prefetch is None
        for u in self.units.values():  # normally none yet: metadata comes before any access
            u.executor.extent_of = extent_of if fill and u.executor.fills_free_space else None

    def on_prefetch_used(self, block: int, now: float) -> None:
        # the driver's ledger decides used/wasted; the executor that holds the block learns it
        u = self.block_unit.get(block)
        if u is not None:
            u.executor.prefetcher.on_prefetch_used(block, now)
            if u.credit is not None:
                u.credit.used(block)

    def on_prefetch_wasted(self, block: int, now: float) -> None:
        # told right after ``victim`` named ``block``, whose unit ``_forget`` kept for this
        u = self._victim_unit
        if u is not None and self._victim == block:
            u.executor.prefetcher.on_prefetch_wasted(block, now)
            if u.credit is not None:
                u.credit.lost(block)

    def admit(self, unit: str, block: int, size: int, used: int, now: float) -> bool:
        """The block's own executor decides (told the unit's window counts, for a refusal
        that yields to faster-than-epoch re-reads, ``admits_frequent``); a unit that refuses
        when full (``rejects_when_full``) still takes it in the place of another unit's
        *consumed* blocks when its executor counts them as room (``consumed_is_room``):
        ``victim`` evicts those first anyway, so they are the space a finished pass leaves;
        likewise in the place of a unit not read since its executor took over."""
        u = self._unit(unit, now)
        ex = u.executor
        if self._scans is not None:  # what the budget holds besides this system's blocks
            self._outside = used - self.used if used > self.used else 0
        if ex.rejects and self._scan_asked:
            # scan fill was granted free space: a refusing unit's demand block does not take
            # it from the scan's blocks in flight (one that lands on a full cache is refused,
            # and its file fetched again when read)
            flying = self._flying
            used += sum(flying.get(b, 0) for b in self._scan_asked if b != block)
        if ex.rejects and ex.consumed_is_room and used + size > self.capacity:
            if any(o.executor.eager_candidate() for o in self.units.values()):
                return True
            # a refusal keeps the unit's own resident subset from thrashing; it is not a
            # reason to keep a unit that has not been read since this executor took over
            # (a finished phase): ``victim`` takes the least recently read non-refusing
            # unit's blocks first, so the new block goes in their place
            since = u.since
            if any(o.last_access < since and not o.executor.rejects and len(o.executor.eviction)
                   for o in self.units.values()):
                return True
        if ex.admit(size, used, block, u.counts if self._track_counts else None):
            return True
        if self._flying:  # a refused prefetch takes no space
            self._land(block)
        self._placed(block)  # nor a refused demand block
        if block in self._scan_asked and self._scans is not None:
            scan = self._scans.get(u.name)
            if scan is not None:  # no room after all: the rest of this scan is read on demand
                scan.exhausted = True
        return False

    def _placed(self, block: int) -> None:
        """``block``'s demand miss was inserted, refused or dropped: it takes no more
        pending space."""
        pending = self._pending
        if pending:
            s = pending.pop(block, None)
            if s is not None:
                self._pending_bytes -= s

    def on_insert(self, unit: str, block: int, size: int, now: float, prefetched: bool) -> bool:
        if self._flying:
            self._land(block, release=False)  # a prefetch stays its file's while unread
        self._placed(block)
        u = self._unit(unit, now)
        if not u.executor.on_insert(block, size, now, prefetched):
            if self._owner:
                self._release(block)
            return False
        self.block_unit[block] = u
        self.sizes[block] = size
        self.used += size
        if prefetched:
            self.unread.add(block)
            self._unread_bytes += size
        if self._owner:
            self._release(block)
        return True

    def held(self) -> Collection[int]:
        return self.sizes.keys()

    def _forget(self, block: int, now: float) -> None:
        self._victim_unit = self.block_unit.pop(block)
        self._victim = block
        self._was_read(block)
        self.used -= self.sizes.pop(block)

    def victim(self, now: float) -> int:
        units = self.units.values()
        for u in units:
            if u.executor.eager_candidate():
                # a unit's policies hold block ids, typed Hashable by the policy interface
                b: int = int(u.executor.eviction.victim(now))  # type: ignore[call-overload]  # see above
                self._forget(b, now)
                return b
        best: _Unit | None = None
        fallback: _Unit | None = None
        for u in units:
            if not len(u.executor.eviction):
                continue
            if u.executor.rejects:
                if fallback is None or u.last_access < fallback.last_access:
                    fallback = u
            elif best is None or u.last_access < best.last_access:
                best = u
        chosen = best or fallback
        if chosen is None:
            raise RuntimeError("victim() called on an empty cache")
        b = int(chosen.executor.eviction.victim(now))  # type: ignore[call-overload]  # a block id (above)
        self._forget(b, now)
        return b

    def on_remove(self, block: int) -> None:
        if self._flying:
            self._land(block)
        self._placed(block)
        u = self.block_unit.get(block)
        if u is None:
            return
        u.executor.eviction.on_remove(block)
        if u.credit is not None:
            u.credit.lost(block)
        self.block_unit.pop(block)
        self._was_read(block)
        self.used -= self.sizes.pop(block)

    # -- control loop ---------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Act on what is due at ``now``: advisor answers that arrived, rounds that ended,
        reviews that are due. Called after every access, so it returns at once unless
        something can be due. Each unit is queued (a heap) at the earliest time one of
        its conditions can change — its round's end, its next review unless that waits on
        a fuller window (``on_access`` re-queues it when the window fills) or on an answer
        in flight (re-queued when judged) — so a dataset of thousands of units costs
        O(log units) per event, not a walk over all units per read. Units due together
        are handled in creation order, as a walk over all of them would."""
        if now < self._next_tick:
            return
        due_units: dict[int, _Unit] = {}
        if now >= self.runner.next_ready():
            for req, advice in self.runner.poll(now):
                self._judge(req, advice, now)
                u = self.units[req.unit]
                due_units[u.index] = u
        wake = self._wake
        while wake and wake[0][0] <= now:
            _, i, name = heapq.heappop(wake)
            due_units[i] = self.units[name]
        for i in sorted(due_units):
            self._visit(due_units[i], now)
        self._next_tick = min(wake[0][0] if wake else float("inf"), self.runner.next_ready())

    def _wake_at(self, u: _Unit, t: float) -> None:
        heapq.heappush(self._wake, (t, u.index, u.name))
        if t < self._next_tick:
            self._next_tick = t

    def _visit(self, u: _Unit, now: float) -> None:
        """One unit's part of :meth:`tick`: close its round if it ended (feedback
        reflection), start its review if due; then queue it for its next event."""
        p = self.params
        self.unit_visits += 1
        if now - u.round_start >= p.round_s:
            r = u.reflector.observe_counts(u.round_hits, u.round_reads)
            anomaly = r is not None and r.anomaly
            if u.shape is not None:
                for refl, k in zip(u.shape, (u.round_small, u.round_reuse)):
                    r = refl.observe_counts(k, u.round_reads)
                    if r is not None and r.anomaly:
                        # a shape change is one event: restart its EWMA at the new
                        # level instead of re-flagging while the average catches up
                        refl.ewma = r.chr
                        anomaly = True
            u.round_start, u.round_hits, u.round_reads = now, 0, 0
            u.round_small = u.round_reuse = 0
            if anomaly:
                u.streak, u.backoff = None, 0
                if not u.open_anomaly:
                    u.open_anomaly, u.anomaly_reads = True, u.reads
                u.scheduler.anomaly(now)
        nxt = u.round_start + p.round_s
        if u.scheduler.due(now) is not None:
            if len(u.window) >= p.min_window:
                self._diagnose(u, now)
            else:  # too few reads to diagnose: ``on_access`` re-queues it when the window fills
                heapq.heappush(self._wake, (nxt, u.index, u.name))
                return
        if not u.scheduler.in_flight:  # an answer in flight re-queues it when judged
            nxt = min(nxt, u.scheduler.next_at)
        heapq.heappush(self._wake, (nxt, u.index, u.name))

    def _diagnose(self, u: _Unit, now: float) -> None:
        trigger = u.scheduler.started(now)
        u.submitted_reads = u.reads
        if u.open_anomaly:
            # an early retry of a rejected anomaly review is still about that anomaly: the
            # older part of the window may still be stale
            trigger = TRIGGER_CHR_ANOMALY
        window = tuple(u.window)
        ctx = ReviewContext.for_review(trigger, u.state, u.pattern, len(window))
        stats = analyze(window) if self.params.statistics else {}
        self.advisor_calls += 1
        req = DiagnosisRequest(u.name, window, stats, ctx)
        for o in self.observers:
            o.on_submit(req, now)
        self.runner.submit(req, now)

    def _judge(self, req: DiagnosisRequest, advice: Advice | None, now: float) -> None:
        u = self.units[req.unit]
        if advice is not None:
            self.input_tokens += advice.input_tokens
            self.output_tokens += advice.output_tokens
        evidence = (weigh_evidence(req.window, req.context.older_prefix_may_be_stale)
                    if self._evidence else None)
        decision = self.gate.check(advice, evidence)
        if advice is None:
            self.no_advice += 1
        elif not decision.accepted:
            self.rejected_advice += 1
            self.contradicted_advice += decision.verdict is Verdict.CONTRADICTED
        pattern = decision.adopted
        self.evidence_adopted += pattern is not None and not decision.accepted
        sch = u.scheduler
        sch.finished(now, pattern is not None)
        self._backoff(u, advice, pattern is not None, now)
        if pattern is not None and u.open_anomaly:
            self._resolve_anomaly(u, pattern)
        if self.observers:
            j = Judgement(now, u.name, req.context.trigger, advice.pattern if advice else None,
                          advice.confidence if advice else None, decision.accepted, pattern)
            for o in self.observers:
                o.on_judged(req, advice, j)
        if pattern is None:
            return
        if pattern == u.pattern:
            u.state = "stable"
            return
        if not self._may_switch(u, pattern):
            self.flaps_suppressed += 1
            return
        self._switch(u, pattern, now)

    def _may_switch(self, u: _Unit, pattern: str) -> bool:
        """Exponential back-off on oscillation (the retry back-off's rule, applied to
        switches). A switch back to the pattern the unit's last switch left (A -> B -> A)
        needs ``window * retry_backoff ** k`` reads under B, k = switch-backs since the
        unit last moved to a pattern it had not just left; a switch to any other pattern
        is never held. Why: on a huge dataset a skewed phase's hot set can be too large
        for one window to show reuse, and the diagnosis then alternates between random
        and skewed at every review (at W1 x 40, 109 switches instead of 3), each switch
        resetting the executor and handing over every resident block. Real phase changes
        (a new pattern, or a switch back after a long stay) go through at once, so
        workloads that do not oscillate behave exactly as without the rule."""
        if pattern != u.left_pattern or u.pattern is None:
            u.flaps = 0
            return True
        p = self.params
        if u.reads - u.switch_reads < p.window * p.retry_backoff ** u.flaps:
            return False
        u.flaps += 1
        return True

    def _resolve_anomaly(self, u: _Unit, pattern: str | None) -> None:
        """An accepted answer resolves an open anomaly if it changes the pattern, or if it
        was given on a tail made only of accesses after the anomaly. A 'no change' on a
        tail still partly from before is premature (flagged within a round of a change,
        the new pattern may not show yet): re-check, still as an anomaly review, once the
        tail has turned over (evidence-driven; the routine review stays the latest)."""
        need = tail_length(self.params.window)
        u.review_at_reads = -1
        if pattern != u.pattern or u.submitted_reads - u.anomaly_reads >= need:
            u.open_anomaly = False
        else:
            u.review_at_reads = u.anomaly_reads + need

    def _backoff(self, u: _Unit, advice: Advice | None, accepted: bool, now: float) -> None:
        """Stretch the early retry while the answers stay ambiguous on fresh evidence.

        The early retry exists to re-diagnose on fresh accesses. During a transition the
        window turns over and the answer changes; but when the same pattern keeps coming
        back below tau after a whole window of new accesses, the stream itself is
        ambiguous and retrying every ``early_retry_s`` only spends advisor calls: the delay
        then doubles (``retry_backoff``) per rejection, up to the routine interval. An
        acceptance, another pattern, or a feedback anomaly restarts from the early retry.
        """
        p = self.params
        if accepted or advice is None or advice.pattern != u.streak:
            u.streak = None if accepted or advice is None else advice.pattern
            u.streak_start, u.backoff = u.reads, 0
            return
        if u.reads - u.streak_start < p.window:
            return
        u.backoff += 1
        sch = u.scheduler
        if sch.next_at > now:  # not overridden by a pending anomaly
            delay = p.early_retry_s * p.retry_backoff ** u.backoff
            sch.next_at = now + min(delay, max(p.early_retry_s, self._review.routine_s))

    def _switch(self, u: _Unit, pattern: str, now: float) -> None:
        """Replace the unit's executor; hand its resident blocks over in eviction order."""
        old = u.executor
        new = self._executor(pattern)
        # the old policy's keys are block ids, typed Hashable by the policy interface
        new.adopt_many(list(old.eviction.keys()), self.sizes, now, self.unread)  # type: ignore[arg-type]  # see above
        u.executor = new
        u.since = now
        if u.credit is not None:  # a new pattern's prefetcher starts with a whole budget
            u.credit = PrefetchCredit()
        u.left_pattern = u.pattern
        u.switch_reads = u.reads
        u.pattern = pattern
        u.state = "transition"
        self.switches += 1
        for o in self.observers:
            o.on_switch(u.name, u.left_pattern, pattern, now)

    # -- reporting ------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return {
            "advisor_calls": self.advisor_calls,
            "advisor_tokens": self.input_tokens + self.output_tokens,
            "advisor_input_tokens": self.input_tokens,
            "advisor_output_tokens": self.output_tokens,
            "no_advice": self.no_advice,
            "rejected_advice": self.rejected_advice,
            "contradicted_advice": self.contradicted_advice,
            "evidence_adopted": self.evidence_adopted,
            "switches": self.switches,
            "flaps_suppressed": self.flaps_suppressed,
            "active_patterns": {n: (u.pattern or "default") for n, u in self.units.items()},
            "params": asdict(self.params),
        }

    def close(self) -> None:
        self.runner.close()
        self.advisor.close()
