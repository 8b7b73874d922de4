"""Sparse reads (:mod:`aicache.datacache.engine.sparse`): the fetch sizing against
brute-force references, and the engine's bytes, requests, budget and versions with pages."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.engine.sparse import (
    ReadStream,
    check_page_size,
    dense,
    fetch_span,
    joined_runs,
    page_range,
    streaming,
)

B = 64 * 1024  # blocks
P = 4 * 1024  # pages
RUN = 16 * 1024  # sparse_run


# -- the sizing, against brute force -------------------------------------------------------------
def test_page_range_is_the_pages_whose_bytes_meet_the_read() -> None:
    rng = random.Random(1)
    for _ in range(2000):
        page = rng.choice([1, 3, 8, 64])
        s = rng.randrange(0, 400)
        e = s + rng.randrange(1, 300)
        touched = [j for j in range(0, e // page + 2) if j * page < e and (j + 1) * page > s]
        assert page_range(s, e, page) == (touched[0], touched[-1])


def test_fetch_span_is_the_shortest_run_holding_every_missing_page() -> None:
    rng = random.Random(2)
    for _ in range(3000):
        first = rng.randrange(0, 20)
        last = first + rng.randrange(0, 12)
        present = {j for j in range(first, last + 1) if rng.random() < 0.5}
        missing = [j for j in range(first, last + 1) if j not in present]
        # brute force: of all runs [lo, hi] inside [first, last] holding every missing page,
        # the shortest (unique: it starts and ends at a missing page)
        runs = [(lo, hi) for lo in range(first, last + 1) for hi in range(lo, last + 1)
                if all(lo <= j <= hi for j in missing)]
        want = min(runs, key=lambda r: r[1] - r[0]) if missing else None
        assert fetch_span(first, last, present) == want


def test_joined_runs_are_the_unions_of_two_or_more_adjacent_ranges() -> None:
    rng = random.Random(8)
    for _ in range(2000):
        ranges, pos = [], 0
        for _ in range(rng.randrange(0, 8)):
            pos += rng.choice([0, 0, rng.randrange(1, 50)])  # adjacent, or a gap
            n = rng.randrange(1, 40)
            ranges.append((pos, pos + n))
            pos += n
        # brute force: group by adjacency, keep the groups of two or more
        groups: list[list[tuple[int, int]]] = []
        for r in ranges:
            if groups and groups[-1][-1][1] == r[0]:
                groups[-1].append(r)
            else:
                groups.append([r])
        want = [(g[0][0], g[-1][1]) for g in groups if len(g) >= 2]
        assert joined_runs(ranges) == want


def _dense_reference(s: int, e: int, b0: int, b1: int, reads: list[tuple[int, int]] | None,
                     page: int, run: int) -> bool:
    """The rule as stated, from the reader's whole history (``reads``, this one last)."""
    if page <= 0 or 5 * (e - s) >= 4 * (b1 - b0):  # covers 4/5 of the block
        return True
    if reads is None:
        return False
    k = len(reads) - 1  # the run this read belongs to: walk back while contiguous
    while k > 0 and reads[k - 1][1] == reads[k][0]:
        k -= 1
    from_start = reads[k][0] == 0 and reads[k][1] - reads[k][0] >= page
    before = sum(b - a for a, b in reads[k:-1])
    return from_start or before >= run


