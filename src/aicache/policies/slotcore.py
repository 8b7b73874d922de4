"""The policy core of LRU, FIFO, CLOCK, SIEVE, S3-FIFO and ARC: state in typed arrays
indexed by dense slot ids, walked by compiled code.

Each policy is one class here (``LRUCore`` …) over slot ids ``0 .. n-1``: doubly linked
lists in ``prev``/``next`` arrays (:class:`Links`), per-slot counters, sizes and flags in
arrays beside them. The policy's rules are written once, in this file; two drivers use
them:

* the real engines and :class:`aicache.sim.cache.Cache` through
  :class:`aicache.policies.slotted.SlotPolicy`, which maps arbitrary keys to slots with a
  dict and recycles the slots of keys the policy has forgotten;
* the simulator through :func:`replay`, over a trace whose ids :class:`SlotMap` turned into
  dense slots once while reading it — the per-request loop of ``Cache.request`` in objects
  mode (see :mod:`aicache.sim.cache`), with no Python object per request.

This file is Cython's pure-Python mode: valid Python that the install compiles with
Cython (``setup.py``; ``cython.compiled`` is then true and the annotations are C types) and
that runs unchanged as Python where it was not compiled (or with ``AICACHE_PURE_PYTHON=1``,
:mod:`aicache.native`), with identical results: the arrays are ``array.array`` either way.

Contract of a core (slot ``i`` is ``>= 0`` except where ``-1`` is allowed):

* ``access(i)`` — if ``i`` is resident, apply a hit and return True; else False.
* ``on_miss(i, size)`` — a demand miss on ``i`` (``-1``: a key the caller never gave a
  slot, which is in no ghost list) before the size check; False refuses the object.
* ``insert(i, size)`` / ``prefetch_insert(i, size)`` — store ``i``; False declines it.
* ``victim()`` — evict one resident slot and return it (at least one is resident).
* ``remove(i)`` — forget resident ``i`` without choosing it.
* ``alive(i)`` — whether the core still refers to ``i`` (resident, or in a ghost list);
  the caller may reuse a slot only when it is not alive. With ``track_dropped`` set, slots
  a ghost list dropped are listed by :meth:`Core.take_dropped`.
"""

from __future__ import annotations

from array import array

try:
    import cython
except ImportError:  # uncompiled without Cython installed: the same code, run as Python
    from aicache.policies import _cython_shim as cython  # type: ignore[no-redef]  # (the same names)

#: slot arrays grow to at least this many entries
_MIN_SLOTS = 16


def _ints(n: cython.Py_ssize_t, fill: cython.int):
    return array("i", [fill]) * n


def _longs(n: cython.Py_ssize_t):
    return array("q", bytes(8 * n))


def _bytes(n: cython.Py_ssize_t, fill: cython.int):
    return array("b", [fill]) * n


@cython.cfunc
def _grow_ints(old: cython.int[::1], n: cython.Py_ssize_t, fill: cython.int) -> cython.int[::1]:
    new: cython.int[::1] = _ints(n, fill)
    new[:len(old)] = old
    return new


@cython.cfunc
def _grow_longs(old: cython.longlong[::1], n: cython.Py_ssize_t) -> cython.longlong[::1]:
    new: cython.longlong[::1] = _longs(n)
    new[:len(old)] = old
    return new


@cython.cfunc
def _grow_bytes(old: cython.schar[::1], n: cython.Py_ssize_t, fill: cython.int) -> cython.schar[::1]:
    new: cython.schar[::1] = _bytes(n, fill)
    new[:len(old)] = old
    return new


