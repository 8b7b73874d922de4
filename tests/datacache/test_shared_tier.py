"""The shared tier: a cache level under each node's local cache, on a store all nodes share.

What is proved, against outside references (SHA-256 of the origin's bytes; request counts
taken at the servers, not by the client):

* nodes are separate processes with separate cache dirs; the origin is a counting moto S3
  behind a delay line, the shared tier a *second* counting moto S3. A second node's first
  epoch makes no origin GET for what the first node read, and gets every byte right;
* a shared block overwritten with garbage, and one holding another version's block (the
  origin object changed), are misses: counted as rejects, read from the origin, right bytes;
* the shared server stopped, and stopped with SIGSTOP (it accepts connections, never
  answers): reads still complete from the origin with the right bytes (the time limit on
  the node is only a hang guard);
* the block format's checks (brute force over damaged copies), the circuit breaker (an
  injected clock), the write queue's bound (a store whose writes never finish), and the
  bound on calls that hang.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from aicache.datacache.engine import CacheEngine, EngineParams, file_meta
from aicache.datacache.keys import BlockKey
from aicache.datacache.metrics import EngineMetrics
from aicache.datacache.shared import CircuitBreaker, SharedTier, SharedTierSpec
from aicache.datacache.store import HEADER_SIZE, decode_block, encode_block
from aicache.datacache.version import scheme_for
from aicache.sim.datacache import (MiB, BlockWorkload, CostModel, PhaseSegment, SharedTierCost,
                                   simulate_datacache)
from aicache.testing.delayline import DelayLine
from aicache.testing.s3count import CountingS3, start_counting_s3

TESTS = Path(__file__).resolve().parents[1]
ORIGIN, SHARED = "origin", "shared"
BLOCK = 64 * 1024
#: a node that takes this long is hung (the assertions are about completion, not time)
HANG_GUARD_S = 180


# -- the block format ---------------------------------------------------------------------------
def test_decode_accepts_only_the_intact_block_of_its_key() -> None:
    rng = random.Random(1)
    data = rng.randbytes(1000)
    key = BlockKey("b/x.bin", "etag-1", 3)
    blob = encode_block(key, data, BLOCK)
    assert decode_block(key, blob, BLOCK) == data
    # brute force: every truncation and every single-byte change is refused
    for cut in range(0, len(blob), 37):
        assert decode_block(key, blob[:cut], BLOCK) is None
    for at in range(0, len(blob), 41):
        bad = bytearray(blob)
        bad[at] ^= 0x5A
        assert decode_block(key, bytes(bad), BLOCK) is None, at
    # the same bytes under another path, version, index or block size: not this block
    for other in (BlockKey("b/y.bin", "etag-1", 3), BlockKey("b/x.bin", "etag-2", 3),
                  BlockKey("b/x.bin", "etag-1", 4)):
        assert decode_block(other, blob, BLOCK) is None
    assert decode_block(key, blob, 2 * BLOCK) is None
    assert decode_block(key, rng.randbytes(len(blob)), BLOCK) is None
    assert len(blob) == HEADER_SIZE + len(data)


# -- the circuit breaker ------------------------------------------------------------------------
def test_breaker_opens_after_failures_and_retries_after_its_backoff() -> None:
    now = [0.0]
    b = CircuitBreaker(3, 10.0, lambda: now[0])
    b.failure()
    b.failure()
    assert b.allow()  # two failures: still closed
    b.success()
    b.failure()
    b.failure()
    assert b.allow()  # a success reset the count
    b.failure()
    assert not b.allow()
    now[0] = 9.99
    assert not b.allow()
    now[0] = 10.0
    assert b.allow()  # the backoff is over: one call may try
    b.failure()
    assert not b.allow()  # and one failure opens it again
    now[0] = 20.0
    assert b.allow()
    b.success()
    b.failure()
    assert b.allow()  # after a success it takes three again


# -- bounds on a store that hangs ---------------------------------------------------------------
class HangingFS(MemoryFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """A memory store whose reads and writes wait on ``gate`` (a stopped server)."""

    gate = threading.Event()

    def cat_file(self, path: str, *args: Any, **kwargs: Any) -> bytes:
        self.gate.wait()
        return bytes(super().cat_file(path, *args, **kwargs))

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        self.gate.wait()
        super().pipe_file(path, value, *args, **kwargs)


@pytest.fixture
def hanging() -> Iterator[HangingFS]:
    HangingFS.gate.clear()
    fs = HangingFS(skip_instance_cache=True)
    yield fs
    HangingFS.gate.set()  # let the parked threads go


def test_reads_of_a_hanging_store_are_bounded_then_backed_off(hanging: HangingFS) -> None:
    now = [0.0]
    m = EngineMetrics()
    spec = SharedTierSpec("memory://t", timeout_s=0.05, failures=2, backoff_s=60.0, call_slots=4)
    tier = SharedTier(spec, BLOCK, m, fs=hanging, root="/t", clock=lambda: now[0])
    key = BlockKey("b/x", "v", 0)
    assert tier.get(key, 10) is None  # waited its bound, then gave up
    assert tier.get(key, 10) is None
    assert m.value("shared_errors") == 2
    for _ in range(5):  # backing off: no call made at all
        assert tier.get(key, 10) is None
    assert m.value("shared_skipped") == 5 and m.value("shared_errors") == 2
    now[0] = 61.0
    assert tier.get(key, 10) is None  # one retry after the backoff, which also hangs
    assert m.value("shared_errors") == 3
    tier.close(timeout_s=0.1)


def test_calls_that_hang_hold_their_slots_and_later_calls_are_skipped(hanging: HangingFS) -> None:
    m = EngineMetrics()
    spec = SharedTierSpec("memory://t", timeout_s=0.02, failures=100, call_slots=2)
    tier = SharedTier(spec, BLOCK, m, fs=hanging, root="/t")
    key = BlockKey("b/x", "v", 0)
    for _ in range(2):
        assert tier.get(key, 10) is None  # each times out; its thread stays parked
    for _ in range(3):
        assert tier.get(key, 10) is None
    assert m.value("shared_errors") == 2 and m.value("shared_skipped") == 3
    tier.close(timeout_s=0.1)


def test_a_full_write_queue_drops_blocks_and_never_waits(hanging: HangingFS) -> None:
    m = EngineMetrics()
    spec = SharedTierSpec("memory://t", timeout_s=30.0, write_queue=3, call_slots=1)
    tier = SharedTier(spec, BLOCK, m, fs=hanging, root="/t")
    offered = [tier.offer(BlockKey("b/x", "v", i), b"x" * 100) for i in range(10)]
    # the writer holds one block (its write hangs), three wait in the queue: the rest drop
    assert offered.count(True) in (3, 4)  # 4 when the writer took the first one already
    assert m.value("shared_write_drops") == offered.count(False)
    assert tier.queue_depth <= 3
    HangingFS.gate.set()
    assert tier.flush(30.0)
    assert m.value("shared_writes") == offered.count(True)
    for i, ok in enumerate(offered):
        key = BlockKey("b/x", "v", i)
        assert (tier.get(key, 100) == b"x" * 100) is ok
    tier.close()


# -- two engines in one process over a file-system tier -----------------------------------------
def test_second_engine_reads_the_first_ones_blocks_from_the_tier(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    rng = random.Random(7)
    files = {origin / f"f{i}.bin": rng.randbytes(rng.randrange(1, 5 * BLOCK)) for i in range(5)}
    for p, data in files.items():
        p.write_bytes(data)
    spec = SharedTierSpec(f"file://{tmp_path / 'tier'}")
    target = fsspec.filesystem("file")
    fetched = []
    for node in (1, 2):
        with CacheEngine(target, str(tmp_path / f"cache{node}"), 1 << 26, policy="lru",
                         shared=spec) as e:
            for p, data in files.items():
                assert e.read(str(p)) == data
        fetched.append((e.metrics.value("remote_bytes"), e.metrics.value("shared_hit_bytes")))
    total = sum(len(d) for d in files.values())
    assert fetched[0] == (total, 0)  # node 1: all from the origin, all written to the tier
    assert fetched[1] == (0, total)  # node 2: nothing from the origin
    # the Prometheus page names them (and the write queue's depth, a gauge)
    text = e.metrics.text().decode()
    nblocks = sum(-(-len(d) // (4 << 20)) for d in files.values())
    assert f"aicache_shared_hits_total {float(nblocks)}" in text
    assert f"aicache_shared_hit_bytes_total {float(total)}" in text
    assert "aicache_shared_write_queue 0.0" in text
    # and `aicache cache stats --json` sums them from the counters the engine persisted
    r = _cli("cache", "stats", "--cache-dir", str(tmp_path / "cache2"), "--json")
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    assert stats["shared_hits"] == stats["origin_requests_saved"] == nblocks
    assert stats["shared_hit_bytes"] == total and stats["remote_bytes"] == 0


def test_a_shared_hit_is_an_access_the_policy_sees_and_a_block_it_admits(tmp_path: Path) -> None:
    """Each node's policy still decides what it keeps: a block read from the tier is an
    access told to the policy (as every read) and offered for local admission, so the next
    read of it is a local hit that asks the tier nothing."""
    origin = tmp_path / "origin"
    origin.mkdir()
    rng = random.Random(9)
    files = {origin / f"f{i}.bin": rng.randbytes(3 * BLOCK + 5) for i in range(3)}
    for p, data in files.items():
        p.write_bytes(data)
    nblocks = 4 * len(files)
    spec = SharedTierSpec(f"file://{tmp_path / 'tier'}")
    target = fsspec.filesystem("file")
    params = EngineParams(block_size=BLOCK)
    with CacheEngine(target, str(tmp_path / "c1"), 1 << 26, policy="chiron", params=params,
                     shared=spec) as warm:
        for p, data in files.items():
            assert warm.read(str(p)) == data  # fills the tier through node 1
    seen: list[tuple[str, int]] = []
    with CacheEngine(target, str(tmp_path / "c2"), 1 << 26, policy="chiron", params=params,
                     shared=spec, record=lambda now, unit, block, size: seen.append((unit, block))) as e:
        for p, data in files.items():
            assert e.read(str(p)) == data
        e.wait_prefetches()
        first = (e.metrics.value("shared_hits"), e.metrics.value("remote_bytes"), len(seen))
        resident = e.stats()["blocks"]
        hits = e.metrics.value("hits")  # prefetched blocks a demand read found count as hits
        for p, data in files.items():
            assert e.read(str(p)) == data
        again = (e.metrics.value("shared_hits"), e.metrics.value("hits") - hits, len(seen))
    assert first == (nblocks, 0, nblocks)  # every block from the tier, every read an access
    assert resident == nblocks  # the policy admitted them locally
    assert again == (nblocks, nblocks, 2 * nblocks)  # the second pass: local hits only


# -- nodes as processes, two S3 servers ---------------------------------------------------------
@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[CountingS3, DelayLine, CountingS3]]:
    origin = start_counting_s3()
    shared = start_counting_s3()
    line = DelayLine(("127.0.0.1", origin.port), delay_s=0.003)
    try:
        for server in (origin, shared):
            fs = _s3(server.endpoint_url)
            fs.mkdir(ORIGIN if server is origin else SHARED)
        yield origin, line, shared
    finally:
        line.close()
        origin.stop()
        shared.stop()


def _s3(endpoint: str) -> Any:
    return fsspec.filesystem("s3", key="testing", secret="testing", skip_instance_cache=True,
                             use_listings_cache=False, client_kwargs={"endpoint_url": endpoint})


def _dataset(origin: CountingS3, prefix: str, n: int, seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    fs = _s3(origin.endpoint_url)
    files = {f"{ORIGIN}/{prefix}/f{i:02d}.bin": rng.randbytes(rng.randrange(1, 4 * BLOCK))
             for i in range(n)}
    for p, data in files.items():
        fs.pipe_file(p, data)
    return files


def _blocks(files: dict[str, bytes]) -> int:
    return sum(-(-len(d) // BLOCK) for d in files.values())


def _node(tmp_path: Path, name: str, origin_url: str, shared: CountingS3 | None,
          files: list[str], prefix: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """Run one node (a process of its own, a cache dir of its own) over ``files``."""
    spec = {"origin": origin_url, "cache_dir": str(tmp_path / name), "block_size": BLOCK,
            "files": files, "timeout": timeout_s,
            "shared": shared.endpoint_url if shared is not None else None,
            "shared_url": f"s3://{SHARED}/{prefix}"}
    r = subprocess.run([sys.executable, str(TESTS / "shared_tier_node.py"), json.dumps(spec)],
                       capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr[-3000:]
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_second_node_reads_nothing_from_the_origin_that_the_first_read(
        tmp_path: Path, servers: tuple[CountingS3, DelayLine, CountingS3]) -> None:
    origin, line, shared = servers
    files = _dataset(origin, "epoch", 8, seed=1)
    want = {p: _sha(d) for p, d in files.items()}
    nblocks = _blocks(files)

    before = origin.counts().bucket(ORIGIN)
    n1 = _node(tmp_path, "node1", line.url, shared, list(files), "epoch")
    mid = origin.counts().bucket(ORIGIN)
    n2 = _node(tmp_path, "node2", line.url, shared, list(files), "epoch")
    after = origin.counts().bucket(ORIGIN)

    assert n1["digests"] == want and n2["digests"] == want
    first, second = mid.minus(before), after.minus(mid)
    assert first.get == nblocks  # one GET per block, as counted at the origin
    assert n1["stats"]["shared_writes"] == nblocks and n1["stats"]["shared_write_drops"] == 0
    assert second.get == 0  # node 2's epoch: every block from the shared tier
    assert n2["stats"]["shared_hits"] == nblocks
    assert n2["stats"]["remote_bytes"] == 0
    assert n2["stats"]["shared_hit_bytes"] == sum(len(d) for d in files.values())
    # the shared server saw those reads (and nothing was written back)
    assert shared.counts().bucket(SHARED).get >= nblocks
    assert n2["stats"]["shared_writes"] == 0


def _block_path(origin_url: str, path: str, idx: int) -> str:
    """The shared tier object of block ``idx`` of ``path`` under the tier's ``damage``
    prefix, for the origin's current version, keyed as a node keys it."""
    target = _s3(origin_url)
    meta = file_meta(scheme_for(target), path, target.info(path, refresh=True))
    d = BlockKey(meta.path, meta.version, idx).digest(BLOCK)
    return f"{SHARED}/damage/{d[:2]}/{d}.blk"


