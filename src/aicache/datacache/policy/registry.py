"""Data-cache systems by name: the baselines, Chiron, the clairvoyant bound, and any
``EVICTION+PREFETCH`` pair from the policy registries.

| name               | prefetch                         | eviction           |
| ------------------ | -------------------------------- | ------------------ |
| `nocache`          | none                             | nothing retained   |
| `juicefs`          | sequential readahead (adaptive)  | 2-random           |
| `alluxio`          | none                             | LRU                |
| `juicefs-adaptive` | SFP                              | LeCaR              |
| `chiron`           | per-unit executor chosen by the advisor (see controller)   |
| `clairvoyant`      | the next needed blocks (needs the trace) | Belady with bypass |
| `E+P`              | prefetch ``P``                   | eviction ``E``     |
| `E`                | none                             | eviction ``E``     |

Every system is a :class:`~aicache.policies.system.DataCacheSystem` (the fixed
ones in :mod:`aicache.datacache.policy.baselines`, Chiron in
:mod:`aicache.adaptive.controller`); one driver,
:class:`~aicache.datacache.policy.driver.SystemDriver`, drives them in the simulator and
in the real engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aicache.datacache.policy.baselines import ClairvoyantSystem, NoCacheSystem, PolicySystem
from aicache.policies.system import DataCacheSystem
from aicache.errors import BadInput
from aicache.policies import EVICTION, PREFETCH
from aicache.registry import Registry

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec

SystemFactory = Callable[..., DataCacheSystem]
DATACACHE_SYSTEMS: Registry[SystemFactory] = Registry("system")


def _pair(name: str, eviction: str, prefetch: str) -> SystemFactory:
    def make(capacity_bytes: int, block_size: int, *, seed: int = 0, **params: Any) -> DataCacheSystem:
        params.pop("advisor", None)
        params.pop("trace", None)
        params.pop("labels", None)
        if eviction == "lecar":
            # a data cache's capacity is bytes but its entries are blocks: LeCaR's discount
            # counts entries, as its paper defines it (see policies/eviction/lecar.py)
            params["eviction_params"] = {"discount": "entries", **(params.get("eviction_params") or {})}
        return PolicySystem(name, eviction, prefetch, capacity_bytes, seed=seed, **params)

    return make


def _nocache(capacity_bytes: int, block_size: int, **params: Any) -> DataCacheSystem:
    return NoCacheSystem()


def _clairvoyant(capacity_bytes: int, block_size: int, *, trace: Any = None,
                 lookahead: int = 32, **params: Any) -> DataCacheSystem:
    if trace is None:
        raise BadInput("system 'clairvoyant' needs the future: give it the trace (trace=...)")
    return ClairvoyantSystem(trace, capacity_bytes, lookahead=lookahead)


def _chiron(capacity_bytes: int, block_size: int, *, advisor: AdvisorSpec = "statistical", seed: int = 0,
            **params: Any) -> DataCacheSystem:
    from aicache.adaptive.controller import ChironParams, ChironSystem

    params.pop("trace", None)
    runner = params.pop("runner", None)
    return ChironSystem(capacity_bytes, advisor=advisor, params=ChironParams(**params), seed=seed,
                        runner=runner)


DATACACHE_SYSTEMS.register("nocache", _nocache, "no cache: every read goes remote")
DATACACHE_SYSTEMS.register("juicefs", _pair("juicefs", "2-random", "readahead"), "readahead + 2-random")
DATACACHE_SYSTEMS.register("alluxio", _pair("alluxio", "lru", "none"), "no prefetch + LRU")
DATACACHE_SYSTEMS.register("juicefs-adaptive", _pair("juicefs-adaptive", "lecar", "sfp"), "SFP + LeCaR")
DATACACHE_SYSTEMS.register("chiron", _chiron, "advisor-switched executors per cache unit")
DATACACHE_SYSTEMS.register("chiron-seed", lambda capacity_bytes, block_size, **params: _chiron(
    capacity_bytes, block_size, **{"executors": "seed", **params}),
    "chiron with the seed's executor table as written (docs/design/chiron.md)")
DATACACHE_SYSTEMS.register("clairvoyant", _clairvoyant, "Belady + perfect prefetch (needs the trace)")


def make_system(name: str, capacity_bytes: int, block_size: int, *, advisor: AdvisorSpec = "statistical",
                seed: int = 0, **params: Any) -> DataCacheSystem:
    """Build system ``name``: a registered system, an ``EVICTION+PREFETCH`` pair, or a bare
    eviction name (``lru`` = ``lru+none``). An unknown name is a :class:`BadInput` listing
    the valid ones."""
    if not isinstance(capacity_bytes, int) or capacity_bytes < 0:
        raise BadInput(f"cache size {capacity_bytes!r} must be a non-negative number of bytes")
    if name in DATACACHE_SYSTEMS:
        return DATACACHE_SYSTEMS.get(name)(capacity_bytes, block_size, advisor=advisor, seed=seed, **params)
    if "+" in name:
        ev, _, pf = name.partition("+")
        if ev in EVICTION and pf in PREFETCH:
            return _pair(name, ev, pf)(capacity_bytes, block_size, seed=seed, **params)
    elif name in EVICTION:  # a bare eviction name: that policy with no prefetch
        return _pair(name, name, "none")(capacity_bytes, block_size, seed=seed, **params)
    raise BadInput(
        f"unknown system {name!r}; valid: {', '.join(DATACACHE_SYSTEMS.names())}, EVICTION or EVICTION+PREFETCH "
        f"with EVICTION in {{{', '.join(EVICTION.names())}}} and PREFETCH in "
        f"{{{', '.join(PREFETCH.names())}}} (e.g. lru+stride)"
    )
