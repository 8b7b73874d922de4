"""The data cache's policy core: what to prefetch, admit and evict, with no I/O and no clock.

* :mod:`~aicache.policies.system` — the ``DataCacheSystem`` interface (below this package
  and the adaptive controller that implements it).
* :mod:`~aicache.datacache.policy.driver` — ``SystemDriver``, the one driver of a system
  (resident set, unread prefetches, evict-until-it-fits) and the typed port the engine
  talks to; the simulator and the real engine both use it.
* :mod:`~aicache.datacache.policy.blockmap` — stable file → block ids.
* :mod:`~aicache.datacache.policy.baselines` — fixed eviction + prefetch systems, no
  cache, the clairvoyant bound.
* :mod:`~aicache.datacache.policy.registry` — systems by name (``DATACACHE_SYSTEMS``, ``make_system``).
"""
