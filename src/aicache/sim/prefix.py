"""Prefix-cache simulator over KV traces (SAECache's evaluation harness).

Model, and the decisions behind it:

* Capacity is in tokens; blocks are keyed by their chained hash id (``hash_ids``), so a
  block id stands for the whole prefix up to it. A block holds ``block_tokens`` tokens; the
  last block of a prompt holds the remainder (SGLang-like token accounting).
* A request hits the longest run of *consecutive* cached blocks from its start; those
  tokens are its hit tokens (the rest is prefilled).
* It then touches its blocks **tail first** (as vLLM frees a request's blocks in reverse
  order): so among blocks with equal recency, a prompt's tail goes before its prefix.
  Resident blocks are hits to the policy; missing blocks are inserted, evicting by the
  policy until they fit; a block larger than the whole cache is not cached.
* Eviction may take a block whose descendants are still cached (as vLLM's hash-keyed
  block pool does; SGLang would only take leaves). Those descendants are unreachable until
  the parent returns; such evictions are counted as ``orphan_evictions`` so the cost of
  allowing them is visible.
* Decode: blocks named in ``extra["output_hash_ids"]`` (written by the chat generators)
  are touched after the prefill (tail first too), with their token types; traces
  without them have no decode-phase blocks.
* TTFT: one prefill server, FIFO: ``ttft = wait + overhead + uncached_tokens / throughput``.
* Labels: a trace with ``block_types`` on every request is ``labels: given``. Otherwise
  they are inferred (``labels: inferred``): a block already seen in another session (or
  another request, without session ids) is ``system`` (shared template/prefix), else
  ``user``; ``turn`` is counted per session when absent; Bailian's ``type`` field is kept
  as the request type.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from aicache.errors import BadInput
from aicache.kv.prefix_policies import PrefixPolicy, RequestView, make_prefix_policy
from aicache.traces.base import KVRequest
from aicache.units import parse_size


@dataclass(slots=True)
class PrefixSimParams:
    """Cost model of the simulated server."""

    prefill_tokens_per_s: float = 10_000.0  #: prefill throughput (tokens/s)
    request_overhead_s: float = 0.002  #: fixed per-request scheduling/launch cost
    decode_blocks: bool = True  #: insert decoded blocks named by the trace


@dataclass
class PrefixResult:
    """One replay's metrics (the stable ``--json`` keys first).

    ``token_hit_ratio`` = prefix-hit tokens / prompt tokens. ``decisions_per_second`` =
    policy calls (hits, inserts, victims) per second of replay wall time, simulator
    included — the only non-deterministic numbers are it, ``wall_seconds`` and
    ``cpu_seconds`` (the replay loop's process CPU time, the fairer cost measure on a shared
    machine).
    ``orphan_evictions`` counts evicted blocks that still had cached descendants.
    """

    policy: str
    requests: int
    token_hit_ratio: float
    ttft_mean_s: float
    ttft_p90_s: float
    decisions_per_second: float
    labels: str
    capacity_tokens: int
    working_set_tokens: int
    input_tokens: int
    hit_tokens: int
    evictions: int
    orphan_evictions: int
    decisions: int
    wall_seconds: float
    cpu_seconds: float = 0.0  #: process CPU time of the replay loop (waiting for a core excluded)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def block_sizes(r: KVRequest) -> list[int]:
    """Tokens per prompt block: ``block_tokens`` each, the last holds the remainder.

    A record whose ``hash_ids`` disagree with its ``input_length`` (more blocks than the
    prompt fills) gets 1 token for each surplus block, so a request never hits more tokens
    than its prompt has (the hit count is also capped at ``input_length``).
    """
    n = len(r.hash_ids)
    if not n:
        return []
    bt = r.block_tokens
    if r.input_length >= bt * n:
        return [bt] * n
    return [min(bt, max(1, r.input_length - bt * i)) for i in range(n)]


def _output(r: KVRequest) -> tuple[list[int], list[str]]:
    ids = r.extra.get("output_hash_ids") if r.extra else None
    if not isinstance(ids, (list, tuple)) or not ids:
        return [], []
    types = r.extra.get("output_block_types")
    if not isinstance(types, (list, tuple)) or not types:
        types = ["decode"] * len(ids)
    # the trace formats write the output blocks' ids as integers (a JSON array of numbers)
    return [int(x) for x in cast("list[int]", ids)], [str(t) for t in types]


def _output_sizes(r: KVRequest, n: int) -> list[int]:
    if not n:
        return []
    bt = r.block_tokens
    start = (r.input_length // bt) * bt
    total = r.input_length + r.output_length - start
    last = total - bt * (n - 1)
    if not 0 < last <= bt:
        last = bt
    return [bt] * (n - 1) + [last]


def infer_labels(requests: Iterable[KVRequest]) -> tuple[list[KVRequest], str]:
    """Materialise ``requests``, filling missing block types and turns (see module doc)."""
    out: list[KVRequest] = []
    owner: dict[int, object] = {}
    turns: dict[object, int] = {}
    inferred = False
    for n, r in enumerate(requests):
        sid = r.session_id if r.session_id is not None else ("#", n)
        if r.turn is None and r.session_id is not None:
            turns[sid] = turns.get(sid, 0) + 1
            r.turn = turns[sid]
            inferred = True
        if r.block_types is None or len(r.block_types) != len(r.hash_ids):
            types = []
            for h in r.hash_ids:
                o = owner.get(h)
                types.append("system" if (o is not None and o != sid) else "user")
            r.block_types = types
            inferred = True
        for h in r.hash_ids:
            owner.setdefault(h, sid)
        out.append(r)
    return out, ("inferred" if inferred else "given")


def working_set_tokens(requests: Sequence[KVRequest], decode: bool = True) -> int:
    seen: dict[int, int] = {}
    for r in requests:
        for h, t in zip(r.hash_ids, block_sizes(r)):
            seen[h] = t
        if decode:
            ids, _ = _output(r)
            for h, t in zip(ids, _output_sizes(r, len(ids))):
                seen.setdefault(h, t)
    return sum(seen.values())


def _future(requests: Sequence[KVRequest], decode: bool) -> list[int]:
    """Next event index of the same block for every block event, in the simulator's order."""
    keys: list[int] = []
    for r in requests:
        keys.extend(reversed(r.hash_ids))
        if decode:
            keys.extend(reversed(_output(r)[0]))
    nxt = [-1] * len(keys)
    last: dict[int, int] = {}
    for i in range(len(keys) - 1, -1, -1):
        nxt[i] = last.get(keys[i], -1)
        last[keys[i]] = i
    return nxt


