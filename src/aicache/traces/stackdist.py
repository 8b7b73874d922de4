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
    from aicache.policies import _cython_shim as cython  # type: ignore[no-redef]  # (the same names)


def slot_distances(ids: cython.int[::1], slots: cython.Py_ssize_t,
                   weights: cython.longlong[::1], out: cython.longlong[::1]) -> None:
    """``out[i]`` = ``weights[i]`` + the weights of the distinct objects requested strictly
    between the previous request to ``ids[i]`` and ``i``; ``-1`` for a first request.

    ``ids`` are dense object ids in ``0 .. slots-1`` (:class:`aicache.policies.slotcore.
    SlotMap`); ``weights[i]`` is the object's weight and must be equal on all requests to
    one object.

    Each object's latest request so far holds a position in a Fenwick tree, in request
    order; the tree holds the object's weight there. Invariants: positions below ``t`` are
    ordered like their requests, ``owner[q]`` is the object whose latest request is at
    ``q`` (``-1``: none any more), ``last[s]`` is ``s``'s position + 1 (0: not seen) and
    ``live`` the tree's total. The distinct objects requested after position ``p`` are then
    the live positions above it: ``live - prefix(p)``. The tree has ``m`` positions, at
    least twice the objects; when they run out the live ones are renumbered ``0, 1, …`` in
    order (``compact``), so the tree stays the size of the working set, not the trace, and
    a renumbering costs ``O(m)`` once per at least ``m / 2`` requests.
    """
    n: cython.Py_ssize_t = len(ids)
    m: cython.Py_ssize_t = max(1, min(n, 2 * slots))
    tree: cython.longlong[::1] = array("q", bytes(8 * (m + 1)))  # position q at q + 1
    posw: cython.longlong[::1] = array("q", bytes(8 * m))  # the weight at each position
    owner: cython.int[::1] = array("i", [-1]) * m
    last: cython.longlong[::1] = array("q", bytes(8 * slots))
    live: cython.longlong = 0
    t: cython.Py_ssize_t = 0  # the next free position
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    p: cython.Py_ssize_t
    q: cython.Py_ssize_t
    k: cython.Py_ssize_t
    s: cython.int
    o: cython.int
    w: cython.longlong
    total: cython.longlong
    for i in range(n):
        s = ids[i]
        w = weights[i]
        if t == m:  # compact: live positions to 0 .. k-1 in order, then rebuild the tree
            k = 0
            for q in range(m):
                o = owner[q]
                if o >= 0:
                    owner[k] = o
                    posw[k] = posw[q]
                    last[o] = k + 1
                    k += 1
            for q in range(k, m):
                owner[q] = -1
            for j in range(m + 1):
                tree[j] = 0
            for q in range(k):
                tree[q + 1] = posw[q]
            for j in range(1, m + 1):  # linear Fenwick build: each node adds to its parent
                q = j + (j & -j)
                if q <= m:
                    tree[q] += tree[j]
            t = k
        p = last[s] - 1
        if p >= 0:
            total = 0
            j = p + 1  # prefix over positions 0 .. p
            while j > 0:
                total += tree[j]
                j -= j & -j
            out[i] = live - total + w
            j = p + 1  # position p is no longer its object's latest
            while j <= m:
                tree[j] -= w
                j += j & -j
            owner[p] = -1
            live -= w
        else:
            out[i] = -1
        if w:
            j = t + 1
            while j <= m:
                tree[j] += w
                j += j & -j
        owner[t] = s
        posw[t] = w
        last[s] = t + 1
        live += w
        t += 1


def hits_at(dist: cython.longlong[::1], sizes: cython.longlong[::1],
            caps: cython.longlong[::1], hits: cython.longlong[::1],
            bytes_hit: cython.longlong[::1]) -> None:
    """For capacities ``caps`` in ascending order: ``hits[c]`` = the requests with
    ``0 <= dist[i] <= caps[c]`` (LRU's hits at that size; ``-1`` never hits) and
    ``bytes_hit[c]`` the sum of their ``sizes``. ``hits`` and ``bytes_hit`` start at 0."""
    n: cython.Py_ssize_t = len(dist)
    nc: cython.Py_ssize_t = len(caps)
    i: cython.Py_ssize_t
    lo: cython.Py_ssize_t
    hi: cython.Py_ssize_t
    mid: cython.Py_ssize_t
    d: cython.longlong
    for i in range(n):
        d = dist[i]
        if d < 0:
            continue
        lo = 0  # the smallest capacity >= d
        hi = nc
        while lo < hi:
            mid = (lo + hi) // 2
            if caps[mid] < d:
                lo = mid + 1
            else:
                hi = mid
        if lo < nc:
            hits[lo] += 1
            bytes_hit[lo] += sizes[i]
    for i in range(1, nc):  # a hit at one size is a hit at every larger one
        hits[i] += hits[i - 1]
        bytes_hit[i] += bytes_hit[i - 1]


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
