"""LRU stack distances in one pass (Mattson et al.'s inclusion property, Bennett-Kruskal
counting with a Fenwick tree): O(n log n) for n requests, whatever the number of sizes.

The distance of a request is the amount of cache LRU needs to hit it: the weight of its
object plus the weights of the distinct objects requested since its previous request
(``-1`` for a first request). With every weight 1 (objects mode) LRU of capacity ``c``
hits exactly the requests whose distance is ``<= c``. With weights = object sizes (bytes
mode) the same holds for a byte capacity ``C`` provided every object keeps one size and
objects larger than ``C`` carry weight 0 (the cache never stores them and they evict
nothing, so they are not in its stack): the cache's content is then always the longest
prefix of the recency stack that fits, because eviction removes from the bottom only until
the incoming object fits. :mod:`aicache.sim.mrc` builds the curve from these distances.

Compiled with the hot path (:mod:`aicache.native`); the loop is written over plain lists
of ints so that it compiles to C arithmetic.
"""

from __future__ import annotations


def stack_distances(prev: list[int], weights: list[int]) -> list[int]:
    """``d[i]`` = ``weights[i]`` + the weights of the distinct objects requested strictly
    between ``prev[i]`` and ``i``; ``-1`` where ``prev[i] < 0``.

    ``prev[i]`` is the index of the previous request to the same object (``-1``: none);
    ``weights[i]`` is the object's weight and must be equal on all requests to one object.
    Invariant of the tree: position ``j`` holds ``weights[j]`` iff request ``j`` is the
    latest request so far to its object, else 0.
    """
    n = len(prev)
    tree = [0] * (n + 1)  # Fenwick tree over positions 1..n (request j at j + 1)
    out = [-1] * n
    for i in range(n):
        w = weights[i]
        p = prev[i]
        if p >= 0:
            total = 0
            j = i  # prefix sum over requests 0 .. i-1
            while j > 0:
                total += tree[j]
                j -= j & -j
            j = p + 1  # minus the prefix over requests 0 .. p
            while j > 0:
                total -= tree[j]
                j -= j & -j
            out[i] = total + w
            j = p + 1  # request p is no longer its object's latest
            while j <= n:
                tree[j] -= w
                j += j & -j
        if w:
            j = i + 1
            while j <= n:
                tree[j] += w
                j += j & -j
    return out
