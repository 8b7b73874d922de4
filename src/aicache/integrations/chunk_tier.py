"""Engine-neutral pieces of aicache's SSD tier inside a serving engine.

Both engine adapters (vLLM's secondary offloading tier, SGLang's HiCache storage backend)
see the same thing: fixed-size KV chunks named by a chained hash, offered for storage
when the engine's host tier holds them and asked for when the engine misses them. They
share two pieces:

* :class:`AdmissionGate` — SSD admission from the evidence such calls carry. A chunk
  offered again after its first offer left the engine's memory and was recomputed (an
  eviction boundary: ``E_b += 1``); a request asking for a chunk the gate knows reused it
  (``R_b += 1``). A chunk is *known* once it has been offered: as in the simulator's index,
  reuse is counted only for chunks it has metadata for, so a brand-new chunk's first lookup
  does not count, and its first offer is never taken for an eviction. The gate keeps a
  metadata-only :class:`~aicache.kv.radix.RadixNode` per known chunk, so the admissions of
  the one registry (:data:`~aicache.kv.admissions.SSD_ADMISSIONS`: SARIA's rule, the
  field's rules, the budgeted one) read it as they read the simulator's tree
  (:class:`IndexAdmissionAtOffer`). An offer is a store: the index's ``prewrite_at_store``
  decides it (with prewrite, SARIA's default: ``E_b + 1 ≥ θ_E`` or ``R_b ≥ θ_R``), else its
  ``at_eviction`` (the engine holds the bytes only at the offer, so an eviction-time rule
  decides there). Entries the engine serves differently name their own builder:
  ``oracle`` (a key set fixed in advance), ``learned`` (:class:`LearnedChunkAdmission`),
  ``hint`` (a client's "this conversation continues", :class:`HintAdmission`).
* :class:`SlabChunkStore` — chunks on a :class:`~aicache.kvstore.store.TieredKVStore` with
  no DRAM tier (the engine owns memory): slab files with per-block checksums, crash
  recovery by header scan, an SSD LRU within the byte budget. Each chunk is one block
  directly under its namespace's root (the engine's keys are already chained, so a chunk
  needs no parent to be found again, and recovery keeps every chunk); its geometry is a
  :class:`ChunkGeometry` (opaque bytes), not a model's. A write learns from the store's
  :class:`~aicache.kvstore.store.StoreOutcome` what it did and which chunks it evicted.

SARIA's evidence has one home: the gate's node for a chunk *is* the store's block node
once the chunk is written (:meth:`SlabChunkStore.write` links it into the store's tree),
so the slab header persists the gate's ``E``/``R`` and a restart hands the same counters
back to the gate (:meth:`SlabChunkStore.recovered`, :meth:`AdmissionGate.learn`). The
store never counts on these nodes itself (no DRAM tier: no eviction boundary; reads do
not count a reuse — the gate counts the engine's requests).

Neither piece is thread-safe: an adapter calls them from one thread or under one lock.
"""

from __future__ import annotations

import hashlib
import importlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

import numpy as np

from aicache.errors import BadInput
from aicache.kv.admission import LearnedRule, SSDAdmission
from aicache.kv.admissions import (
    SSD_ADMISSIONS, AdmissionContext, ChunkFactory, make_ssd_admission,
)
from aicache.kv.radix import RadixNode, Tier
from aicache.kv.saria import KVIndexParams
from aicache.kv.write_budget import (
    RATED_DWPD, RATED_YEARS, WriteBudget, life_years, parse_write_budget,
)
from aicache.units import parse_duration
from aicache.kvstore.ssd import lifetime_days
from aicache.kvstore.store import StoreOutcome, TieredKVStore, TieredKVStoreParams

_SSD = int(Tier.SSD)
StoreKey = tuple[str, bytes]  #: (namespace, ≤ 32-byte chunk hash): how the store names a chunk


