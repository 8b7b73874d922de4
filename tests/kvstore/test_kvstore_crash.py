"""Crash safety of the SSD tier: ``kill -9`` during a write burst, torn blocks, full disk.

Payloads are a pure function of the block key, so any byte a recovered store serves can
be checked without trusting the store.
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from fsfixtures import mount_tmpfs

from aicache.kv.models import ModelSpec
from aicache.kv.admission import AdmissionRule
from aicache.kv.saria import KVIndexParams, Tier
from aicache.kvstore.ssd import HEADER_BYTES, SlabStore
from aicache.kvstore.store import TieredKVStore, TieredKVStoreParams

BT, KVB = 64, 1024            # 64 tokens × 1 KiB/token = 64 KiB blocks
BB = BT * KVB
SLOT = HEADER_BYTES + BB
MODEL = ModelSpec("crash-tiny", 2, 2, 64, block_tokens=BT)
assert MODEL.block_bytes == BB
SSD_SLOTS = 48


def expected(key: int) -> np.ndarray:
    return ((np.arange(BB, dtype=np.uint32) * (key % 251 + 1) + key) % 256).astype(np.uint8)


def params(directory: Path, ssd_slots: int = SSD_SLOTS, dram_blocks: int = 8,
           slab_bytes: int = 16 * SLOT, admission: str = "full-duplicate") -> TieredKVStoreParams:
    ip = KVIndexParams(model=MODEL, dram_bytes=dram_blocks * BB, ssd_bytes=ssd_slots * SLOT,
                       admission=AdmissionRule.parse(admission))
    return TieredKVStoreParams(ip, directory, slab_bytes=slab_bytes, io_threads=4)


WRITER = textwrap.dedent("""
    import sys, numpy as np
    import aicache.kvstore.ssd as ssd
    ssd.CHUNK_BYTES = 4096              # many syscalls per block: a kill lands mid-block
    sys.path[:0] = {testdirs!r}  # this file's folder, and tests/ for its helpers
    from test_kvstore_crash import params, expected
    from aicache.kvstore.store import TieredKVStore
    from pathlib import Path
    store = TieredKVStore(params(Path({d!r})))
    print("recovered", store.recovered_blocks, flush=True)
    r = {start}
    while True:
        keys = [r * 1000 + j for j in range(6)]
        store.store("m", keys, [expected(k) for k in keys], now=float(r))
        if r == {start} + 5:
            store.flush()
            print("ready", flush=True)
        r += 1
