"""Faults of the real KV store's directory and identity, on real files (a real tmpfs where
the disk must be small): a block is its whole chain across restarts, a failed open gives
the directory back, an SSD budget the disk cannot hold is refused at open, a failed slab
allocation leaves nothing behind, a damaged ``meta.json`` is a one-line error.

Payloads are a pure function of the block's *whole path*, so a block served under
another prefix — even one with the same hash — is caught without trusting the store.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fsfixtures import mount_tmpfs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicache.errors import BadInput, UnknownName
from aicache.kv.models import ModelSpec
from aicache.kv.admission import AdmissionRule
from aicache.kv.saria import KVIndexParams, Tier
from aicache.kvstore.ssd import HEADER_BYTES
from aicache.kvstore.store import TieredKVStore, TieredKVStoreParams

MODEL = ModelSpec("faults-tiny", 1, 2, 8, block_tokens=8)  # 512-byte blocks
BB = MODEL.block_bytes
SLOT = HEADER_BYTES + 4096


def payload(path: tuple[int, ...]) -> np.ndarray:
    """Block ``path[-1]``'s bytes under the prefix ``path[:-1]``."""
    seed = int.from_bytes(hashlib.blake2b(repr(path).encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).integers(0, 256, BB, dtype=np.uint8)


def params(d: Path, ssd_slots: int = 64, dram_blocks: int = 1, slab_slots: int = 16,
           **kw: object) -> TieredKVStoreParams:
    ip = KVIndexParams(model=MODEL, dram_bytes=dram_blocks * BB, ssd_bytes=ssd_slots * SLOT,
                       admission=AdmissionRule.parse("full-duplicate"), **kw)  # type: ignore[arg-type]
    return TieredKVStoreParams(ip, d, slab_bytes=slab_slots * SLOT, io_threads=2)


def store_prompt(store: TieredKVStore, keys: list[int], now: float) -> None:
    store.store("m", keys, [payload(tuple(keys[: i + 1])) for i in range(len(keys))], now=now)


def served(store: TieredKVStore, keys: list[int], now: float = 100.0) -> list[np.ndarray]:
    """The bytes a begun lookup + load serves for ``keys`` (only the valid blocks)."""
    plan = store.lookup("m", keys, now=now)
    bufs = [np.zeros(BB, np.uint8) for _ in range(plan.hit_blocks)]
    res = store.load(plan, bufs)
    store.release(plan)
    return bufs[: res.valid_blocks]


def assert_whole_chain(store: TieredKVStore, keys: list[int], want_hits: int) -> None:
    got = served(store, keys)
    assert len(got) == want_hits, (keys, len(got), want_hits)
    for i, b in enumerate(got):
        assert np.array_equal(b, payload(tuple(keys[: i + 1]))), (keys, i)


# --------------------------------------------------------------- identity = the whole chain
WRITER = textwrap.dedent("""
    import sys, time
    sys.path[:0] = {testdirs!r}  # this file's folder, and tests/ for its helpers
    from pathlib import Path
    from test_kvstore_faults import params, store_prompt
    from aicache.kvstore.store import TieredKVStore
    store = TieredKVStore(params(Path({d!r})))
    for t, keys in enumerate({prompts!r}):
        store_prompt(store, keys, float(t))
    store.flush()
    print("ready", flush=True)
    time.sleep(600)   # killed here: the restart is a new process
""")


def test_restart_never_serves_a_block_under_another_prefix(tmp_path: Path) -> None:
    """The issue's case: [5,1,2] then [1] are stored by a process that is killed; after
    the restart [1,2] (never stored) hits only [1], and [5,1,2] comes back whole."""
    d = tmp_path / "kv"
    prompts = [[5, 1, 2], [1], [7, 7, 7]]  # 7 repeats under its own prefix, too
    code = WRITER.format(testdirs=[str(Path(__file__).parent), str(Path(__file__).resolve().parents[1])], d=str(d), prompts=prompts)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    store = TieredKVStore(params(d))
    try:
        store.check()
        assert store.recovered_blocks == 7 and store.orphans_dropped == 0
        assert_whole_chain(store, [1, 2], 1)
        assert_whole_chain(store, [5, 1, 2], 3)
        assert_whole_chain(store, [7, 7, 7], 3)
        assert_whole_chain(store, [7, 7, 7, 7], 3)
        assert_whole_chain(store, [1, 5], 1)
        assert store.lookup("m", [2], begin=False).hit_blocks == 0
    finally:
        store.close()


prompt = st.lists(st.integers(1, 3), min_size=1, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompts=st.lists(prompt, min_size=1, max_size=12), probes=st.lists(prompt, max_size=6))
def test_reopened_store_serves_exactly_the_stored_chains(tmp_path_factory, prompts, probes) -> None:
    """Against a set of stored paths (the reference): after a reopen every lookup hits
    exactly the longest stored prefix, each block with its own path's bytes."""
    d = tmp_path_factory.mktemp("kv")
    store = TieredKVStore(params(d))
    for t, keys in enumerate(prompts):
        store_prompt(store, keys, float(t))
    store.close()
    stored = {tuple(k[: i + 1]) for k in prompts for i in range(len(k))}
    store = TieredKVStore(params(d))
    try:
        store.check()
        assert store.recovered_blocks == len(stored)
        for keys in prompts + probes:
            want = max((i for i in range(len(keys) + 1) if i == 0 or tuple(keys[:i]) in stored))
            assert_whole_chain(store, keys, want)
    finally:
        store.close()


def _slot_place(store: TieredKVStore, node: object) -> tuple[Path, int]:
    ssd = store.ssd
    assert ssd is not None
    slab, i = divmod(store._sslot[node], ssd.slab_slots)  # type: ignore[index]
    return ssd.dir / f"slab-{slab:05d}.bin", i * ssd.slot_disk_bytes


def _swap_slots(pa: Path, oa: int, pb: Path, ob: int, size: int) -> None:
    """Exchange the ``size``-byte slots at ``pa``:``oa`` and ``pb``:``ob`` on disk."""
    with open(pa, "r+b") as fa, open(pb, "r+b") as fb:
        fa.seek(oa)
        slot_a = fa.read(size)
        fb.seek(ob)
        slot_b = fb.read(size)
        fa.seek(oa)
        fa.write(slot_b)
        fb.seek(ob)
        fb.write(slot_a)


def test_swapped_slots_are_a_miss_then_recovered_by_their_headers(tmp_path: Path) -> None:
    """Two valid blocks with the same hash under different prefixes trade slots behind
    the store's back (a misdirected write): the open store refuses them (identity, not
    just the checksum), and a reopen files each under its own chain again."""
    d = tmp_path / "kv"
    store = TieredKVStore(params(d))
    store_prompt(store, [1, 2], 0.0)
    store_prompt(store, [3, 2], 1.0)
    store_prompt(store, [9], 2.0)  # the one DRAM slot goes to [9]: the others load from SSD
    store.flush()
    a = store.index.tree.match("m", [1, 2])[1]
    b = store.index.tree.match("m", [3, 2])[1]
    (pa, oa), (pb, ob) = _slot_place(store, a), _slot_place(store, b)
    size = store.ssd.slot_disk_bytes  # type: ignore[union-attr]
    _swap_slots(pa, oa, pb, ob, size)
    try:
        assert store.lookup("m", [1, 2], now=3.0, begin=False).sources == [Tier.SSD] * 2
        assert_whole_chain(store, [1, 2], 1)  # block 2 is a miss, never [3,2]'s bytes
        assert_whole_chain(store, [3, 2], 1)
        assert store.stats()["ssd_identity_mismatches"] == 2
        store.check()
    finally:
        store.close()
    store = TieredKVStore(params(d))
    try:  # the refused copies were freed: only the first blocks (and [9]) are left
        assert_whole_chain(store, [1, 2], 1)
        assert_whole_chain(store, [3, 2], 1)
        assert_whole_chain(store, [9], 1)
    finally:
        store.close()


def test_swapped_slots_found_by_recovery_follow_their_headers(tmp_path: Path) -> None:
    d = tmp_path / "kv"
    store = TieredKVStore(params(d))
    store_prompt(store, [1, 2], 0.0)
    store_prompt(store, [3, 2], 1.0)
    a = store.index.tree.match("m", [1, 2])[1]
    b = store.index.tree.match("m", [3, 2])[1]
    (pa, oa), (pb, ob) = _slot_place(store, a), _slot_place(store, b)
    size = store.ssd.slot_disk_bytes  # type: ignore[union-attr]
    store.close()
    _swap_slots(pa, oa, pb, ob, size)
    store = TieredKVStore(params(d))
    try:
        assert store.recovered_blocks == 4
        assert_whole_chain(store, [1, 2], 2)
        assert_whole_chain(store, [3, 2], 2)
    finally:
        store.close()


# ------------------------------------------------------------------- a failed open
def test_failed_open_gives_the_directory_back(tmp_path: Path) -> None:
    d = tmp_path / "kv"
    TieredKVStore(params(d)).close()
    with pytest.raises(UnknownName):  # fails after the slab store took the lock
        TieredKVStore(params(d, dram_policy="no-such-policy"))
    (d / "slab-00000.bin").mkdir()  # fails inside the slab store's open
    with pytest.raises(BadInput, match="slab-00000.bin is not a regular file"):
        TieredKVStore(params(d))
    (d / "slab-00000.bin").rmdir()
    store = TieredKVStore(params(d))  # the same process opens it again
    store_prompt(store, [1], 0.0)
    assert_whole_chain(store, [1], 1)
    store.close()


# ---------------------------------------------------------------- budget vs free disk
@pytest.fixture
def small_fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A 1 MiB filesystem: a real tmpfs, or (where mounting is not allowed) free space
    and allocation limited to 1 MiB by wrapping ``statvfs`` / ``posix_fallocate``."""
    mnt = tmp_path / "small"
    if mount_tmpfs(mnt, "1m"):
        yield mnt
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=20)
        return
    limit = 1 << 20
    real_statvfs, real_falloc = os.statvfs, os.posix_fallocate

    def used() -> int:
        return sum(p.stat().st_size for p in mnt.rglob("*") if p.is_file())

    def statvfs(path):  # type: ignore[no-untyped-def]
        st = real_statvfs(path)
        if str(path).startswith(str(mnt)):
            return os.statvfs_result((4096, 4096, limit // 4096, 0, (limit - used()) // 4096,
                                      *tuple(st)[5:]))
        return st

    def fallocate(fd: int, off: int, length: int) -> None:
        if used() - os.fstat(fd).st_size + length > limit:
            os.ftruncate(fd, length // 2)  # a partial allocation, then the failure
            raise OSError(errno.ENOSPC, "No space left on device")
        real_falloc(fd, off, length)

    monkeypatch.setattr(os, "statvfs", statvfs)
    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    yield mnt


def test_budget_larger_than_the_disk_is_refused_at_open(small_fs: Path) -> None:
    """200 slots × 8 KiB = 1.6 MiB on a 1 MiB disk: one line naming the budget and the
    free space at the first open, nothing left behind, and a budget that fits opens."""
    d = small_fs / "kv"
    with pytest.raises(BadInput) as e:
        TieredKVStore(params(d, ssd_slots=200))
    msg = str(e.value)
    assert "\n" not in msg and f"SSD budget of {200 * SLOT} B" in msg and "free" in msg
    assert "lower the SSD budget" in msg
    assert not list(d.glob("slab-*.bin"))
    store = TieredKVStore(params(d, ssd_slots=64))  # fits: the failed open kept no lock
    store_prompt(store, [1, 2], 0.0)
    assert_whole_chain(store, [1, 2], 2)
    store.close()


def test_failed_slab_allocation_leaves_no_partial_slab(small_fs: Path) -> None:
    """The budget fits at open; another writer then fills the disk, so a slab cannot be
    allocated: admissions stop, no partial slab is left, the store reopens — while the
    disk is still full (its slabs are intact: the budget is capped to them, with a
    warning), and with its whole budget once space is back — and serves every block it
    wrote."""
    import warnings
    d = small_fs / "kv"
    p = params(d, ssd_slots=100)  # 800 KiB of 1 MiB, in slabs of 16 slots (128 KiB)
    store = TieredKVStore(p)
    filler = small_fs / "filler.bin"
    st_ = os.statvfs(small_fs)
    with open(filler, "wb") as f:  # leave room for one slab, not two
        f.write(bytes(st_.f_bavail * st_.f_frsize - 200 * 1024))
    prompts = [[r * 10 + j for j in range(4)] for r in range(10)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t, keys in enumerate(prompts):
            store_prompt(store, keys, float(t))
            store.flush()
    assert store.counters.admissions_stopped
    assert any("SSD tier is full" in str(w.message) for w in caught)
    written = store.ssd.stats.blocks_written  # type: ignore[union-attr]
    assert 0 < written < 40
    store.check()
    store.close()
    sizes = [q.stat().st_size for q in d.glob("slab-*.bin")]
    assert sizes and all(sz == 16 * SLOT for sz in sizes)  # whole slabs only
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = TieredKVStore(p)  # the disk is still full: reopened on its slabs
    assert any("does not fit" in str(w.message) for w in caught)
    try:
        free = os.statvfs(d).f_bavail * os.statvfs(d).f_frsize
        # its slabs' slots, and what the free space adds: not the whole budget
        assert store.ssd.n_slots == len(sizes) * 16 + free // SLOT < 100  # type: ignore[union-attr]
        store.check()
        assert store.recovered_blocks == written
        for node in list(store._sslot):
            path = node.path()
            assert_whole_chain(store, path, len(path))  # type: ignore[arg-type]
    finally:
        store.close()
    assert sorted(q.stat().st_size for q in d.glob("slab-*.bin")) == sorted(sizes)  # intact
    filler.unlink()
    store = TieredKVStore(p)
    try:
        store.check()
        assert store.recovered_blocks == len(store._sslot) > 0
        for node in list(store._sslot):
            path = node.path()
            assert_whole_chain(store, path, len(path))  # type: ignore[arg-type]
        store_prompt(store, [999, 998], 50.0)  # admissions work again: room is back
        store.flush()
        assert_whole_chain(store, [999, 998], 2)
        assert store.ssd.stats.blocks_written == 2  # type: ignore[union-attr]
    finally:
        store.close()


# ---------------------------------------------------------------------- meta.json
@pytest.mark.parametrize("damage", ["garbage", "empty", "directory", "not-a-dict"])
def test_damaged_meta_json_is_a_one_line_error_naming_the_file(tmp_path: Path,
                                                               damage: str) -> None:
    d = tmp_path / "kv"
    TieredKVStore(params(d)).close()
    meta = d / "meta.json"
    meta.unlink()
    if damage == "directory":
        meta.mkdir()
    else:
        meta.write_text({"garbage": "{not json", "empty": "", "not-a-dict": "[1, 2]"}[damage])
    with pytest.raises(BadInput) as e:
        TieredKVStore(params(d))
    msg = str(e.value)
    assert "\n" not in msg and str(meta) in msg and f"delete {d}" in msg
    if damage == "directory":
        meta.rmdir()
    else:
        meta.unlink()
    TieredKVStore(params(d)).close()  # the failed open released the directory


def test_meta_json_of_another_format_names_the_fix(tmp_path: Path) -> None:
    d = tmp_path / "kv"
    d.mkdir()
    (d / "meta.json").write_text('{"format": 1, "slot_bytes": 512, "header_bytes": 4096, '
                                 '"slab_slots": 16}')
    with pytest.raises(BadInput, match="format 1; this version reads format 2"):
        TieredKVStore(params(d))


def test_a_path_of_the_wrong_type_is_a_one_line_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(BadInput, match="is not a directory"):
        TieredKVStore(params(f))
    d = tmp_path / "kv"
    (d / "lock").mkdir(parents=True)
    with pytest.raises(BadInput, match="lock file"):
        TieredKVStore(params(d))


def test_hybrid_model_is_refused_naming_what_it_would_need(tmp_path: Path) -> None:
    """The store keeps dense KV only: a hybrid model's checkpoint blocks do not fit its one
    slot size, so the open fails at once, naming the model, the extra bytes and the doc."""
    from aicache.kv.models import get_model

    hybrid = get_model("qwen3.5-9b")
    assert hybrid.hybrid
    ip = KVIndexParams(model=hybrid, dram_bytes=4 * hybrid.block_bytes,
                       ssd_bytes=8 * hybrid.block_bytes)
    with pytest.raises(BadInput) as e:
        TieredKVStore(TieredKVStoreParams(ip, str(tmp_path / "kv")))
    msg = str(e.value)
    assert "qwen3.5-9b is hybrid" in msg and str(hybrid.checkpoint_bytes) in msg
    assert "docs/results/kv-models.md" in msg and "\n" not in msg
    assert not (tmp_path / "kv").exists()  # refused before touching the directory