def test_garbage_and_foreign_version_blocks_are_misses(
        tmp_path: Path, servers: tuple[CountingS3, DelayLine, CountingS3]) -> None:
    origin, line, shared = servers
    files = _dataset(origin, "damage", 4, seed=2)
    paths = sorted(files)
    n1 = _node(tmp_path, "node1", line.url, shared, paths, "damage")
    assert n1["stats"]["shared_writes"] == _blocks(files)
    sfs = _s3(shared.endpoint_url)
    ofs = _s3(origin.endpoint_url)

    # garbage over block 0 of the first file
    garbage_at = _block_path(line.url, paths[0], 0)
    assert sfs.exists(garbage_at)
    sfs.pipe_file(garbage_at, random.Random(3).randbytes(HEADER_SIZE + 100))
    # the second file changes at the origin; its new version's block 0 is given the old
    # version's block file (well-formed, checksum right, but another version's)
    old_at = _block_path(line.url, paths[1], 0)
    old_blob = sfs.cat_file(old_at)
    changed = random.Random(4).randbytes(len(files[paths[1]]))
    ofs.pipe_file(paths[1], changed)
    files[paths[1]] = changed
    new_at = _block_path(line.url, paths[1], 0)
    assert new_at != old_at
    sfs.pipe_file(new_at, old_blob)

    before = origin.counts().bucket(ORIGIN)
    n2 = _node(tmp_path, "node2", line.url, shared, paths, "damage")
    got = origin.counts().bucket(ORIGIN).minus(before)
    assert n2["digests"] == {p: _sha(d) for p, d in files.items()}
    assert n2["stats"]["shared_rejects"] == 2
    # the changed file's other blocks were never in the tier under its new version
    other = _blocks({paths[1]: changed}) - 1
    assert n2["stats"]["shared_misses"] == other
    assert got.get == 2 + other  # the two rejected blocks and the new version's others
    assert n2["stats"]["shared_hits"] == _blocks(files) - 2 - other


