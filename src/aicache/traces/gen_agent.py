"""Coding-agent session generators: ``agent`` (TraceLab-like) and ``weka`` (WEKA-like).

Why synthetic: neither source trace ships prompt contents (the published evaluation
reconstructs deterministic inputs too). What must be right is the *reuse structure*: each request is
the previous prompt plus the model's last answer plus new tool output or user text, so
consecutive requests of a session share all but a few thousand tokens; a few system-
prompt variants are shared across sessions; sessions occasionally reset their prefix
(``/clear``, compaction — forced at the 450K-token context limit).

Calibration (the published SARIA workload statistics, ``docs/design/saria.md``):

=========  ========  ========  ============  ================  ========  ===========
kind       sessions  requests  req/session   prompt tok/req    gap (s)   block ids
=========  ========  ========  ============  ================  ========  ===========
agent      350       6,431     18.4          83.7K (538.26M)   112.1     512 tokens
weka       170       5,995     35.3          155.2K (930.25M)  111.1     64 tokens
=========  ========  ========  ============  ================  ========  ===========

Session and request counts are hit exactly (counts are drawn, then nudged to the target
total); the mean prompt length is hit by scaling the tool-output sizes (a bisection on
the drawn, unit-scale sizes, so the random structure is fixed first); gaps are
log-normal with the target mean. Unique ("minimum prefill") tokens are reported next to
the published 36.55M / 26.43M but not forced. Block ids are chained by construction: an id
names its whole prefix, as Mooncake's ``hash_ids`` do. Every block carries its token
type (``system``, ``user``, ``assistant``, ``tool``) and every request ``session_type``
``agentic``. Sessions start within the first 20 h so the 24 h truncation drops nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import KVRequest


@dataclass(frozen=True)
class SessionTargets:
    """Published statistics a generator is calibrated to (and reports against)."""

    name: str
    sessions: int
    requests: int
    mean_prompt_tokens: float
    mean_gap_s: float
    min_prefill_tokens: float
    block_tokens: int
    context_limit: int = 450_000
    requests_sd_ratio: float = 0.7     #: sd / mean of requests per session
    system_prompts: tuple[int, ...] = (14_000, 18_000, 11_000, 22_000)
    system_weights: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    initial_context_mean: float = 6_000.0
    reset_prob: float = 0.02
    assistant_mean: float = 450.0
    user_frac: float = 0.15
    user_mean: float = 300.0
    summary_mean: float = 8_000.0


AGENT = SessionTargets("agent", 350, 6431, 538.26e6 / 6431, 112.1, 36.55e6, 512)
WEKA = SessionTargets("weka", 170, 5995, 930.25e6 / 5995, 111.1, 26.43e6, 64,
                      requests_sd_ratio=0.75, initial_context_mean=30_000.0)


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, size: Any = None) -> Any:
    return rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, size)


@dataclass(slots=True)
class _Plan:
    """All random draws of one session, at unit tool-output scale; the arrays hold one entry
    per request of the session (``n``)."""

    n: int
    variant: int  #: index of the session's system prompt
    init: int  #: tokens of the first user message
    asst: np.ndarray  #: assistant tokens per request (int)
    is_user: np.ndarray  #: whether a request's new input is a user turn, else tool output (bool)
    tool: np.ndarray  #: tool-output tokens per request at unit scale (float)
    user: np.ndarray  #: user tokens per request (int)
    reset: np.ndarray  #: whether the context is summarised before a request (bool)
    summary: np.ndarray  #: tokens of the summary that replaces the context (int)
    gaps: np.ndarray  #: seconds before each request, the first 0 (float)
    start: float  #: the session's first request, seconds into the trace


def _draw(t: SessionTargets, n_sessions: int, rng: np.random.Generator) -> list[_Plan]:
    total = round(t.requests / t.sessions * n_sessions)
    mean_n = total / n_sessions
    sd = t.requests_sd_ratio * mean_n
    sigma = math.sqrt(math.log(1 + (sd / mean_n) ** 2))
    counts = np.maximum(1, np.rint(_lognormal(rng, mean_n, sigma, n_sessions))).astype(int)
    while counts.sum() != total:  # nudge to the exact total, randomly
        i = int(rng.integers(n_sessions))
        if counts.sum() > total and counts[i] > 1:
            counts[i] -= 1
        elif counts.sum() < total:
            counts[i] += 1
    starts = np.sort(rng.uniform(0, 20 * 3600, n_sessions))
    w = np.asarray(t.system_weights) / sum(t.system_weights)
    plans: list[_Plan] = []
    for i in range(n_sessions):
        n = int(counts[i])
        # the draws in the order the generator has always made them (same seed, same trace)
        variant = int(rng.choice(len(w), p=w))
        init = max(1, int(_lognormal(rng, t.initial_context_mean, 0.8)))
        asst = np.maximum(1, _lognormal(rng, t.assistant_mean, 0.9, n)).astype(int)
        is_user = rng.random(n) < t.user_frac
        tool = _lognormal(rng, 1.0, 1.1, n)
        user = np.maximum(1, _lognormal(rng, t.user_mean, 0.8, n)).astype(int)
        reset = rng.random(n) < t.reset_prob
        summary = np.maximum(1, _lognormal(rng, t.summary_mean, 0.5, n)).astype(int)
        gaps = _lognormal(rng, t.mean_gap_s, 1.0, n)
        gaps[0] = 0.0
        plans.append(_Plan(n=n, variant=variant, init=init, asst=asst, is_user=is_user, tool=tool,
                           user=user, reset=reset, summary=summary, gaps=gaps, start=float(starts[i])))
    return plans


def _increment(p: _Plan, k: int, scale: float) -> int:
    return int(p.asst[k]) + (int(p.user[k]) if p.is_user[k] else max(1, int(p.tool[k] * scale)))


def _mean_prompt(t: SessionTargets, plans: list[_Plan], scale: float) -> float:
    total = 0
    count = 0
    for p in plans:
        sys_len = t.system_prompts[p.variant]
        L = sys_len + p.init
        for k in range(p.n):
            if k:
                inc = _increment(p, k, scale)
                if p.reset[k] or L + inc > t.context_limit:
                    L = sys_len + int(p.summary[k])
                else:
                    L += inc
            total += L
            count += 1
    return total / max(1, count)


def _calibrate(t: SessionTargets, plans: list[_Plan]) -> float:
    lo, hi = 1.0, 1e6
    if _mean_prompt(t, plans, lo) >= t.mean_prompt_tokens:
        return lo
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if _mean_prompt(t, plans, mid) < t.mean_prompt_tokens:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.0005:
            break
    return math.sqrt(lo * hi)


class _Lineage:
    """Append-only token content of one prefix lineage, as chained block ids."""

    __slots__ = ("ids", "types", "fill", "ptype", "bt")

    def __init__(self, bt: int, sys_ids: list[int], sys_len: int) -> None:
        self.bt = bt
        self.ids = list(sys_ids)
        self.types = ["system"] * len(sys_ids)
        self.fill = sys_len - len(sys_ids) * bt
        self.ptype = "system"

    def append(self, n: int, kind: str, new_id: Any) -> None:
        bt = self.bt
        while n > 0:
            if self.fill == 0:
                self.ptype = kind
            take = min(n, bt - self.fill)
            self.fill += take
            n -= take
            if self.fill == bt:
                self.ids.append(new_id())
                self.types.append(self.ptype)
                self.fill = 0

    @property
    def tokens(self) -> int:
        return len(self.ids) * self.bt + self.fill


def _generate(t: SessionTargets, sessions: int | None, seed: int,
              block_tokens: int | None = None) -> Iterator[KVRequest]:
    """The sessions' requests in timestamp order (ties in session, then turn order), as a
    trace records them and as every replay of a trace file requires; block ids are assigned
    session by session, so the ids do not depend on how the sessions interleave."""
    yield from sorted(_by_session(t, sessions, seed, block_tokens), key=lambda r: r.timestamp)


def _by_session(t: SessionTargets, sessions: int | None, seed: int,
                block_tokens: int | None = None) -> Iterator[KVRequest]:
    n_s = t.sessions if sessions is None else int(sessions)
    if n_s < 1:
        raise BadInput(f"--sessions {sessions} must be at least 1")
    bt = block_tokens or t.block_tokens
    rng = np.random.default_rng(seed)
    plans = _draw(t, n_s, rng)
    scale = _calibrate(t, plans)
    counter = [((seed & 0xFFFF) << 40) + 1]

    def new_id() -> int:
        counter[0] += 1
        return counter[0]

    sys_ids = [[new_id() for _ in range(s // bt)] for s in t.system_prompts]
    for si, p in enumerate(plans):
        sid = f"{t.name}-{seed}-{si:05d}"
        sys_len = t.system_prompts[p.variant]
        lin = _Lineage(bt, sys_ids[p.variant], sys_len)
        lin.append(p.init, "user", new_id)
        ts = p.start
        for k in range(p.n):
            if k:
                ts += float(p.gaps[k])
                inc = _increment(p, k, scale)
                if p.reset[k] or lin.tokens + inc > t.context_limit:
                    lin = _Lineage(bt, sys_ids[p.variant], sys_len)
                    lin.append(int(p.summary[k]), "user", new_id)
                else:
                    lin.append(int(p.asst[k]), "assistant", new_id)
                    lin.append(inc - int(p.asst[k]), "user" if p.is_user[k] else "tool", new_id)
            ids = lin.ids + ([new_id()] if lin.fill else [])
            types = lin.types + ([lin.ptype] if lin.fill else [])
            yield KVRequest(timestamp=round(ts, 3), input_length=lin.tokens,
                            output_length=int(p.asst[(k + 1) % p.n]), hash_ids=ids,
                            block_tokens=bt, session_id=sid, turn=k, session_type="agentic",
                            block_types=types)


def generate_agent(sessions: int | None = None, seed: int = 0) -> Iterator[KVRequest]:
    """TraceLab-like coding-agent sessions (350 sessions, 6,431 requests by default)."""
    return _generate(AGENT, sessions, seed)


def generate_weka(sessions: int | None = None, seed: int = 0) -> Iterator[KVRequest]:
    """WEKA-like Claude-Code streams with 64-token block ids (170 sessions, 5,995 requests)."""
    return _generate(WEKA, sessions, seed)


TARGETS = {"agent": AGENT, "weka": WEKA}


def session_stats(requests: Iterable[KVRequest]) -> dict[str, float]:
    """Workload statistics in the terms of the published workload table
    (``docs/design/saria.md``)."""
    sessions: dict[str, list[KVRequest]] = {}
    n = 0
    prompt = 0
    for r in requests:
        sessions.setdefault(str(r.session_id), []).append(r)
        n += 1
        prompt += r.input_length
    gaps: list[float] = []
    seen: set[int] = set()
    unique_tokens = 0
    for lst in sessions.values():
        for a, b in zip(lst, lst[1:]):
            gaps.append(b.timestamp - a.timestamp)
    for lst in sessions.values():
        for r in lst:
            bt = r.block_tokens
            for i, h in enumerate(r.hash_ids):
                if h not in seen:
                    seen.add(h)
                    unique_tokens += min(bt, r.input_length - i * bt)
    return {
        "sessions": len(sessions),
        "requests": n,
        "requests_per_session": n / max(1, len(sessions)),
        "mean_prompt_tokens": prompt / max(1, n),
        "total_prompt_tokens": float(prompt),
        "mean_gap_s": float(np.mean(gaps)) if gaps else 0.0,
        "min_prefill_tokens": float(unique_tokens),
        "max_prompt_tokens": float(max((r.input_length for lst in sessions.values() for r in lst),
                                       default=0)),
    }


def stats_table(kind: str, sessions: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Generated statistics next to the targets (scaled to the session count)."""
    t = TARGETS[kind]
    gen = generate_agent if kind == "agent" else generate_weka
    got = session_stats(gen(sessions, seed))
    f = (sessions or t.sessions) / t.sessions
    want = {"sessions": t.sessions * f, "requests": round(t.requests * f),
            "requests_per_session": t.requests / t.sessions,
            "mean_prompt_tokens": t.mean_prompt_tokens,
            "total_prompt_tokens": t.mean_prompt_tokens * t.requests * f,
            "mean_gap_s": t.mean_gap_s, "min_prefill_tokens": t.min_prefill_tokens * f,
            "max_prompt_tokens": t.context_limit}
    return [{"statistic": k, "generated": got[k], "target": want[k]} for k in got]


