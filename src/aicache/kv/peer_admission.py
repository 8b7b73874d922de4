"""The field's SSD admission rules, by name, as :class:`~aicache.kv.admission.SSDAdmission`
policies (the index's seam; engine tiers reach them through the same registry).

Each rule is stated from its source's behaviour (``docs/design/kv-admission-peers.md`` has
the sources and the mapping onto a DRAM→SSD pair); none is copied. The mapping: the peer's
memory tier is our DRAM, its disk tier our SSD; its "store" or "registration" of a block is
our DRAM store of a block a request computed (``prewrite_at_store``: the index writes it
through at once); a request that reuses a block is a hit (``on_reference``); its eviction
hook is ours (``at_eviction``). A block a rule decided to write whose write the index's
bandwidth gate held back (``prewrite_write_bps``) is still owed: the peer queues it, so it
is written when it leaves DRAM.

* :class:`SGLangSelective` — ``write_through_selective``: a node's ``hit_count`` rises on
  the insert that creates it and on every later insert matching it; at ``threshold`` (2:
  the first reuse) the node is backed up to host, and the storage tier inherits every host
  backup.
* :class:`VLLMReuseFilter` — ``FilterReusedOffloadingManager``: every ``lookup`` records
  each block hash of the request in an LRU-bounded counter (64,000 entries); a store is
  kept only for hashes recorded ``store_threshold`` (2) times. Hits are not stored again.
* :class:`LMCacheGate` — ``SsdStorageGate``: a put to disk is vetoed when the chunk is
  smaller than ``min_size_bytes`` or was read fewer than ``min_access_count`` times since
  its last write (a write resets the count).
* :class:`KVBMFrequency` — Dynamo KVBM's disk offload filter: each registration of a block
  in host memory doubles its frequency (a new one starts at 1); every ``decay_every``
  seconds (600) each frequency drops by one and zeros are forgotten; host→disk offload
  happens at frequency ≥ ``threshold`` (2).
* :class:`MooncakeOnEvict` — Mooncake Store's ``offload_on_evict``: an object goes to SSD
  when DRAM eviction picks it, at most ``cap_ratio × queue_limit`` (0.5 × 50,000) per
  eviction cycle; past the cap it is evicted without offload (``offload_force_evict``).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

from aicache.kv.admission import IgnoresEvents
from aicache.kv.radix import RadixNode
from aicache.kv.request_attrs import RequestAttrs

#: bytes of a block (the index's ``size``)
BlockBytes = Callable[[RadixNode], int]


class _Owed:
    """Blocks a rule decided to write that are not written yet (see module docstring)."""

    __slots__ = ("_owed",)

    def __init__(self) -> None:
        self._owed: weakref.WeakSet[RadixNode] = weakref.WeakSet()

    def owe(self, node: RadixNode, ok: bool) -> bool:
        if ok:
            self._owed.add(node)
        return ok

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        return node in self._owed

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        self._owed.discard(node)


class SGLangSelective(IgnoresEvents):
    """SGLang HiCache ``write_through_selective`` (module docstring). ``hit_count`` of a
    node = 1 (its creating insert) + ``R_b`` (each later request whose prompt contains it,
    matched or re-inserted), so the node is backed up on the request that first reuses it:
    at that hit (``prewrite_now``) or at its re-store after a loss."""

    __slots__ = ("threshold", "label")

    def __init__(self, threshold: int = 2) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self.label = "sglang-selective"

    def _due(self, node: RadixNode, now: float) -> bool:
        return 1 + node.R >= self.threshold

    at_eviction = prewrite_now = prewrite_at_store = _due


class VLLMReuseFilter(_Owed):
    """vLLM ``FilterReusedOffloadingManager`` (module docstring): the counts are by block,
    recorded for every block of each finished request's prompt (its lookup); the write is
    decided at the store of a block the request computed."""

    __slots__ = ("store_threshold", "max_tracker_size", "_counts", "label")

    def __init__(self, store_threshold: int = 2, max_tracker_size: int = 64_000) -> None:
        super().__init__()
        if store_threshold < 1 or max_tracker_size < 1:
            raise ValueError("store_threshold and max_tracker_size must be at least 1")
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        self._counts: OrderedDict[RadixNode, int] = OrderedDict()
        self.label = "vllm-reuse-filter"

    def lookups(self, node: RadixNode) -> int:
        return self._counts.get(node, 0)

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        counts, cap = self._counts, self.max_tracker_size
        for n in path:
            c = counts.get(n)
            if c is None:
                if len(counts) >= cap:
                    counts.popitem(last=False)
                counts[n] = 1
            else:
                counts[n] = c + 1
                counts.move_to_end(n)

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return self.owe(node, self._counts.get(node, 0) >= self.store_threshold)

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False

    def on_reference(self, node: RadixNode, now: float) -> None:
        return None


class LMCacheGate(_Owed):
    """LMCache ``SsdStorageGate`` (module docstring): reads are the block's reuses
    (``on_reference``); a put is our DRAM store of a block a request computed."""

    __slots__ = ("min_access_count", "min_size_bytes", "size_of", "_reads", "label")

    def __init__(self, size_of: BlockBytes, min_access_count: int = 1,
                 min_size_bytes: int = 0) -> None:
        super().__init__()
        if min_access_count < 0 or min_size_bytes < 0:
            raise ValueError("min_access_count and min_size_bytes must be non-negative")
        self.size_of = size_of
        self.min_access_count = min_access_count
        self.min_size_bytes = min_size_bytes
        self._reads: weakref.WeakKeyDictionary[RadixNode, int] = weakref.WeakKeyDictionary()
        self.label = "lmcache-gate"

    def reads(self, node: RadixNode) -> int:
        return self._reads.get(node, 0)

    def vetoed(self, node: RadixNode) -> bool:
        if self.min_size_bytes > 0 and self.size_of(node) < self.min_size_bytes:
            return True
        return self.min_access_count > 0 and self._reads.get(node, 0) < self.min_access_count

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return self.owe(node, not self.vetoed(node))

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False

    def on_reference(self, node: RadixNode, now: float) -> None:
        self._reads[node] = self._reads.get(node, 0) + 1

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        super().on_write(node, size, now)
        self._reads[node] = 0

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        return None


class KVBMFrequency(_Owed):
    """Dynamo KVBM's disk offload filter (module docstring). The decay steps are the
    multiples of ``decay_every`` on the caller's clock; a frequency is decayed lazily, by
    the steps passed since it was last set (the same values the periodic sweep leaves)."""

    __slots__ = ("threshold", "decay_every", "max_entries", "_freq", "label")

    def __init__(self, threshold: int = 2, decay_every: float = 600.0,
                 max_entries: int = 1_000_000) -> None:
        super().__init__()
        if threshold < 1 or not decay_every > 0 or max_entries < 1:
            raise ValueError("threshold, decay_every and max_entries must be positive")
        self.threshold = threshold
        self.decay_every = decay_every
        self.max_entries = max_entries
        #: node -> (frequency when last set, decay step then)
        self._freq: dict[RadixNode, tuple[int, int]] = {}
        self.label = "kvbm-frequency"

    def frequency(self, node: RadixNode, now: float) -> int:
        got = self._freq.get(node)
        if got is None:
            return 0
        return max(0, got[0] - (int(now // self.decay_every) - got[1]))

    def should_offload(self, node: RadixNode, now: float) -> bool:
        """A registration of ``node``: double (or start at 1) and test."""
        f = self.frequency(node, now)
        f = f * 2 if f > 0 else 1
        self._freq[node] = (f, int(now // self.decay_every))
        if len(self._freq) > self.max_entries:  # drop what the sweeps already zeroed
            self._freq = {n: v for n, v in self._freq.items() if self.frequency(n, now) > 0}
        return f >= self.threshold

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return self.owe(node, self.should_offload(node, now))

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False  # a host hit is not a registration

    def on_reference(self, node: RadixNode, now: float) -> None:
        return None

    def on_store(self, path: Sequence[RadixNode], skip: int, now: float,
                 attrs: RequestAttrs | None) -> None:
        return None


class MooncakeOnEvict(IgnoresEvents):
    """Mooncake Store ``offload_on_evict`` with ``offload_force_evict`` (module docstring).
    An eviction cycle is one index call: the evictions stamped with the same ``now``."""

    __slots__ = ("cap", "_cycle", "_in_cycle", "label", "over_cap")

    def __init__(self, cap_ratio: float = 0.5, queue_limit: int = 50_000) -> None:
        if not 0.0 <= cap_ratio <= 1.0 or queue_limit < 1:
            raise ValueError("cap_ratio must be in [0, 1] and queue_limit at least 1")
        self.cap = int(cap_ratio * queue_limit)
        self._cycle = float("nan")
        self._in_cycle = 0
        self.over_cap = 0
        self.label = "mooncake-on-evict"

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        if now != self._cycle:
            self._cycle, self._in_cycle = now, 0
        if self._in_cycle >= self.cap:
            self.over_cap += 1
            return False
        self._in_cycle += 1
        return True

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return False
