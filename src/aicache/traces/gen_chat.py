"""Chat, arena, tool-use and shifting-mix KV session generators (SAECache's workloads).

Every request carries its prompt as chained block ids (``hash_ids``: block *i*'s id is
interned from (id of block *i−1*, the content spans of block *i*), so two prompts share a
block id exactly when they share the whole prefix up to and including that block, as in
vLLM's chained block hashes), a token type per block (``system``, ``user``, ``assistant``,
``reasoning``, ``tool``, ``decode``: majority type of the block's tokens) and the session's
type (``single`` when the session sent one request, else ``chat``/``agentic``).

``extra["output_hash_ids"]``/``extra["output_block_types"]`` name the blocks the decode
phase writes (reasoning then answer, chained after the prompt). When the next turn's
prompt is the old prompt plus the answer (no reasoning to strip), those ids are exactly the
next prompt's blocks, so a cache that keeps decode KV gets a hit; reasoning is stripped
from the history (as chat templates of reasoning models do), so its blocks never recur.

Calibration (stated, not fitted to any result of this project). From the published
SAECache characterisation (``docs/design/saecache.md``):
system prompts are reused 92.3% of the time and chain-of-thought 2.2%; inter-turn gaps are
log-normal with app-specific parameters; single-turn requests reuse shared templates
(tool-use, coding instructions); agentic sessions carry long tool schemas and system
prompts shared across sessions. Everything numeric below is an *assumption* (the published
design gives no further values); :func:`workload_stats` measures the result and the
``saecache-capacity`` report prints it next to the two published numbers.

* chat — ShareGPT/LMSys-like: ~2.7 requests per conversation on average (LMSys-Chat-1M ≈ 2,
  ShareGPT ≈ 3.5), user turns median ~60 tokens, answers median ~220 tokens; most
  sessions come through one of ``CHAT_APPS`` = 20 chat applications with their own system
  prompt (median 400 tokens, Zipf popularity), the rest get a 30-token default; log-normal
  inter-turn gaps, median 40 s, σ = 1.0. A quarter of sessions use a reasoning model
  (median 400 reasoning tokens per turn).
* arena — Chatbot-Arena-like single-turn prompts; 80% use one of 8 shared templates
  (median 600 tokens, Zipf popularity), 20% free-form.
* tool — BFCL-like tool-use sessions: an agent application = system prompt (median 500
  tokens) + tool schema (median 2,500 tokens), ``TOOL_APPS`` = 40 applications with
  Zipf(1.0) popularity, shared verbatim by their sessions; ``CUSTOM_TOOLS`` = 10% of
  sessions bring their own schema (median 2,000, shared with nobody); ~5 requests per
  session of tool call + tool output (median 300 tokens), log-normal gaps median 5 s,
  σ = 0.8 (tool execution, not human think time).
* reasoning — stripped from the history (as reasoning models' chat templates do), except
  for ``KEEP_REASONING`` = 5% of reasoning sessions whose client re-sends it (agent
  frameworks that keep thinking blocks in the tool loop): with the system prompts above
  this gives block-level reuse of ≈1–3% for reasoning and ≈70–98% for system blocks (the
  seed: 2.2% and 92.3%; system blocks at the system/user boundary also hold user text,
  are typed by majority and are shared by no one, which is why short prompts sit lower).
* mix — sessions of all three whose composition shifts linearly from chat-heavy
  (70% chat / 10% tool) to tool-heavy (10% chat / 70% tool), 20% arena throughout.

Generators stream: memory is bounded by the sessions active at one time, plus the block-id
intern table.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from dataclasses import dataclass, field

import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import KVRequest

BLOCK_TOKENS = 64
TOKEN_TYPES = ("system", "user", "assistant", "reasoning", "tool", "decode")


@dataclass(frozen=True, slots=True)
class GapModel:
    """Log-normal inter-turn gap (seconds): ``ln gap ~ N(mu, sigma)``."""

    mu: float
    sigma: float

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.lognormal(self.mu, self.sigma))


CHAT_GAP = GapModel(mu=math.log(40.0), sigma=1.0)
TOOL_GAP = GapModel(mu=math.log(5.0), sigma=0.8)
CHAT_APPS = 20  #: chat applications with their own system prompt (assumption)
TOOL_APPS = 40  #: agent applications (system prompt + tool schema) (assumption)
CUSTOM_TOOLS = 0.1  #: share of tool sessions with a tool set nobody else uses (assumption)
KEEP_REASONING = 0.05  #: share of reasoning sessions whose client re-sends the reasoning


@dataclass(slots=True)
class _Segment:
    uid: int
    tokens: int
    kind: str


class _Blocks:
    """Interns chained block ids, shared by all sessions of one generator run."""

    __slots__ = ("block_tokens", "_ids")

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._ids: dict[tuple[int, tuple[tuple[int, int, int], ...]], int] = {}

    def chain(self, segs: list[_Segment], start_block: int = 0) -> tuple[list[int], list[str]]:
        """Block ids and majority token types of ``segs`` from block ``start_block`` on."""
        B = self.block_tokens
        ids: list[int] = []
        types: list[str] = []
        prev = -1
        spans: list[tuple[int, int, int]] = []
        weight: dict[str, int] = {}
        fill = 0
        block = 0
        for seg in segs:
            off = 0
            while off < seg.tokens:
                take = min(B - fill, seg.tokens - off)
                spans.append((seg.uid, off, off + take))
                weight[seg.kind] = weight.get(seg.kind, 0) + take
                off += take
                fill += take
                if fill == B:
                    prev = self._emit(prev, spans, weight, block >= start_block, ids, types)
                    spans, weight, fill = [], {}, 0
                    block += 1
        if fill:
            self._emit(prev, spans, weight, block >= start_block, ids, types)
        return ids, types

    def _emit(self, prev: int, spans: list[tuple[int, int, int]], weight: dict[str, int],
              keep: bool, ids: list[int], types: list[str]) -> int:
        key = (prev, tuple(spans))
        bid = self._ids.get(key)
        if bid is None:
            bid = len(self._ids) + 1
            self._ids[key] = bid
        if keep:
            ids.append(bid)
            types.append(max(weight.items(), key=lambda kv: (kv[1], -TOKEN_TYPES.index(kv[0])))[0])
        return bid


class _Ctx:
    """Per-run state: RNG, block interning, unique segment ids, shared templates."""

    def __init__(self, seed: int, block_tokens: int = BLOCK_TOKENS) -> None:
        self.rng = np.random.default_rng(seed)
        self.blocks = _Blocks(block_tokens)
        self._uid = 0
        self._templates: dict[tuple[str, int], _Segment] = {}

    def unique(self, tokens: int, kind: str) -> _Segment:
        self._uid += 1
        return _Segment(self._uid, max(1, int(tokens)), kind)

    def template(self, pool: str, index: int, median: float, sigma: float, kind: str) -> _Segment:
        """The ``index``-th shared template of ``pool`` (drawn once, then reused verbatim)."""
        key = (pool, index)
        seg = self._templates.get(key)
        if seg is None:
            seg = self.unique(self.ln(median, sigma, lo=16, hi=8000), kind)
            seg.uid = -seg.uid  # template ids live in their own (negative) range
            self._templates[key] = seg
        return seg

    def ln(self, median: float, sigma: float, lo: int = 1, hi: int = 32000) -> int:
        return int(min(hi, max(lo, round(self.rng.lognormal(math.log(median), sigma)))))

    def zipf_index(self, n: int, s: float = 1.1) -> int:
        w = 1.0 / np.arange(1, n + 1) ** s
        return int(self.rng.choice(n, p=w / w.sum()))


@dataclass(slots=True)
class _Turn:
    new: list[_Segment]  # appended to the history before this request
    reasoning: int  # reasoning tokens decoded (stripped from the history)
    answer: _Segment  # answer decoded, kept in the history


@dataclass(slots=True)
class _SessionPlan:
    kind: str  # "chat" | "agentic" | "single"
    app: str  # "chat" | "arena" | "tool"
    request_type: str
    prefix: list[_Segment]
    turns: list[_Turn]
    gap: GapModel | None
    keep_reasoning: bool = False  # the client re-sends reasoning in the history
    times: list[float] = field(default_factory=list)


def _session_requests(ctx: _Ctx, sid: str, plan: _SessionPlan, start: float) -> list[KVRequest]:
    B = ctx.blocks.block_tokens
    out: list[KVRequest] = []
    history = list(plan.prefix)
    t = start
    n = len(plan.turns)
    stype = "single" if n == 1 else plan.kind
    for i, turn in enumerate(plan.turns):
        if i:
            assert plan.gap is not None
            t += plan.gap.draw(ctx.rng)
        history.extend(turn.new)
        ids, types = ctx.blocks.chain(history)
        prompt = sum(s.tokens for s in history)
        decoded = list(history)
        thought = ctx.unique(turn.reasoning, "reasoning") if turn.reasoning else None
        if thought is not None:
            decoded.append(thought)
        decoded.append(turn.answer)
        out_ids, out_types = ctx.blocks.chain(decoded, start_block=prompt // B)
        out_types = [ty if ty == "reasoning" else "decode" for ty in out_types]
        out.append(KVRequest(
            timestamp=round(t, 6), input_length=prompt,
            output_length=turn.reasoning + turn.answer.tokens, hash_ids=ids, block_tokens=B,
            session_id=sid, turn=i + 1, session_type=stype, block_types=types,
            request_type=plan.request_type,
            extra={"output_hash_ids": out_ids, "output_block_types": out_types, "app": plan.app},
        ))
        if thought is not None and plan.keep_reasoning:
            history.append(thought)
        history.append(turn.answer)
    return out


# -- session shapes --------------------------------------------------------------------

def _chat_plan(ctx: _Ctx) -> _SessionPlan:
    rng = ctx.rng
    engaged = rng.random() < 0.55
    # Most chat traffic comes through an application with its own system prompt (a catalogue
    # of CHAT_APPS prompts, Zipf popularity); engaged users favour those apps and write
    # longer openers: a weak, noisy signal a continuation predictor can learn, as real
    # request features are. The rest get the server's short default prompt.
    if rng.random() < (0.85 if engaged else 0.6):
        prefix = [ctx.template("chat-system", ctx.zipf_index(CHAT_APPS), 400, 0.8, "system")]
    else:
        prefix = [ctx.template("default-system", 0, 30, 0.0, "system")]
    if engaged:
        n = 2 + int(rng.geometric(0.35)) - 1
    else:
        n = 1 if rng.random() < 0.85 else 2
    n = min(n, 20)
    reasoning = rng.random() < 0.25
    turns = []
    for i in range(n):
        user = ctx.unique(ctx.ln(120 if (engaged and i == 0) else 60, 1.0, hi=2000), "user")
        turns.append(_Turn([user], ctx.ln(400, 0.6, hi=4000) if reasoning else 0,
                           ctx.unique(ctx.ln(220, 0.7, hi=1500), "assistant")))
    return _SessionPlan("chat", "chat", "text", prefix, turns, CHAT_GAP,
                        keep_reasoning=reasoning and rng.random() < KEEP_REASONING)


def _arena_plan(ctx: _Ctx) -> _SessionPlan:
    prefix = [ctx.template("default-system", 0, 30, 0.0, "system")]
    if ctx.rng.random() < 0.8:
        prefix.append(ctx.template("arena-template", ctx.zipf_index(8), 600, 0.6, "system"))
    user = ctx.unique(ctx.ln(80, 0.9, hi=2000), "user")
    turns = [_Turn([user], 0, ctx.unique(ctx.ln(300, 0.7, hi=1500), "assistant"))]
    return _SessionPlan("single", "arena", "text", prefix, turns, None)


def _tool_plan(ctx: _Ctx) -> _SessionPlan:
    rng = ctx.rng
    # An agent application = its system prompt + its tool schema, shared verbatim by all of
    # its sessions; TOOL_APPS applications with Zipf popularity, and a share of sessions
    # that bring their own (custom) tool set, which no other session shares.
    if rng.random() < CUSTOM_TOOLS:
        prefix = [ctx.template("agent-system", ctx.zipf_index(TOOL_APPS, 1.0), 500, 0.5, "system"),
                  ctx.unique(ctx.ln(2000, 0.6, lo=64, hi=16000), "tool")]
    else:
        app = ctx.zipf_index(TOOL_APPS, 1.0)
        prefix = [ctx.template("agent-system", app, 500, 0.5, "system"),
                  ctx.template("tool-schema", app, 2500, 0.6, "tool")]
    n = min(30, int(rng.geometric(0.2)))
    thinking = rng.random() < 0.3
    turns = []
    for i in range(n):
        if i == 0:
            new = [ctx.unique(ctx.ln(80, 0.9, hi=2000), "user")]
        else:
            new = [ctx.unique(ctx.ln(300, 1.0, hi=6000), "tool")]
            if rng.random() < 0.2:
                new.append(ctx.unique(ctx.ln(40, 0.8, hi=1000), "user"))
        turns.append(_Turn(new, ctx.ln(200, 0.6, hi=3000) if thinking else 0,
                           ctx.unique(ctx.ln(60, 0.7, hi=800), "assistant")))
    return _SessionPlan("agentic", "tool", "tool", prefix, turns, TOOL_GAP,
                        keep_reasoning=thinking and rng.random() < KEEP_REASONING)


_PLANS: dict[str, Callable[[_Ctx], _SessionPlan]] = {
    "chat": _chat_plan, "arena": _arena_plan, "tool": _tool_plan,
}


def _merge(ctx: _Ctx, starts: Iterable[tuple[float, str]], prefix: str) -> Iterator[KVRequest]:
    """Merge sessions (given in start order) into one timestamp-ordered stream."""
    heap: list[tuple[float, int, int, list[KVRequest]]] = []
    seq = 0
    for i, (start, app) in enumerate(starts):
        while heap and heap[0][0] <= start:
            yield from _pop(heap)
        reqs = _session_requests(ctx, f"{prefix}{i}", _PLANS[app](ctx), start)
        heapq.heappush(heap, (reqs[0].timestamp, seq, 0, reqs))
        seq += 1
    while heap:
        yield from _pop(heap)


def _pop(heap: list[tuple[float, int, int, list[KVRequest]]]) -> Iterator[KVRequest]:
    _, seq, idx, reqs = heapq.heappop(heap)
    yield reqs[idx]
    if idx + 1 < len(reqs):
        heapq.heappush(heap, (reqs[idx + 1].timestamp, seq, idx + 1, reqs))


def _check(sessions: int | None, default: int) -> int:
    n = default if sessions is None else sessions
    if not isinstance(n, int) or n < 1:
        raise BadInput(f"--sessions {sessions!r} must be a positive integer")
    return n


def _poisson_starts(ctx: _Ctx, n: int, rate: float, pick: Callable[[int], str]) -> Iterator[tuple[float, str]]:
    t = 0.0
    for i in range(n):
        t += float(ctx.rng.exponential(1.0 / rate))
        yield t, pick(i)


def generate_chat(sessions: int | None = None, seed: int = 0) -> Iterator[KVRequest]:
    """ShareGPT/LMSys-like multi-turn chats (default 1,000 sessions, 1.5 session/s)."""
    n = _check(sessions, 1000)
    ctx = _Ctx(seed)
    return _merge(ctx, _poisson_starts(ctx, n, 1.5, lambda i: "chat"), "chat-")


def generate_arena(sessions: int | None = None, seed: int = 0) -> Iterator[KVRequest]:
    """Chatbot-Arena-like single-turn prompts over 8 shared templates (default 3,000, 6/s)."""
    n = _check(sessions, 3000)
    ctx = _Ctx(seed)
    return _merge(ctx, _poisson_starts(ctx, n, 6.0, lambda i: "arena"), "arena-")


def generate_tool(sessions: int | None = None, seed: int = 0) -> Iterator[KVRequest]:
    """BFCL-like agentic tool-use sessions (default 300 sessions, 0.5 session/s)."""
    n = _check(sessions, 300)
    ctx = _Ctx(seed)
    return _merge(ctx, _poisson_starts(ctx, n, 0.5, lambda i: "tool"), "tool-")


def mix_weights(frac: float) -> tuple[float, float, float]:
    """(chat, tool, arena) probabilities at position ``frac`` ∈ [0, 1] of the mix."""
    f = min(1.0, max(0.0, frac))
    return 0.7 - 0.6 * f, 0.1 + 0.6 * f, 0.2


def generate_mix(sessions: int | None = None, seed: int = 0) -> Iterator[KVRequest]:
    """Chat-heavy → tool-heavy mix with 20% arena throughout (default 1,000 sessions, 1/s)."""
    n = _check(sessions, 1000)
    ctx = _Ctx(seed)

    def pick(i: int) -> str:
        w = mix_weights(i / max(1, n - 1))
        return ("chat", "tool", "arena")[int(ctx.rng.choice(3, p=w))]

    return _merge(ctx, _poisson_starts(ctx, n, 1.0, pick), "mix-")


def stats(requests: Iterable[KVRequest]) -> dict[str, object]:
    """Summary of a generated stream: sizes, turns, gaps and token-type shares."""
    n = 0
    tokens = 0
    sessions: dict[str, tuple[int, float, str]] = {}
    gaps: dict[str, list[float]] = {}
    type_blocks: dict[str, int] = {}
    for r in requests:
        n += 1
        tokens += r.input_length
        sid = r.session_id or f"#{n}"
        prev = sessions.get(sid)
        if prev is not None:
            gaps.setdefault(r.session_type or "?", []).append(r.timestamp - prev[1])
        sessions[sid] = ((prev[0] if prev else 0) + 1, r.timestamp, r.session_type or "?")
        for ty in r.block_types or ():
            type_blocks[ty] = type_blocks.get(ty, 0) + 1
    kinds: dict[str, int] = {}
    for _, _, st in sessions.values():
        kinds[st] = kinds.get(st, 0) + 1
    total_blocks = max(1, sum(type_blocks.values()))
    return {
        "requests": n,
        "sessions": len(sessions),
        "requests_per_session": n / max(1, len(sessions)),
        "mean_prompt_tokens": tokens / max(1, n),
        "session_types": kinds,
        "gap_median_s": {k: float(np.median(v)) for k, v in gaps.items() if v},
        "block_type_share": {k: v / total_blocks for k, v in sorted(type_blocks.items())},
    }


@dataclass(slots=True)
class _BlockStat:
    tau: str
    sid: str
    shared: bool = False  # seen in a second session
    reused: bool = False  # named by a prompt after its first appearance


def _lognormal_fit(xs: list[float]) -> dict[str, float]:
    lx = np.log(np.maximum(np.asarray(xs, dtype=float), 1e-9))
    return {"n": float(len(xs)), "median_s": float(np.exp(np.median(lx))), "mu": float(lx.mean()),
            "sigma": float(lx.std()), "p90_s": float(np.exp(np.quantile(lx, 0.9)))}


def _listed(v: object) -> list[object] | tuple[object, ...]:
    """A list-valued ``extra`` field (a JSON array), or nothing when it is absent."""
    return v if isinstance(v, (list, tuple)) else ()


def workload_stats(requests: Iterable[KVRequest]) -> dict[str, Any]:
    """The characterisation the published design reports (``docs/design/saecache.md``),
    measured on a KV stream.

    * ``type_reuse`` — per token type, the fraction of its *distinct* blocks (prompt blocks
      and decoded blocks) that a later request's prompt names again (its "token
      reuse rate": system 92.3%, chain-of-thought 2.2%).
    * ``turns`` — requests per session: mean, median, p90, share of single-request sessions.
    * ``gaps`` — per session type, the log-normal fit (median, μ, σ of ln gap) of in-session
      inter-request gaps.
    * ``token_share`` — tokens of distinct blocks split into ``shared`` (named by two or more
      sessions: system prompts, templates, tool schemas), ``session_local`` (reused, but only
      inside one session: conversation history) and ``never_reused`` (reasoning, last answers,
      one-off prompts).
    """
    blocks: dict[int, _BlockStat] = {}
    sessions: dict[str, list[float]] = {}
    stype: dict[str, str] = {}
    n = 0
    B = BLOCK_TOKENS
    for r in requests:
        n += 1
        B = r.block_tokens
        sid = r.session_id or f"#{n}"
        sessions.setdefault(sid, []).append(r.timestamp)
        stype[sid] = r.session_type or "?"
        types = r.block_types or ["other"] * len(r.hash_ids)
        for h, ty in zip(r.hash_ids, types):
            b = blocks.get(h)
            if b is None:
                blocks[h] = _BlockStat(ty, sid)
            else:
                b.reused = True
                if b.sid != sid:
                    b.shared = True
        ex = r.extra or {}
        for out_id, out_ty in zip(_listed(ex.get("output_hash_ids")),
                                  _listed(ex.get("output_block_types"))):
            if isinstance(out_id, int) and out_id not in blocks:
                blocks[out_id] = _BlockStat(str(out_ty), sid)
    per: dict[str, list[int]] = {}
    share = {"shared": 0, "session_local": 0, "never_reused": 0}
    for b in blocks.values():
        acc = per.setdefault(b.tau, [0, 0])
        acc[0] += 1
        acc[1] += b.reused
        share["shared" if b.shared else "session_local" if b.reused else "never_reused"] += 1
    turns = np.array([len(v) for v in sessions.values()], dtype=float)
    gaps: dict[str, list[float]] = {}
    for sid, ts in sessions.items():
        gaps.setdefault(stype[sid], []).extend(b - a for a, b in zip(ts, ts[1:]))
    total = max(1, len(blocks))
    return {
        "requests": n, "sessions": len(sessions), "block_tokens": B,
        "type_reuse": {k: v[1] / v[0] for k, v in sorted(per.items())},
        "type_blocks": {k: v[0] for k, v in sorted(per.items())},
        "turns": {"mean": float(turns.mean()) if n else 0.0,
                  "median": float(np.median(turns)) if n else 0.0,
                  "p90": float(np.quantile(turns, 0.9)) if n else 0.0,
                  "single_share": float((turns == 1).mean()) if n else 0.0},
        "gaps": {k: _lognormal_fit(v) for k, v in sorted(gaps.items()) if len(v) > 1},
        "token_share": {k: v / total for k, v in share.items()},
    }