@cython.final
@cython.cclass
class Links:
    """``lists`` doubly linked lists over slot ids, front = oldest. A slot is in at most one
    of them: ``where[i]`` is its list, ``-1`` for none. ``length[l]`` counts entries."""

    prev: cython.int[::1]
    next: cython.int[::1]
    where: cython.schar[::1]
    head: cython.int[::1]
    tail: cython.int[::1]
    length: cython.longlong[::1]

    def __init__(self, lists: cython.int, slots: cython.Py_ssize_t) -> None:
        self.prev = _ints(slots, -1)
        self.next = _ints(slots, -1)
        self.where = _bytes(slots, -1)
        self.head = _ints(lists, -1)
        self.tail = _ints(lists, -1)
        self.length = _longs(lists)

    def grow(self, slots: cython.Py_ssize_t) -> None:
        self.prev = _grow_ints(self.prev, slots, -1)
        self.next = _grow_ints(self.next, slots, -1)
        self.where = _grow_bytes(self.where, slots, -1)

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def push(self, lst: cython.int, i: cython.int) -> cython.void:
        """Append ``i`` (in no list) at the back of ``lst``."""
        t: cython.int = self.tail[lst]
        self.prev[i] = t
        self.next[i] = -1
        if t >= 0:
            self.next[t] = i
        else:
            self.head[lst] = i
        self.tail[lst] = i
        self.where[i] = lst
        self.length[lst] += 1

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def unlink(self, i: cython.int) -> cython.void:
        """Take ``i`` out of its list."""
        lst: cython.int = self.where[i]
        p: cython.int = self.prev[i]
        n: cython.int = self.next[i]
        if p >= 0:
            self.next[p] = n
        else:
            self.head[lst] = n
        if n >= 0:
            self.prev[n] = p
        else:
            self.tail[lst] = p
        self.where[i] = -1
        self.length[lst] -= 1

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def pop(self, lst: cython.int) -> cython.int:
        """Take the front (oldest) of ``lst`` out and return it (``lst`` is not empty)."""
        i: cython.int = self.head[lst]
        self.unlink(i)
        return i

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def to_back(self, i: cython.int, lst: cython.int) -> cython.void:
        """Move ``i`` (in a list) to the back of ``lst``."""
        if self.where[i] == lst and self.tail[lst] == i:
            return
        self.unlink(i)
        self.push(lst, i)

    def order(self, lst: cython.int) -> list:
        """The slots of ``lst``, front first."""
        out = []
        i: cython.int = self.head[lst]
        while i >= 0:
            out.append(i)
            i = self.next[i]
        return out

    def state(self) -> tuple:
        return (bytes(self.prev), bytes(self.next), bytes(self.where), bytes(self.head),
                bytes(self.tail), bytes(self.length))

    def load(self, st: tuple) -> None:
        self.prev = _from_bytes("i", st[0])
        self.next = _from_bytes("i", st[1])
        self.where = _from_bytes("b", st[2])
        self.head = _from_bytes("i", st[3])
        self.tail = _from_bytes("i", st[4])
        self.length = _from_bytes("q", st[5])


def _from_bytes(code: str, raw: bytes):
    """An ``array(code)`` holding ``raw`` (a pickled slot array)."""
    a = array(code)
    a.frombytes(raw)
    return a


def _restore(cls, args: tuple, st: tuple):
    core = cls(*args)
    core.load(st)
    return core


@cython.cclass
class Core:
    """The interface every core implements (see the module's contract). ``count`` is the
    number of resident slots, ``slots`` the number of slot ids the arrays hold."""

    count = cython.declare(cython.Py_ssize_t, visibility="readonly")
    slots = cython.declare(cython.Py_ssize_t, visibility="readonly")
    track_dropped = cython.declare(cython.bint, visibility="public")
    _dropped: list

    def __init__(self) -> None:
        self.count = 0
        self.slots = 0
        self.track_dropped = False
        self._dropped = []

    def reserve(self, n: cython.Py_ssize_t) -> None:
        """Make slot ids ``0 .. n-1`` valid (amortised: grows at least twofold)."""
        if n > self.slots:
            size: cython.Py_ssize_t = max(n, 2 * self.slots, _MIN_SLOTS)
            self._grow(size)
            self.slots = size

    def _grow(self, size: cython.Py_ssize_t) -> None:
        raise NotImplementedError

    @cython.ccall
    def access(self, i: cython.int) -> cython.bint:
        raise NotImplementedError

    @cython.ccall
    def resident(self, i: cython.int) -> cython.bint:
        raise NotImplementedError

    @cython.ccall
    def alive(self, i: cython.int) -> cython.bint:
        return self.resident(i)

    @cython.ccall
    def on_miss(self, i: cython.int, size: cython.longlong) -> cython.bint:
        return True

    @cython.ccall
    def insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        raise NotImplementedError

    @cython.ccall
    def prefetch_insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        return self.insert(i, size)

    @cython.ccall
    def victim(self) -> cython.int:
        raise NotImplementedError

    @cython.ccall
    def remove(self, i: cython.int) -> cython.void:
        raise NotImplementedError

    def order(self) -> list:
        """The resident slots, in the order the policy keeps them (oldest first)."""
        raise NotImplementedError

    def first(self) -> int:
        """``order()[0]``, or -1 when nothing is resident, in O(1) where the core can."""
        o = self.order()
        return o[0] if o else -1

    def take_dropped(self) -> list:
        """The slots ghost lists dropped since the last call (with ``track_dropped``)."""
        out = self._dropped
        self._dropped = []
        return out

    @cython.cfunc
    def _drop(self, i: cython.int) -> cython.void:
        if self.track_dropped:
            self._dropped.append(i)