def _fresh_shared() -> CountingS3:
    s = start_counting_s3()
    _s3(s.endpoint_url).mkdir(SHARED)
    return s


@pytest.mark.parametrize("fault", ["stopped", "sigstop"])
def test_reads_complete_from_the_origin_when_the_shared_server_is_down(
        tmp_path: Path, servers: tuple[CountingS3, DelayLine, CountingS3], fault: str) -> None:
    origin, line, _shared = servers
    files = _dataset(origin, f"down-{fault}", 6, seed=5)
    tier = _fresh_shared()
    try:
        _node(tmp_path, "warm", line.url, tier, list(files), f"down-{fault}")  # the tier holds it all
        if fault == "stopped":
            tier.stop()
        else:
            os.kill(tier.process.pid, signal.SIGSTOP)
        before = origin.counts().bucket(ORIGIN)
        n = _node(tmp_path, "node", line.url, tier, list(files), f"down-{fault}", timeout_s=0.5)
        got = origin.counts().bucket(ORIGIN).minus(before)
    finally:
        if fault == "sigstop" and tier.process.poll() is None:
            os.kill(tier.process.pid, signal.SIGCONT)
        tier.stop()
    assert n["digests"] == {p: _sha(d) for p, d in files.items()}
    s = n["stats"]
    assert s["shared_hits"] == 0
    assert got.get == _blocks(files)  # every block from the origin
    assert s["shared_errors"] >= 1  # the calls that were tried failed or timed out
    # after the breaker opened, later blocks did not even try the tier
    assert s["shared_errors"] + s["shared_skipped"] >= _blocks(files)


