"""The one driver of a data-cache system, shared by the simulator and the real engine.

A :class:`~aicache.policies.system.DataCacheSystem` decides (what to prefetch, whether to
admit, what to evict); a :class:`SystemDriver` is the only caller of its ``on_*`` methods
and keeps the bookkeeping every driver needs, once:

* the *resident set* (block → the bytes it costs in the budget) and each block's key;
* the *unread-prefetch ledger* (:class:`PrefetchLedger`): a prefetched block read before it
  is evicted is *used*, one evicted unread is *wasted*; the system hears both;
* "evict until it fits": :meth:`SystemDriver.place` asks the system for victims while the
  block does not fit, and returns what to drop — the caller (the simulator's dict, the
  engine's store) removes exactly those, and never calls back up;
* the *block map* (:class:`~aicache.datacache.policy.blockmap.BlockMap`): stable file →
  block ids.

The simulator calls :meth:`SystemDriver.access` / :meth:`SystemDriver.place` (single
thread, no lock, no result object per read); the engine goes through the
:class:`PolicyPort` methods (:meth:`~SystemDriver.read`, :meth:`~SystemDriver.insert`,
:meth:`~SystemDriver.forget`), which lock and return small typed results.
:class:`aicache.datacache.daemon.DaemonPolicy` implements the same port by forwarding it to
the cache directory's daemon, which holds one ``SystemDriver`` for every process reading
the directory. The engine cannot tell them apart.

Invariant (``tests/datacache/policy/test_datacache_system_contract.py``, every registered system): after
every event the driver's resident set equals the set of blocks the system holds, and a
single engine's store holds exactly the driver's resident blocks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from aicache.datacache.keys import BlockKey
from aicache.datacache.policy.blockmap import BlockMap
from aicache.datacache.policy.registry import make_system
from aicache.policies.system import DataCacheSystem

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec

K = TypeVar("K")
_NONE: tuple[int, ...] = ()


class Admission(Enum):
    """What :meth:`SystemDriver.place` decided for a fetched block."""

    #: resident now: store it (after dropping the victims)
    STORED = "stored"
    #: not stored, nothing evicted for it (the system's admission, or larger than the budget)
    REJECTED = "rejected"
    #: the system made room (victims) and then declined it (S3-FIFO's late refusal)
    DECLINED = "declined"
    #: already resident: nothing to do
    HELD = "held"


class Source(Enum):
    """Where the bytes of a demand read came from, as the engine saw them."""

    #: a block in the local store (adopted if the system does not hold it yet)
    STORE = "store"
    #: a fetch in flight (a prefetch, another reader's miss) that the read waited on
    FLIGHT = "flight"
    #: nothing in hand: the read fetches (a block the system holds but the store lost is
    #: forgotten first)
    REMOTE = "remote"


@dataclass(frozen=True, slots=True)
class Victim(Generic[K]):
    """A block the system gave up to make room; ``wasted``: a prefetch never read."""

    block: int
    key: K
    wasted: bool


@dataclass(frozen=True, slots=True)
class Placement(Generic[K]):
    """The answer to one fetched block: the admission and the blocks to drop first (also
    for ``DECLINED``: the room was made)."""

    admission: Admission
    victims: Sequence[Victim[K]] = ()


@dataclass(frozen=True, slots=True)
class AccessResult:
    """The answer to one demand read: whether the system held the block, which of the
    blocks it wants prefetched are not resident, and whether the read used an unread
    prefetch."""

    hit: bool
    prefetch: Sequence[int]
    prefetch_used: bool


#: the answers that name no prefetch, shared: ``_NO_PREFETCH[hit][prefetch_used]``
_NO_PREFETCH = ((AccessResult(False, _NONE, False), AccessResult(False, _NONE, True)),
                (AccessResult(True, _NONE, False), AccessResult(True, _NONE, True)))


class PrefetchLedger:
    """Prefetched blocks that are stored and not read yet.

    One implementation of used/wasted prefetch accounting: :meth:`read` says a demand read
    used a prefetch, :meth:`evicted` that an eviction wasted one, :meth:`forget` drops a
    block that left for another reason (neither used nor wasted)."""

    __slots__ = ("_unread",)

    def __init__(self) -> None:
        self._unread: set[int] = set()

    def stored(self, block: int) -> None:
        self._unread.add(block)

    def read(self, block: int) -> bool:
        """A demand read of ``block``: True when it was an unread prefetch (now used)."""
        u = self._unread
        if block in u:
            u.discard(block)
            return True
        return False

    def evicted(self, block: int) -> bool:
        """``block`` was evicted: True when it was never read (a wasted prefetch)."""
        return self.read(block)

    def forget(self, block: int) -> None:
        self._unread.discard(block)

    def __contains__(self, block: object) -> bool:
        return block in self._unread

    def __len__(self) -> int:
        return len(self._unread)


class PolicyPort(Protocol):
    """What the engine asks of its policy, once per event: a :class:`SystemDriver` in this
    process or a :class:`~aicache.datacache.daemon.DaemonPolicy` forwarding to the daemon."""

    @property
    def name(self) -> str: ...

    def register(self, files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]: ...

    def locate(self, bid: int) -> tuple[str, int] | None: ...

    def read(self, unit: str, bid: int, key: BlockKey, size: int, source: Source,
             now: float) -> AccessResult: ...

    def opened(self, unit: str, bid: int, now: float) -> None: ...

    def is_resident(self, bid: int) -> bool: ...

    def insert(self, unit: str, bid: int, key: BlockKey, size: int, used: int, now: float,
               prefetched: bool) -> Placement[BlockKey]: ...

    def forget(self, bid: int, key: BlockKey) -> None: ...

    def stats(self) -> dict[str, object]: ...

    def close(self) -> None: ...


class SystemDriver(Generic[K]):
    """A DataCacheSystem plus the state every driver of one keeps (see module docstring).

    ``capacity``: the budget in bytes (the system's own capacity when None); ``overhead``:
    what each stored block costs beyond its payload (a real store's header), ``align``
    the unit that cost is rounded up to (the store's allocation unit), and ``extra`` what
    it costs besides its file (its index row), so that the driver's arithmetic is the
    store's. ``resident`` maps a block to that cost; ``used``
    is their sum.
    """

    def __init__(self, system: DataCacheSystem, block_size: int, *, capacity: int | None = None,
                 overhead: int = 0, align: int = 1, extra: int = 0) -> None:
        self.system = system
        self.map = BlockMap(block_size)
        self.capacity = int(capacity if capacity is not None else getattr(system, "capacity", 0))
        self.overhead = overhead
        if align < 1:
            raise ValueError(f"align={align!r} must be >= 1")
        self.align = align
        self.extra = extra
        #: how much more room the system believes it has than this budget (the store's
        #: index reserve, :func:`~aicache.datacache.store.block_budget`): added to the
        #: ``used`` the system is told, so that its "full" is the budget's
        self._slack = int(getattr(system, "capacity", self.capacity) or self.capacity) - self.capacity
        self.resident: dict[int, int] = {}
        self.keys: dict[int, K] = {}
        self.used = 0
        self.ledger = PrefetchLedger()
        self.evictions = 0
        self.prefetch_used = 0
        self._lock = threading.Lock()  # the port's methods; the core methods never take it
        # the base class's no-op hooks are skipped (a call per read on the simulator's path)
        cls = type(system)
        self._ticks = cls.tick is not DataCacheSystem.tick
        self._tells_used = cls.on_prefetch_used is not DataCacheSystem.on_prefetch_used
        self._unread = self.ledger._unread  # the ledger's set, read inline in access()

    @property
    def name(self) -> str:
        return str(self.system.name)

    # -- the core (the simulator calls these directly: one thread, no lock) ----------------
    def cost(self, size: int) -> int:
        """What a block of ``size`` payload bytes takes of the budget (the store's
        ``stored_size`` when the driver has the store's overhead, align and extra)."""
        return -(-(size + self.overhead) // self.align) * self.align + self.extra

    def tick(self, now: float) -> None:
        if self._ticks:
            self.system.tick(now)

    def access(self, unit: str, bid: int, size: int, hit: bool, now: float) -> Sequence[int]:
        """A demand read; ``hit`` means the block is resident. Returns the blocks the
        system wants prefetched."""
        if hit and bid in self._unread:
            self._unread.discard(bid)
            self.prefetch_used += 1
            if self._tells_used:
                self.system.on_prefetch_used(bid, now)
        return self.system.on_access(unit, bid, size, hit, now) or _NONE

    def place(self, unit: str, bid: int, key: K, size: int, used: int, now: float,
              prefetched: bool, victims: list[Victim[K]] | None = None) -> Admission:
        """A fetched block arrived: admit, make room, insert. ``used``: bytes the budget
        holds now as the caller sees it (a shared store's count, which includes other
        writers' blocks); the driver never counts less than its own resident bytes.
        Victims are appended to ``victims`` when given (the caller drops them)."""
        res = self.resident
        if bid in res:
            return Admission.HELD
        if used < self.used:
            used = self.used
        system = self.system
        cost = self.cost(size)
        cap = self.capacity
        # the system counts blocks at their cost, as the budget does
        if cost > cap or not system.admit(unit, bid, cost, used + self._slack, now):
            return Admission.REJECTED
        while used + cost > cap and res:
            v = system.victim(now)
            c = res.pop(v, None)
            if c is None:  # a block the system named twice: it forgot it already
                continue
            used -= c
            self.used -= c
            self.evictions += 1
            k = self.keys.pop(v)
            wasted = self.ledger.evicted(v)
            if wasted:
                system.on_prefetch_wasted(v, now)
            if victims is not None:
                victims.append(Victim(v, k, wasted))
        if system.on_insert(unit, bid, cost, now, prefetched) is False:
            return Admission.DECLINED
        res[bid] = cost
        self.keys[bid] = key
        self.used += cost
        if prefetched:
            self.ledger.stored(bid)
        return Admission.STORED

    def drop(self, bid: int) -> None:
        """The caller lost ``bid`` (corrupt, evicted by another writer, a failed store):
        the system forgets it without choosing."""
        c = self.resident.pop(bid, None)
        if c is None:
            return
        self.used -= c
        self.keys.pop(bid, None)
        self.ledger.forget(bid)
        self.system.on_remove(bid)

    # -- the port (the engine, the daemon: locked, typed results) ---------------------------
    def register(self, files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        return self.map.register(files)

    def base(self, path: str) -> int | None:
        return self.map.base(path)

    def locate(self, bid: int) -> tuple[str, int] | None:
        return self.map.locate(bid)

    def is_resident(self, bid: int) -> bool:
        return bid in self.resident

    def read(self, unit: str, bid: int, key: K, size: int, source: Source,
             now: float) -> AccessResult:
        """A demand read through the engine: reconcile with what the store showed (adopt a
        stored block the system does not hold, forget one the store lost), then
        :meth:`tick` and :meth:`access`. One lock acquisition; a read that needs no
        prefetch (the system named none, or only resident blocks) gets a shared result."""
        with self._lock:
            res = self.resident
            if bid in res:
                hit = source is not Source.REMOTE
                if not hit:  # the store lost it
                    self.drop(bid)
            elif source is Source.STORE and self.system.on_insert(
                    unit, bid, cost := self.cost(size),
                    now, False) is not False:
                res[bid] = cost
                self.keys[bid] = key
                self.used += cost
                hit = True
            else:
                hit = False
            if self._ticks:
                self.system.tick(now)
            before = self.prefetch_used
            prefetch = self.access(unit, bid, size, hit, now)
            used = self.prefetch_used != before
            if prefetch:  # what is resident already needs no fetch
                prefetch = [b for b in prefetch if b not in res]
        if prefetch:
            return AccessResult(hit, prefetch, used)
        return _NO_PREFETCH[hit][used]

    def opened(self, unit: str, bid: int, now: float) -> None:
        """A reader opened file ``unit`` (first block ``bid``): told to the system
        (:meth:`~aicache.policies.system.DataCacheSystem.on_open`)."""
        with self._lock:
            self.system.on_open(unit, bid, now)

    def insert(self, unit: str, bid: int, key: K, size: int, used: int, now: float,
               prefetched: bool) -> Placement[K]:
        with self._lock:
            victims: list[Victim[K]] = []
            adm = self.place(unit, bid, key, size, used, now, prefetched, victims)
            return Placement(adm, victims)

    def forget(self, bid: int, key: K) -> None:
        """The store dropped ``key`` (block ``bid``) on its own: forget it if it is ours."""
        with self._lock:
            if self.keys.get(bid) == key:
                self.drop(bid)

    def stats(self) -> dict[str, object]:
        try:
            s: dict[str, object] = dict(self.system.stats())
        except Exception:  # noqa: BLE001 - metrics must survive a system's bug
            s = {}
        s["resident_blocks"] = len(self.resident)
        s.setdefault("advisor_no_advice", s.get("no_advice", 0))
        counters = getattr(getattr(self.system, "advisor", None), "counters", None)
        if counters is not None:
            s["advisor_latency_seconds_total"] = counters.latency_s_total
        s.pop("params", None)
        return s

    def close(self) -> None:
        self.system.close()


def make_engine_system(policy: str | DataCacheSystem, capacity: int, block_size: int,
                       advisor: AdvisorSpec | None = None, seed: int = 0, **params: object) -> DataCacheSystem:
    """A system for a real engine, by name (:func:`~aicache.datacache.policy.registry.make_system`:
    chiron, juicefs, ``lru+stride``, a bare eviction name…; ``params`` go to its factory,
    e.g. Chiron's ``gate_mode``) or as given. Chiron's advisor runs on its own thread in a
    real engine (never on the read path)."""
    if isinstance(policy, DataCacheSystem):
        return policy
    extra = {"runner": "thread"} if policy in ("chiron", "chiron-seed") else {}
    return make_system(policy, capacity, block_size,
                       advisor=advisor if advisor is not None else "statistical", seed=seed,
                       **extra, **params)