@cython.cclass
class FIFOCore(Core):
    """First in, first out: one list, oldest first; a hit changes nothing."""

    links: Links

    def __init__(self) -> None:
        Core.__init__(self)
        self.links = Links(1, 0)

    def _grow(self, size: cython.Py_ssize_t) -> None:
        self.links.grow(size)

    @cython.ccall
    def resident(self, i: cython.int) -> cython.bint:
        return self.links.where[i] >= 0

    @cython.ccall
    def access(self, i: cython.int) -> cython.bint:
        return self.links.where[i] >= 0

    @cython.ccall
    def insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        self.links.push(0, i)
        self.count += 1
        return True

    @cython.ccall
    def victim(self) -> cython.int:
        self.count -= 1
        return self.links.pop(0)

    @cython.ccall
    def remove(self, i: cython.int) -> cython.void:
        self.links.unlink(i)
        self.count -= 1

    def order(self) -> list:
        return self.links.order(0)

    def first(self) -> int:
        return self.links.head[0]

    def __reduce__(self):
        return (_restore, (type(self), (), (self.count, self.slots, self.links.state())))

    def load(self, st: tuple) -> None:
        self.count, self.slots = st[0], st[1]
        self.links.load(st[2])


@cython.cclass
class LRUCore(FIFOCore):
    """Least recently used: FIFO's list with every hit moved to the back."""

    @cython.ccall
    def access(self, i: cython.int) -> cython.bint:
        links: Links = self.links
        if links.where[i] < 0:
            return False
        links.to_back(i, 0)
        return True


@cython.cclass
class ClockCore(FIFOCore):
    """CLOCK as libCacheSim's ``Clock.c``: a hit counts up to ``max_freq``; eviction takes
    the front, and while its counter is non-zero decrements it and moves it to the back."""

    freq: cython.int[::1]
    max_freq: cython.int
    init_freq: cython.int

    def __init__(self, max_freq: cython.int, init_freq: cython.int) -> None:
        FIFOCore.__init__(self)
        self.freq = _ints(0, 0)
        self.max_freq = max_freq
        self.init_freq = init_freq

    def _grow(self, size: cython.Py_ssize_t) -> None:
        self.links.grow(size)
        self.freq = _grow_ints(self.freq, size, 0)

    @cython.ccall
    def access(self, i: cython.int) -> cython.bint:
        if self.links.where[i] < 0:
            return False
        if self.freq[i] < self.max_freq:
            self.freq[i] += 1
        return True

    @cython.ccall
    def insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        self.links.push(0, i)
        self.freq[i] = self.init_freq
        self.count += 1
        return True

    @cython.ccall
    def victim(self) -> cython.int:
        links: Links = self.links
        i: cython.int
        while True:
            i = links.pop(0)
            if self.freq[i] < 1:
                self.count -= 1
                return i
            self.freq[i] -= 1
            links.push(0, i)

    def __reduce__(self):
        return (_restore, (type(self), (self.max_freq, self.init_freq),
                           (self.count, self.slots, self.links.state(), bytes(self.freq))))

    def load(self, st: tuple) -> None:
        FIFOCore.load(self, st)
        self.freq = _from_bytes("i", st[3])


