"""The engine's parts alone, each with fakes for its collaborators: the metadata cache
(a fake remote, an injected clock), the remote client (a fake fsspec filesystem, an
injected sleep), the block layout (a block map behind a fake policy port), the flights
(threads ordered by events, never by sleeps), the page reader (a dict store, a fake
engine sink) and the block reader the front ends use (one local check per read)."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aicache.datacache.engine import CacheEngine, EngineParams, RemoteReadError
from aicache.datacache.engine.blockmap import PAGE_TAG, BlockLayout
from aicache.datacache.engine.fetch import Flight, Flights, Offer
from aicache.datacache.engine.meta import MetadataCache
from aicache.datacache.engine.reader import BlockReader
from aicache.datacache.engine.remote import RemoteClient
from aicache.datacache.engine.sparse import PageReader, ReadStream
from aicache.datacache.keys import BlockKey, FileMeta
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.policy.blockmap import BlockMap
from aicache.datacache.policy.driver import Source
from aicache.datacache.version import VersionGone, VersionScheme

B = 1024


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _record(path: str, size: int, etag: str) -> dict[str, Any]:
    return {"name": path, "size": size, "type": "file", "ETag": etag}


class FakeRemote:
    """The remote as the metadata cache sees it (``MetadataSource``): files by path, and a
    count of every request made."""

    def __init__(self, files: dict[str, tuple[int, str]]) -> None:
        self.files = files
        self.calls: Counter[str] = Counter()

    def strip(self, path: str) -> str:
        return path.removeprefix("fake://")

    def invalidate(self, path: str | None = None) -> None:
        self.calls["invalidate"] += 1

    def info(self, path: str) -> dict[str, Any]:
        self.calls["info"] += 1
        if path in self.files:
            return _record(path, *self.files[path])
        if any(p.startswith(path + "/") for p in self.files):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def ls(self, path: str) -> list[dict[str, Any]]:
        self.calls["ls"] += 1
        base = path.rstrip("/")
        subdirs = sorted({p[len(base) + 1:].split("/", 1)[0] for p in self.files
                          if p.startswith(base + "/") and "/" in p[len(base) + 1:]})
        return [_record(p, *v) for p, v in sorted(self.files.items())
                if p.rsplit("/", 1)[0] == base] + [
            {"name": f"{base}/{d}", "size": 0, "type": "directory"} for d in subdirs]

    def find(self, path: str, maxdepth: int | None = None,
             withdirs: bool = False) -> dict[str, dict[str, Any]]:
        self.calls["find"] += 1
        return {p: _record(p, *v) for p, v in sorted(self.files.items())
                if p.startswith(path.rstrip("/") + "/")}


    def read_first(self, path: str, page: int) -> tuple[dict[str, Any], bytes] | None:
        self.calls["read_first"] += 1
        return None  # a target whose range reads tell no metadata


class FakeRegistry:
    """The block layout as the metadata cache sees it (``FileRegistry``)."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int]]] = []
        self.single: list[str] = []

    def register(self, files: Sequence[tuple[str, int]]) -> None:
        self.batches.append(list(files))

    def register_file(self, path: str, nblocks: int, size: int) -> None:
        self.single.append(path)


def _metadata(files: dict[str, tuple[int, str]], ttl: float = 10.0
              ) -> tuple[MetadataCache, FakeRemote, FakeRegistry, Clock]:
    remote, registry, clock = FakeRemote(files), FakeRegistry(), Clock()
    cache = MetadataCache(remote, VersionScheme(), registry, ttl_s=ttl, block_size=B, clock=clock)
    return cache, remote, registry, clock


# -- the metadata cache ---------------------------------------------------------------------
def test_metadata_is_reused_within_the_ttl_and_asked_again_past_it() -> None:
    cache, remote, _, clock = _metadata({"d/a": (10, "v1")}, ttl=10.0)
    first = cache.stat("d/a")
    assert (first.size, first.version) == (10, "ETag:v1")
    clock.t = 9.9
    remote.files["d/a"] = (20, "v2")  # overwritten on the remote
    assert cache.stat("d/a") is first and remote.calls["info"] == 1  # within the TTL
    asked = remote.calls["info"] + remote.calls["ls"]
    clock.t = 10.0
    again = cache.stat("d/a")  # one request (its folder's listing, or a HEAD)
    assert (again.size, again.version) == (20, "ETag:v2")
    assert remote.calls["info"] + remote.calls["ls"] == asked + 1