def print_stats(kind: str, sessions: int | None = None, seed: int = 0) -> None:
    """Print generated statistics next to the published targets."""
    for row in stats_table(kind, sessions, seed):
        print(f"{row['statistic']:>22}  generated {row['generated']:>16,.1f}  target {row['target']:>16,.1f}")


def generate_mooncake_like(requests: int = 4000, seed: int = 0, *, rate: float = 2.0,
                           prefixes: int = 64, block_tokens: int = 512) -> Iterator[KVRequest]:
    """Mooncake-shaped requests (FAST'25 conversation-trace-like): Poisson arrivals, no
    session ids, 512-token prefix-block ids, mean input ≈ 12K tokens.

    Reuse comes from a Zipf-popular pool of shared prefixes (system prompts, documents)
    and from hidden conversations (a request continues a live one with probability 0.5),
    which a timestamp replay must discover from the ids alone — as with the real trace.
    """
    if requests < 1:
        raise BadInput(f"requests {requests} must be at least 1")
    rng = np.random.default_rng(seed)
    counter = [((seed & 0xFFFF) << 40) + (1 << 39)]

    def new_id() -> int:
        counter[0] += 1
        return counter[0]

    lens = np.maximum(block_tokens, _lognormal(rng, 6000.0, 0.8, prefixes)).astype(int)
    pref_ids = [[new_id() for _ in range(int(n) // block_tokens)] for n in lens]
    pop = 1.0 / np.arange(1, prefixes + 1) ** 1.1
    pop /= pop.sum()
    live: list[_Lineage] = []
    t = 0.0
    for _ in range(requests):
        t += float(rng.exponential(1.0 / rate))
        if live and rng.random() < 0.5:
            i = int(rng.integers(len(live)))
            lin = live[i]
            lin.append(int(_lognormal(rng, 350.0, 0.8)), "assistant", new_id)
            lin.append(int(_lognormal(rng, 1500.0, 1.0)), "user", new_id)
            if lin.tokens > 64_000:
                live.pop(i)
                continue
        else:
            v = int(rng.choice(prefixes, p=pop))
            lin = _Lineage(block_tokens, pref_ids[v], int(lens[v]))
            lin.append(int(_lognormal(rng, 2000.0, 1.0)), "user", new_id)
            live.append(lin)
            if len(live) > 200:
                live.pop(0)
        ids = lin.ids + ([new_id()] if lin.fill else [])
        yield KVRequest(timestamp=round(t, 3), input_length=lin.tokens,
                        output_length=int(_lognormal(rng, 343.0, 0.8)), hash_ids=ids,
                        block_tokens=block_tokens)
