"""aicache's SGLang HiCache storage backend, against SGLang's own classes (no engine).

References: SGLang's ``HiCacheFile`` backend driven through the same calls (the bytes
and leading-run counts must agree wherever admission kept a page), a brute-force model
of SARIA's E/R rule (which pages an offer sequence must have persisted), SGLang's
``StorageBackendFactory`` (the ``dynamic`` loader and its failure-injection switches),
and the bytes each page was stored with.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import re
import subprocess
import sys

import pytest
import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheFile, HiCacheStorageExtraInfo, HiCacheStorageFailureInjector, PoolName, PoolTransfer,
)
from sglang.srt.mem_cache.storage import StorageBackendFactory

from aicache.errors import BadInput
from aicache.integrations.sglang import SGLANG_VERSION
from aicache.integrations.sglang.storage import SariaHiCacheStorage
from aicache.kvstore.ssd import HEADER_BYTES
from sglang_harness import (
    MODULE, PAGE_BYTES, HostPages, chains, indices, payload, storage_config,
)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
SETUP = os.path.join(ROOT, "scripts", "setup.sh")

SLOT = HEADER_BYTES + -(-PAGE_BYTES // 4096) * 4096  # a page's slot on disk (4 KiB-aligned)


def ours(root, admission: str = "E2", pages: int = 1024, model: str = "tiny-llama",
         pool: HostPages | None = None, **kw) -> SariaHiCacheStorage:
    extra = {"root_dir": str(root), "ssd_bytes": pages * SLOT, "admission": admission, **kw}
    b = SariaHiCacheStorage(storage_config(extra, model=model), {})
    b.register_mem_pool_host(pool or HostPages(8))
    return b


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch):
    for v in ("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", "SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE",
              "SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY"):
        monkeypatch.delenv(v, raising=False)


# --------------------------------------------------------------------------- loader
def test_installed_sglang_is_the_pinned_release():
    assert importlib.metadata.version("sglang") == SGLANG_VERSION
    with open(SETUP) as f:  # setup.sh installs exactly this release (--no-deps)
        assert f"SGLANG_VERSION={SGLANG_VERSION}\n" in f.read()


def test_sglang_dynamic_loader_builds_our_backend(tmp_path):
    extra = {"backend_name": "aicache", "module_path": MODULE, "class_name": "SariaHiCacheStorage",
             "interface_v1": 1, "root_dir": str(tmp_path), "ssd_bytes": 16 * SLOT}
    b = StorageBackendFactory.create_backend("dynamic", storage_config(extra), None)
    assert type(b) is SariaHiCacheStorage
    b.register_mem_pool_host(HostPages(4))
    k = chains(random.Random(0), 1)[0][0]
    assert b.set(k, payload(k)) and not b.exists(k)  # E2: a page seen once is declined
    b.close()
    with pytest.raises(BadInput, match="ssd_bytes"):
        StorageBackendFactory.create_backend(
            "dynamic", storage_config({**extra, "ssd_bytes": 0}), None)


def test_readme_config_builds_our_backend(tmp_path):
    """The README's pasted extra config, after SGLang's parser takes its own keys."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    m = re.search(r"--hicache-storage-backend-extra-config '(\{.*?\})'", text, re.S)
    assert m is not None
    extra = json.loads(m.group(1))
    assert extra.pop("hicache_storage_pass_prefix_keys") is True  # SGLang's own key
    extra["root_dir"] = str(tmp_path)  # the README's NVMe path, here a temporary one
    b = StorageBackendFactory.create_backend("dynamic", storage_config(extra), None)
    assert type(b) is SariaHiCacheStorage and b.admission.label == "E2"
    assert b.ssd_bytes == 549755813888
    b.close()


