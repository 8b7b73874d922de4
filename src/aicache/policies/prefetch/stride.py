"""Stride prefetching (Chen & Baer 1995) with fixed or adaptive depth, and JuiceFS-style
sequential readahead (the adaptive one locked to step +1).

Per stream (the ``unit`` the caller passes: a file, or a dataset directory whose files map
to consecutive block ranges) the prefetcher keeps the last ``history`` block-id steps and
takes their *dominant* step — the most frequent non-zero step, if it accounts for at least
``min_support`` of them and half of the steps seen. It then asks for the next ``depth``
blocks along that step. Negative and non-unit strides work the same way (a reverse
traversal, or every other file).

A *frontier* per stream remembers how far along the stride blocks were already requested,
so steady sequential reading asks for ~one new block per access instead of re-listing the
whole window each time (no per-request list of ``depth`` ids).

Adaptive depth is AIMD, the shape of JuiceFS's readahead window and Linux's ``ondemand``
readahead: every prefetched block that is read grows the depth by one (the consumer keeps
up with it, so fetch further ahead), every prefetched block evicted unread halves it
(the window outran the consumer or the pattern changed). Depth stays in ``[min_depth,
max_depth]``. The depth is shared by the streams of one prefetcher (one executor).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence

from aicache.policies.base import PrefetchPolicy

_EMPTY: tuple[int, ...] = ()


class _Stream:
    """Per-unit stride state."""

    __slots__ = ("last", "deltas", "frontier", "step")

    def __init__(self, block: int, history: int) -> None:
        self.last = block
        self.deltas: deque[int] = deque(maxlen=history)
        self.frontier: int | None = None  # furthest block already requested along ``step``
        self.step = 0


def _window(st: _Stream, depth: int) -> int:
    """How far ahead of its last read a stream with a step has asked (or would ask)."""
    if st.frontier is not None:
        return abs(st.frontier - st.last) + abs(st.step)
    return depth * abs(st.step)


class StridePrefetcher(PrefetchPolicy):
    """Detect the dominant step per unit; prefetch ``depth`` blocks along it.

    ``step``: lock the stride to this value (readahead = 1) instead of detecting it; the
    prefetcher then triggers only when the last step equals it.
    ``adaptive``: AIMD depth between ``min_depth`` and ``max_depth`` (start
    ``init_depth``); otherwise the depth is fixed at ``depth``.
    """

    name = "stride"

    def __init__(
        self,
        *,
        adaptive: bool = True,
        depth: int = 8,
        init_depth: int = 4,
        min_depth: int = 1,
        max_depth: int = 32,
        history: int = 8,
        min_support: int = 3,
        step: int | None = None,
    ) -> None:
        if min_depth < 1 or max_depth < min_depth or depth < 1:
            raise ValueError("need 1 <= min_depth <= max_depth and depth >= 1")
        if step == 0:
            raise ValueError("a locked step must be non-zero")
        self.adaptive = adaptive
        self.min_depth = min_depth
        self.max_depth = max_depth
        self.init_depth = max(min_depth, min(init_depth, max_depth))
        self.fixed_depth = depth
        self.depth = self.init_depth if adaptive else depth
        self.history = history
        self.min_support = min_support
        self.locked_step = step
        self._streams: dict[Hashable, _Stream] = {}

    # -- step detection -------------------------------------------------------------------
    def _dominant_step(self, deltas: deque[int]) -> int:
        """Most frequent non-zero step (ties: the most recent), or 0 when none dominates."""
        if self.locked_step is not None:
            return self.locked_step if deltas and deltas[-1] == self.locked_step else 0
        n = len(deltas)
        if n == 0:
            return 0
        need = max(min(self.min_support, self.history), (n + 1) // 2)
        last = deltas[-1]
        if last and deltas.count(last) == n:  # a steady stride (the common case), in C
            return last if n >= need else 0
        counts: dict[int, int] = {}
        for d in deltas:
            if d:
                counts[d] = counts.get(d, 0) + 1
        best, best_count = 0, 0
        for d in reversed(deltas):  # ties go to the most recent step
            c = counts.get(d, 0)
            if c > best_count:
                best, best_count = d, c
        return best if best_count >= need else 0

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        st = self._streams.get(unit)
        if st is None:
            self._streams[unit] = _Stream(block, self.history)
            return _EMPTY
        return self._advance(st, block)

    def _advance(self, st: _Stream, block: int) -> Sequence[int]:
        """Append ``block`` to the stream ``st``; the blocks to ask for along its step."""
        st.deltas.append(block - st.last)
        st.last = block
        step = self._dominant_step(st.deltas)
        if step == 0:
            st.step = 0
            st.frontier = None
            return _EMPTY
        if step != st.step or st.deltas[-1] != step:
            # a new stride, or a jump off the stride: the old frontier says nothing here
            st.step = step
            st.frontier = None
        depth = self.depth
        start = 1
        fr = st.frontier
        if fr is not None:
            ahead, rem = divmod(fr - block, step)
            if rem == 0 and 0 < ahead:
                start = ahead + 1
        if start > depth:
            return _EMPTY
        out = [block + step * j for j in range(start, depth + 1)]
        out = [b for b in out if b >= 0]
        st.frontier = block + step * depth
        return out

    def withheld(self, unit: Hashable, block: int) -> None:
        """``block``, asked for by the last read of its stream in ``unit``, was not granted
        (the cache's share for unread prefetches was taken): the stream's frontier moves
        back before it, so that the stream's next read asks for it again. Without this a
        stream whose window was cut would go without readahead until its reads pass the
        frontier."""
        for st in self._streams_of(unit):
            fr, step = st.frontier, st.step
            if fr is None or not step:
                continue
            ahead, rem = divmod(block - st.last, step)
            if rem == 0 and 0 < ahead and (fr - block) // step >= 0:
                st.frontier = block - step
                return

    def _streams_of(self, unit: Hashable) -> Sequence[_Stream]:
        st = self._streams.get(unit)
        return (st,) if st is not None else ()

    # -- feedback ------------------------------------------------------------------------
    def on_prefetch_used(self, block: int, now: float) -> None:
        if self.adaptive and self.depth < self.max_depth:
            self.depth += 1

    def on_prefetch_wasted(self, block: int, now: float) -> None:
        if self.adaptive:
            self.depth = max(self.min_depth, self.depth // 2)

    def reset(self) -> None:
        self._streams.clear()
        self.depth = self.init_depth if self.adaptive else self.fixed_depth


class FixedStridePrefetcher(StridePrefetcher):
    """Stride detection with a fixed depth (the "fixed-depth sequential" micro-benchmark
    baseline of ``docs/design/chiron.md``)."""

    name = "stride-fixed"

    def __init__(self, *, depth: int = 8, **kw: int) -> None:
        super().__init__(adaptive=False, depth=depth, **kw)


class NextBlocksPrefetcher(PrefetchPolicy):
    """Sequential prefetching at a fixed depth with no pattern detection: every read of
    block ``b`` asks for ``b+1 .. b+depth`` (the driver skips those resident or in flight,
    so a sequential pass costs about one new request per read). Unlike
    :class:`FixedStridePrefetcher` it also fires on a random stream, where the blocks it
    brings in are rarely read: the cache pollution a pattern-aware policy avoids."""

    name = "next-fixed"

    def __init__(self, *, depth: int = 8) -> None:
        if depth < 1:
            raise ValueError("need depth >= 1")
        self.depth = depth

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        return range(block + 1, block + 1 + self.depth)


class ReadaheadPrefetcher(StridePrefetcher):
    """JuiceFS-like sequential readahead: step +1 only, adaptive (AIMD) depth."""

    name = "readahead"

    def __init__(self, **kw: int) -> None:
        kw.setdefault("step", 1)
        super().__init__(adaptive=True, **kw)


class StreamsStridePrefetcher(StridePrefetcher):
    """:class:`StridePrefetcher` that tells apart several sequential streams interleaved in
    one unit (readers that each walk their own shard of one dataset folder), as readahead
    keeps a window per open file and a hardware stream prefetcher a table of streams.

    Per unit it keeps up to ``sessions`` streams. A read continues the stream whose last
    block it is nearest to *in that stream's direction* (a step the stream has not taken
    the other way), within ``reach`` blocks; a re-read of a stream's last block continues
    it too. While a session is free, a stream with no step yet is not continued backwards
    by more than one block (readers starting together on neighbouring files start a stream
    each), and a stream with a step is not continued past what it asked for (another
    reader's first read a few blocks ahead of it would take it over). A read no stream reaches starts a new one, which replaces the stream least
    recently continued. With one session this is :class:`StridePrefetcher`; with readers
    interleaved, each keeps its own steps, where a single stream per unit would see the
    jumps between them and find no stride. ``sessions``
    bounds the state per unit; ``reach`` (the deepest window, ``max_depth``, by default)
    is how far apart two reads of one stream may land when the reader skips blocks
    another process or an earlier pass left in the cache.
    """

    name = "stride-streams"

    def __init__(self, *, adaptive: bool = True, sessions: int = 16, reach: int | None = None,
                 **kw: int) -> None:
        super().__init__(adaptive=adaptive, **kw)
        if sessions < 1:
            raise ValueError("need sessions >= 1")
        self.sessions = sessions
        self.reach = self.max_depth if reach is None else reach
        #: unit -> its streams, least recently continued first
        self._sets: dict[Hashable, list[_Stream]] = {}

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        streams = self._sets.get(unit)
        if streams is None:
            streams = self._sets[unit] = []
        best: _Stream | None = None
        best_d = self.reach + 1
        locked = self.locked_step
        room = len(streams) < self.sessions
        for st in streams:
            d = block - st.last
            ad = d if d >= 0 else -d
            if ad >= best_d:
                continue
            if d < 0 and (locked is not None and locked > 0 or room and not st.step and d < -1):
                # a stream goes one way: readahead only forward, and while a session is free
                # a stream with no step yet takes a backward read only as the next block of a
                # reverse scan. Readers that start together on neighbouring files (parallel
                # shards, a few blocks apart) each start their own stream instead of all
                # joining the first one's, which would see no stride
                continue
            # a stream with a known direction is continued only along it
            if d and st.step and (d > 0) != (st.step > 0):
                continue
            if room and st.step and ad > _window(st, self.depth):
                # past what this stream asked for (another reader's first read, not a
                # skip of this one's): a new stream while a session is free
                continue
            best, best_d = st, ad
        if best is None:
            if len(streams) >= self.sessions:
                streams.pop(0)
            streams.append(_Stream(block, self.history))
            return _EMPTY
        if streams[-1] is not best:
            streams.remove(best)
            streams.append(best)
        return self._advance(best, block)

    def _streams_of(self, unit: Hashable) -> Sequence[_Stream]:
        return self._sets.get(unit, ())

    def reset(self) -> None:
        super().reset()
        self._sets.clear()


class ReadaheadStreamsPrefetcher(StreamsStridePrefetcher):
    """JuiceFS-like readahead (step +1, AIMD depth) per stream of a unit
    (:class:`StreamsStridePrefetcher`). Streams only go forward."""

    name = "readahead-streams"

    def __init__(self, **kw: int) -> None:
        kw.setdefault("step", 1)
        super().__init__(adaptive=True, **kw)


class SampleRestPrefetcher(PrefetchPolicy):
    """Random order *between* samples, sequential *within* one: on a sample's first block,
    fetch the rest of the sample.

    A shuffled epoch reads samples in random order but each sample whole, front to back;
    a sample is a run of consecutive blocks (files sorted by path own consecutive ranges: a
    multi-block file, an image and its caption sidecar). Nothing predicts the next sample,
    so nothing is fetched across samples (the random pattern's "no prefetch"); but once a
    sample's first block is read, its other blocks are certain. Per stream the prefetcher
    keeps the lengths of the last ``history`` runs of +1 steps; when a read jumps (starts a
    new run) it asks for the next ``median run length - 1`` blocks (at most ``max_depth``).
    With single-block samples every run has length 1 and it never prefetches.
    """

    name = "sample-rest"

    def __init__(self, *, history: int = 32, max_depth: int = 32) -> None:
        if history < 1 or max_depth < 0:
            raise ValueError("need history >= 1 and max_depth >= 0")
        self.history = history
        self.max_depth = max_depth
        #: stream -> [last block, length of the current run, recent run lengths]
        self._streams: dict[Hashable, tuple[list[int], deque[int]]] = {}

    def rest(self, unit: Hashable) -> int:
        """Blocks fetched after a sample's first one: median recent run length - 1."""
        st = self._streams.get(unit)
        if st is None or not st[1]:
            return 0
        runs = sorted(st[1])
        return min(self.max_depth, runs[len(runs) // 2] - 1)

    def on_access(self, unit: Hashable, block: int, hit: bool, now: float) -> Sequence[int]:
        st = self._streams.get(unit)
        if st is None:
            self._streams[unit] = ([block, 1], deque(maxlen=self.history))
            return _EMPTY
        cur, runs = st
        if block == cur[0] + 1:
            cur[0] = block
            cur[1] += 1
            return _EMPTY
        if block == cur[0]:  # a re-read of the same block (a small read): same run
            return _EMPTY
        runs.append(cur[1])
        cur[0], cur[1] = block, 1
        k = self.rest(unit)
        if k <= 0:
            return _EMPTY
        return [block + j for j in range(1, k + 1)]

    def reset(self) -> None:
        self._streams.clear()