def digest32(key: bytes) -> bytes:
    """A chunk hash the slab header can hold (≤ 32 bytes): longer ones are hashed."""
    return key if len(key) <= 32 else hashlib.blake2b(key, digest_size=32).digest()


#: SARIA's counters (``E``, ``R``) for a chunk the gate knows, held or not: a radix node,
#: the object the index's admissions read — detached until the chunk is written, then the
#: store's node for it (module docstring)
Evidence = RadixNode


def new_evidence(sk: StoreKey) -> Evidence:
    """A detached node keyed by the chunk's hash, as the store's tree keys it."""
    return RadixNode(sk[1], None, 1)


@dataclass(slots=True)
class GateCounters:
    offers: int = 0
    admitted: int = 0
    declined: int = 0
    references: int = 0  #: reuses counted (known chunks asked for)


@dataclass(slots=True)
class Offer:
    """What the engine's call says about one offer beyond the chunk's evidence."""

    request: str = ""    #: the offering request's id ('' when the engine passes none)
    end_token: int = -1  #: where the chunk ends in that request's prompt (-1: unknown)
    now: float = 0.0     #: the adapter's clock, in seconds
    request_tokens: int = -1  #: the request's prompt tokens seen so far (-1: unknown)
    #: the client's hint that the request's conversation sends another turn (None: not sent)
    continues: bool | None = None


class ChunkAdmission(Protocol):
    """Persist a chunk offered for storage? :meth:`admit` is called once per offer of a
    chunk not held, after the offer's evidence was counted (``ev.E`` includes the
    eviction a repeated offer implies; ``ev.R`` the reuses counted so far);
    :meth:`referenced` after a request's reuse of a known chunk was counted."""

    label: str

    def admit(self, sk: StoreKey, ev: Evidence, offer: Offer) -> bool: ...
    def referenced(self, sk: StoreKey, ev: Evidence, now: float) -> None: ...


class IndexAdmissionAtOffer:
    """An index admission (:class:`~aicache.kv.admission.SSDAdmission`) deciding an
    engine's offers: each offer is a store of the chunk's node (``on_store``), admitted by
    ``prewrite_at_store`` (with ``prewrite``) or ``at_eviction``; an admitted offer is a
    write of ``size_of(node)`` bytes (``on_write``); a counted reuse is ``on_reference``."""

    __slots__ = ("adm", "prewrite", "size_of", "label")

    def __init__(self, adm: SSDAdmission, prewrite: bool,
                 size_of: Callable[[RadixNode], int]) -> None:
        self.adm = adm
        self.prewrite = prewrite
        self.size_of = size_of
        self.label = adm.label

    def admit(self, sk: StoreKey, ev: Evidence, offer: Offer) -> bool:
        adm, now = self.adm, offer.now
        adm.on_store((ev,), 0, now, None)
        ok = (self.prewrite and adm.prewrite_at_store(ev, now)) or adm.at_eviction(ev, now)
        if ok:
            adm.on_write(ev, self.size_of(ev), now)
        return ok

    def referenced(self, sk: StoreKey, ev: Evidence, now: float) -> None:
        self.adm.on_reference(ev, now)


class KeySetAdmission:
    """Admit exactly the chunks whose hash is in a set fixed in advance (``oracle``: the
    chunks a write-everything run of the same replay read back from its SSD tier — what
    an admission that knew the future would write). Namespaces are not compared: the set
    comes from one model's replay."""

    __slots__ = ("keys", "label")

    def __init__(self, keys: Iterable[bytes], label: str = "oracle") -> None:
        self.keys = frozenset(digest32(bytes(k)) for k in keys)
        self.label = label

    def admit(self, sk: StoreKey, ev: Evidence, offer: Offer) -> bool:
        return sk[1] in self.keys

    def referenced(self, sk: StoreKey, ev: Evidence, now: float) -> None:
        return None