@cython.cclass
class SieveCore(FIFOCore):
    """SIEVE as libCacheSim's ``Sieve.c``: new slots at the back with the visited bit
    clear, a hit sets it. The hand walks from the front (oldest) backwards: a visited slot
    has its bit cleared and stays, an unvisited one is evicted and the hand stops at its
    newer neighbour. ``hand == -1``: start at the front (past the newest, it wraps)."""

    visited: cython.schar[::1]
    hand: cython.int

    def __init__(self) -> None:
        FIFOCore.__init__(self)
        self.visited = _bytes(0, 0)
        self.hand = -1

    def _grow(self, size: cython.Py_ssize_t) -> None:
        self.links.grow(size)
        self.visited = _grow_bytes(self.visited, size, 0)

    @cython.ccall
    def access(self, i: cython.int) -> cython.bint:
        if self.links.where[i] < 0:
            return False
        self.visited[i] = 1
        return True

    @cython.ccall
    def insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        self.links.push(0, i)
        self.visited[i] = 0
        self.count += 1
        return True

    @cython.ccall
    def victim(self) -> cython.int:
        links: Links = self.links
        h: cython.int = self.hand
        if h < 0:
            h = links.head[0]
        while self.visited[h]:
            self.visited[h] = 0
            h = links.next[h]
            if h < 0:
                h = links.head[0]
        self.hand = links.next[h]
        links.unlink(h)
        self.count -= 1
        return h

    @cython.ccall
    def remove(self, i: cython.int) -> cython.void:
        if i == self.hand:
            self.hand = self.links.next[i]
        self.links.unlink(i)
        self.count -= 1

    def __reduce__(self):
        return (_restore, (type(self), (), (self.count, self.slots, self.links.state(),
                                            bytes(self.visited), self.hand)))

    def load(self, st: tuple) -> None:
        FIFOCore.load(self, st)
        self.visited = _from_bytes("b", st[3])
        self.hand = st[4]


@cython.cclass
class TwoListCore(Core):
    """The bookkeeping S3-FIFO (small / main) and ARC (T1 / T2) share: two lists of resident
    slots in one :class:`Links` (list 0, then list 1), each slot's stored size in ``rsize``
    and each list's total in ``used``. Invariant: ``used[l]`` is the sum of ``rsize`` over
    the slots in list ``l``, and ``count`` the number of slots in either list."""

    res: Links
    rsize: cython.longlong[::1]
    used: cython.longlong[::1]

    def __init__(self) -> None:
        Core.__init__(self)
        self.res = Links(2, 0)
        self.rsize = _longs(0)
        self.used = _longs(2)

    def _grow(self, size: cython.Py_ssize_t) -> None:
        self.res.grow(size)
        self.rsize = _grow_longs(self.rsize, size)

    @cython.ccall
    def resident(self, i: cython.int) -> cython.bint:
        return self.res.where[i] >= 0

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def _add(self, lst: cython.int, i: cython.int, size: cython.longlong) -> cython.void:
        """Store ``i`` (``size``) at the back of ``lst``."""
        self.res.push(lst, i)
        self.rsize[i] = size
        self.used[lst] += size
        self.count += 1

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def _take(self, lst: cython.int) -> cython.int:
        """Evict the front of ``lst`` (not empty) and return it."""
        i: cython.int = self.res.pop(lst)
        self.used[lst] -= self.rsize[i]
        self.count -= 1
        return i

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def _move(self, i: cython.int, lst: cython.int) -> cython.void:
        """Move resident ``i`` to the back of ``lst`` (its own list or the other)."""
        w: cython.int = self.res.where[i]
        if w != lst:
            self.used[w] -= self.rsize[i]
            self.used[lst] += self.rsize[i]
        self.res.to_back(i, lst)

    @cython.ccall
    def remove(self, i: cython.int) -> cython.void:
        self.used[self.res.where[i]] -= self.rsize[i]
        self.res.unlink(i)
        self.count -= 1

    def order(self) -> list:
        return self.res.order(0) + self.res.order(1)

    def first(self) -> int:
        i: cython.int = self.res.head[0]
        return i if i >= 0 else self.res.head[1]

    def _base_state(self) -> tuple:
        return (self.count, self.slots, self.res.state(), bytes(self.rsize), bytes(self.used),
                self.track_dropped, list(self._dropped))

    def _load_base(self, st: tuple) -> None:
        self.count, self.slots = st[0], st[1]
        self.res.load(st[2])
        self.rsize = _from_bytes("q", st[3])
        self.used = _from_bytes("q", st[4])
        self.track_dropped, self._dropped = st[5], st[6]


_SMALL = cython.declare(cython.int, 0)
_MAIN = cython.declare(cython.int, 1)


