"""SSD admission policies beyond the seed's E/R rule (the :class:`~aicache.kv.saria.SSDAdmission`
seam of :class:`~aicache.kv.saria.KVIndex`).

* :class:`OracleAdmission` — the offline frontier: it knows the whole trace.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from aicache.kv.radix import RadixNode


class OracleAdmission:
    """Persist exactly the blocks some later request will reference.

    At a block's DRAM eviction the oracle writes it to SSD iff a request that has not
    started yet references it (its prefix path, counted over the whole trace in advance):
    that request will find it on SSD instead of recomputing it. A block no later request
    references is never written; nothing is prewritten (a block still in DRAM serves its
    readers, and writing it before its eviction could only add writes). The counts are
    by prefix path, not by radix node, so metadata reclaimed and rebuilt is still known.

    It is a frontier, not a bound on every policy: with the SSD full, an admitted block
    may still be dropped (SSD LRU) before its reader comes. The driver calls
    :meth:`started` with each request's block keys when the request starts.
    """

    label = "oracle"
    __slots__ = ("_ids", "_remaining", "_memo")

    def __init__(self, prompts: Iterable[Sequence[Hashable]]) -> None:
        self._ids: dict[tuple[int, Hashable], int] = {}
        self._remaining: list[int] = [0]  # path id 0 = the root
        ids, rem = self._ids, self._remaining
        for keys in prompts:
            pid = 0
            for k in keys:
                nxt = ids.get((pid, k))
                if nxt is None:
                    nxt = ids[(pid, k)] = len(rem)
                    rem.append(0)
                rem[nxt] += 1
                pid = nxt
        self._memo: dict[RadixNode, int] = {}

    def started(self, keys: Sequence[Hashable]) -> None:
        """A request referencing ``keys`` started: it is no longer a future reader."""
        ids, rem = self._ids, self._remaining
        pid = 0
        for k in keys:
            pid = ids[(pid, k)]
            rem[pid] -= 1

    def future_references(self, node: RadixNode) -> int:
        """Requests not yet started whose prompts contain ``node``'s prefix."""
        pid = self._pid(node)
        return self._remaining[pid] if pid >= 0 else 0

    def _pid(self, node: RadixNode) -> int:
        memo = self._memo
        pid = memo.get(node)
        if pid is not None:
            return pid
        chain = []
        n: RadixNode | None = node
        while n is not None and n.parent is not None and n not in memo:
            chain.append(n)
            n = n.parent
        pid = memo[n] if n is not None and n.parent is not None else 0
        for m in reversed(chain):
            pid = self._ids.get((pid, m.key), -1) if pid >= 0 else -1
            memo[m] = pid
        return pid

    def at_eviction(self, node: RadixNode, now: float) -> bool:
        pid = self._pid(node)
        return pid >= 0 and self._remaining[pid] > 0

    def prewrite_now(self, node: RadixNode, now: float) -> bool:
        return False

    def prewrite_at_store(self, node: RadixNode, now: float) -> bool:
        return False

    def on_reference(self, node: RadixNode, now: float) -> None:
        return None

    def on_write(self, node: RadixNode, size: int, now: float) -> None:
        return None
