"""Trace-driven replay of a tiered KV cache (GPU ← DRAM ← SSD) for SARIA and baselines.

Methodology (the published evaluation's, ``docs/design/saria.md``):

* **Session replay** (traces with session ids): each session keeps its request order and
  recorded inter-request intervals; only session *start* times move — spread over a
  window (12 h / 4 h / 2 h …) with Gamma(k=1) gaps. One active request per session: a
  successor arrives its recorded interval after its predecessor finished.
  **Timestamp replay** (no session ids, e.g. Mooncake): requests arrive at their
  timestamps (relative to the first).
* **Replay clock** (the default, the seed's: "the logical replay clock advances at 6,500
  computed prefill tokens/s; reported latencies use wall-clock time"). Session starts,
  recorded idle intervals and timestamps are laid out on a clock that advances with the
  work the server does: while the prefill GPU computes, 1 s of replay time passes per
  ``prefill_tps`` (6,500) computed tokens; when nothing is in flight the clock jumps to the
  next arrival. At most ``in_flight`` requests are *submitted* at once (FIFO); an arrival
  that finds every slot taken waits in the replay driver, so arrivals are paced by the
  work actually done (a trace offering more load than the server serves is stretched —
  ``replay_stretch`` — instead of queueing without bound). TTFT runs from submission:
  cache transfer (shared :class:`~aicache.kv.transfer.TransferCoordinator`) + waiting for
  the GPU behind the other in-flight requests + prefill of the uncached suffix. Requests
  stop after the first token (prefill only).
* **Queueing mode** (only when asked: ``prefill_gpus ≥ 1``): ``prefill_gpus`` GPUs at
  ``prefill_tps`` each serve ``in_flight`` requests per GPU; arrivals keep their trace /
  session times whatever the load, and TTFT runs from *arrival*, so it includes the wait
  for a slot. The result reports the offered load (computed prefill tokens per second of
  arrivals over the GPUs' capacity) and utilisation, and warns when the offered load
  exceeds capacity (the queue then grows for as long as the trace lasts).
* CHAR = hit blocks / blocks a cache of unlimited capacity would have hit on the same
  arrival schedule (a shadow prefix set updated when each request finishes, with the same
  checkpoint-boundary rule for hybrid models).

The cache is a :class:`~aicache.kv.saria.KVIndex` — the same object the real tiered store
drives. Cache blocks are the model's ``block_tokens`` (512 dense, 1,024 hybrid); trace
blocks (Mooncake 512, WEKA 64, Bailian 16) are regrouped into cache blocks by chaining
their ids, so a prefix shared at trace granularity stays shared at cache granularity.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from aicache.errors import BadInput
from aicache.kv.admission import AdmissionRule, OracleAdmission, SSDAdmission
from aicache.kv.admissions import (
    SSD_ADMISSIONS, AdmissionContext, make_ssd_admission, unknown_admission,
)
from aicache.kv.budgeted_admission import BudgetSpender, CappedAdmission
from aicache.kv.shadow_admission import ShadowFollowAdmission
from aicache.kv.models import DEFAULT_MODEL, ModelSpec, get_model
from aicache.kv.promotion import PromotionMode, PromotionParams
from aicache.kv.saria import (
    KVIndex, KVIndexParams, LookupMode, Moves, ReloadPlan, RequestAttrs,
)
from aicache.kv.radix import RadixNode, Tier
from aicache.kv.transfer import GB, Bandwidths, SharingModel, TransferCoordinator, TransferMode
from aicache.kv.write_budget import (
    RATED_DWPD, RATED_YEARS, WriteBudget, life_years, parse_write_budget,
)
from aicache.registry import Registry
from aicache.traces.base import KVRequest

#: The stable keys of ``aicache sim kv --json``, in order (scripts parse them).
JSON_KEYS = ("system", "requests", "ttft_mean_s", "ttft_p90_s", "ttft_p25bad_s", "char",
             "char_p25bad", "ssd_write_bytes", "ssd_read_bytes", "ssd_writes_norm",
             "ssd_reads_norm", "dram_evictions", "transfer_mean_s", "transfer_p25bad_s",
             "ssd_lifetime_days")


# ---------------------------------------------------------------------------- systems
@dataclass(frozen=True)
class SystemSpec:
    """A cache configuration by name. ``admission=None`` means SARIA's own admission
    (θ_E / θ_R from the run's parameters); ``admission_policy`` names an
    :data:`~aicache.kv.admissions.SSD_ADMISSIONS` entry that replaces it."""

    name: str
    dram: bool = True
    ssd: bool = True
    admission: AdmissionRule | None = None
    lookup: LookupMode = LookupMode.UNIFIED
    promotion: PromotionMode = PromotionMode.PARTIAL
    transfer: TransferMode = TransferMode.COORDINATED
    admission_policy: str | None = None


_FD = AdmissionRule(None, None, True)
KV_SYSTEMS: Registry[SystemSpec] = Registry("KV system")
KV_SYSTEMS.register("saria", SystemSpec("saria"), "SARIA: E/R admission, unified plan, partial promotion, coordinator")
KV_SYSTEMS.register("full-duplicate", SystemSpec("full-duplicate", admission=_FD),
                 "SARIA with admission disabled (every block to SSD)")
KV_SYSTEMS.register("dram-only", SystemSpec("dram-only", ssd=False), "SARIA with SSD disabled")
KV_SYSTEMS.register("lmcache-plus", SystemSpec(
    "lmcache-plus", admission=_FD, lookup=LookupMode.TIER_PREFIX, promotion=PromotionMode.ZERO,
    transfer=TransferMode.SERIAL), "full duplicate, tier-prefix lookup, serial tiers, no promotion")
KV_SYSTEMS.register("gds-only", SystemSpec("gds-only", dram=False, admission=_FD,
                                        promotion=PromotionMode.ZERO),
                 "KV only on SSD, read straight to GPU")
KV_SYSTEMS.register("full-promotion", SystemSpec("full-promotion", admission=_FD,
                                              promotion=PromotionMode.FULL),
                 "HiCache-style: every SSD hit kept in DRAM (full duplicate)")
KV_SYSTEMS.register("oracle", SystemSpec("oracle", admission_policy="oracle"),
                 "SARIA with offline oracle admission: persist exactly the blocks a later "
                 "request references (the frontier)")
KV_SYSTEMS.register("zero-promotion", SystemSpec("zero-promotion", admission=_FD,
                                              promotion=PromotionMode.ZERO),
                 "FlexKV/Dynamo-style: SSD hits go to GPU only (full duplicate)")


@dataclass(frozen=True)
class KVSimParams:
    """One replay. ``None`` overrides keep the system's own setting."""

    system: str = "saria"
    model: str = DEFAULT_MODEL
    dram_tokens: int = 1_000_000
    ssd_tokens: int = 10_000_000
    theta_e: int | None = 2
    theta_r: int | None = None
    admission: str | None = None        #: e.g. "E2∨R8"; overrides theta_e/theta_r
    promotion: float | None = None      #: target DRAM share r (default 0.4)
    promotion_mode: str | None = None   #: partial / zero / full
    p_tau: float = 60.0
    lookup: str | None = None           #: unified / tier-prefix
    transfer: str | None = None         #: serial / overlap / coordinated
    prewrite: bool = True
    gpu_gbps: float = 48.0
    disk_gbps: float = 20.0             #: one SSD's read (GDS) rate
    dram_gbps: float = 48.0
    est_disk_gbps: float | None = None  #: coordinator's estimate of B_disk (default: exact)
    #: one SSD's write rate: the seed's 20 GB/s read scaled by the real store's measured
    #: write/read ratio (docs/results/ssd-model.md)
    disk_write_gbps: float = 18.8
    ssd_devices: int = 1                #: drives every object is striped over
    #: queued: a write takes SSD bandwidth and time, the block is served from DRAM until
    #: it completes; instant: a write is readable when issued
    ssd_writes: str = "queued"
    overlap_ssd_share: float = 0.1      #: SSD share of its rate under an uncoordinated burst
    read_share: float = 0.5             #: device time reads keep while writes are queued
    coord_overhead_s_per_gb: float = 0.013  #: coordinator control time per paced SSD GB
    session_window: float = 12 * 3600.0
    in_flight: int = 4
    prefill_tps: float = 6500.0         #: replay clock rate; per-GPU rate when queueing
    prefill_gpus: int = 0               #: 0: the seed's replay clock; N: queue behind N GPUs
    replay: str = "auto"                #: auto / sessions / timestamps
    dram_policy: str = "lru"
    metadata_window: float = 3600.0
    seed: int = 0
    #: SSD write budget (``1DWPD``, ``200MB/s``) on the replay clock; None: unlimited. With
    #: no ``admission``, the budgeted admission spends it; any other is capped by it
    ssd_write_budget: str | None = None
    #: the window the budget holds over: writes in any ``[t, t + window)`` ≤ rate × window
    ssd_write_window: float = 600.0


# ---------------------------------------------------------------------- preparation
class _Req:
    __slots__ = ("session", "turn", "gap", "ts", "input_length", "keys", "last_tokens",
                 "types", "arrival", "t_start", "transfer", "plan", "achievable", "next",
                 "output_length")

    def __init__(self, session: str | None, turn: int, ts: float, input_length: int,
                 keys: list[Hashable], last_tokens: int, types: list[str] | None,
                 output_length: int = -1) -> None:
        self.session, self.turn, self.ts = session, turn, ts
        self.output_length = output_length
        self.input_length, self.keys, self.last_tokens, self.types = (
            input_length, keys, last_tokens, types)
        self.gap = 0.0
        self.arrival = self.t_start = self.transfer = 0.0
        self.plan: ReloadPlan | None = None
        self.achievable = 0
        self.next: _Req | None = None


def _reblock(r: KVRequest, cb: int, no: int) -> tuple[list[Hashable], int, list[str] | None]:
    """Cache-block keys of a request: trace blocks of ``r.block_tokens`` regrouped into
    ``cb``-token cache blocks (ids chained so equal prefixes give equal keys)."""
    tb = r.block_tokens
    ids = r.hash_ids
    types = r.block_types
    if tb <= 0:
        raise BadInput(f"trace request {no}: block_tokens {tb} must be positive")
    if tb == cb:
        keys: list[Hashable] = list(ids)
        btypes = list(types) if types is not None else None
    elif cb % tb == 0:
        g = cb // tb
        keys = []
        prev: Hashable = 0
        for j in range(0, len(ids), g):
            prev = hash((prev, *ids[j:j + g]))
            keys.append(prev)
        btypes = [types[j] for j in range(0, len(ids), g)] if types is not None else None
    elif tb % cb == 0:
        g = tb // cb
        n_cache = -(-r.input_length // cb) if r.input_length else len(ids) * g
        keys = [(blk, k) for blk in ids for k in range(g)]
        keys = keys[:max(0, n_cache)]
        btypes = ([t for t in types for _ in range(g)][:len(keys)] if types is not None else None)
    else:
        raise BadInput(f"trace request {no}: block_tokens {tb} and the model's {cb}-token cache "
                       f"blocks do not divide; use --model with a compatible block size")
    if not keys:
        return keys, 0, btypes
    last = r.input_length - (len(keys) - 1) * cb
    last = min(cb, max(1, last))
    return keys, last, btypes


def prepare(requests: Iterable[KVRequest], block_tokens: int) -> list[_Req]:
    """Materialise the trace compactly (cache-block keys only), in trace order."""
    out: list[_Req] = []
    for no, r in enumerate(requests, 1):
        if r.input_length < 0:
            raise BadInput(f"trace request {no}: input_length must be non-negative")
        keys, last, types = _reblock(r, block_tokens, no)
        out.append(_Req(r.session_id, r.turn if r.turn is not None else -1, float(r.timestamp),
                        r.input_length, keys, last, types, r.output_length))
    return out


# ------------------------------------------------------------------------ the replay
@dataclass
class KVSimResult:
    metrics: dict[str, Any]
    ttft: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    transfer: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    #: one line each, for the driver to print (e.g. offered load above capacity)
    warnings: list[str] = field(default_factory=list)


def _policy_name(p: KVSimParams, spec: SystemSpec) -> str | None:
    """The registered admission replacing the E/R rule, if any (under a write budget with
    no admission named, the budgeted one)."""
    if p.admission and p.admission.strip().lower() in SSD_ADMISSIONS:
        return p.admission.strip().lower()
    if p.admission:
        return None
    if spec.admission_policy is not None:
        return spec.admission_policy
    return "budgeted" if p.ssd_write_budget and spec.admission is None else None


def _block_bytes(model: ModelSpec) -> Callable[[RadixNode], int]:
    """A block's bytes, as :meth:`KVIndex.size` counts them."""
    kv, ck = model.kv_bytes_per_token, model.checkpoint_bytes
    return lambda n: n.tokens * kv + (ck if n.has_ckpt else 0)


def _write_budget(p: KVSimParams, spec: SystemSpec, model: ModelSpec) -> WriteBudget | None:
    if not p.ssd_write_budget or not spec.ssd:
        return None
    ssd_bytes = p.ssd_tokens * model.kv_bytes_per_token
    return WriteBudget(parse_write_budget(p.ssd_write_budget, ssd_bytes).bytes_per_s,
                       p.ssd_write_window)


def _index_params(p: KVSimParams, spec: SystemSpec, model: ModelSpec) -> KVIndexParams:
    if _policy_name(p, spec) is not None:
        rule = AdmissionRule(None, None, False)  # decisions come from the policy
    elif p.admission:
        rule = AdmissionRule.parse(p.admission)
    elif spec.admission is not None:
        rule = spec.admission
    else:
        if p.theta_e is None and p.theta_r is None:
            raise BadInput("saria needs --theta-e or --theta-r (or --admission)")
        rule = AdmissionRule(p.theta_e, p.theta_r, False)
    mode = PromotionMode(p.promotion_mode) if p.promotion_mode else spec.promotion
    r = 0.4 if p.promotion is None else float(p.promotion)
    return KVIndexParams(
        model=model,
        dram_bytes=p.dram_tokens * model.kv_bytes_per_token if spec.dram else 0,
        ssd_bytes=p.ssd_tokens * model.kv_bytes_per_token if spec.ssd else 0,
        admission=rule,
        promotion=PromotionParams(mode, r, p.p_tau),
        lookup=LookupMode(p.lookup) if p.lookup else spec.lookup,
        prewrite=p.prewrite,
        dram_policy=p.dram_policy,
        metadata_window=p.metadata_window,
        deferred_writes=p.ssd_writes == "queued",
        prewrite_write_bps=(p.disk_write_gbps * p.ssd_devices * GB
                            if p.ssd_writes == "queued" else None),
    )


def validate(p: KVSimParams) -> tuple[SystemSpec, ModelSpec]:
    """Check a parameter set; every problem is a one-line :class:`BadInput`."""
    spec = KV_SYSTEMS.get(p.system)
    model = get_model(p.model)
    bt = model.block_tokens
    if p.dram_tokens < 0 or p.ssd_tokens < 0:
        raise BadInput("--dram-tokens/--ssd-tokens must be non-negative token counts")
    if spec.dram and p.dram_tokens < bt:
        raise BadInput(f"--dram-tokens {p.dram_tokens} is smaller than one {bt}-token block; "
                       f"give at least {bt} (or use --system gds-only)")
    if spec.ssd and p.ssd_tokens < bt:
        raise BadInput(f"--ssd-tokens {p.ssd_tokens} is smaller than one {bt}-token block; "
                       f"give at least {bt} (or use --system dram-only)")
    if p.in_flight < 1:
        raise BadInput(f"--in-flight {p.in_flight} must be at least 1")
    if p.prefill_gpus < 0:
        raise BadInput(f"--prefill-gpus {p.prefill_gpus} must be at least 1 (or omitted for "
                       f"the replay clock)")
    if p.promotion is not None and not 0.0 <= p.promotion <= 1.0:
        raise BadInput(f"--promotion {p.promotion} must be a DRAM share between 0 and 1")
    if not p.session_window > 0:
        raise BadInput("--session-window must be a positive duration, e.g. 12h")
    if p.prefill_tps <= 0 or min(p.gpu_gbps, p.disk_gbps, p.dram_gbps, p.disk_write_gbps) <= 0:
        raise BadInput("prefill rate and bandwidths must be positive")
    if p.ssd_devices < 1:
        raise BadInput(f"--ssd-devices {p.ssd_devices} must be at least 1")
    if p.ssd_writes not in ("queued", "instant"):
        raise BadInput(f"ssd writes {p.ssd_writes!r}; valid: queued, instant")
    if not (0.0 <= p.overlap_ssd_share <= 1.0 and 0.0 < p.read_share <= 1.0
            and p.coord_overhead_s_per_gb >= 0):
        raise BadInput("--overlap-ssd-share must be in [0, 1], --read-share in (0, 1], "
                       "--coord-overhead non-negative")
    for name, val, enum in (("promotion mode", p.promotion_mode, PromotionMode),
                            ("lookup", p.lookup, LookupMode), ("transfer", p.transfer, TransferMode)):
        if val is not None:
            try:
                enum(val)
            except ValueError:
                raise BadInput(f"{name} {val!r}; valid: {', '.join(e.value for e in enum)}") from None
    if p.replay not in ("auto", "sessions", "timestamps"):
        raise BadInput(f"replay {p.replay!r}; valid: auto, sessions, timestamps")
    if p.theta_e is not None and p.theta_e < 1 or p.theta_r is not None and p.theta_r < 1:
        raise BadInput("--theta-e/--theta-r must be at least 1")
    if p.admission and p.admission.strip().lower() not in SSD_ADMISSIONS:
        try:
            AdmissionRule.parse(p.admission)
        except BadInput as e:
            raise unknown_admission(p.admission, e) from None
    if p.ssd_write_budget:
        if not p.ssd_write_window > 0 or math.isinf(p.ssd_write_window):
            raise BadInput(f"--ssd-write-window {p.ssd_write_window} must be a positive "
                           f"duration, e.g. 10min")
        parse_write_budget(p.ssd_write_budget, p.ssd_tokens * model.kv_bytes_per_token)
    elif _policy_name(p, spec) == "budgeted":
        raise BadInput("admission 'budgeted' needs --ssd-write-budget (e.g. 1DWPD or 200MB/s)")
    return spec, model


def _schedule_arrivals(reqs: list[_Req], p: KVSimParams) -> tuple[list[_Req], bool]:
    """First request of each chain and its arrival; links successors. Returns (heads,
    session_mode)."""
    sessions = p.replay == "sessions" or (
        p.replay == "auto" and bool(reqs) and all(r.session is not None for r in reqs))
    if not sessions:
        t0 = min((r.ts for r in reqs), default=0.0)
        for r in reqs:
            r.arrival = r.ts - t0
        return reqs, False
    by: dict[str, list[_Req]] = {}
    for r in reqs:
        by.setdefault(str(r.session), []).append(r)
    chains = []
    for sid, lst in by.items():
        lst.sort(key=lambda q: (q.ts, q.turn))
        for a, b in zip(lst, lst[1:]):
            b.gap = max(0.0, b.ts - a.ts)
            a.next = b
        chains.append((lst[0].ts, sid, lst[0]))
    chains.sort(key=lambda c: (c[0], c[1]))
    rng = np.random.default_rng(p.seed)
    g = rng.gamma(1.0, size=len(chains) + 1)
    starts = p.session_window * np.cumsum(g[:-1]) / g.sum()
    heads = []
    for (_, _, head), s in zip(chains, starts):
        head.arrival = float(s)
        heads.append(head)
    return heads, True


def _p25bad(x: np.ndarray, frac: float = 0.25) -> float:
    """Mean of the worst ``frac`` of the samples (the seed's "P25 bad avg")."""
    if x.size == 0:
        return float("nan")
    k = max(1, math.ceil(x.size * frac))
    return float(np.mean(np.sort(x)[-k:]))


def simulate_kv(requests: Iterable[KVRequest] | Sequence[_Req], params: KVSimParams,
                *, progress: Any = None) -> KVSimResult:
    """Replay ``requests`` through one system; deterministic in ``params``."""
    spec, model = validate(params)
    wall0 = time.perf_counter()
    reqs: list[_Req]
    if isinstance(requests, list) and (not requests or isinstance(requests[0], _Req)):
        reqs = cast("list[_Req]", requests)  # prepared already (its first item says so)
    else:
        reqs = prepare(cast("Iterable[KVRequest]", requests), model.block_tokens)
    for r in reqs:  # a prepared list may be replayed more than once
        r.next, r.plan, r.gap = None, None, 0.0
    ip = _index_params(params, spec, model)
    pname = _policy_name(params, spec)
    budget = _write_budget(params, spec, model)
    adm_policy: SSDAdmission | None = None
    if spec.ssd and (pname is not None or budget is not None):
        adm_policy = make_ssd_admission(pname if pname is not None else ip.admission.label,
                                        AdmissionContext(_block_bytes(model),
                                                         params.metadata_window, {},
                                                         [r.keys for r in reqs], budget,
                                                         ip.ssd_bytes))
        # the policy decides every write, full duplicate's included
        ip = replace(ip, admission=AdmissionRule(None, None, False),
                     admission_policy=adm_policy)
    inner = adm_policy.base if isinstance(adm_policy, CappedAdmission) else adm_policy
    oracle = inner if isinstance(inner, OracleAdmission) else None
    index = KVIndex(ip)
    nd = params.ssd_devices  # striped: every object spread over all drives
    bw = Bandwidths(params.gpu_gbps * GB, params.disk_gbps * nd * GB, params.dram_gbps * GB,
                    params.disk_write_gbps * nd * GB)
    est = replace(bw, disk=params.est_disk_gbps * GB) if params.est_disk_gbps else None
    sharing = SharingModel(params.overlap_ssd_share, params.read_share,
                           params.coord_overhead_s_per_gb / GB)
    coord = TransferCoordinator(TransferMode(params.transfer) if params.transfer else spec.transfer,
                                bw, est, sharing)
    deferred = ip.deferred_writes
    ns = (model.name, None)
    cb = model.block_tokens
    ck_every = index.ck_every
    tps = params.prefill_tps
    queueing = params.prefill_gpus > 0
    n_gpus = max(1, params.prefill_gpus)
    n_slots = params.in_flight * n_gpus

    heads, session_mode = _schedule_arrivals(reqs, params)
    heap: list[tuple[float, int, int, _Req]] = []
    seq = 0
    for h in heads:
        heap.append((h.arrival, seq, 0, h))
        seq += 1
    heapq.heapify(heap)

    shadow: dict[tuple[int, Hashable], int] = {}
    waiting: deque[_Req] = deque()
    in_flight = 0
    gpu_free = [0.0] * n_gpus
    gpu_busy = 0.0
    computed_tokens = 0
    ttft: list[float] = []
    waits: list[float] = []
    transfer: list[float] = []
    hits: list[int] = []
    achv: list[int] = []
    block_events = 0
    dram_hit_blocks = ssd_hit_blocks = 0
    hit_requests = all_dram_requests = 0
    read_copies = 0
    ssd_read_marked: set[Any] = set()
    t_first = min((h.arrival for h in heads), default=0.0)
    t_last = t_first
    last_arrival = t_first

    def apply(moves: Moves, t: float) -> None:
        """Queue an index call's SSD writes (and drop its cancelled ones)."""
        for w in moves.ssd_writes:
            ssd_read_marked.discard(w)
            if deferred:
                coord.submit_write(w, index.size(w), t)
        for w in moves.write_cancels:
            coord.cancel_write(w)

    def start(r: _Req, t: float) -> None:
        nonlocal in_flight, block_events, dram_hit_blocks, ssd_hit_blocks, hit_requests
        nonlocal all_dram_requests, read_copies
        in_flight += 1
        r.t_start = t
        keys = r.keys
        block_events += len(keys)
        if oracle is not None:
            oracle.started(keys)
        plan = index.lookup(ns, keys, t)
        # unlimited-capacity reference: leading blocks any earlier finished request stored
        sid = 0
        a = 0
        for k in keys:
            nxt = shadow.get((sid, k))
            if nxt is None:
                break
            sid = nxt
            a += 1
        if ck_every:
            a -= a % ck_every
        r.achievable = a
        apply(index.begin(plan, t), t)
        r.plan = plan
        if plan.nodes:
            hit_requests += 1
            dram_hit_blocks += plan.dram_blocks + plan.hbm_blocks
            ssd_hit_blocks += plan.ssd_blocks
            if plan.ssd_blocks == 0:
                all_dram_requests += 1
            if plan.ssd_blocks:
                for n, s in zip(plan.nodes, plan.sources):
                    if s is Tier.SSD and n not in ssd_read_marked:
                        ssd_read_marked.add(n)
                        read_copies += 1
        if plan.dram_bytes + plan.ssd_bytes > 0:
            coord.submit(r, plan.dram_bytes, plan.ssd_bytes, t)
        else:
            transfer_done(r, t)

    def transfer_done(r: _Req, t: float) -> None:
        nonlocal gpu_busy, computed_tokens, seq
        r.transfer = t - r.t_start
        plan = r.plan
        assert plan is not None
        uncached = max(0, r.input_length - plan.hit_tokens)
        g = gpu_free.index(min(gpu_free)) if n_gpus > 1 else 0
        s = max(t, gpu_free[g])
        end = s + uncached / tps
        gpu_free[g] = end
        gpu_busy += uncached / tps
        computed_tokens += uncached
        heapq.heappush(heap, (end, seq, 1, r))
        seq += 1

    def finish(r: _Req, t: float) -> None:
        nonlocal in_flight, seq, t_last, read_copies
        plan = r.plan
        assert plan is not None
        keys = r.keys
        n = len(keys)
        tokens = [cb] * n
        if n:
            tokens[-1] = r.last_tokens
        apply(index.finish(plan, keys, t, tokens=tokens,
                           attrs=RequestAttrs(r.session, r.turn, r.types,
                                              r.output_length)), t)
        sid = 0
        for k in keys:
            key = (sid, k)
            nxt = shadow.get(key)
            if nxt is None:
                nxt = shadow[key] = len(shadow) + 1
            sid = nxt
        # the replay clock measures latency from submission; a queueing study from arrival
        ttft.append(t - (r.arrival if queueing else r.t_start))
        waits.append(r.t_start - r.arrival)
        transfer.append(r.transfer)
        hits.append(plan.hit_blocks)
        achv.append(r.achievable)
        r.plan = None
        t_last = max(t_last, t)
        in_flight -= 1
        if waiting:
            start(waiting.popleft(), t)
        if r.next is not None and session_mode:
            nx = r.next
            nx.arrival = t + nx.gap
            heapq.heappush(heap, (nx.arrival, seq, 0, nx))
            seq += 1
        if progress is not None:
            progress.advance(1)

    while heap or len(coord):
        t_heap = heap[0][0] if heap else math.inf
        t_coord = coord.next_event() if len(coord) else math.inf
        if t_coord <= t_heap:
            jobs = coord.advance(t_coord)
            # the coordinator hands back the jobs this replay gave it: written nodes, loading requests
            for w in coord.take_writes_done():
                index.complete_write(cast(RadixNode, w), coord.now)
            for job in jobs:
                transfer_done(cast(_Req, job), coord.now)
            continue
        t, _, kind, r = heapq.heappop(heap)
        if kind == 0:
            last_arrival = max(last_arrival, t)
            if in_flight < n_slots:
                start(r, t)
            else:
                waiting.append(r)
        else:
            finish(r, t)

    wall = time.perf_counter() - wall0
    st = index.stats
    tt = np.asarray(ttft, dtype=float)
    tr = np.asarray(transfer, dtype=float)
    hit_arr = np.asarray(hits, dtype=float)
    a = np.asarray(achv, dtype=float)
    char = float(hit_arr.sum() / a.sum()) if a.sum() > 0 else float("nan")
    elig = a > 0
    if elig.any():
        ratio = hit_arr[elig] / a[elig]
        order = np.argsort(ratio, kind="stable")
        k = max(1, math.ceil(order.size / 4))
        worst = order[:k]
        char_bad = float(hit_arr[elig][worst].sum() / a[elig][worst].sum())
    else:
        char_bad = float("nan")
    ssd_cap = ip.ssd_bytes
    duration = max(0.0, t_last - t_first)
    if ssd_cap > 0 and st.ssd_write_bytes > 0 and duration > 0:
        lifetime = 1825.0 * ssd_cap * (duration / 86400.0) / st.ssd_write_bytes
    else:
        lifetime = None
    hit_total = dram_hit_blocks + ssd_hit_blocks
    arrival_span = last_arrival - t_first
    offered = (computed_tokens / (arrival_span * n_gpus * tps) if arrival_span > 0 else None)
    warns: list[str] = []
    if queueing and offered is not None and offered > 1.0:
        warns.append(f"offered prefill load is {offered:.2f}x the capacity of {n_gpus} GPU(s) "
                     f"at {tps:g} tokens/s: the queue grows for the whole trace and TTFT "
                     f"measures it (drop --prefill-gpus for the seed's replay clock, or add "
                     f"GPUs)")
    metrics: dict[str, Any] = {
        "system": spec.name,
        "requests": int(tt.size),
        "ttft_mean_s": float(tt.mean()) if tt.size else float("nan"),
        "ttft_p90_s": float(np.percentile(tt, 90)) if tt.size else float("nan"),
        "ttft_p25bad_s": _p25bad(tt),
        "char": char,
        "char_p25bad": char_bad,
        "ssd_write_bytes": int(st.ssd_write_bytes),
        "ssd_read_bytes": int(st.ssd_read_bytes),
        "ssd_writes_norm": st.ssd_write_bytes / ssd_cap if ssd_cap else 0.0,
        "ssd_reads_norm": st.ssd_read_bytes / ssd_cap if ssd_cap else 0.0,
        "dram_evictions": int(st.dram_evictions),
        "transfer_mean_s": float(tr.mean()) if tr.size else float("nan"),
        "transfer_p25bad_s": _p25bad(tr),
        "ssd_lifetime_days": lifetime,
        # projected life at the run's write rate of a drive rated RATED_DWPD x RATED_YEARS
        "ssd_life_years": life_years(st.ssd_write_bytes, duration, ssd_cap),
        "ssd_rated_endurance": f"{RATED_DWPD:g} DWPD x {RATED_YEARS:g} years",
        "ssd_write_budget": params.ssd_write_budget if budget is not None else None,
        "ssd_write_budget_bps": budget.bytes_per_s if budget is not None else None,
        "ssd_write_window_s": budget.window if budget is not None else None,
        "ssd_budget_refusals": budget.refused if budget is not None else None,
        "ssd_budget_max_window_bytes": budget.max_window if budget is not None else None,
        **(_budgeted_counters(inner) if isinstance(inner, BudgetSpender) else {}),
        **(inner.stats() if isinstance(inner, ShadowFollowAdmission) else {}),
        "transfer_p10bad_s": _p25bad(tr, 0.10),
        "transfer_p5bad_s": _p25bad(tr, 0.05),
        # extras (stable additions)
        "model": model.name,
        "admission": index.adm.label if spec.ssd else "none",
        "promotion": ip.promotion.mode.value if spec.dram else "none",
        "promotion_r": ip.promotion.r,
        "lookup": ip.lookup.value,
        "transfer_mode": coord.mode.value,
        "replay": "sessions" if session_mode else "timestamps",
        "replay_clock": "queueing" if queueing else "logical",
        "prefill_gpus": n_gpus,
        "prefill_tokens_per_s": tps,
        "computed_prefill_tokens": int(computed_tokens),
        "offered_load": offered,
        "gpu_utilisation": gpu_busy / (n_gpus * duration) if duration > 0 else None,
        "replay_stretch": duration / arrival_span if arrival_span > 0 else None,
        "replay_wait_mean_s": float(np.mean(waits)) if waits else float("nan"),
        "dram_tokens": params.dram_tokens if spec.dram else 0,
        "ssd_tokens": params.ssd_tokens if spec.ssd else 0,
        "duration_s": duration,
        "ssd_writes_per_day_norm": (st.ssd_write_bytes / ssd_cap / (duration / 86400.0)
                                    if ssd_cap and duration > 0 else 0.0),
        "ssd_write_blocks": int(st.ssd_writes),
        "ssd_prewrites": int(st.prewrites),
        # re-admissions of a copy dropped in the same call: kept on the device, not written
        "ssd_keep_blocks": int(st.ssd_keeps),
        "ssd_keep_bytes": int(st.ssd_keep_bytes),
        "ssd_writes_withdrawn": int(st.ssd_writes_withdrawn),
        "ssd_write_model": params.ssd_writes,
        "ssd_devices": params.ssd_devices,
        # queued writes abandoned because the DRAM source went first (block lost)
        "ssd_writes_cancelled": int(st.ssd_writes_cancelled),
        "prewrites_gated": int(st.prewrites_gated),
        "dram_store_failures": int(st.dram_store_failures),
        "ssd_read_blocks": int(st.ssd_reads),
        "ssd_writes_never_read_frac": (1.0 - read_copies / st.ssd_writes) if st.ssd_writes else None,
        "ssd_reads_per_write": st.ssd_reads / st.ssd_writes if st.ssd_writes else None,
        "dram_read_bytes": int(st.dram_read_bytes),
        "dram_hit_share": dram_hit_blocks / hit_total if hit_total else None,
        "all_dram_hit_request_share": all_dram_requests / hit_requests if hit_requests else None,
        "promotions": int(st.promotions),
        "promotions_blocked": int(st.promotions_blocked),
        "hit_blocks": int(hit_arr.sum()),
        "achievable_blocks": int(a.sum()),
        "metadata_nodes": len(index.tree),
        "block_events": block_events,
        "wall_seconds": wall,
        "block_events_per_second": block_events / wall if wall > 0 else None,
    }
    return KVSimResult(metrics, tt, tr, warns)


def _budgeted_counters(adm: BudgetSpender) -> dict[str, list[int]]:
    """Candidates offered and admitted per evidence class (returning, reused, first)."""
    return {"budget_candidates": list(adm.offered), "budget_admitted": list(adm.admitted)}