@cython.cclass
class S3FIFOCore(TwoListCore):
    """S3-FIFO as libCacheSim's ``S3FIFO.c`` (the rules are listed in
    :mod:`aicache.policies.eviction.s3fifo`): resident lists small (0) and main (1) with
    access counts, and a ghost FIFO of evicted slots with the size each had. A slot may be
    resident and in the ghost at once (a prefetch insert does not consult the ghost), so
    the ghost has links of its own."""

    ghost: Links
    freq: cython.longlong[::1]
    gsize: cython.longlong[::1]
    ghost_used: cython.longlong
    small_cap: cython.longlong
    main_cap: cython.longlong
    ghost_cap: cython.longlong
    threshold: cython.longlong
    ghost_hit: cython.bint
    has_evicted: cython.bint

    def __init__(self, small_cap: cython.longlong, main_cap: cython.longlong,
                 ghost_cap: cython.longlong, threshold: cython.longlong) -> None:
        TwoListCore.__init__(self)
        self.ghost = Links(1, 0)
        self.freq = _longs(0)
        self.gsize = _longs(0)
        self.ghost_used = 0
        self.small_cap = small_cap
        self.main_cap = main_cap
        self.ghost_cap = ghost_cap
        self.threshold = threshold
        self.ghost_hit = False
        self.has_evicted = False

    def _grow(self, size: cython.Py_ssize_t) -> None:
        TwoListCore._grow(self, size)
        self.ghost.grow(size)
        self.freq = _grow_longs(self.freq, size)
        self.gsize = _grow_longs(self.gsize, size)

    @cython.ccall
    def alive(self, i: cython.int) -> cython.bint:
        return self.res.where[i] >= 0 or self.ghost.where[i] >= 0

    @cython.ccall
    def on_miss(self, i: cython.int, size: cython.longlong) -> cython.bint:
        if i >= 0 and self.ghost.where[i] >= 0:
            self.ghost.unlink(i)
            self.ghost_used -= self.gsize[i]
            self.ghost_hit = True
        else:
            self.ghost_hit = False
        return size <= self.small_cap

    @cython.ccall
    def access(self, i: cython.int) -> cython.bint:
        if self.res.where[i] < 0:
            return False
        self.freq[i] += 1
        return True

    @cython.ccall
    def insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        if self.ghost_hit:
            self.ghost_hit = False
            self._add(_MAIN, i, size)
        elif size >= self.small_cap:
            return False
        elif not self.has_evicted and self.used[_SMALL] >= self.small_cap:
            self._add(_MAIN, i, size)
        else:
            self._add(_SMALL, i, size)
        self.freq[i] = 0
        return True

    @cython.ccall
    def prefetch_insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        self.ghost_hit = False
        if size > self.small_cap:
            return False
        return self.insert(i, size)

    @cython.ccall
    def victim(self) -> cython.int:
        """Evict one resident slot; moves between queues on the way are not evictions
        (libCacheSim's ``S3FIFO_evict`` called until it evicts)."""
        res: Links = self.res
        ghost: Links = self.ghost
        i: cython.int
        f: cython.longlong
        s: cython.longlong
        used: cython.longlong
        j: cython.int
        self.has_evicted = True
        while True:
            if self.used[_MAIN] > self.main_cap or res.length[_SMALL] == 0:
                while res.length[_MAIN] > 0:  # 2-bit clock over main
                    i = res.head[_MAIN]
                    f = self.freq[i]
                    if f:
                        res.to_back(i, _MAIN)
                        self.freq[i] = (f if f < 3 else 3) - 1
                        continue
                    return self._take(_MAIN)
                continue
            while res.length[_SMALL] > 0:  # promote accessed objects until one is evicted
                i = res.head[_SMALL]
                if self.freq[i] >= self.threshold:
                    self._move(i, _MAIN)
                    self.freq[i] = 0
                    continue
                self._take(_SMALL)
                s = self.rsize[i]
                if s <= self.ghost_cap:
                    used = self.ghost_used + s
                    while used > self.ghost_cap and ghost.length[0] > 0:
                        j = ghost.pop(0)
                        used -= self.gsize[j]
                        self._drop(j)
                    if ghost.where[i] < 0:
                        ghost.push(0, i)
                    self.gsize[i] = s  # an id already in the ghost keeps its place
                    self.ghost_used = used
                return i

    def __reduce__(self):
        return (_restore, (type(self), (self.small_cap, self.main_cap, self.ghost_cap,
                                        self.threshold),
                           (self._base_state(), self.ghost.state(), bytes(self.freq),
                            bytes(self.gsize), self.ghost_used, self.ghost_hit,
                            self.has_evicted)))

    def load(self, st: tuple) -> None:
        self._load_base(st[0])
        self.ghost.load(st[1])
        self.freq = _from_bytes("q", st[2])
        self.gsize = _from_bytes("q", st[3])
        self.ghost_used, self.ghost_hit, self.has_evicted = st[4], st[5], st[6]