""")


def run_writer_and_kill(d: Path, start: int, rng: random.Random) -> int:
    code = WRITER.format(testdirs=[str(Path(__file__).parent), str(Path(__file__).resolve().parents[1])], d=str(d), start=start)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("recovered"), first
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.3))
        os.kill(proc.pid, 9)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -9
    return int(first.split()[1])


def verify_all(store: TieredKVStore) -> int:
    """Every block the recovered index holds loads byte-exact via a full-prefix lookup."""
    n_ok = 0
    for node in list(store._sslot):
        path = node.path()
        plan = store.lookup("m", path)
        assert plan.hit_blocks == len(path) and set(plan.sources) == {Tier.SSD}
        bufs = [np.zeros(BB, np.uint8) for _ in path]
        res = store.load(plan, bufs)
        assert res.valid_blocks == len(path)
        for k, b in zip(path, bufs):
            assert np.array_equal(b, expected(k))
        store.release(plan)
        n_ok += 1
    return n_ok


def test_kill9_during_write_burst_then_recover(tmp_path: Path) -> None:
    rng = random.Random(3)
    d = tmp_path / "kv"
    recovered_seen = []
    for cycle in range(2):
        recovered_seen.append(run_writer_and_kill(d, 10_000 * (cycle + 1), rng))
        files = sum(p.stat().st_size for p in d.glob("slab-*.bin"))
        assert files <= SSD_SLOTS * SLOT  # the budget holds on disk, even mid-crash
        store = TieredKVStore(params(d))
        try:
            store.check()
            assert 0 < store.recovered_blocks <= SSD_SLOTS
            assert verify_all(store) == store.recovered_blocks
        finally:
            store.close()
    assert all(r > 0 for r in recovered_seen[1:])  # the writer itself restarted from disk


def _slot_offset(store: TieredKVStore, slot: int) -> tuple[Path, int]:
    ssd = store.ssd
    assert ssd is not None
    slab, i = divmod(slot, ssd.slab_slots)
    return ssd.dir / f"slab-{slab:05d}.bin", i * ssd.slot_disk_bytes


def test_torn_block_is_never_served(tmp_path: Path) -> None:
    """A block whose payload changed under its header (a torn write after power loss) is
    refused at load time and dropped at recovery; the rest of the prefix is cut there."""
    d = tmp_path / "kv"
    store = TieredKVStore(params(d, dram_blocks=1))
    keys = [7000 + j for j in range(4)]
    store.store("m", keys, [expected(k) for k in keys], now=0.0)
    store.store("m", [1], [expected(1)], now=1.0)  # push the chain out of DRAM
    store.flush()
    node = store.index.tree.match("m", keys)[2]
    path, off = _slot_offset(store, store._sslot[node])
    with open(path, "r+b") as f:  # tear: the second half of the payload is stale
        f.seek(off + HEADER_BYTES + BB // 2)
        f.write(bytes(BB // 2))
    plan = store.lookup("m", keys, now=2.0)
    assert plan.sources == [Tier.SSD] * 4
    bufs = [np.zeros(BB, np.uint8) for _ in keys]
    res = store.load(plan, bufs)
    assert res.valid_blocks == 2
    assert store.stats()["ssd_checksum_failures"] == 1
    # finishing the request without the lost bytes (the caller recomputes from block 2
    # but does not hand them back) keeps the store consistent
    store.finish_request(plan, keys, [None] * 4, now=2.5)
    store.check()
    assert store.lookup("m", keys, now=3.0, begin=False).hit_blocks == 2  # dropped
    store.close()

    # a torn block found by the recovery scan is dropped there
    store = TieredKVStore(params(d))
    node = store.index.tree.match("m", keys)[1]
    path, off = _slot_offset(store, store._sslot[node])
    store.close()
    with open(path, "r+b") as f:
        f.seek(off + HEADER_BYTES + 5)
        f.write(b"\xff\x00\xff")
    ssd = SlabStore(d, BB, SSD_SLOTS * SLOT, slab_bytes=16 * SLOT)
    assert ssd.stats.recovery_dropped == 1 and all(r.meta.key != keys[1] for r in ssd.recovered)
    ssd.close()
    store = TieredKVStore(params(d))
    assert store.lookup("m", keys, now=0.0, begin=False).hit_blocks == 1
    assert verify_all(store) == store.recovered_blocks
    store.close()


def fill_disk(where: Path, leave: int) -> Path:
    """Another writer fills the filesystem until only ``leave`` bytes are free."""
    st = os.statvfs(where)
    filler = where / "filler.bin"
    with open(filler, "wb") as f:
        f.write(bytes(max(0, st.f_bavail * st.f_frsize - leave)))
    return filler


def _full_disk_scenario(d: Path, mounted: bool) -> None:
    store = TieredKVStore(params(d, ssd_slots=40, dram_blocks=4, slab_bytes=4 * SLOT,
                                 admission="E1"))
    if mounted:  # the budget fitted at open; now the disk fills behind the store's back
        fill_disk(d.parent, 9 * SLOT)
    try:
        stored = []
        with pytest.warns(RuntimeWarning, match="SSD tier is full"):
            for r in range(12):
                keys = [r * 100 + j for j in range(4)]
                store.store("m", keys, [expected(k) for k in keys], now=float(r))
                store.flush()
                stored.append(keys)
        assert store.counters.admissions_stopped
        written = store.ssd.stats.blocks_written  # type: ignore[union-attr]
        assert 0 < written < 40
        store.check()
        # lookups and loads of what was stored keep working, byte-exact
        served = 0
        for keys in stored:
            plan = store.lookup("m", keys, now=20.0)
            bufs = [np.zeros(BB, np.uint8) for _ in range(plan.hit_blocks)]
            res = store.load(plan, bufs)
            assert res.valid_blocks == plan.hit_blocks
            for k, b in zip(keys, bufs):
                assert np.array_equal(b, expected(k))
            served += plan.hit_blocks
            store.finish_request(plan, keys, [None] * plan.hit_blocks +
                                 [expected(k) for k in keys[plan.hit_blocks:]], now=20.0)
        assert served > 4
        # new stores still land in DRAM, with no further SSD writes
        store.store("m", [999_001], [expected(999_001)], now=30.0)
        store.flush()
        assert store.ssd.stats.blocks_written == written  # type: ignore[union-attr]
        assert store.lookup("m", [999_001], now=31.0, begin=False).sources == [Tier.DRAM]
    finally:
        store.close()


def test_full_disk_stops_admissions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up after the open (another writer): admissions stop with a warning."""
    mnt = tmp_path / "tmpfs"
    if mount_tmpfs(mnt, "4m"):  # 40 slots × 68 KiB fit at open, then the filler takes it
        try:
            _full_disk_scenario(mnt / "kv", True)
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=20)
        return
    real = os.posix_fallocate
    calls = {"n": 0}

    def fallocate(fd: int, off: int, length: int) -> None:
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, off, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    _full_disk_scenario(tmp_path / "kv", False)


def test_reopen_with_a_smaller_budget_keeps_it(tmp_path: Path) -> None:
    """Shrinking the SSD budget between runs truncates the slabs to it; what survives is
    still byte-exact and the index agrees with the slots."""
    d = tmp_path / "kv"
    store = TieredKVStore(params(d, ssd_slots=40, slab_bytes=8 * SLOT))
    for r in range(8):
        keys = [r * 100 + j for j in range(5)]
        store.store("m", keys, [expected(k) for k in keys], now=float(r))
    store.close()
    assert sum(p.stat().st_size for p in d.glob("slab-*.bin")) == 40 * SLOT
    store = TieredKVStore(params(d, ssd_slots=13, slab_bytes=8 * SLOT))
    try:
        assert sum(p.stat().st_size for p in d.glob("slab-*.bin")) <= 13 * SLOT
        store.check()
        assert 0 < store.recovered_blocks <= 13
        assert verify_all(store) == store.recovered_blocks
    finally:
        store.close()