def test_a_folder_listed_once_answers_its_subfolders_info() -> None:
    """A mount looks a path up folder by folder: the listing made for the first lookup in
    a folder answers ``info`` (FUSE ``getattr``) of its subfolders too, as of its files
    (a subfolder took a HEAD and a listing of its own, two round trips, before the first
    byte of a job)."""
    files = {"b/data/large/s0": (10, "e0"), "b/data/large/s1": (10, "e1"), "b/data/top": (5, "t")}
    cache, remote, _, clock = _metadata(files)
    assert cache.info("b/data/top")["size"] == 5  # lists b/data once
    assert remote.calls["ls"] == 1 and remote.calls["info"] == 0
    got = cache.info("b/data/large")
    assert got is not None and got["type"] == "directory"
    assert remote.calls["info"] == 0 and remote.calls["ls"] == 1
    clock.t = 10.0  # past the TTL: asked again
    assert cache.info("b/data/large")["type"] == "directory"
    assert remote.calls["info"] + remote.calls["ls"] == 2


def test_a_missing_path_is_remembered_for_the_ttl() -> None:
    cache, remote, _, clock = _metadata({"d/a": (10, "v1")}, ttl=5.0)
    for _ in range(3):
        with pytest.raises(FileNotFoundError):
            cache.stat("d/nope")
        assert cache.info("d/nope") is None
    assert remote.calls["info"] == 1
    clock.t = 5.0
    remote.files["d/nope"] = (3, "x")
    assert cache.stat("d/nope").size == 3


def test_one_table_answers_ls_info_and_stat_alike() -> None:
    """A listing (fsspec ``ls``, FUSE ``readdir``) answers the ``info`` (fsspec ``info``,
    FUSE ``getattr``) and the ``stat`` (an open) of its files: no request per file."""
    files = {f"d/f{i}": (100 + i, f"e{i}") for i in range(5)}
    cache, remote, registry, _ = _metadata(files)
    names = sorted(e["name"] for e in cache.ls("d"))
    assert names == sorted(files) and remote.calls["ls"] == 1
    for p, (size, _etag) in files.items():
        assert cache.info_is_cached(p)
        info = cache.info(p)
        assert info is not None and info["size"] == size
        assert cache.stat(p).size == size
    assert remote.calls["info"] == 0 and remote.calls["ls"] == 1
    # ... and is the block layout's listing of the folder: ranges in path order
    assert registry.batches == [[(p, files[p][0]) for p in sorted(files)]]


def test_the_second_file_of_a_folder_lists_it_once_for_the_layout() -> None:
    files = {f"d/f{i}": (B * (i + 1), f"e{i}") for i in range(4)}
    cache, remote, registry, _ = _metadata(files)
    cache.stat("d/f2")  # the first: a HEAD, registered alone
    assert remote.calls == Counter(info=1, invalidate=1) and registry.batches == []
    cache.stat("d/f0")  # the second: one listing, whose entries answer the rest
    assert remote.calls["ls"] == 1 and remote.calls["info"] == 1
    assert registry.batches == [[(p, files[p][0]) for p in sorted(files)]]
    for p in files:
        cache.stat(p)
    assert remote.calls["ls"] == 1 and remote.calls["info"] == 1
    mapped = set(registry.single) | {p for batch in registry.batches for p, _ in batch}
    assert mapped == set(files)  # every file stat'ed has its block range


def test_a_version_gone_drops_only_that_version() -> None:
    cache, remote, _, _ = _metadata({"d/a": (10, "v1")})
    old = cache.stat("d/a")
    cache.forget_version(FileMeta("d/a", 10, "ETag:other"))  # not the cached one: kept
    assert cache.known("d/a") is old
    cache.forget_version(old)
    assert cache.known("d/a") is None
    remote.files["d/a"] = (11, "v2")
    assert cache.stat("d/a").version == "ETag:v2"