def simulate(requests: Sequence[KVRequest], policy: str | PrefixPolicy, capacity: int | str,
             *, params: PrefixSimParams | None = None, seed: int = 0, labels: str = "given",
             policy_params: Mapping[str, Any] | None = None) -> PrefixResult:
    """Replay ``requests`` through a token-capacity prefix cache run by ``policy``.

    Invariant (asserted): resident tokens never exceed the capacity, and the policy holds
    exactly the resident blocks.
    """
    p = params or PrefixSimParams()
    if p.prefill_tokens_per_s <= 0:
        raise BadInput(f"prefill throughput {p.prefill_tokens_per_s!r} must be positive")
    ws = working_set_tokens(requests, p.decode_blocks)
    cap = parse_size(capacity, total=ws, what="--capacity-tokens")
    if cap < 1:
        raise BadInput(f"--capacity-tokens {capacity!r} gives {cap} tokens; give at least 1")
    pol = policy if isinstance(policy, PrefixPolicy) else \
        make_prefix_policy(policy, cap, seed=seed, **dict(policy_params or {}))
    future = _future(requests, p.decode_blocks) if pol.needs_future else None

    resident: dict[int, int] = {}  # key -> tokens
    parent_of: dict[int, int] = {}
    children: dict[int, int] = {}
    used = 0
    ev = 0
    evictions = orphans = decisions = 0
    hit_total = in_total = 0
    ttfts = np.empty(len(requests))
    free_at = 0.0
    view = RequestView()
    prev_t = -np.inf

    def insert(key: int, tokens: int, i: int, parent: int | None, now: float) -> None:
        nonlocal used, evictions, orphans, decisions
        if tokens > cap:
            return
        while used + tokens > cap:
            v = cast(int, pol.victim(now))  # the keys this replay inserts are block ids
            decisions += 1
            used -= resident.pop(v)
            evictions += 1
            if children.get(v, 0) > 0:
                orphans += 1
            par = parent_of.pop(v, None)
            if par is not None:
                c = children[par] - 1
                if c:
                    children[par] = c
                else:
                    del children[par]
        pol.on_insert(key, tokens, i, now)
        decisions += 1
        resident[key] = tokens
        used += tokens
        if parent is not None:
            parent_of[key] = parent
            children[parent] = children.get(parent, 0) + 1

    t0 = time.perf_counter()
    c0 = time.process_time()
    for n, r in enumerate(requests):
        now = float(r.timestamp)
        if now < prev_t:
            raise BadInput(f"request {n} goes back in time ({now} < {prev_t}); sort the trace by timestamp")
        prev_t = now
        ids = r.hash_ids
        sizes = block_sizes(r)
        hb = ht = 0
        for h, t in zip(ids, sizes):
            if h not in resident:
                break
            hb += 1
            ht += t
        view.timestamp = now
        view.session_id = r.session_id
        view.turn = r.turn
        view.request_type = r.request_type
        view.session_type = r.session_type
        view.input_length = r.input_length
        view.output_length = r.output_length
        view.block_tokens = r.block_tokens
        view.hash_ids = ids
        view.block_types = r.block_types or []
        view.hit_blocks = hb
        view.hit_tokens = ht
        view.decode = False
        pol.begin(view, now)
        for i in range(len(ids) - 1, -1, -1):
            h = ids[i]
            if future is not None:
                pol.set_next_access(future[ev])
            ev += 1
            if h in resident:
                pol.on_hit(h, i, now)
                decisions += 1
            else:
                insert(h, sizes[i], i, ids[i - 1] if i else None, now)
        if p.decode_blocks:
            out_ids, out_types = _output(r)
            if out_ids:
                view.decode = True
                view.block_types = out_types
                pol.begin_decode(now)
                osz = _output_sizes(r, len(out_ids))
                first = r.input_length // r.block_tokens
                root: int | None = ids[first - 1] if 0 < first <= len(ids) else None
                for j in range(len(out_ids) - 1, -1, -1):  # tail first, as for the prompt
                    h = out_ids[j]
                    if future is not None:
                        pol.set_next_access(future[ev])
                    ev += 1
                    if h in resident:
                        pol.on_hit(h, j, now)
                        decisions += 1
                    else:
                        insert(h, osz[j], j, out_ids[j - 1] if j else root, now)
        pol.end(now)
        assert used <= cap
        if ht > r.input_length:
            ht = r.input_length
        uncached = r.input_length - ht
        start = max(now, free_at)
        free_at = start + p.request_overhead_s + uncached / p.prefill_tokens_per_s
        ttfts[n] = free_at - now
        hit_total += ht
        in_total += r.input_length
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if len(pol) != len(resident):
        raise AssertionError(f"policy holds {len(pol)} blocks, cache {len(resident)}")
    nreq = len(requests)
    return PrefixResult(
        policy=pol.name, requests=nreq,
        token_hit_ratio=hit_total / in_total if in_total else 0.0,
        ttft_mean_s=float(ttfts.mean()) if nreq else 0.0,
        ttft_p90_s=float(np.percentile(ttfts, 90)) if nreq else 0.0,
        decisions_per_second=decisions / wall if wall > 0 else 0.0,
        labels=labels, capacity_tokens=cap, working_set_tokens=ws, input_tokens=in_total,
        hit_tokens=hit_total, evictions=evictions, orphan_evictions=orphans,
        decisions=decisions, wall_seconds=wall, cpu_seconds=cpu)


def load_requests(*, trace: str | None = None, workload: str | None = None,
                  sessions: int | None = None, seed: int = 0, fmt: str = "auto",
                  skip_bad: bool = False) -> tuple[list[KVRequest], str]:
    """The requests of a KV trace file or a generated workload, with labels filled in."""
    if (trace is None) == (workload is None):
        raise BadInput("give exactly one of --trace PATH or --workload chat|arena|tool|mix")
    if trace is not None:
        from aicache.traces.io import open_trace

        src = open_trace(trace, fmt, skip_bad=skip_bad)
        return infer_labels(src.requests())
    from aicache.traces.gen import SESSIONS

    gen = SESSIONS.get(str(workload))
    return infer_labels(gen(sessions=sessions, seed=seed))
