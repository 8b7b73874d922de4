"""The one registry of SSD admissions, by name, for the simulator (``aicache sim kv
--admission NAME``), the vLLM tier and the SGLang backend.

An entry builds an :class:`~aicache.kv.admission.SSDAdmission` (the index's seam) from an
:class:`AdmissionContext`; engine tiers drive the same object from the evidence their calls
carry (:class:`~aicache.integrations.chunk_tier.AdmissionGate`). An entry may name an
engine-specific builder instead (``chunk``: a lazy ``"module:attr"`` path to a
``(prewrite, args) -> ChunkAdmission`` factory) where the engine sees something the index
does not (a key file, a client's hint, the moment of an offer). A name that is not
registered is parsed as SARIA's rule (``E2``, ``R8``, ``E2∨R8``, ``full-duplicate``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from aicache.errors import BadInput
from aicache.kv.admission import (
    AdmissionRule, LearnedAdmission, OracleAdmission, RuleAdmission, SSDAdmission,
)
from aicache.kv.budgeted_admission import PACE_WINDOW as BUDGETED_PACE_WINDOW
from aicache.kv.budgeted_admission import RETURNING_SHARE
from aicache.kv.budgeted_admission import (
    BudgetSpender, CappedAdmission, ClassPacedAdmission, RankedBudgetedAdmission,
    ThresholdBudgetedAdmission,
)
from aicache.kv.peer_admission import (
    KVBMFrequency, LMCacheGate, MooncakeOnEvict, SGLangSelective, VLLMReuseFilter,
)
from aicache.kv.radix import RadixNode
from aicache.kv.shadow_admission import ShadowFollowAdmission
from aicache.kv.write_budget import WriteBudget
from aicache.registry import Registry


def _unit_block(node: RadixNode) -> int:
    return max(1, node.tokens)


@dataclass(frozen=True)
class AdmissionContext:
    """What a builder may read. ``size_of``: a block's bytes (the index's ``size``);
    ``horizon``: the metadata window (s); ``args``: the entry's options (CLI or the tier's
    ``admission_args``); ``prompts``: the whole trace's block keys (offline policies only;
    None under an engine); ``budget``: the SSD write budget, if one was set; ``ssd_bytes``: the SSD's capacity."""

    size_of: Callable[[RadixNode], int] = _unit_block
    horizon: float = 3600.0
    args: Mapping[str, object] = field(default_factory=dict)
    prompts: Sequence[Sequence[Hashable]] | None = None
    budget: WriteBudget | None = None
    #: the SSD's bytes (shadow caches size themselves by it; 0: unknown, unbounded)
    ssd_bytes: int = 0


AdmissionFactory = Callable[[AdmissionContext], SSDAdmission]


#: an engine tier's own builder: ``(prewrite, args) -> ChunkAdmission`` (the protocol lives
#: with the engine tiers, :mod:`aicache.integrations.chunk_tier`)
ChunkFactory = Callable[[bool, Mapping[str, object]], object]


@dataclass(frozen=True)
class AdmissionEntry:
    """A registered admission: ``build`` for the index (None: engine-only); ``chunk`` the
    engine's own builder or its lazy ``"module:attr"`` path (None: the engine drives
    ``build``'s policy)."""

    build: AdmissionFactory | None
    chunk: str | ChunkFactory | None = None


def _int(ctx: AdmissionContext, name: str, default: int) -> int:
    v = ctx.args.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise BadInput(f"admission option {name} {v!r} is not a number")
    try:
        return int(float(v))
    except ValueError:
        raise BadInput(f"admission option {name} {v!r} is not a number") from None


def _float(ctx: AdmissionContext, name: str, default: float) -> float:
    v = ctx.args.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise BadInput(f"admission option {name} {v!r} is not a number")
    try:
        return float(v)
    except ValueError:
        raise BadInput(f"admission option {name} {v!r} is not a number") from None


def _checked(make: Callable[[], SSDAdmission], name: str) -> SSDAdmission:
    try:
        return make()
    except ValueError as e:
        raise BadInput(f"admission {name!r}: {e}") from None