_T1 = cython.declare(cython.int, 0)
_T2 = cython.declare(cython.int, 1)


@cython.cclass
class ARCCore(TwoListCore):
    """ARC as libCacheSim's ``ARC.c`` (the rules are listed in
    :mod:`aicache.policies.eviction.arc`): resident lists T1 (0) and T2 (1), ghost lists
    B1 and B2 in one :class:`Links` each, all LRU first and measured in the cache's unit.
    A slot may be resident and in a ghost list, or in both ghost lists, at once (a prefetch
    insert does not consult the ghosts), as an id may in libCacheSim's separate lists."""

    b1: Links
    b2: Links
    b1size: cython.longlong[::1]
    b2size: cython.longlong[::1]
    b1_size: cython.longlong
    b2_size: cython.longlong
    capacity: cython.longlong
    p: cython.double
    ghost_hit: cython.int
    incoming: cython.longlong

    def __init__(self, capacity: cython.longlong) -> None:
        TwoListCore.__init__(self)
        self.b1 = Links(1, 0)
        self.b2 = Links(1, 0)
        self.b1size = _longs(0)
        self.b2size = _longs(0)
        self.b1_size = self.b2_size = 0
        self.capacity = capacity
        self.p = 0.0
        self.ghost_hit = 0
        self.incoming = 0

    def _grow(self, size: cython.Py_ssize_t) -> None:
        TwoListCore._grow(self, size)
        self.b1.grow(size)
        self.b2.grow(size)
        self.b1size = _grow_longs(self.b1size, size)
        self.b2size = _grow_longs(self.b2size, size)

    @property
    def target(self) -> float:
        """``p``, the target size of T1."""
        return self.p

    @cython.ccall
    def alive(self, i: cython.int) -> cython.bint:
        return self.res.where[i] >= 0 or self.b1.where[i] >= 0 or self.b2.where[i] >= 0

    @cython.ccall
    def on_miss(self, i: cython.int, size: cython.longlong) -> cython.bint:
        delta: cython.double
        self.incoming = size
        if i >= 0 and self.b1.where[i] >= 0:
            self.ghost_hit = 1
            delta = max(cython.cast(cython.double, self.b2_size) / self.b1_size, 1.0)
            self.p = min(self.p + delta, cython.cast(cython.double, self.capacity))
            self.b1_size -= self.b1size[i]
            self.b1.unlink(i)
        elif i >= 0 and self.b2.where[i] >= 0:
            self.ghost_hit = 2
            delta = max(cython.cast(cython.double, self.b1_size) / self.b2_size, 1.0)
            self.p = max(self.p - delta, 0.0)
            self.b2_size -= self.b2size[i]
            self.b2.unlink(i)
        else:
            self.ghost_hit = 0
        return True

    @cython.ccall
    def access(self, i: cython.int) -> cython.bint:
        if self.res.where[i] < 0:
            return False
        self.ghost_hit = 0
        self._move(i, _T2)
        return True

    @cython.ccall
    def insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        self._add(_T2 if self.ghost_hit else _T1, i, size)
        self.ghost_hit = 0
        return True

    @cython.ccall
    def prefetch_insert(self, i: cython.int, size: cython.longlong) -> cython.bint:
        self.ghost_hit = 0  # a prefetch is no ghost hit
        return self.insert(i, size)

    @cython.ccall
    def victim(self) -> cython.int:
        j: cython.int
        c: cython.longlong = self.capacity
        if self.ghost_hit:
            return self._replace()
        if self.used[_T1] + self.b1_size + self.incoming > c:
            if self.b1_size > 0:
                j = self.b1.pop(0)
                self.b1_size -= self.b1size[j]
                self._drop(j)
                return self._replace()
            if self.res.length[_T1] > 0:
                return self._take(_T1)  # evicted without a ghost
            return self._replace()
        if (self.used[_T1] + self.b1_size + self.used[_T2] + self.b2_size >= 2 * c
                and self.b2_size > 0):
            j = self.b2.pop(0)
            self.b2_size -= self.b2size[j]
            self._drop(j)
        return self._replace()

    @cython.cfunc
    def _replace(self) -> cython.int:
        t1: cython.longlong = self.used[_T1]
        i: cython.int
        s: cython.longlong
        if ((t1 > 0 and (t1 > self.p or (t1 == self.p and self.ghost_hit == 2)))
                or self.res.length[_T2] == 0):
            i = self._take(_T1)
            s = self.rsize[i]
            if self.b1.where[i] < 0:  # an id already in B1 keeps its place
                self.b1.push(0, i)
            self.b1size[i] = s
            self.b1_size += s
        else:
            i = self._take(_T2)
            s = self.rsize[i]
            if self.b2.where[i] < 0:
                self.b2.push(0, i)
            self.b2size[i] = s
            self.b2_size += s
        return i

    def __reduce__(self):
        return (_restore, (type(self), (self.capacity,),
                           (self._base_state(), self.b1.state(), self.b2.state(),
                            bytes(self.b1size), bytes(self.b2size), self.b1_size,
                            self.b2_size, self.p, self.ghost_hit, self.incoming)))

    def load(self, st: tuple) -> None:
        self._load_base(st[0])
        self.b1.load(st[1])
        self.b2.load(st[2])
        self.b1size = _from_bytes("q", st[3])
        self.b2size = _from_bytes("q", st[4])
        self.b1_size, self.b2_size, self.p, self.ghost_hit, self.incoming = st[5:10]