# -- the remote client ----------------------------------------------------------------------
class FlakyFS:
    """An fsspec-like target whose calls fail ``fail`` times before they answer."""

    def __init__(self, data: bytes, fail: int, exc: type[BaseException] = ConnectionError,
                 short: bool = False) -> None:
        self.data = data
        self.fail = fail
        self.exc = exc
        self.short = short
        self.calls = 0

    def info(self, path: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.fail:
            raise self.exc("boom")
        return _record(path, len(self.data), "e")

    def cat_file(self, path: str, start: int, end: int) -> bytes:
        self.calls += 1
        if self.calls <= self.fail:
            raise self.exc("boom")
        return self.data[start:end - 1] if self.short else self.data[start:end]


def _client(fs: Any, retries: int = 3) -> tuple[RemoteClient, list[float], EngineMetrics]:
    slept: list[float] = []
    metrics = EngineMetrics()
    return (RemoteClient(fs, VersionScheme(), metrics, retries=retries, backoff_s=0.5,
                         sleep=slept.append), slept, metrics)


def test_the_remote_retries_with_exponential_backoff_then_answers() -> None:
    fs = FlakyFS(b"x" * 10, fail=2)
    client, slept, metrics = _client(fs)
    assert client.info("p")["size"] == 10
    assert slept == [0.5, 1.0] and metrics.value("remote_retries") == 2
    assert metrics.value("remote_errors") == 0


def test_the_remote_maps_a_failure_past_its_retries_to_eio() -> None:
    fs = FlakyFS(b"", fail=99)
    client, slept, metrics = _client(fs, retries=2)
    with pytest.raises(RemoteReadError) as err:
        client.info("p")
    assert err.value.errno == 5 and isinstance(err.value, OSError)
    assert "ConnectionError" in str(err.value) and fs.calls == 3
    assert slept == [0.5, 1.0] and metrics.value("remote_errors") == 1


@pytest.mark.parametrize("answer", [FileNotFoundError, PermissionError, IsADirectoryError])
def test_an_answer_is_raised_at_once_not_retried(answer: type[BaseException]) -> None:
    fs = FlakyFS(b"", fail=99, exc=answer)
    client, slept, metrics = _client(fs)
    with pytest.raises(answer):
        client.info("p")
    assert fs.calls == 1 and slept == [] and metrics.value("remote_errors") == 0


def test_a_range_is_the_bytes_and_a_short_read_is_retried() -> None:
    data = bytes(range(256)) * 8
    client, _, metrics = _client(FlakyFS(data, fail=1))
    got = client.fetch_range(FileMeta("p", len(data), "v"), 100, 700)
    assert hashlib.sha256(got).digest() == hashlib.sha256(data[100:700]).digest()
    assert metrics.value("remote_bytes") == 600 and metrics.value("remote_retries") == 1
    short, _, m2 = _client(FlakyFS(data, fail=0, short=True), retries=1)
    with pytest.raises(RemoteReadError, match="short read"):
        short.fetch_range(FileMeta("p", len(data), "v"), 0, 10)
    assert m2.value("remote_bytes") == 0


def test_a_version_gone_is_raised_and_counted_not_retried() -> None:
    class Gone(VersionScheme):
        def read(self, fs: Any, path: str, version: str, pin: str, start: int,
                 end: int) -> bytes:
            raise VersionGone(path, version, "overwritten")

    metrics = EngineMetrics()
    slept: list[float] = []
    client = RemoteClient(object(), Gone(), metrics, retries=3, sleep=slept.append)
    with pytest.raises(VersionGone):
        client.fetch_range(FileMeta("p", 10, "v"), 0, 10)
    assert slept == [] and metrics.value("versions_gone") == 1


# -- the block layout -----------------------------------------------------------------------
class FakePolicy:
    """The policy port as the layout sees it: a block map, and a count of registrations."""

    def __init__(self) -> None:
        self.map = BlockMap(B)
        self.registered: list[list[tuple[str, int]]] = []

    def register(self, files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        self.registered.append(list(files))
        return self.map.register(files)


def test_the_layout_gives_stable_ranges_and_registers_a_file_again_only_when_it_grew() -> None:
    policy = FakePolicy()
    layout = BlockLayout(policy, B, root="bucket/data")  # type: ignore[arg-type]
    layout.register([("bucket/data/b", 3 * B), ("bucket/data/a", 1)])
    assert layout.block_id("bucket/data/a", 0) == 0 and layout.block_id("bucket/data/b", 2) == 3
    layout.register_file("bucket/data/b", 3, 3 * B)  # unchanged: no request
    assert len(policy.registered) == 1
    layout.register_file("bucket/data/b", 5, 5 * B)  # grew: a fresh range after the others
    assert layout.block_id("bucket/data/b", 0) == 4 and len(policy.registered) == 2
    meta = FileMeta("bucket/data/b", 5 * B, "v")
    fb = layout.file_blocks(meta)
    assert fb.base == 4 and fb.key(1) == BlockKey(meta.path, "v", 1)
    assert layout.file_blocks(meta) is fb and fb.key(1) is fb.key(1)
    assert layout.unit_of("bucket/data/x/y") == "x/y" and layout.unit_of("bucket/data/top") == "./top"
    base = layout.page_base(meta, 256)
    assert base >= 4 + 5  # after every block range
    assert layout.id_of(BlockKey(meta.path, f"v{PAGE_TAG}256", 7)) == base + 7
    assert layout.id_of(BlockKey(meta.path, "v", 2)) == 6


# -- flights --------------------------------------------------------------------------------
K = BlockKey("p", "v", 0)


def test_two_concurrent_readers_of_one_block_make_one_fetch() -> None:
    flights = Flights(max_prefetch=1, max_prefetch_bytes=1 << 20)
    fetching, joined, release = threading.Event(), threading.Event(), threading.Event()
    fetches: list[int] = []
    got: dict[str, bytes] = {}

    def fetch() -> bytes:
        fetches.append(1)
        fetching.set()
        assert release.wait(10)
        return b"block"

    def leader() -> None:
        flight, lead, fresh = flights.join(K)
        assert lead and fresh
        got["leader"] = flights.lead(K, flight, fetch, lambda data, fl: False)

    def follower() -> None:
        assert fetching.wait(10)
        flight, lead, fresh = flights.join(K)
        assert not lead and not fresh
        joined.set()
        got["follower"] = flight.future.result(timeout=10)

    threads = [threading.Thread(target=leader), threading.Thread(target=follower)]
    for t in threads:
        t.start()
    assert joined.wait(10)
    release.set()
    for t in threads:
        t.join(10)
    assert got == {"leader": b"block", "follower": b"block"} and len(fetches) == 1
    assert flights.pending() == 0
    flights.close()


def test_a_failed_fetch_resolves_its_flight_and_leaves_the_table() -> None:
    flights = Flights(max_prefetch=1, max_prefetch_bytes=1 << 20)
    flight, _, _ = flights.join(K)

    def fetch() -> bytes:
        raise OSError("remote down")

    with pytest.raises(OSError, match="remote down"):
        flights.lead(K, flight, fetch, lambda data, fl: False)
    with pytest.raises(OSError, match="remote down"):  # a waiter gets the error, not a hang
        flight.future.result(timeout=0)
    assert flights.pending() == 0 and flights.join(K)[2]  # the next reader starts afresh
    flights.close()


def test_a_kept_block_stays_in_flight_until_its_writer_ends_it() -> None:
    flights = Flights(max_prefetch=1, max_prefetch_bytes=1 << 20)
    flight, _, _ = flights.join(K)
    held: list[Flight] = []
    flights.lead(K, flight, lambda: b"x", lambda data, fl: held.append(fl) is None)
    assert flights.busy(K) and flight.future.result(timeout=0) == b"x"
    flights.end(K, held[0])
    assert not flights.busy(K)
    flights.close()


def test_prefetches_respect_their_limits_and_a_demand_read_takes_one_over() -> None:
    flights = Flights(max_prefetch=1, max_prefetch_bytes=100, sync=True)
    fetched: list[BlockKey] = []

    def fetch_of(k: BlockKey) -> Any:
        return lambda: fetched.append(k) or b"d"

    keys = [BlockKey("p", "v", i) for i in range(4)]
    assert flights.prefetch(keys[0], 60, fetch_of(keys[0]), lambda d, f: False) is Offer.ISSUED
    assert flights.prefetch(keys[0], 10, fetch_of(keys[0]), lambda d, f: False) is Offer.IN_FLIGHT
    assert flights.prefetch(keys[1], 60, fetch_of(keys[1]), lambda d, f: False) is Offer.DROPPED
    assert flights.prefetch(keys[2], 40, fetch_of(keys[2]), lambda d, f: False) is Offer.ISSUED
    flight, lead, fresh = flights.join(keys[0])  # not started yet: the demand read leads it
    assert lead and not fresh
    flights.lead(keys[0], flight, lambda: b"demand", lambda d, f: False)
    flights.run_queued()
    assert fetched == [keys[2]] and flights.prefetching() == 0 and flights.pending() == 0
    flights.close()


# -- the page reader ------------------------------------------------------------------------
class DictStore:
    """The store as the page reader and the block reader see it."""

    def __init__(self) -> None:
        self.blocks: dict[BlockKey, bytes] = {}
        self.verified: set[BlockKey] = set()
        self.checks = 0

    def get(self, key: BlockKey) -> bytes | None:
        return self.blocks.get(key)

    def contains(self, key: BlockKey) -> bool:
        return key in self.blocks

    def serves_ranges(self, key: BlockKey) -> bool:
        self.checks += 1
        return key in self.verified

    def get_range(self, key: BlockKey, start: int, end: int) -> bytes | None:
        return self.blocks[key][start:end] if key in self.verified else None


class Sink:
    """The engine as the page reader sees it (``PageSink``)."""

    def __init__(self, data: bytes, store: DictStore) -> None:
        self.data = data
        self.store = store
        self.fetches: list[tuple[int, int]] = []
        self.accesses: list[tuple[int, Source]] = []

    def now(self) -> float:
        return 0.0

    def access(self, unit: str, bid: int, key: BlockKey, size: int, source: Source,
               now: float) -> None:
        self.accesses.append((key.index, source))

    def keep(self, unit: str, bid: int, key: BlockKey, data: bytes, flight: Flight) -> bool:
        self.store.blocks[key] = data
        return False

    def fetch_range(self, meta: FileMeta, start: int, end: int) -> bytes:
        self.fetches.append((start, end))
        return self.data[start:end]


def test_a_sparse_read_fetches_its_pages_once_and_reads_them_back_from_the_store() -> None:
    P = 128
    data = bytes((i * 7) % 251 for i in range(3 * B))
    store = DictStore()
    sink = Sink(data, store)
    flights = Flights(max_prefetch=1, max_prefetch_bytes=1 << 20)
    layout = BlockLayout(FakePolicy(), B)  # type: ignore[arg-type]
    params = EngineParams(block_size=B, page_size=P, sparse_run=4 * B)
    pages = PageReader(store, flights, layout, sink, EngineMetrics(), params,  # type: ignore[arg-type]
                       page_size=P)
    meta = FileMeta("f", len(data), "v")
    start, end = B + 200, B + 500  # pages 9..11 of the file (1 KiB blocks, 128 B pages)
    got = pages.read_sparse(meta, start, end, ReadStream())
    assert got == data[start:end]
    assert sink.fetches == [(9 * P, 12 * P)]  # one GET, exactly the covering pages
    assert sink.accesses == [(9, Source.REMOTE), (10, Source.REMOTE), (11, Source.REMOTE)]
    assert pages.read_sparse(meta, start + 10, end - 10, ReadStream()) == data[start + 10:end - 10]
    assert len(sink.fetches) == 1 and sink.accesses[-1] == (11, Source.STORE)
    assert flights.pending() == 0
    whole = pages.read_sparse(meta, 0, B, ReadStream())  # a whole block is not sparse
    assert whole is None
    flights.close()


# -- the block reader (what fsspec and FUSE read through) -----------------------------------
class Demand:
    """The engine's demand reads as the block reader sees them (``DemandReads``)."""

    def __init__(self) -> None:
        self.claims: list[tuple[int, int | None]] = []

    def read_block_hit(self, meta: FileMeta, idx: int, served: int | None = None,
                       ahead: bool = True) -> tuple[bytes, bool]:
        return b"whole", False

    def read_meta(self, meta: FileMeta, offset: int = 0, length: int | None = None,
                  stream: ReadStream | None = None) -> bytes:
        return b""

    def read_sparse(self, meta: FileMeta, start: int, end: int,
                    stream: ReadStream | None) -> bytes | None:
        return None

    def claim_local(self, meta: FileMeta, idx: int, served: int | None = None) -> None:
        self.claims.append((idx, served))


def test_the_block_reader_says_which_blocks_are_local_and_serves_their_ranges() -> None:
    store = DictStore()
    layout = BlockLayout(FakePolicy(), B)  # type: ignore[arg-type]
    demand = Demand()
    reader = BlockReader(demand, store, layout, EngineMetrics(), EngineParams(block_size=B),  # type: ignore[arg-type]
                         page_size=0)
    meta = FileMeta("f", 2 * B, "v")
    key = BlockKey("f", "v", 1)
    store.blocks[key] = bytes(range(256)) * 4
    assert reader.local(meta, 1) is None  # stored but not verified here: read it whole
    store.verified.add(key)
    block = reader.local(meta, 1)
    assert block is not None and block.get_range(10, 20) == store.blocks[key][10:20]
    reader.claim(meta, 1, 10)
    assert demand.claims == [(1, 10)]
    assert reader.read_block(meta, 0) == (b"whole", False)


def test_a_fuse_read_asks_whether_its_block_is_local_once(tmp_path: Path) -> None:
    """The low-level driver asks :meth:`CacheFuse.read_is_local` before it reads; the read
    then serves the block by range without asking the store again."""
    from aicache.datacache.fuse.ops import CacheFuse

    import fsspec

    data = bytes((i * 13) % 256 for i in range(3 * B + 5))
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "f.bin"
    path.write_bytes(data)
    made: list[CacheEngine] = []

    def factory() -> CacheEngine:
        made.append(CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 20,
                                policy="lru", params=EngineParams(block_size=B, page_size=0,
                                                                  write_behind=False)))
        return made[0]

    ops = CacheFuse(factory, str(tmp_path / "src"))
    ops.init("/")
    engine = made[0]
    engine.store.reads.racy_ns = 0  # a block file just written may be trusted at once (as in
    # test_datacache_verify_modes): the second read verifies it
    try:
        for _ in range(2):  # fetched and stored, then read whole once more: verified
            fh = ops.open("/f.bin", 0)
            assert ops.read("/f.bin", B, 0, fh) == data[:B]
            ops.release("/f.bin", fh)
        checks: list[BlockKey] = []
        serves = engine.store.serves_ranges

        def counted(key: BlockKey) -> bool:
            checks.append(key)
            return serves(key)

        engine.store.serves_ranges = counted  # type: ignore[method-assign]
        fh = ops.open("/f.bin", 0)
        hits = engine.metrics.value("hits")
        assert ops.read_is_local(fh, 100, 200)
        assert ops.read("/f.bin", 200, 100, fh) == data[100:300]
        assert checks == [BlockKey(engine.stat(str(path)).path, engine.stat(str(path)).version, 0)]
        assert engine.metrics.value("hits") == hits + 1
        assert ops.read("/f.bin", 300, 400, fh) == data[400:700]  # held: no check at all
        assert len(checks) == 1
    finally:
        ops.destroy("/")