def _oracle(ctx: AdmissionContext) -> SSDAdmission:
    if ctx.prompts is None:
        raise BadInput("admission 'oracle' needs the whole trace (the simulator); an engine "
                       "tier takes \"admission_args\": {\"keys_file\": PATH}")
    return OracleAdmission(ctx.prompts)


def _budget_of(ctx: AdmissionContext, name: str) -> WriteBudget:
    """The write budget a budgeted rule ``name`` needs (a one-line error without one)."""
    if ctx.budget is None:
        raise BadInput(f"admission '{name}' needs a write budget: --ssd-write-budget "
                       "1DWPD (or 200MB/s)")
    return ctx.budget


def _budgeted(ctx: AdmissionContext) -> SSDAdmission:
    b = _budget_of(ctx, "budgeted")
    return _checked(lambda: ClassPacedAdmission(
        b, ctx.size_of, _float(ctx, "pace_window", BUDGETED_PACE_WINDOW)), "budgeted")


def _budgeted_ranked(ctx: AdmissionContext) -> SSDAdmission:
    b, hl = _budget_of(ctx, "budgeted-ranked"), ctx.args.get("half_life")
    return _checked(lambda: RankedBudgetedAdmission(
        b, ctx.size_of, _float(ctx, "pace_window", BUDGETED_PACE_WINDOW),
        None if hl is None else _float(ctx, "half_life", 0.0)), "budgeted-ranked")


def _budgeted_threshold(ctx: AdmissionContext) -> SSDAdmission:
    b, hl = _budget_of(ctx, "budgeted-threshold"), ctx.args.get("half_life")
    return _checked(lambda: ThresholdBudgetedAdmission(
        b, ctx.size_of, _float(ctx, "pace_window", BUDGETED_PACE_WINDOW),
        None if hl is None else _float(ctx, "half_life", 0.0),
        _float(ctx, "returning_share", RETURNING_SHARE)), "budgeted-threshold")


#: the rules :class:`ShadowFollowAdmission` runs as shadows: the field's, SARIA's seed
#: rule and the budgeted admission (each its own instance, its own ledger)
SHADOW_RULES = ("sglang-selective", "vllm-reuse-filter", "lmcache-gate", "kvbm-frequency",
                "mooncake-on-evict", "E2", "budgeted")


def _shadow_follow(ctx: AdmissionContext) -> SSDAdmission:
    b = _budget_of(ctx, "shadow-follow")
    rules: list[SSDAdmission] = []
    for name in SHADOW_RULES:
        own = WriteBudget(b.bytes_per_s, b.window) if name == "budgeted" else None
        rules.append(make_ssd_admission(name, replace(ctx, budget=own)))
    return _checked(lambda: ShadowFollowAdmission(
        rules, b, ctx.size_of, ctx.ssd_bytes, hysteresis=_float(ctx, "hysteresis", 0.02),
        schedule=str(ctx.args.get("schedule", "project")), slack=_float(ctx, "slack", 0.25)),
        "shadow-follow")


SSD_ADMISSIONS: Registry[AdmissionEntry] = Registry("SSD admission")
SSD_ADMISSIONS.register("sglang-selective", AdmissionEntry(lambda c: _checked(
    lambda: SGLangSelective(_int(c, "threshold", 2)), "sglang-selective")),
    "SGLang write_through_selective: back up at hit_count >= 2 (first reuse); L3 inherits L2")
SSD_ADMISSIONS.register("vllm-reuse-filter", AdmissionEntry(lambda c: _checked(
    lambda: VLLMReuseFilter(_int(c, "store_threshold", 2),
                            _int(c, "max_tracker_size", 64_000)), "vllm-reuse-filter")),
    "vLLM FilterReusedOffloadingManager: store a block looked up >= 2 times")
SSD_ADMISSIONS.register("lmcache-gate", AdmissionEntry(lambda c: _checked(
    lambda: LMCacheGate(c.size_of, _int(c, "min_access_count", 1),
                        _int(c, "min_size_bytes", 0)), "lmcache-gate")),
    "LMCache SsdStorageGate: write on put when read >= min_access_count times, size >= min")
