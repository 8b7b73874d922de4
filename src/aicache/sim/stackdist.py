# mypy: ignore-errors
# (Cython's pure-Python mode: the annotations are C types that mypy cannot read; the
# typed callers are aicache.sim.mrc and aicache.traces.summary.)
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

Cython's pure-Python mode, like :mod:`aicache.policies.slotcore`: the install compiles it
(:data:`aicache.native.CYTHON`) and the loop of :func:`slot_distances` runs over typed
arrays in C; uncompiled it is the same code run as Python, with identical results.
"""

from __future__ import annotations

from array import array

try:
    import cython
except ImportError:  # uncompiled without Cython installed: the same code, run as Python
    from aicache.policies import _cython_shim as cython  # type: ignore[no-redef]


def slot_distances(ids: cython.int[::1], slots: cython.Py_ssize_t,
                   weights: cython.longlong[::1], out: cython.longlong[::1]) -> None:
    """``out[i]`` = ``weights[i]`` + the weights of the distinct objects requested strictly
    between the previous request to ``ids[i]`` and ``i``; ``-1`` for a first request.

    ``ids`` are dense object ids in ``0 .. slots-1`` (:class:`aicache.policies.slotcore.
    SlotMap`); ``weights[i]`` is the object's weight and must be equal on all requests to
    one object. Invariant of the tree: position ``j`` holds ``weights[j]`` iff request
    ``j`` is the latest request so far to its object, else 0.
    """
    n: cython.Py_ssize_t = len(ids)
    tree: cython.longlong[::1] = array("q", bytes(8 * (n + 1)))  # Fenwick, request j at j + 1
    last: cython.longlong[::1] = array("q", bytes(8 * slots))  # latest request + 1; 0: none
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    p: cython.Py_ssize_t
    s: cython.int
    w: cython.longlong
    total: cython.longlong
    for i in range(n):
        s = ids[i]
        w = weights[i]
        p = last[s] - 1
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
        else:
            out[i] = -1
        if w:
            j = i + 1
            while j <= n:
                tree[j] += w
                j += j & -j
        last[s] = i + 1


def stack_distances(prev: list, weights: list) -> list:
    """:func:`slot_distances` over ``prev[i]``, the index of the previous request to the
    same object (``-1``: none), instead of object ids; returns the list of distances."""
    n: cython.Py_ssize_t = len(prev)
    ids: cython.int[::1] = array("i", bytes(4 * n))
    count: cython.int = 0
    i: cython.Py_ssize_t
    p: cython.Py_ssize_t
    for i in range(n):
        p = prev[i]
        if p >= 0:
            ids[i] = ids[p]
        else:
            ids[i] = count
            count += 1
    out = array("q", bytes(8 * n))
    slot_distances(ids, count, array("q", weights), out)
    return out.tolist()
