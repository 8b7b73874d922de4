"""Policy registries. One line per policy: ``name -> "module:Class"`` (imported lazily).

Adding a policy = one module + one registration line here; the contract tests in
``tests/policies/test_policy_contract.py`` pick it up with no new test code.
"""

from __future__ import annotations

from collections.abc import Callable

from aicache.policies.base import EvictionPolicy, PrefetchPolicy
from aicache.registry import Registry

EVICTION: Registry[type[EvictionPolicy]] = Registry("eviction policy")
PREFETCH: Registry[type[PrefetchPolicy]] = Registry("prefetch policy")

_E = "aicache.policies.eviction"
EVICTION.register("lru", f"{_E}.lru:LRU", "least recently used")
EVICTION.register("fifo", f"{_E}.fifo:FIFO", "first in, first out")
EVICTION.register("lfu", f"{_E}.lfu:LFU", "least frequently used (libCacheSim tie-breaking)")
EVICTION.register("clock", f"{_E}.clock:Clock", "CLOCK (second chance)")
EVICTION.register("2-random", f"{_E}.random2:TwoRandom", "JuiceFS: sample two, evict the older")
EVICTION.register("2-random-unread-last", f"{_E}.random2:TwoRandomUnreadLast",
                  "2-random over read blocks; unread prefetches only past half the capacity")
EVICTION.register("arc", f"{_E}.arc:ARC", "adaptive replacement cache")
EVICTION.register("lecar", f"{_E}.lecar:LeCaR", "regret-minimising LRU/LFU mix")
EVICTION.register("sieve", f"{_E}.sieve:Sieve", "SIEVE (NSDI'24)")
EVICTION.register("s3fifo", f"{_E}.s3fifo:S3FIFO", "S3-FIFO (SOSP'23)")
EVICTION.register("2q", f"{_E}.twoq:TwoQ", "2Q: FIFO A1in, ghost A1out, LRU Am (VLDB'94)")
EVICTION.register("lirs", f"{_E}.lirs:LIRS", "LIRS: LIR set + resident-HIR queue (SIGMETRICS'02), libCacheSim's variant")
EVICTION.register("wtinylfu", f"{_E}.tinylfu:WTinyLFU", "W-TinyLFU: LRU window + sketch-admitted SLRU (TOS'17)")
EVICTION.register("lhd", f"{_E}.lhd:LHD", "LHD: least hit density, sampled (NSDI'18)")
EVICTION.register("gdsf", f"{_E}.gdsf:GDSF", "Greedy-Dual-Size-Frequency, libcachesim's order (may bypass)")
EVICTION.register("belady", f"{_E}.belady:Belady", "offline optimum from next-access times")
EVICTION.register("eager", f"{_E}.eager:EagerEviction", "eager: read blocks first, most recently read first (Chiron, sequential)")
EVICTION.register("eager-seed", f"{_E}.eager:SeedEagerEviction", "eager as published: read blocks first, least recently read first")
EVICTION.register("slru", f"{_E}.slru:SegmentedLRU", "segmented LRU: probation, then protected re-read blocks (Chiron, skewed)")
EVICTION.register("aslru", f"{_E}.slru:AdaptiveSLRU", "segmented LRU whose protected share adapts from ghost hits (ARC's rule)")
EVICTION.register("reject-when-full", f"{_E}.reject:RejectWhenFull", "no eviction: refuse inserts when full")

PREFETCH.register("none", "aicache.policies.base:NoPrefetch", "no prefetching")
PREFETCH.register("stride", "aicache.policies.prefetch.stride:StridePrefetcher", "stride detection, adaptive depth")
PREFETCH.register("stride-streams", "aicache.policies.prefetch.stride:StreamsStridePrefetcher", "stride detection per interleaved stream of a unit, adaptive depth")
PREFETCH.register("readahead-streams", "aicache.policies.prefetch.stride:ReadaheadStreamsPrefetcher", "JuiceFS sequential readahead per interleaved stream of a unit")
PREFETCH.register("stride-fixed", "aicache.policies.prefetch.stride:FixedStridePrefetcher", "stride detection, fixed depth")
PREFETCH.register("next-fixed", "aicache.policies.prefetch.stride:NextBlocksPrefetcher", "next N blocks on every read, no detection")
PREFETCH.register("readahead", "aicache.policies.prefetch.stride:ReadaheadPrefetcher", "JuiceFS sequential readahead")
PREFETCH.register("sample-rest", "aicache.policies.prefetch.stride:SampleRestPrefetcher", "rest of a multi-block sample on its first block")
PREFETCH.register("neighborhood", "aicache.policies.prefetch.neighborhood:NeighborhoodPrefetcher", "on a miss, nearby blocks")
PREFETCH.register("neighborhood+readahead", "aicache.policies.prefetch.neighborhood:NeighborhoodReadaheadPrefetcher",
                  "on a miss, nearby blocks; readahead while reads are in order")
PREFETCH.register("sfp", "aicache.policies.prefetch.sfp:SFPPrefetcher", "SFP file-successor Markov")
PREFETCH.register("sfp-128", "aicache.policies.prefetch.sfp:SFP128Prefetcher", "SFP, window <= 128 blocks")


def make_eviction(name: str, capacity: int, **kwargs: object) -> EvictionPolicy:
    """Instantiate the eviction policy registered as ``name``."""
    # the keyword arguments are the named policy's own (checked by its constructor)
    factory: Callable[..., EvictionPolicy] = EVICTION.get(name)
    return factory(capacity, **kwargs)


__all__ = [
    "EVICTION",
    "PREFETCH",
    "EvictionPolicy",
    "PrefetchPolicy",
    "make_eviction",
]