#: Knuth's multiplicative hash of the id's two halves folded to 32 bits: the product stays
#: below 2**64, so compiled and pure code compute the same buckets without overflow (typed
#: constants: a literal beyond a C long would make Cython do the arithmetic on objects)
_GOLDEN = cython.declare(cython.ulonglong, 2654435761)
_LOW32 = cython.declare(cython.ulonglong, 0xFFFFFFFF)


@cython.final
@cython.cclass
class SlotMap:
    """Trace ids (uint64) -> dense slot ids ``0, 1, 2, …`` in order of first appearance:
    an open-addressing table of ``[id, slot + 1]`` pairs (0 = empty), linear probing, at
    most half full. ``n`` is the number of distinct ids seen."""

    table: cython.ulonglong[::1]
    mask: cython.Py_ssize_t
    n = cython.declare(cython.Py_ssize_t, visibility="readonly")
    #: the sum of each distinct id's size at its first appearance (:meth:`map_sized`)
    first_bytes = cython.declare(cython.longlong, visibility="readonly")

    def __init__(self, expect: cython.Py_ssize_t = 0) -> None:
        buckets: cython.Py_ssize_t = 1024
        while buckets < 2 * expect:
            buckets *= 2
        self.table = array("Q", bytes(16 * buckets))
        self.mask = buckets - 1
        self.n = 0
        self.first_bytes = 0

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def _bucket(self, k: cython.ulonglong) -> cython.Py_ssize_t:
        h: cython.ulonglong = ((k ^ (k >> 32)) & _LOW32) * _GOLDEN
        return cython.cast(cython.Py_ssize_t, (h ^ (h >> 32)) & self.mask)

    def map(self, ids: cython.ulonglong[::1], out: cython.int[::1]) -> cython.Py_ssize_t:
        """Write the slot of each ``ids[k]`` to ``out[k]`` (``len(out) >= len(ids)``);
        returns the number of distinct ids seen so far."""
        k: cython.Py_ssize_t
        j: cython.Py_ssize_t
        key: cython.ulonglong
        v: cython.ulonglong
        table: cython.ulonglong[::1] = self.table
        for k in range(len(ids)):
            key = ids[k]
            j = self._bucket(key)
            while True:
                v = table[2 * j + 1]
                if v == 0:
                    if 2 * (self.n + 1) > self.mask:
                        self._grow()
                        table = self.table
                        j = self._bucket(key)
                        continue
                    table[2 * j] = key
                    self.n += 1
                    table[2 * j + 1] = self.n
                    out[k] = cython.cast(cython.int, self.n - 1)
                    break
                if table[2 * j] == key:
                    out[k] = cython.cast(cython.int, v - 1)
                    break
                j = (j + 1) & self.mask
        return self.n

    def map_sized(self, ids: cython.ulonglong[::1], sizes: cython.longlong[::1],
                  out: cython.int[::1]) -> cython.Py_ssize_t:
        """:meth:`map`, adding the size of each id's first appearance to ``first_bytes``."""
        before: cython.Py_ssize_t = self.n
        self.map(ids, out)
        k: cython.Py_ssize_t
        for k in range(len(ids)):
            if out[k] >= before:  # new slots are numbered in order of first appearance
                self.first_bytes += sizes[k]
                before += 1
        return self.n

    def _grow(self) -> None:
        old: cython.ulonglong[::1] = self.table
        buckets: cython.Py_ssize_t = 2 * (self.mask + 1)
        table: cython.ulonglong[::1] = array("Q", bytes(16 * buckets))
        self.table = table
        self.mask = buckets - 1
        i: cython.Py_ssize_t
        j: cython.Py_ssize_t
        for i in range(len(old) // 2):
            if old[2 * i + 1]:
                j = self._bucket(old[2 * i])
                while table[2 * j + 1]:
                    j = (j + 1) & self.mask
                table[2 * j] = old[2 * i]
                table[2 * j + 1] = old[2 * i + 1]


def replay(core: Core, ids: cython.int[::1], sizes: cython.longlong[::1],
           capacity: cython.longlong, used: cython.longlong) -> tuple:
    """``Cache.request`` in objects mode (every object counts 1; see
    :mod:`aicache.sim.cache`) for each slot ``ids[k]`` in order, over a core reserved for
    every slot in ``ids``; ``sizes[k]`` (the trace's size) only counts bytes hit.
    ``used`` is the occupancy before (the core's ``count``). Returns ``(hits, bytes_hit,
    evictions, rejected, used)``."""
    hits: cython.Py_ssize_t = 0
    evictions: cython.Py_ssize_t = 0
    rejected: cython.Py_ssize_t = 0
    bytes_hit: cython.longlong = 0
    k: cython.Py_ssize_t
    i: cython.int
    for k in range(len(ids)):
        i = ids[k]
        if core.access(i):
            hits += 1
            bytes_hit += sizes[k]
            continue
        if not core.on_miss(i, 1):
            rejected += 1
            continue
        if capacity < 1:
            continue
        while used > capacity - 1:
            core.victim()
            used -= 1
            evictions += 1
        if not core.insert(i, 1):
            rejected += 1
            continue
        used += 1
    return hits, bytes_hit, evictions, rejected, used


def replay_bytes(core: Core, ids: cython.int[::1], sizes: cython.longlong[::1],
                 capacity: cython.longlong, used: cython.longlong,
                 stored: cython.longlong[::1]) -> tuple:
    """``Cache.request`` in bytes mode (see :mod:`aicache.sim.cache`) for each slot
    ``ids[k]`` of size ``sizes[k]``, over a core reserved for every slot in ``ids``;
    ``stored[i]`` is the size slot ``i`` was stored with (the cache's table: a hit keeps
    the stored size) and ``used`` the bytes stored before. Returns ``(hits, bytes_hit,
    evictions, rejected, used)``."""
    hits: cython.Py_ssize_t = 0
    evictions: cython.Py_ssize_t = 0
    rejected: cython.Py_ssize_t = 0
    bytes_hit: cython.longlong = 0
    k: cython.Py_ssize_t
    i: cython.int
    v: cython.int
    size: cython.longlong
    for k in range(len(ids)):
        i = ids[k]
        size = sizes[k]
        if core.access(i):
            hits += 1
            bytes_hit += size
            continue
        if not core.on_miss(i, size):
            rejected += 1
            continue
        if size > capacity:
            continue
        while used > capacity - size:
            v = core.victim()
            used -= stored[v]
            evictions += 1
        if not core.insert(i, size):
            rejected += 1
            continue
        stored[i] = size
        used += size
    return hits, bytes_hit, evictions, rejected, used
