"""The default advisor: a deterministic classifier of the access window, offline, ~1 ms.

Each pattern is tested against what *chance* would produce, so no threshold is tied to a
dataset size, stride or skew parameter of some generator:

* **order** ``O`` (sequential: "ordered traversal or a stable stride"). For lags
  ``k = 1..8`` (lag ``k`` sees ``k`` interleaved readers, e.g. DataLoader workers, as one
  stride) over the nonzero ID steps ``x[i] - x[i-k]`` (zero steps are re-reads of a block
  by small reads): the share of the most common step and the share of steps in the
  dominant direction. Under a random order of the same IDs the first is about ``1/m``
  (``m`` distinct IDs) and the second 1/2. ``O`` is the excess of a lower confidence bound
  (Wilson, z = 3) over that chance level, normalised to [0, 1]: ~1 for a clean stride or a
  sorted traversal, ~0 for shuffled IDs.
  The same test is repeated on the *run starts* (accesses that do not continue the
  previous one by the lag-1 dominant step): a sample made of neighbouring blocks (an image
  and its caption sidecar, a multi-block file) read in a shuffled sample order has a +1
  step inside every sample, but its runs are shuffled. The two are mixed by the step's
  *persistence* ``p`` (how often the dominant step follows itself): ``O = p O_all +
  (1-p) O_runs`` — long runs (a traversal, or big files read through) keep their order
  evidence, two-block runs are judged by the order of the samples.
  Readers interleaved *irregularly* (PyTorch DataLoader workers, whose batches finish at
  different times) leave no lag with a constant step; a third test counts the accesses
  that continue (±1) one of the last ``2·MAX_LAG`` accesses, against the chance ``L/m`` of
  that under a random order (:func:`continuation_evidence`).
* **concentration** ``C`` (skewed: "repeated accesses concentrated on a comparatively
  small subset of IDs"). The *collision* statistic ``K = sum_u c_u (c_u - 1) / 2`` (pairs
  of accesses to the same ID) estimates ``n(n-1)/2 · sum p_u²`` without bias. Uniform
  sampling over the ``S`` IDs of the accessed span gives ``E0 = n(n-1)/(2S)`` with a known
  spread; the concentration factor ``kappa = K/E0`` says how many times more often accesses
  collide than under uniform access (1 = uniform, < 1 = shuffled epochs, which avoid
  repeats). It is lowered by z = 3 null standard deviations and measured against the
  textbook definition of skew, the 80/20 rule (20% of the items take 80% of the accesses,
  ``kappa = 0.8²/0.2 + 0.2²/0.8 = 3.25``): ``C = log(kappa_lo) / log(3.25)`` clipped to
  [0, 1], so an 80/20 concentration or stronger is fully skewed.
* **random** is what remains: neither order nor concentration.

Scores ``seq = O(1-C)``, ``skw = C``, ``rnd = (1-O)(1-C)`` sum to 1; the winner's score
times a sample-size reliability ``1 - 1/sqrt(n)`` is the confidence. Concentrated reuse
outranks order (hot files read block by block want LRU, not eager eviction).

Phase changes: the window and its recent tail are classified separately. If the review
context says the older prefix may be stale, the recent part decides — the tail, or the
newest half of the tail (at least ``MIN_RECENT`` accesses) when that is more decisive,
since a review flagged by feedback may come within a round of the change. Otherwise, when they
disagree, the window's claim is discounted by how strongly the recent part contradicts
it, and the recent part's claim is capped by the window's support — a window straddling a
change gets a low confidence, so the gate rejects it and retries early with fresh
accesses. A recent part that is simply too short to show the window's hot set (it would
not look skewed even if nothing had changed) does not count as a contradiction: the
recent half is judged instead, or the window alone if that is too short as well.

Limits, inherent to a bounded window: a hot set much larger than the window is invisible
in it; uniform access to IDs that are sparse in their span (e.g. only the first block of
every multi-block file, in random order) looks concentrated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest
from aicache.adaptive.analyzer import tail_length

#: Lags examined for a stable stride (1 = plain sequential; k = k interleaved readers).
MAX_LAG = 8
#: One-sided z of every lower confidence bound (several lags are tested: be strict).
Z = 3.0
#: Fewer nonzero steps than this carry no order evidence.
MIN_STEPS = 4
#: Fewest accesses a recent part is judged on alone (sample-size reliability 0.9).
MIN_RECENT = 100
#: Collision factor of the 80/20 rule: 0.8²/0.2 + 0.2²/0.8.
KAPPA_PARETO = 0.8**2 / 0.2 + 0.2**2 / 0.8


@dataclass(frozen=True, slots=True)
class PatternScores:
    """Evidence for one sequence: order ``O`` and concentration ``C`` in [0, 1], the three
    pattern scores (summing to 1), the sample-size reliability, and what the concentration
    test measured (span ``S`` of the IDs and collision factor ``kappa``)."""

    order: float
    concentration: float
    sequential: float
    random: float
    skewed: float
    reliability: float
    why: str
    span: float = 0.0
    kappa: float = 0.0

    @property
    def pattern(self) -> str:
        best = max(self.skewed, self.sequential, self.random)
        if self.skewed == best:
            return "skewed"
        if self.sequential == best:
            return "sequential"
        return "random"

    @property
    def confidence(self) -> float:
        return self.score(self.pattern) * self.reliability

    def score(self, pattern: str) -> float:
        return float(getattr(self, pattern))


def _wilson_lower(successes: int, trials: int, z: float = Z) -> float:
    """Lower Wilson score bound of a binomial proportion."""
    if trials <= 0:
        return 0.0
    p = successes / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    margin = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return max(0.0, (centre - margin) / (1 + z2 / trials))


def order_evidence(x: np.ndarray, m: int) -> tuple[float, str]:
    """Max over lags of the normalised excess of (top step share, dominant direction share)
    over their chance levels (1/m and 1/2)."""
    n = x.size
    best, why = 0.0, "no stable stride"
    p0 = 1.0 / max(m, 1)
    for k in range(1, min(MAX_LAG, n - 1) + 1):
        d = x[k:] - x[:-k]
        d = d[d != 0]
        nz = int(d.size)
        if nz < MIN_STEPS:
            continue
        values, counts = np.unique(d, return_counts=True)
        top = int(counts.argmax())
        stride = (_wilson_lower(int(counts[top]), nz) - p0) / (1.0 - p0) if p0 < 1 else 0.0
        pos = int(np.count_nonzero(d > 0))
        mono = 2.0 * _wilson_lower(max(pos, nz - pos), nz) - 1.0
        if stride > best:
            best = stride
            why = f"lag-{k} step {int(values[top]):+d} on {counts[top] / nz:.0%} of moves"
        if mono > best:
            best = mono
            direction = "ascending" if pos >= nz - pos else "descending"
            why = f"lag-{k} moves {max(pos, nz - pos) / nz:.0%} {direction}"
    cont, why_cont = continuation_evidence(x, m)
    if cont > best:
        best, why = cont, why_cont
    return min(1.0, max(0.0, best)), why


def continuation_evidence(x: np.ndarray, m: int) -> tuple[float, str]:
    """Readers interleaved *irregularly* (DataLoader workers whose batches finish at
    different times: ``0 32 1 2 33 3 34 35 4 …``) have no lag with a constant step, but
    each access continues one of the last ``L = 2·MAX_LAG`` accesses by ±1. Under a random
    order of ``m`` IDs the block next to ``x_i`` is among those ``L`` with chance about
    ``L/m``; the evidence is the normalised excess of the Wilson lower bound over that,
    as for a stride. Re-reads (a zero step) never count as a continuation."""
    n = int(x.size)
    L = min(2 * MAX_LAG, n - 1)
    if L < 1 or n - L < MIN_STEPS:
        return 0.0, "no stable stride"
    p0 = min(1.0, L / max(m, 1))
    if p0 >= 1.0:
        return 0.0, "no stable stride"
    cur = x[L:]
    best, why = 0.0, "no stable stride"
    for step, name in ((1, "ascending"), (-1, "descending")):
        hit = np.zeros(cur.size, dtype=bool)
        for k in range(1, L + 1):
            hit |= cur - x[L - k : n - k] == step
        h = int(np.count_nonzero(hit))
        e = (_wilson_lower(h, int(cur.size)) - p0) / (1.0 - p0)
        if e > best:
            best = e
            why = f"{h / cur.size:.0%} of accesses continue one of the last {L} ({name}, interleaved readers)"
    return best, why


def run_starts(x: np.ndarray) -> tuple[np.ndarray, float]:
    """``(starts, persistence)``: the sequence with every access that continues the
    previous one by the lag-1 dominant non-zero step removed — one ID per *run* (a
    multi-block sample, an image and its caption sidecar, a file read block by block) —
    and how often that step is followed by itself (1 for a long traversal, 0 when every
    run is two accesses long). A traversal is ordered only if its runs are long or are
    themselves in order; within-sample contiguity under a shuffled sample order is not."""
    if x.size < 3:
        return x, 1.0
    d = np.diff(x)
    nz = d[d != 0]
    if nz.size == 0:
        return x, 1.0
    values, counts = np.unique(nz, return_counts=True)
    on = d == values[int(counts.argmax())]
    keep = np.ones(x.size, dtype=bool)
    keep[1:] = ~on
    first = int(np.count_nonzero(on[:-1]))
    persistence = float(np.count_nonzero(on[:-1] & on[1:])) / first if first else 1.0
    return x[keep], persistence


def concentration_from(collisions: float, n: int, span: float) -> tuple[float, float]:
    """``(C, kappa)`` for ``collisions`` same-ID pairs among ``n`` accesses over ``span`` IDs.

    Null: uniform access, counts ~ Poisson(lam = n/S) per ID, so ``E0 = S lam²/2`` and
    ``Var0 = S (lam³ + lam²/2)``. ``kappa_lo = (K - z·sd0)/E0``; ``C`` measures it against
    the 80/20 rule on a log scale."""
    if n < 2 or span <= 1.0:
        return 0.0, 0.0
    lam = n / span
    e0 = n * (n - 1) / (2.0 * span)
    sd0 = math.sqrt(span * (lam**3 + lam * lam / 2.0))
    kappa = collisions / e0
    kappa_lo = (collisions - Z * sd0) / e0
    if kappa_lo <= 1.0:
        return 0.0, kappa
    return min(1.0, math.log(kappa_lo) / math.log(KAPPA_PARETO)), kappa


def _span(x: np.ndarray) -> float:
    """IDs the accesses range over; the extreme 0.5% on each side are trimmed so that one
    stray access does not make a hot set look small."""
    if x.size < 200:
        return float(x.max() - x.min() + 1)
    lo, hi = np.quantile(x, (0.005, 0.995))
    return (float(hi) - float(lo) + 1.0) / 0.99


def concentration_evidence(x: np.ndarray, counts: np.ndarray) -> tuple[float, float, float, str]:
    """``(C, span, kappa, why)`` for one sequence (see the module docstring)."""
    n = int(x.size)
    span = _span(x)
    collisions = float((counts * (counts - 1)).sum()) / 2.0
    c, kappa = concentration_from(collisions, n, span)
    reuse = 1.0 - counts.size / n
    if c <= 0.0:
        return 0.0, span, kappa, f"reuse {reuse:.0%}, {kappa:.1f}x uniform collisions"
    top = np.sort(counts)[-5:].sum() / n
    return c, span, kappa, f"repeats concentrated: {kappa:.1f}x uniform collisions, reuse {reuse:.0%}, top-5 share {top:.0%}"


def score_sequence(seq: Sequence[int] | np.ndarray) -> PatternScores:
    """Classify one sequence (a window or a recent part of it)."""
    x = np.asarray(seq, dtype=np.int64).ravel()
    n = int(x.size)
    if n == 0:
        return PatternScores(0.0, 0.0, 0.0, 1.0, 0.0, 0.0, "empty")
    _, counts = np.unique(x, return_counts=True)
    o, why_o = order_evidence(x, int(counts.size))
    if o > 0.0:
        runs, persist = run_starts(x)
        if MIN_STEPS < runs.size < n and persist < 1.0:
            o_runs, why_runs = order_evidence(runs, int(np.unique(runs).size))
            if o_runs < o:
                # short runs (low persistence) are judged by the order of their starts
                o = persist * o + (1.0 - persist) * o_runs
                why_o = (f"{why_o}, but that step repeats only {persist:.0%} of the time; "
                         f"{runs.size} run starts: {why_runs}")
    c, span, kappa, why_c = concentration_evidence(x, counts)
    rel = max(0.0, 1.0 - 1.0 / math.sqrt(n))
    seq_s, skw_s, rnd_s = o * (1.0 - c), c, (1.0 - o) * (1.0 - c)
    why = why_c if skw_s >= max(seq_s, rnd_s) else why_o if seq_s >= rnd_s else f"{why_o}; {why_c}"
    return PatternScores(o, c, seq_s, rnd_s, skw_s, rel, why, span, kappa)


def could_show_skew(window: PatternScores, length: int) -> bool:
    """Would ``length`` accesses behaving like ``window`` (same collision factor over the
    same span) reliably be classified skewed — even with z·sqrt fewer collisions than
    expected? If not, their failure to look skewed is no evidence against the hot set."""
    if length < 2 or window.span <= 1.0:
        return False
    expected = window.kappa * length * (length - 1) / (2.0 * window.span)
    c, _ = concentration_from(expected - Z * math.sqrt(expected), length, window.span)
    return c > 0.5


class StatisticalAdvisor(Advisor):
    """Deterministic, offline advisor (see module docstring). Never raises."""

    name: ClassVar[str] = "statistical"
    expected_latency_s = 0.001

    def diagnose(self, window: Sequence[int], stale_prefix: bool = False) -> Advice | None:
        """Window + recent-part classification; ``stale_prefix`` lets the recent part decide."""
        n = len(window)
        if n == 0:
            return None
        w = np.asarray(window, dtype=np.int64)
        tail = w[n - tail_length(n) :]
        ts = score_sequence(tail)
        ws = score_sequence(w) if tail.size < n else ts
        recent = "tail"
        if ws.pattern == "skewed" and ts.pattern == "random" and not could_show_skew(ws, tail.size):
            half = w[n // 2 :]
            if half.size <= tail.size or not could_show_skew(ws, half.size):
                return Advice(ws.pattern, round(ws.confidence, 3), f"{ws.why}; recent accesses too few to show the hot set")
            ts, recent = score_sequence(half), "recent half"
        if stale_prefix:
            if recent == "tail" and tail.size >= 2 * MIN_RECENT:
                # the change may lie inside the tail itself (a review flagged within a
                # round of it): its newer half, if more decisive, is the fresher evidence
                half = tail[tail.size // 2 :]
                hs = score_sequence(half)
                # ... unless it is merely too short to show the tail's hot set
                hides_skew = ts.pattern == "skewed" and not could_show_skew(ts, half.size)
                if hs.confidence > ts.confidence and not hides_skew:
                    ts, recent = hs, "newest half of the tail"
            return Advice(ts.pattern, round(ts.confidence, 3), f"{recent}: {ts.why}")
        if ws.pattern == ts.pattern:
            return Advice(ws.pattern, round(ws.confidence, 3), ws.why)
        against = (ts.score(ts.pattern) - ts.score(ws.pattern)) * ts.reliability
        keep = ws.confidence * (1.0 - against)
        switch = min(ts.confidence, ws.score(ts.pattern) * ws.reliability)
        why = f"window {ws.pattern} ({ws.why}) but {recent} {ts.pattern} ({ts.why})"
        if keep >= switch:
            return Advice(ws.pattern, round(keep, 3), why)
        return Advice(ts.pattern, round(switch, 3), why)

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        self.counters.calls += 1
        if not request.window:
            self.counters.error("empty window")
            return None
        try:
            return self.diagnose(request.window, request.context.older_prefix_may_be_stale)
        except Exception as exc:  # never raise into the read path
            self.counters.error(type(exc).__name__)
            return None