def test_dense_agrees_with_the_rule_applied_to_the_whole_history() -> None:
    rng = random.Random(4)
    for _ in range(300):
        st, hist = ReadStream(), []
        pos = 0
        for _ in range(30):
            if rng.random() < 0.3:
                pos = rng.choice([0, rng.randrange(0, 4 * B)])
            n = rng.choice([1, 8, 100, P - 1, P, 3000, RUN // 2, RUN, B - 10])
            s, e = pos, pos + n
            st.note(s, e, P, 1 << 40)
            hist.append((s, e))
            b0 = (s // B) * B
            piece_end = min(e, b0 + B)
            for page in (0, P):
                assert dense(s, piece_end, b0, b0 + B, st, page, RUN) == \
                    _dense_reference(s, piece_end, b0, b0 + B, hist, page, RUN)
            assert dense(s, piece_end, b0, b0 + B, None, P, RUN) == \
                _dense_reference(s, piece_end, b0, b0 + B, None, P, RUN)
            pos = e


def test_dense_cases_by_name() -> None:
    assert dense(0, B, 0, B, None, P, RUN) and dense(0, 100, 0, 100, ReadStream(), P, RUN)
    assert dense(10, 20, 0, B, None, 0, RUN)  # pages off
    assert not dense(10, 10 + B // 2, 0, B, None, P, RUN)  # a big read that jumps: its pages
    st = ReadStream()
    for a, b in [(0, 8), (8, 10), (10, 128)]:  # a header read in small pieces from 0
        st.note(a, b, P, 1 << 40)
        assert not dense(a, b, 0, B, st, P, RUN)
    st2 = ReadStream()
    st2.note(0, P, P, 1 << 40)  # a first read of a page or more at offset 0: a stream
    assert dense(0, P, 0, B, st2, P, RUN)
    st3 = ReadStream()
    st3.note(0, 100, P, 100)  # a small file read whole: a stream (read ahead for)
    assert streaming(st3, RUN) and not streaming(st, RUN)


def test_page_size_must_divide_the_block() -> None:
    assert check_page_size(P, B) == P
    assert check_page_size(3000, B) == 0 and check_page_size(B, B) == 0 and check_page_size(0, B) == 0


# -- the engine -----------------------------------------------------------------------------------
def _engine(tmp_path: Path, cache_size: int = 1 << 30, **kw: Any) -> CacheEngine:
    import fsspec

    params = EngineParams(block_size=B, page_size=P, sparse_run=RUN, stats_interval_s=0, **kw)
    return CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), cache_size,
                       policy="lru", params=params)


class Requests:
    """Counts the engine's remote reads (and their bytes) at its version scheme."""

    def __init__(self, engine: CacheEngine) -> None:
        self.calls: list[tuple[int, int]] = []
        inner = engine.versions.read

        def read(fs: Any, path: str, version: str, pin: str, start: int, end: int) -> bytes:
            self.calls.append((start, end))
            return inner(fs, path, version, pin, start, end)

        engine.versions.read = read  # type: ignore[method-assign]

    @property
    def bytes(self) -> int:
        return sum(e - s for s, e in self.calls)


def _file(tmp_path: Path, n: int, seed: int = 0) -> tuple[str, bytes]:
    data = random.Random(seed).randbytes(n)
    p = tmp_path / "src.bin"
    p.write_bytes(data)
    return str(p), data


def test_sparse_reads_fetch_the_pages_they_touch_and_a_second_pass_fetches_nothing(
        tmp_path: Path) -> None:
    path, data = _file(tmp_path, 5 * B + 1234)
    e = _engine(tmp_path)
    req = Requests(e)
    rng = random.Random(5)
    reads = [(s, s + rng.randrange(1, 3 * P)) for s in
             sorted(rng.sample(range(0, len(data) - 3 * P), 40))]
    try:
        meta = e.stat(path)
        for s, end in reads:
            assert e.read_meta(meta, s, end - s) == data[s:end]
        e.wait_prefetches()
        # reference: the pages the reads touch (page-aligned, clipped at the file's end)
        pages = {j for s, end in reads for j in range(s // P, (end - 1) // P + 1)}
        touched = sum(min(P, len(data) - j * P) for j in pages)
        per_read = sum(min(len(data), ((end - 1) // P + 1) * P) - (s // P) * P for s, end in reads)
        assert touched <= req.bytes <= per_read
        assert all(s % P == 0 and (end % P == 0 or end == len(data)) for s, end in req.calls)
        assert len(req.calls) <= len(reads)
        before, hits = len(req.calls), e.metrics.value("hit_bytes")
        for s, end in reads:  # warm: every page is held
            assert e.read_meta(meta, s, end - s) == data[s:end]
        assert len(req.calls) == before
        assert e.metrics.value("hit_bytes") - hits == sum(end - s for s, end in reads)
    finally:
        e.close()


def test_a_streaming_reader_gets_whole_blocks_and_a_jumping_one_pages(tmp_path: Path) -> None:
    import fsspec

    from aicache.datacache.fs import AICacheFileSystem

    path, data = _file(tmp_path, 3 * B + 77)
    fs = AICacheFileSystem(fs=fsspec.filesystem("file"), cache_dir=str(tmp_path / "c"),
                           block_size=B, policy="lru", skip_instance_cache=True)
    e = fs.engine
    e.page_size, e.params.sparse_run = P, RUN
    req = Requests(e)
    try:
        with fs.open(path) as f:  # 8 KiB reads from offset 0: a stream
            got = b"".join(iter(lambda: f.read(8192), b""))
        assert got == data
        assert all(s % B == 0 for s, _e in req.calls) and req.bytes == len(data)
        req.calls.clear()
        other = tmp_path / "other.bin"
        other.write_bytes(data[::-1])
        with fs.open(str(other)) as f:  # a header, then a jump: pages
            assert f.read(10) == data[::-1][:10]
            f.seek(2 * B + 100)
            assert f.read(5000) == data[::-1][2 * B + 100:2 * B + 5100]
        assert req.bytes == 3 * P  # page 0, and the two pages the 5000 bytes straddle
    finally:
        fs.close()


def test_a_jumping_read_across_blocks_is_one_request_for_its_adjacent_pieces(
        tmp_path: Path) -> None:
    path, data = _file(tmp_path, 6 * B + 999)
    e = _engine(tmp_path)
    req = Requests(e)
    try:
        meta = e.stat(path)
        # nearly all of block 1 (a whole block) and 100 bytes of block 2 (a page): one GET
        s, n = B + 300, B - 200
        assert e.read_meta(meta, s, n) == data[s:s + n]
        assert req.calls == [(B, 2 * B + P)]
        # a sparse tail of block 3 and a sparse head of block 4: their pages, one GET
        s = 4 * B - 100
        assert e.read_meta(meta, s, 300) == data[s:s + 300]
        assert req.calls[1:] == [(4 * B - P, 4 * B + P)]
        # across a held block (block 1): the ranges either side are not adjacent, so each
        # is fetched by its own piece, and nothing held is fetched again
        req.calls.clear()
        s = B - 50  # to 100 bytes into block 2's second page (its first is held)
        assert e.read_meta(meta, s, B + P + 150) == data[s:s + B + P + 150]
        assert sorted(req.calls) == [(B - P, B), (2 * B + P, 2 * B + 2 * P)]
        # what was fetched together is stored as the pieces it served: no request again
        req.calls.clear()
        for s, n in ((B + 300, B - 200), (4 * B - 100, 300), (B - 50, B + P + 150)):
            assert e.read_meta(meta, s, n) == data[s:s + n]
        assert req.calls == []
    finally:
        e.close()


def test_jumping_reads_across_blocks_return_the_file_s_bytes_with_at_most_one_request_each(
        tmp_path: Path) -> None:
    path, data = _file(tmp_path, 7 * B + 4321)
    e = _engine(tmp_path)
    req = Requests(e)
    rng = random.Random(9)
    try:
        meta = e.stat(path)
        for _ in range(150):
            s = rng.randrange(0, len(data) - 1)
            n = rng.choice([rng.randrange(1, P), rng.randrange(P, B), rng.randrange(B, 3 * B)])
            before = len(req.calls)
            assert e.read_meta(meta, s, n) == data[s:s + n]  # a new run each time: it jumps
            e.wait_prefetches()
            made = req.calls[before:]
            pieces = (min(s + n, len(data)) - 1) // B - s // B + 1
            assert len(made) <= pieces
            assert all(a % P == 0 and (b % P == 0 or b == len(data)) for a, b in made)
    finally:
        e.close()


def test_a_block_already_held_serves_a_sparse_read_and_pages_stay_in_the_budget(
        tmp_path: Path) -> None:
    path, data = _file(tmp_path, 8 * B)
    budget = 3 * B
    e = _engine(tmp_path, cache_size=budget)
    req = Requests(e)
    try:
        meta = e.stat(path)
        assert e.read_meta(meta, 0, B) == data[:B]  # block 0 whole
        e.wait_prefetches()
        n = len(req.calls)
        assert e.read_meta(meta, 5000, 100) == data[5000:5100]
        assert len(req.calls) == n  # served from block 0, no page fetched
        rng = random.Random(7)
        for _ in range(300):  # far more pages than the budget holds
            s = rng.randrange(B, len(data) - 200)
            assert e.read_meta(meta, s, 200) == data[s:s + 200]
            e.wait_prefetches()
            assert e.store.used <= budget
    finally:
        e.close()


def test_pages_are_pinned_to_the_version_they_were_read_from(tmp_path: Path) -> None:
    path, data = _file(tmp_path, 4 * B)
    e = _engine(tmp_path, metadata_ttl_s=0.0)
    try:
        assert e.read(path, B + 10, 100) == data[B + 10:B + 110]
        e.wait_prefetches()
        new = bytes(255 - b for b in data)
        with open(path, "r+b") as f:  # rewritten in place: a new version (mtime/ctime)
            f.write(new)
            os.fsync(f.fileno())
        os.utime(path, ns=(1, 1))
        assert e.read(path, B + 10, 100) == new[B + 10:B + 110]
    finally:
        e.close()


@pytest.mark.parametrize("page", [0, P])
def test_pages_off_or_on_the_bytes_are_the_file_s(tmp_path: Path, page: int) -> None:
    path, data = _file(tmp_path, 2 * B + 5)
    e = _engine(tmp_path)
    e.page_size = page
    try:
        meta = e.stat(path)
        rng = random.Random(3)
        for _ in range(200):
            s = rng.randrange(0, len(data))
            n = rng.randrange(0, 2 * B)
            assert e.read_meta(meta, s, n) == data[s:s + n]
    finally:
        e.close()


def test_a_failed_page_fetch_resolves_its_flights_and_the_next_read_fetches_again(
        tmp_path: Path) -> None:
    from aicache.datacache.engine import RemoteReadError

    path, data = _file(tmp_path, 3 * B)
    e = _engine(tmp_path, retries=0)
    inner = e.versions.read
    fail = [True]

    def flaky(fs: Any, p: str, version: str, pin: str, start: int, end: int) -> bytes:
        if fail[0]:
            fail[0] = False
            raise ConnectionError("remote hiccup")
        return inner(fs, p, version, pin, start, end)

    e.versions.read = flaky  # type: ignore[method-assign]
    try:
        meta = e.stat(path)
        with pytest.raises(RemoteReadError):
            e.read_meta(meta, B + 100, 3 * P)
        assert e.flights.pending() == 0  # no reader will wait on a flight nobody fetches
        assert e.read_meta(meta, B + 100, 3 * P) == data[B + 100:B + 100 + 3 * P]
    finally:
        e.close()


@pytest.mark.parametrize("seed", range(5))
def test_a_fuse_handle_s_reordered_readahead_streams(seed: int) -> None:
    """The kernel sends a readahead window's requests at once and the driver's threads
    serve them in any order: with the window as the stream's slack every read of a
    sequential pass is judged streaming however the window's requests arrive (without it,
    a request that overtakes the one before it starts a new run and is fetched as pages);
    reads further apart than the window still start new runs."""
    from aicache.datacache.engine.sparse import ReadStream, dense

    page, chunk, window, block = 16 << 10, 128 << 10, 4 << 20, 4 << 20
    size = 3 * block
    rng = random.Random(seed)
    order = [off for w in range(0, size, window)
             for off in rng.sample(range(w, w + window, chunk), window // chunk)]
    judged = {}
    for slack in (window, 0):
        st = ReadStream()
        st.slack = slack
        sparse = 0
        for off in order:
            st.note(off, off + chunk, page, size)
            b0 = off // block * block
            sparse += not dense(off, off + chunk, b0, b0 + block, st, page, 1 << 20)
        judged[slack] = sparse
    assert judged[window] == 0
    assert judged[0] > 0
    jumper = ReadStream()
    jumper.slack = window
    for off in (9 * block, 2 * block, 6 * block):  # a jumping reader: never within the window
        jumper.note(off, off + chunk, page, 12 * block)
        assert not dense(off, off + chunk, off, off + block, jumper, page, 1 << 20)