SSD_ADMISSIONS.register("kvbm-frequency", AdmissionEntry(lambda c: _checked(
    lambda: KVBMFrequency(_int(c, "threshold", 2), _float(c, "decay_every", 600.0)),
    "kvbm-frequency")),
    "Dynamo KVBM disk filter: frequency doubles per registration, -1 per 600 s, offload at >= 2")
SSD_ADMISSIONS.register("mooncake-on-evict", AdmissionEntry(lambda c: _checked(
    lambda: MooncakeOnEvict(_float(c, "cap_ratio", 0.5), _int(c, "queue_limit", 50_000)),
    "mooncake-on-evict")),
    "Mooncake offload_on_evict: persist what DRAM eviction picks, cap 0.5 x queue per cycle")
SSD_ADMISSIONS.register("budgeted", AdmissionEntry(_budgeted),
                        "write at DRAM eviction within --ssd-write-budget, reused/returning "
                        "blocks first")
SSD_ADMISSIONS.register("budgeted-ranked", AdmissionEntry(_budgeted_ranked),
                        "budgeted, with reused/first-eviction blocks ranked by a decayed use "
                        "count (tried, not the default)")
SSD_ADMISSIONS.register("budgeted-threshold", AdmissionEntry(_budgeted_threshold),
                        "budgeted-ranked's threshold for every class, returning blocks "
                        "ranked too with a quarter of the window ahead (tried, not the "
                        "default)")
SSD_ADMISSIONS.register("shadow-follow", AdmissionEntry(_shadow_follow),
                        "follow the shadow cache (the field's rules, E2, budgeted) with the "
                        "most recent hits whose writes fit --ssd-write-budget")
SSD_ADMISSIONS.register("oracle", AdmissionEntry(
    _oracle, "aicache.integrations.chunk_tier:oracle_chunks"),
    "offline: write a block at its DRAM eviction iff a later request references it")
SSD_ADMISSIONS.register("learned", AdmissionEntry(
    lambda c: LearnedAdmission(horizon=c.horizon),
    "aicache.integrations.chunk_tier:learned_chunks"),
    "online: write a block at its DRAM eviction iff its learned reuse probability >= average")
SSD_ADMISSIONS.register("hint", AdmissionEntry(None, "aicache.integrations.chunk_tier:hint_chunks"),
                        "engine only: write at the first offer when the client says the "
                        "conversation continues, else another rule")


def admission_names() -> list[str]:
    """Registered names (SARIA's rules ``E<n>``, ``R<n>``, ``E<n>∨R<m>``,
    ``full-duplicate`` are parsed besides)."""
    return SSD_ADMISSIONS.names()


def unknown_admission(name: str, err: BadInput | None = None) -> BadInput:
    head = f"{err}" if err is not None else f"admission {name!r} is not known"
    return BadInput(f"{head}; or one of: {', '.join(admission_names())}")


def make_ssd_admission(name: str, ctx: AdmissionContext) -> SSDAdmission:
    """The index's admission called ``name`` (a registered one or SARIA's rule), under
    ``ctx.budget`` when one is set (the budgeted admission spends it itself; any other is
    capped by it)."""
    key = name.strip().lower()
    if key in SSD_ADMISSIONS:
        entry = SSD_ADMISSIONS.get(key)
        if entry.build is None:
            raise BadInput(f"admission {name!r} is for engine tiers only; in the simulator "
                           f"use one of: {', '.join(n for n in admission_names() if n != key)}")
        adm = entry.build(ctx)
    else:
        try:
            adm = RuleAdmission(AdmissionRule.parse(name))
        except BadInput as e:
            raise unknown_admission(name, e) from None
    if ctx.budget is not None and not isinstance(adm, (BudgetSpender, ShadowFollowAdmission)):
        adm = CappedAdmission(adm, ctx.budget, ctx.size_of)
    return adm