# --------------------------------------------------------------------------- differential
class Pair:
    """Our backend and SGLang's HiCacheFile on the same calls, one shared source pool."""

    def __init__(self, root, admission: str, seed: int) -> None:
        self.src = HostPages(16)
        self.a = ours(root / "ours", admission, pool=self.src)
        self.f = HiCacheFile(storage_config({"file_storage_path": str(root / "file")}))
        self.f.register_mem_host_pool_v2(self.src, PoolName.KV)
        self.offers: dict[str, int] = {}  # offers of a page ours did not hold (brute force)
        self.rng = random.Random(seed)
        self.held_model: set[str] = set()
        self.saw_declined = False
        self.admit_at = 1 if admission == "full-duplicate" else 2  # E2 with prewrite

    def offer(self, keys: list[str]) -> None:
        for k in dict.fromkeys(keys):
            if k not in self.held_model:
                self.offers[k] = self.offers.get(k, 0) + 1
                if self.offers[k] >= self.admit_at:
                    self.held_model.add(k)

    def backup(self, keys: list[str]) -> None:
        slots = self.rng.sample(range(16), len(keys))
        for s, k in zip(slots, keys):
            self.src.put(s, payload(k))
        got = self.a.batch_set_v1(keys, indices(slots), HiCacheStorageExtraInfo())
        ref = self.f.batch_set_v2([PoolTransfer(PoolName.KV, indices(slots), keys=keys)])
        assert got == ref[PoolName.KV] == [True] * len(keys)  # a declined page is a success
        self.offer(keys)

    def generic_set(self, keys: list[str]) -> None:
        vals = [payload(k) for k in keys]
        assert self.a.batch_set(keys, vals) is self.f.batch_set(keys, vals) is True
        self.offer(keys)

    def lookup(self, keys: list[str]) -> None:
        n_a = self.a.batch_exists(keys, HiCacheStorageExtraInfo(prefix_keys=[]))
        n_f = self.f.batch_exists(keys)
        model = next((i for i, k in enumerate(keys) if k not in self.held_model), len(keys))
        assert n_a == model <= n_f  # declined pages are missing, nothing else is
        self.saw_declined |= n_a < n_f
        if self.admit_at == 1:
            assert n_a == n_f
        # load what ours holds, both ways, into fresh pools: the bytes as stored, as HiCacheFile's
        dst_a, dst_f = HostPages(16), HostPages(16)
        slots = list(range(n_a))
        self.a.mem_pool_host, self.f.registered_pools = dst_a, {PoolName.KV: dst_f}
        try:
            ok_a = self.a.batch_get_v1(keys[:n_a], indices(slots))
            got_f = self.f.batch_get_v2([PoolTransfer(PoolName.KV, indices(slots), keys=keys[:n_a])])
        finally:
            self.a.mem_pool_host, self.f.registered_pools = self.src, {PoolName.KV: self.src}
        assert ok_a == got_f[PoolName.KV] == [True] * n_a
        for s, k in zip(slots, keys):
            assert same_bytes(dst_a.page(s), payload(k)) and same_bytes(dst_f.page(s), payload(k))
        for k in keys[n_a:]:
            t = torch.zeros(PAGE_BYTES // 2, dtype=torch.bfloat16)
            assert (self.a.get(k, t) is not None) == (k in self.held_model)
            assert self.a.exists(k) == (k in self.held_model) <= self.f.exists(k)

    def generic_get(self, keys: list[str]) -> None:
        ta = [torch.zeros(PAGE_BYTES // 2, dtype=torch.bfloat16) for _ in keys]
        tf = [torch.zeros(PAGE_BYTES // 2, dtype=torch.bfloat16) for _ in keys]
        got_a, got_f = self.a.batch_get(keys, ta), self.f.batch_get(keys, tf)
        for k, ga, gf in zip(keys, got_a, got_f):
            assert (ga is not None) == (k in self.held_model)
            if ga is not None:
                assert gf is not None and same_bytes(ga, gf) and same_bytes(ga, payload(k))

    def close(self) -> None:
        self.a.close()


@pytest.mark.parametrize("admission", ["full-duplicate", "E2"])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_answers_and_bytes_as_hicache_file(tmp_path, admission, seed):
    """Random prefix chains through backups (v1 vs HiCacheFile's v2), generic sets, leading-run
    queries and loads. Full duplicate answers exactly as HiCacheFile; under E2 a page is
    held iff it was offered twice (its first re-offer is admitted, by prewrite), and every
    held page's bytes match HiCacheFile's and the stored ones."""
    p = Pair(tmp_path, admission, seed)
    rng = random.Random(seed)
    cs = chains(rng, 12)
    for _ in range(80):
        c = rng.choice(cs)
        op = rng.random()
        if op < 0.35:
            p.backup(c)
        elif op < 0.5:
            p.generic_set(c)
        elif op < 0.85:
            p.lookup(c)
        else:
            p.generic_get(c)
    assert p.held_model and p.saw_declined == (admission == "E2")  # both outcomes were seen
    m = p.a.metrics()
    assert m["pages_written"] == len(p.held_model)
    if admission == "E2":
        assert m["admissions_declined"] == sum(1 for v in p.offers.values() if v >= 1)
    p.close()


# --------------------------------------------------------------------------- SARIA evidence
def test_reuse_counts_known_pages_once_per_request(tmp_path):
    """R2: a page is admitted once two requests asked for it after it was first offered; a
    continuation query (prefix ending at the previous query's last page) does not recount."""
    b = ours(tmp_path, "R2")
    a, c, d = chains(random.Random(3), 1, max_pages=1)[0][0], "c" * 64, "d" * 64
    assert b.set(a, payload(a)) and not b.held(a)  # first offer, R=0
    assert b.batch_exists([a, c]) == 0 and b.batch_exists([d], HiCacheStorageExtraInfo(
        prefix_keys=[a, c])) == 0  # one request: the continuation does not recount a
    assert b.set(a, payload(a)) and not b.held(a)  # R=1 < 2
    assert b.batch_exists([c], HiCacheStorageExtraInfo(prefix_keys=[a])) == 0  # a on host: R=2
    assert b.set(a, payload(a)) and b.held(a)
    b.close()


# --------------------------------------------------------------------------- durability
def test_capacity_never_exceeded_and_held_pages_keep_their_bytes(tmp_path):
    b = ours(tmp_path, "full-duplicate", pages=8)
    keys = [k for c in chains(random.Random(5), 10) for k in c]
    for k in keys:
        assert b.set(k, payload(k))
        assert b._chunks is not None and b._chunks.store.ssd is not None
        assert b._chunks.store.ssd.files_size() <= 8 * SLOT
    held = [k for k in set(keys) if b.held(k)]
    m = b.metrics()
    assert len(held) == 8 == m["pages_written"] - m["pages_dropped"] and m["pages_dropped"] > 0
    for k in held:
        t = torch.zeros(PAGE_BYTES // 2, dtype=torch.bfloat16)
        assert b.get(k, t) is not None and same_bytes(t, payload(k))
    b.close()


_CRASH = """
import os, sys
sys.path[:0] = {tests!r}  # this file's folder, and tests/ for sglang_harness
from sglang_harness import chains, payload
import random
from test_integration_sglang_storage import ours
b = ours({root!r}, "full-duplicate")
for k in chains(random.Random(7), 4)[0]:
    assert b.set(k, payload(k))
os._exit(0)  # no close: the process dies with the store open
"""


def test_new_backend_on_same_directory_serves_what_was_persisted(tmp_path):
    code = _CRASH.format(tests=[os.path.dirname(__file__), os.path.join(ROOT, "tests")], root=str(tmp_path))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    keys = chains(random.Random(7), 4)[0]
    b = ours(tmp_path, "E2")
    assert b.metrics()["recovered_pages"] == len(keys)
    assert b.batch_exists(keys) == len(keys)
    dst = HostPages(8)
    b.mem_pool_host = dst
    assert b.batch_get_v1(keys, indices(list(range(len(keys))))) == [True] * len(keys)
    for s, k in enumerate(keys):
        assert same_bytes(dst.page(s), payload(k))
    b.close()
    other = ours(tmp_path, "E2", model="another-model")  # another layout's pages: never served
    assert other.batch_exists(keys) == 0 and other.metrics()["recovered_pages"] == 0
    other.close()


def test_corrupt_page_is_a_miss_never_wrong_bytes(tmp_path):
    b = ours(tmp_path, "full-duplicate")
    keys = chains(random.Random(8), 1)[0]
    for k in keys:
        b.set(k, payload(k))
    assert b._chunks is not None and b._chunks.store.ssd is not None
    for slab in b._chunks.store.ssd.iter_slabs():  # flip a byte in every stored payload
        raw = bytearray(slab.read_bytes())
        for off in range(0, len(raw), SLOT):
            if raw[off:off + 8] == b"AICKVBLK":
                raw[off + HEADER_BYTES + 3] ^= 0xFF
        slab.write_bytes(bytes(raw))
    dst = HostPages(8)
    b.mem_pool_host = dst
    assert b.batch_get_v1(keys[:1], indices([0])) == [False]
    assert torch.count_nonzero(dst.kv_buffer.view(torch.uint8)) == 0  # nothing landed
    t = torch.zeros(PAGE_BYTES // 2, dtype=torch.bfloat16)
    assert b.get(keys[0], t) is None and not b.exists(keys[0])  # forgotten: a miss from now on
    assert b.metrics()["read_failures"] == 1
    b.close()


def test_clear_forgets_every_page(tmp_path):
    b = ours(tmp_path, "full-duplicate")
    keys = chains(random.Random(9), 1)[0]
    assert b.batch_set(keys, [payload(k) for k in keys])
    b.clear()
    assert b.batch_exists(keys) == 0
    assert b.set(keys[0], payload(keys[0])) and b.exists(keys[0])
    b.close()


@pytest.mark.parametrize("prob, delay", [("1.0", None), ("0.5", None), (None, "0.002"),
                                         ("0.5", "0.002")])
def test_sglang_failure_injection_never_yields_wrong_bytes(tmp_path, monkeypatch, prob, delay):
    """SGLang's own test switches wrap the backend in its injector (random failures, random
    delays before each call): a call either fails as a miss/False or gives the stored
    bytes; with delays alone every call succeeds (a delay is not a fault)."""
    for name, value in (("SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE", prob),
                        ("SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY", delay)):
        if value is not None:
            monkeypatch.setenv(name, value)
    extra = {"backend_name": "aicache", "module_path": MODULE, "class_name": "SariaHiCacheStorage",
             "interface_v1": 1, "root_dir": str(tmp_path), "ssd_bytes": 64 * SLOT,
             "admission": "full-duplicate"}
    b = StorageBackendFactory.create_backend("dynamic", storage_config(extra), None)
    assert isinstance(b, HiCacheStorageFailureInjector)
    pool = HostPages(8)
    b.register_mem_pool_host(pool)
    keys = chains(random.Random(10), 1, max_pages=6)[0]
    for k in keys:
        b.set(k, payload(k))
    for _ in range(20):
        n = b.batch_exists(keys)
        assert 0 <= n <= len(keys)
        t = torch.zeros(PAGE_BYTES // 2, dtype=torch.bfloat16)
        k = keys[0]
        got = b.get(k, t)
        assert got is None or same_bytes(got, payload(k))
        dst = HostPages(8)
        b._backend.mem_pool_host = dst  # type: ignore[attr-defined]
        res = b.batch_get_v1(keys, indices(list(range(len(keys)))))
        for s, (k2, ok) in enumerate(zip(keys, res)):
            if ok:
                assert same_bytes(dst.page(s), payload(k2))
        if prob is None:
            assert n == len(keys) and got is not None and all(res)
    if prob == "1.0":
        assert b.batch_exists(keys) == 0 and not b.set(keys[0], payload(keys[0]))
    b.close()