class LearnedChunkAdmission:
    """:class:`~aicache.kv.admission.LearnedRule` (SARIA's rule plus first-eviction writes
    of chunks whose learned reuse probability is high enough, within a write budget) for
    an engine that offers chunks when they enter its host memory.

    The simulator asks the rule at a block's eviction; an engine tier that is offered
    chunks write-through (vLLM's) holds the bytes only at the offer, so the rule is asked
    there about the eviction to come: ``E_b + 1`` (the same test as SARIA's prewrite),
    ``R_b``, no output length (the engine stores a chunk before the request answers), the
    request's prompt length (``Offer.request_tokens``), no idle time (the chunk is in use).
    A label closes *reused* when a request asks the tier for the chunk — a lookup after
    the chunk left host memory, the reuse an SSD copy serves. Sizes are in chunks: a first
    offer adds one to full duplicate's writes, an admission one to ours.
    """

    __slots__ = ("rule", "label")

    def __init__(self, rule: LearnedRule) -> None:
        self.rule = rule
        self.label = "learned"

    def admit(self, sk: StoreKey, ev: Evidence, offer: Offer) -> bool:
        rule = self.rule
        if ev.E == 0:
            rule.stored(1)
        ok = rule.evicted(sk, ev.E + 1, ev.R, -1, max(1, offer.request_tokens), 0.0, offer.now)
        if ok:
            rule.wrote(1)
        return ok

    def referenced(self, sk: StoreKey, ev: Evidence, now: float) -> None:
        self.rule.referenced(sk, now)


class HintAdmission:
    """Write a chunk at its first offer when the offering request's client says its
    conversation sends another turn (``Offer.continues``); every other offer is decided by
    ``base`` (SARIA's rule). Under an engine that offers chunks write-through (vLLM's), the
    reuse evidence SARIA counts arrives one reuse late for a conversation's chunks; a
    client that knows it will continue (an agent loop) can say so up front. The hint is
    trusted: a client that sends it for every request makes this full duplicate."""

    __slots__ = ("base", "label")

    def __init__(self, base: ChunkAdmission) -> None:
        self.base = base
        self.label = f"hint+{base.label}"

    def admit(self, sk: StoreKey, ev: Evidence, offer: Offer) -> bool:
        return offer.continues is True or self.base.admit(sk, ev, offer)

    def referenced(self, sk: StoreKey, ev: Evidence, now: float) -> None:
        self.base.referenced(sk, ev, now)


#: Builds an admission from ``prewrite`` and the tier's ``admission_args`` mapping.
ChunkAdmissionFactory = Callable[[bool, Mapping[str, object]], ChunkAdmission]


def oracle_chunks(prewrite: bool, args: Mapping[str, object]) -> ChunkAdmission:
    path = args.get("keys_file")
    if not path:
        raise BadInput("admission 'oracle': set \"admission_args\": {\"keys_file\": PATH}, a "
                       "file of chunk hashes in hex, one a line")
    try:
        text = Path(str(path)).read_text()
        return KeySetAdmission(bytes.fromhex(ln.strip()) for ln in text.splitlines()
                               if ln.strip())
    except (OSError, ValueError) as e:
        raise BadInput(f"admission 'oracle': keys_file {path}: {e}; write one hex chunk "
                       f"hash a line") from e