# -- the CLI ------------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aicache.cli.main", *args], capture_output=True,
                          text=True, timeout=HANG_GUARD_S, stdin=subprocess.DEVNULL)


def test_warmup_fills_the_shared_tier_once_for_every_node(
        tmp_path: Path, servers: tuple[CountingS3, DelayLine, CountingS3]) -> None:
    origin, line, shared = servers
    files = _dataset(origin, "warm", 5, seed=6)
    nblocks = _blocks(files)
    r = _cli("warmup", f"s3://{ORIGIN}/warm", "--endpoint-url", line.url,
             "--cache-dir", str(tmp_path / "warmer"), "--block-size", str(BLOCK),
             "--shared-cache", f"s3://{SHARED}/warm",
             "--shared-cache-endpoint-url", shared.endpoint_url, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["shared_blocks_written"] == nblocks and out["shared_blocks_dropped"] == 0
    # a second warmup of the same cache dir: every block is local, the tier has them all
    r = _cli("warmup", f"s3://{ORIGIN}/warm", "--endpoint-url", line.url,
             "--cache-dir", str(tmp_path / "warmer"), "--block-size", str(BLOCK),
             "--shared-cache", f"s3://{SHARED}/warm",
             "--shared-cache-endpoint-url", shared.endpoint_url, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["shared_blocks_written"] == 0
    before = origin.counts().bucket(ORIGIN)
    n = _node(tmp_path, "node", line.url, shared, sorted(files), "warm")
    assert origin.counts().bucket(ORIGIN).minus(before).get == 0
    assert n["digests"] == {p: _sha(d) for p, d in files.items()}
    assert n["stats"]["shared_hits"] == nblocks


def test_a_warmed_cache_dir_fills_a_tier_that_lacks_its_blocks(
        tmp_path: Path, servers: tuple[CountingS3, DelayLine, CountingS3]) -> None:
    """Blocks this cache holds and the tier lacks are written from the local cache (no
    origin GET)."""
    origin, line, shared = servers
    files = _dataset(origin, "late", 3, seed=8)
    common = ["--endpoint-url", line.url, "--cache-dir", str(tmp_path / "c"),
              "--block-size", str(BLOCK), "--json"]
    assert _cli("warmup", f"s3://{ORIGIN}/late", *common).returncode == 0  # local only
    before = origin.counts().bucket(ORIGIN)
    r = _cli("warmup", f"s3://{ORIGIN}/late", *common, "--shared-cache", f"s3://{SHARED}/late",
             "--shared-cache-option", f"endpoint_url={shared.endpoint_url}")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["shared_blocks_written"] == _blocks(files)
    assert origin.counts().bucket(ORIGIN).minus(before).get == 0


@pytest.mark.parametrize("flags, gist", [
    (["--shared-cache", "nosuchproto://x/y"], ["--shared-cache", "nosuchproto"]),
    (["--shared-cache-endpoint-url", "http://127.0.0.1:1"], ["--shared-cache URL"]),
    (["--shared-cache", "s3://b/p", "--shared-cache-option", "novalue"],
     ["--shared-cache-option", "KEY=VALUE"]),
    (["--shared-cache", "s3://b/p", "--shared-cache-timeout", "-1"], ["--shared-cache-timeout"]),
    (["--shared-cache", "file:///tmp/x", "--shared-cache-endpoint-url", "http://h:1"],
     ["--shared-cache-endpoint-url", "s3://"]),
])
def test_bad_shared_cache_flags_are_named(tmp_path: Path, flags: list[str], gist: list[str]) -> None:
    r = _cli("warmup", str(tmp_path), "--cache-dir", str(tmp_path / "c"), *flags)
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, err)
    assert len(err.splitlines()) == 1, err
    for g in gist:
        assert g.lower() in err.lower(), (g, err)


# -- the simulator's model of the tier ----------------------------------------------------------
def _reference(trace: list[int], size: int, cap_blocks: int, cm: CostModel) -> dict[str, float]:
    """One loader worker, no compute, LRU without prefetch, the tier as the module doc of
    :mod:`aicache.sim.datacache` states it: the brute-force reading of that text."""
    from collections import OrderedDict

    sh = cm.shared
    tier: set[int] | None = None if sh is None else (set(trace) if sh.warm else set())
    lru: OrderedDict[int, None] = OrderedDict()
    t = 0.0
    remote = shared_hits = hits = 0
    for b in trace:
        if b in lru:
            lru.move_to_end(b)
            t += cm.hit_ms / 1000
            hits += 1
            continue
        if tier is None:
            t += cm.miss_ms / 1000 + size / cm.remote_bw
            remote += size
        elif b in tier:
            assert sh is not None
            t += sh.ms / 1000 + size / sh.bw
            shared_hits += 1
        else:
            assert sh is not None
            t += sh.ms / 1000 + cm.miss_ms / 1000 + size / cm.remote_bw
            remote += size
            tier.add(b)
        lru[b] = None
        if len(lru) > cap_blocks:
            lru.popitem(last=False)
    return {"jct": t, "remote": remote, "shared_hits": shared_hits, "hits": hits}


@pytest.mark.parametrize("shared", [None, SharedTierCost(5.0, 1000.0 * MiB),
                                    SharedTierCost(5.0, 1000.0 * MiB, warm=True),
                                    SharedTierCost(0.0, 50.0 * MiB)])
def test_the_simulator_prices_the_tier_as_its_model_states(shared: SharedTierCost | None) -> None:
    rng = random.Random(11)
    trace = [rng.randrange(6) for _ in range(200)]
    size = MiB
    n = len(trace)
    wl = BlockWorkload(
        name="t", obj_id=np.array(trace, np.int64), obj_size=np.full(n, size, np.int64),
        unit=np.zeros(n, np.int64), units=["u"], phase=np.full(n, -1, np.int8),
        segments=[PhaseSegment("p", "unknown", 0, n, 0.0)],
        block_size_of={b: size for b in range(6)}, block_unit_of={b: 0 for b in range(6)},
        workers=1, dataset_bytes=6 * size)
    cm = CostModel(shared=shared)
    res = simulate_datacache(wl, "lru+none", 3 * size, cost=cm)
    ref = _reference(trace, size, 3, cm)
    assert res.jct_seconds == pytest.approx(ref["jct"], rel=1e-12)
    assert res.remote_bytes == ref["remote"]
    assert res.hits == ref["hits"]
    assert res.extra.get("shared_hits", 0) == ref["shared_hits"]
    if shared is not None:
        assert res.extra["shared_bytes"] == ref["shared_hits"] * size


# -- the benchmark's accounting -----------------------------------------------------------------
def test_the_benchmark_counts_one_origin_read_per_block_for_the_whole_shared_job() -> None:
    """``benchmarks/shared_tier.py`` at a tiny size: per-node caches read the dataset from the
    origin once per node, the shared tier once per job (the first node), warmup once before
    it (no node at all); every byte checked."""
    r = subprocess.run([sys.executable, str(TESTS.parent / "benchmarks" / "shared_tier.py"),
                        "--nodes", "2", "--files", "4", "--mib", "1", "--block-size", "256KiB",
                        "--latency-ms", "1", "--json"],
                       capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["system"]: row for row in json.loads(r.stdout)["summary"]}
    once = rows["shared"]["origin_gets"]
    assert once >= 4  # at least a block per file
    assert rows["per-node"]["origin_gets"] == 2 * once
    assert rows["per-node"]["node_origin_gets"] == [once, once]
    assert rows["shared"]["node_origin_gets"] == [once, 0]
    assert rows["shared"]["shared_hits"] == once
    assert rows["shared+warmup"]["origin_gets"] == once  # the warmup's
    assert rows["shared+warmup"]["node_origin_gets"] == [0, 0]
    assert all(row["bytes_ok"] for row in rows.values())