def learned_chunks(prewrite: bool, args: Mapping[str, object]) -> ChunkAdmission:
    def num(name: str, default: float | None) -> float | None:
        v = args.get(name, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise BadInput(f"admission 'learned': {name} {v!r} is not a number")
        try:
            return float(v)
        except ValueError:
            raise BadInput(f"admission 'learned': {name} {v!r} is not a number") from None

    horizon = num("horizon", 3600.0)
    budget = num("write_budget", 0.5)
    try:
        return LearnedChunkAdmission(LearnedRule(
            num("threshold", None), 3600.0 if horizon is None else horizon,
            write_budget=0.5 if budget is None else budget))
    except ValueError as e:
        raise BadInput(f"admission 'learned': {e} (admission_args threshold, horizon, "
                       f"write_budget)") from None


def hint_chunks(prewrite: bool, args: Mapping[str, object]) -> ChunkAdmission:
    base = args.get("rule", "E2")
    if not isinstance(base, str) or base.strip().lower() == "hint":
        raise BadInput(f"admission 'hint': rule {base!r} must name another admission "
                       f"(e.g. \"E2\")")
    return HintAdmission(make_admission(base, prewrite, args))


def make_admission(name: str, prewrite: bool = True,
                   args: Mapping[str, object] | None = None, *,
                   size_of: Callable[[RadixNode], int] | None = None,
                   budget: WriteBudget | None = None) -> ChunkAdmission:
    """The admission called ``name`` from the one registry
    (:data:`~aicache.kv.admissions.SSD_ADMISSIONS`), else SARIA's rule (``E2``, ``R8``,
    ``E2∨R8``, ``full-duplicate``). ``size_of``: a chunk's bytes (default 1: budgets in
    chunks); ``budget``: an SSD write budget the admission spends or is capped by (entries
    with an engine builder of their own take none)."""
    key = name.strip().lower()
    args = args or {}
    if key in SSD_ADMISSIONS:
        chunk = SSD_ADMISSIONS.get(key).chunk
        if chunk is not None:
            if budget is not None:
                raise BadInput(f"admission {name!r} takes no write budget in an engine tier; "
                               f"use budgeted or a rule such as E2")
            if isinstance(chunk, str):
                module, _, attr = chunk.partition(":")
                factory: ChunkFactory = getattr(importlib.import_module(module), attr)
            else:
                factory = chunk
            return cast(ChunkAdmission, factory(prewrite, args))
    sizes = size_of if size_of is not None else (lambda n: 1)
    adm = make_ssd_admission(name, AdmissionContext(sizes, 3600.0, args, None, budget))
    return IndexAdmissionAtOffer(adm, prewrite, sizes)


def tier_write_budget(budget: object, window: object, ssd_bytes: int) -> WriteBudget | None:
    """An engine tier's ``ssd_write_budget`` (``1DWPD`` of its ``ssd_bytes``, or a rate such
    as ``200MB/s``) over ``ssd_write_window`` (default 10 min) on the tier's clock; None
    when no budget is set."""
    if budget is None or budget == "":
        return None
    spec = parse_write_budget(str(budget), int(ssd_bytes))
    w = parse_duration(str(window) if window is not None else "10min",
                       what="ssd_write_window")
    if not w > 0:
        raise BadInput(f"ssd_write_window {window!r} must be a positive duration, e.g. 10min")
    return WriteBudget(spec.bytes_per_s, w)


_NO_OFFER_INFO = Offer()  # read-only default: admissions must not keep or change it


class AdmissionGate:
    """The evidence SARIA counts (offers, references) and an admission deciding on it
    (module docstring).

    Counters are kept for at most ``capacity`` chunks, least recently seen forgotten
    first (the simulator's metadata reclaim); a forgotten chunk's next offer is a first
    offer again.
    """

    __slots__ = ("policy", "capacity", "_ev", "c")

    def __init__(self, policy: ChunkAdmission, capacity: int) -> None:
        if capacity < 1:
            raise BadInput(f"metadata_entries {capacity}: keep counters for at least one chunk")
        self.policy = policy
        self.capacity = capacity
        self._ev: OrderedDict[StoreKey, Evidence] = OrderedDict()
        self.c = GateCounters()

    def knows(self, sk: StoreKey) -> bool:
        return sk in self._ev

    def evidence(self, sk: StoreKey) -> Evidence | None:
        return self._ev.get(sk)

    def learn(self, sk: StoreKey, ev: Evidence | None = None) -> None:
        """Know ``sk`` without an offer (a chunk recovered from the SSD, with ``ev`` the
        counters its slab header kept)."""
        if sk not in self._ev:
            self._ev[sk] = ev if ev is not None else new_evidence(sk)
            while len(self._ev) > self.capacity:
                self._ev.popitem(last=False)

    def reference(self, sk: StoreKey, now: float = 0.0) -> bool:
        """A request asked for ``sk``: count a reuse if the chunk is known (returns so)."""
        ev = self._ev.get(sk)
        if ev is None:
            return False
        ev.R += 1
        self._ev.move_to_end(sk)
        self.c.references += 1
        self.policy.referenced(sk, ev, now)
        return True

    def offer(self, sk: StoreKey, info: Offer = _NO_OFFER_INFO) -> bool:
        """The engine offers ``sk`` for storage: persist it? A repeated offer counts the
        eviction it implies first."""
        ev = self._ev.get(sk)
        if ev is None:
            ev = self._ev[sk] = new_evidence(sk)
            while len(self._ev) > self.capacity:
                self._ev.popitem(last=False)
        else:
            ev.E += 1
            self._ev.move_to_end(sk)
        ok = self.policy.admit(sk, ev, info)
        self.c.offers += 1
        if ok:
            self.c.admitted += 1
        else:
            self.c.declined += 1
        return ok


@dataclass(slots=True)
class WriteOutcome:
    """What :meth:`SlabChunkStore.write` did: chunks now held, chunks whose write failed
    (not held), and chunks the SSD LRU dropped to make room (no longer held)."""

    ok: list[StoreKey] = field(default_factory=list)
    failed: list[StoreKey] = field(default_factory=list)
    dropped: list[StoreKey] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ChunkGeometry:
    """An engine's KV chunk as the store's index sees it (a
    :class:`~aicache.kv.models.BlockGeometry`): a block of one "token" holding all
    ``chunk_bytes``, dense. The engine's chunk is opaque bytes here — its layers, heads
    and token count are the engine's business (they are in the namespace, not the
    geometry)."""

    chunk_bytes: int
    name: str = "engine-chunk"
    block_tokens: int = 1
    checkpoint_tokens: int = 0
    checkpoint_bytes: int = 0
    hybrid: bool = False

    @property
    def kv_bytes_per_token(self) -> int:
        return self.chunk_bytes

    @property
    def block_bytes(self) -> int:
        return self.chunk_bytes


class SlabChunkStore:
    """Fixed-size chunks in slab files (module docstring)."""

    def __init__(self, root_dir: str | Path, ssd_bytes: int, chunk_bytes: int, *,
                 io_threads: int = 4, slab_bytes: int = 32 << 20) -> None:
        if chunk_bytes <= 0:
            raise BadInput(f"chunk of {chunk_bytes} B: the SSD tier needs a positive chunk size")
        self.chunk_bytes = chunk_bytes
        self.store = TieredKVStore(TieredKVStoreParams(
            index=KVIndexParams(model=ChunkGeometry(chunk_bytes), dram_bytes=0,
                                ssd_bytes=int(ssd_bytes)),
            directory=root_dir, io_threads=int(io_threads),
            slab_bytes=min(int(slab_bytes), int(ssd_bytes))))

    @property
    def n_slots(self) -> int:
        ssd = self.store.ssd
        return ssd.n_slots if ssd is not None else 0

    def recovered(self, ns_prefix: str) -> list[tuple[StoreKey, Evidence]]:
        """Chunks on the SSD under namespaces starting with ``ns_prefix`` (after a restart:
        what a previous process left), each with its node — the counters its header kept,
        for :meth:`AdmissionGate.learn`. Other namespaces are never reported."""
        tree = self.store.index.tree
        out: list[tuple[StoreKey, Evidence]] = []
        for ns in tree.namespaces():  # once, at open: the namespaces a restart found
            if not str(ns).startswith(ns_prefix):
                continue
            root = tree.root(ns)
            for key, node in ((root.children or {}).items() if root is not None else ()):
                if node.kv_loc & _SSD and isinstance(key, bytes):
                    out.append(((str(ns), key), node))
        return out

    def holds(self, sk: StoreKey) -> bool:
        """Whether chunk ``sk`` is on the SSD (no reuse counted)."""
        return self.store.lookup(sk[0], [sk[1]], begin=False).hit_blocks == 1

    def write(self, items: Sequence[tuple[StoreKey, np.ndarray]], ns_prefix: str,
              evidence: Mapping[StoreKey, Evidence] | None = None) -> WriteOutcome:
        """Persist ``items`` (each a chunk's flat uint8 bytes) and wait for the writes. A
        chunk the store does not hold once they are done (its write failed, or a later
        item's write evicted it) is in ``failed``; ``dropped`` lists the chunks of
        ``ns_prefix`` namespaces the SSD LRU gave up for room and not held at the end.
        ``evidence[sk]``: the gate's node for chunk ``sk``, which becomes the store's
        node (its header persists those counters)."""
        store = self.store
        tree = store.index.tree
        out = WriteOutcome()
        outcomes: list[StoreOutcome] = []
        try:
            for sk, data in items:
                ev = evidence.get(sk) if evidence is not None else None
                if ev is not None:
                    tree.attach(sk[0], ev)
                outcomes.append(store.store(sk[0], [sk[1]], [data]))
            store.settle(*outcomes)  # the writes ran on the store's I/O pool
            broken = False
        except Exception:  # noqa: BLE001 - an I/O error is these chunks' failure, never a crash
            broken = True
        held: set[StoreKey] = set()
        evicted: list[StoreKey] = []
        for (sk, _), res in zip(items, outcomes):
            for ns, key in res.ssd_evicted:  # made room for this item: gone before it came
                if isinstance(key, bytes):
                    held.discard((ns, key))
                    if ns.startswith(ns_prefix):
                        evicted.append((ns, key))
            if res.on_ssd(0) and not broken:
                held.add(sk)
        for sk, _ in items:
            (out.ok if sk in held else out.failed).append(sk)
        out.dropped = [sk for sk in evicted if sk not in held]
        return out

    def read(self, sk: StoreKey, dst: np.ndarray) -> bool:
        """Copy chunk ``sk`` into ``dst`` (writable, ``chunk_bytes`` long). False for a
        chunk not held, one that failed its checksum (the store forgets it) or an I/O
        error; ``dst`` then holds no promise."""
        store = self.store
        try:
            plan = store.lookup(sk[0], [sk[1]], count_reuse=False)  # the gate counts reuse
        except Exception:  # noqa: BLE001
            return False
        try:
            return plan.hit_blocks == 1 and store.load(plan, [dst]).valid_blocks == 1
        except Exception:  # noqa: BLE001 - an I/O error is this chunk's miss
            return False
        finally:
            store.release(plan)

    def ssd_metrics(self, elapsed_s: float) -> dict[str, float | int | str | None]:
        """Bytes written to the slab files, the budget, and the lifetime at that rate."""
        ssd = self.store.ssd
        if ssd is None:
            return {}
        s = ssd.stats
        return {"ssd_bytes_written": s.bytes_written, "ssd_budget_bytes": ssd.budget_bytes,
                "ssd_files_bytes": ssd.files_size(),
                "ssd_checksum_failures": s.checksum_failures,
                "ssd_lifetime_days_1dwpd": lifetime_days(s.bytes_written, elapsed_s,
                                                         ssd.budget_bytes),
                "ssd_life_years": life_years(s.bytes_written, elapsed_s, ssd.budget_bytes),
                "ssd_rated_endurance": f"{RATED_DWPD:g} DWPD x {RATED_YEARS:g} years"}

    def close(self) -> None:
        self.store.close()
