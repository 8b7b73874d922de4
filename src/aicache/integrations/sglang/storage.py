"""``SariaHiCacheStorage``: SGLang's HiCache storage tier on aicache's SSD store, with SARIA admission.

SGLang's HiCache backs up every page its host-memory tier receives to the storage
backend (``batch_set``/``batch_set_v1``) and, for a request whose prefix missed device
and host memory, asks the backend how long a run of the following pages it holds
(``batch_exists``) before fetching them (``batch_get``/``batch_get_v1``). Its ``file``
backend writes every page. This backend persists a page only when SARIA's admission rule
admits it (:class:`~aicache.integrations.chunk_tier.AdmissionGate`):

* a page offered again after its first offer was evicted from host memory and recomputed:
  ``E_b += 1``;
* a known page a request asks for (``batch_exists``) or already had on device or host
  (``extra_info.prefix_keys``, the request's chain before the asked pages, passed when
  the extra config sets ``"hicache_storage_pass_prefix_keys": true``) was reused:
  ``R_b += 1``, once per request — a continuation query (its prefix ends with the
  previous query's last page) counts only its own pages.

``admission="full-duplicate"`` writes every page (the ``file`` backend's behaviour, one
flag away). A declined page's ``set`` still returns True (the backend took the page and
chose not to keep it, as a cache may; False would stop SGLang backing up the rest of the
batch) and ``exists`` reports it missing. False means an I/O failure.

Keys are SGLang's page hashes (SHA-256 hex, chained from the sequence start, so a page
needs no parent to be found again); each page is one block under a namespace that digests
the model, the page geometry and layout, the dtype and the parallel layout — a directory
shared by another model or layout never serves its payloads here. Each rank keeps its own
slab directory under ``root_dir`` (the slab store locks its directory).

Threads: SGLang calls a backend from its prefetch and backup threads; every call here
runs under one lock and returns when its I/O is done (as the ``file`` backend's do).
Only KV pools are stored (``batch_*_v1`` and the generic calls); hybrid models' extra
pools (the ``_v2`` calls) are not supported.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo,
)

from aicache.errors import BadInput
from aicache.integrations.chunk_tier import (
    AdmissionGate, Offer, SlabChunkStore, StoreKey, digest32, make_admission, tier_write_budget,
)

if TYPE_CHECKING:
    from sglang.srt.mem_cache.pool_host import HostKVCache

log = logging.getLogger(__name__)


class PageHostPool(Protocol):
    """What this backend uses of SGLang's host KV pool (``HostKVCache``): a page is
    copied out flat and back in, whatever the pool's layout."""

    page_size: int

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor: ...
    def get_dummy_flat_data_page(self) -> torch.Tensor: ...
    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None: ...


@dataclass(slots=True)
class BackendMetrics:
    pages_offered: int = 0
    already_held: int = 0
    pages_written: int = 0
    write_failures: int = 0
    bytes_written: int = 0
    pages_read: int = 0
    read_failures: int = 0
    bytes_read: int = 0
    exists_queries: int = 0
    pages_dropped: int = 0
    recovered_pages: int = 0


def _flat_u8(t: torch.Tensor) -> np.ndarray:
    """A flat uint8 numpy view of a CPU tensor's bytes (a copy only if not contiguous)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()


class SariaHiCacheStorage(HiCacheStorage):  # type: ignore[misc]  # SGLang is untyped (Any)
    """A HiCache storage backend with SARIA admission over the SSD slab store (module
    docstring). Built by SGLang's ``dynamic`` loader as ``cls(storage_config, kwargs)``;
    configuration comes from ``storage_config.extra_config`` (then ``kwargs``): ``root_dir``
    and ``ssd_bytes`` (the slab files' byte budget per rank) are required; ``admission``
    (``E2`` default, ``R8``, ``E2∨R8``, ``full-duplicate``, or a name in
    :data:`~aicache.kv.admissions.SSD_ADMISSIONS` with its ``admission_args``),
    ``prewrite`` (default true), ``ssd_write_budget`` (``1DWPD`` of ``ssd_bytes`` or a rate
    such as ``200MB/s``) and ``ssd_write_window`` (default 10 min), ``io_threads``, ``metadata_entries`` (pages whose counters are kept; default 8 × SSD
    slots), ``slab_bytes``, ``page_bytes`` (else taken from the host pool or the first page).
    """

    def __init__(self, storage_config: HiCacheStorageConfig,
                 kwargs: dict[str, object] | None = None) -> None:
        cfg: dict[str, object] = {**(storage_config.extra_config or {}), **(kwargs or {})}
        self.config = storage_config
        root = cfg.get("root_dir")
        if not root:
            raise BadInput("SGLang storage backend aicache: set \"root_dir\" in "
                           "--hicache-storage-backend-extra-config to the SSD directory")
        self.ssd_bytes = _positive_int(cfg, "ssd_bytes", "the SSD byte budget per rank "
                                       "(e.g. 107374182400 for 100 GiB)")
        self.prewrite = _as_bool(cfg.get("prewrite", True))
        args = cfg.get("admission_args")
        self._page_bytes = 1  # a page's bytes once the store is open (budgets count bytes)
        self.write_budget = tier_write_budget(cfg.get("ssd_write_budget"),
                                              cfg.get("ssd_write_window"), self.ssd_bytes)
        self.admission = make_admission(str(cfg.get("admission", "E2")), self.prewrite,
                                        args if isinstance(args, dict) else None,
                                        size_of=lambda n: self._page_bytes,
                                        budget=self.write_budget)
        self.io_threads = _positive_int(cfg, "io_threads", "a thread count", default=4)
        self.slab_bytes = _positive_int(cfg, "slab_bytes", "a slab file size", default=32 << 20)
        self._metadata_entries = (None if cfg.get("metadata_entries") is None else _positive_int(
            cfg, "metadata_entries", "the number of pages whose counters are kept"))
        page_bytes = cfg.get("page_bytes")
        c = storage_config
        self.dir = Path(str(root)) / (f"tp{c.tp_rank}of{c.tp_size}-pp{c.pp_rank}of{c.pp_size}"
                                      f"-cp{c.attn_cp_rank}of{c.attn_cp_size}-dp{c.dp_rank}")
        self._lock = threading.Lock()
        self._chunks: SlabChunkStore | None = None
        self._gate: AdmissionGate | None = None
        self._ns = ""
        self._held: set[StoreKey] = set()
        self._tail: str | None = None  # last page of the previous exists query
        self._dtype = ""
        self._staging: torch.Tensor | None = None
        self.m = BackendMetrics()
        self._clock: Callable[[], float] = time.monotonic  # admissions' clock (tests replace it)
        self._t0 = self._clock()
        if page_bytes is not None:
            self._open(_positive_int(cfg, "page_bytes", "the bytes of one KV page"))

    # ------------------------------------------------------------------ opening
    def register_mem_pool_host(self, mem_pool_host: HostKVCache) -> None:
        super().register_mem_pool_host(mem_pool_host)
        page = mem_pool_host.get_dummy_flat_data_page()
        with self._lock:
            self._dtype = str(page.dtype)
            self._staging = page
            self._open(page.numel() * page.element_size())

    def _open(self, page_bytes: int) -> SlabChunkStore:
        """The chunk store for pages of ``page_bytes`` (opened once; recovers old pages)."""
        if self._chunks is not None:
            if self._chunks.chunk_bytes != page_bytes:
                raise BadInput(f"page of {page_bytes} B: this backend stores pages of "
                               f"{self._chunks.chunk_bytes} B")
            return self._chunks
        chunks = SlabChunkStore(self.dir, self.ssd_bytes, page_bytes,
                                io_threads=self.io_threads, slab_bytes=self.slab_bytes)
        self._page_bytes = page_bytes
        cap = self._metadata_entries or 8 * max(1, chunks.n_slots)
        self._gate = AdmissionGate(self.admission, cap)
        self._ns = _namespace(self.config, page_bytes, self._dtype)
        for sk, ev in chunks.recovered(self._ns):
            self._held.add(sk)
            self._gate.learn(sk, ev)  # known, with its persisted counters: its reuse counts
        self.m.recovered_pages = len(self._held)
        self._chunks = chunks
        return chunks

    def _skey(self, key: str) -> StoreKey:
        try:
            raw = bytes.fromhex(key) if len(key) == 64 else key.encode()
        except ValueError:
            raw = key.encode()
        return self._ns, digest32(raw)

    # ------------------------------------------------------------------ lookups
    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: list[str],
                     extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        """The number of leading ``keys`` held; counts the request's reuse of known pages
        (module docstring)."""
        with self._lock:
            self.m.exists_queries += 1
            if self._chunks is None or not keys:
                return 0
            gate = self._gate
            assert gate is not None
            prefix = extra_info.prefix_keys if extra_info is not None else None
            chain: Sequence[str] = keys
            if prefix and prefix[-1] != self._tail:
                chain = [*prefix, *keys]
            now = self._clock()
            for k in chain:  # the known run from the chain's start: the pages it reused
                if not gate.reference(self._skey(k), now):
                    break
            self._tail = keys[-1]
            n = 0
            for k in keys:
                if self._skey(k) not in self._held:
                    break
                n += 1
            return n

    # ------------------------------------------------------------------ writes
    def _offer(self, keys: Sequence[str], pages: Sequence[np.ndarray]) -> list[bool]:
        """Offer pages for storage; per page: False only for a failed write."""
        chunks = self._chunks
        if chunks is None and pages:
            chunks = self._open(pages[0].shape[0])
        if chunks is None:
            return []
        gate = self._gate
        assert gate is not None
        m = self.m
        results = [True] * len(keys)
        now = self._clock()
        todo: list[tuple[StoreKey, np.ndarray]] = []
        where: dict[StoreKey, int] = {}
        for i, (k, data) in enumerate(zip(keys, pages)):
            m.pages_offered += 1
            if data.shape[0] != chunks.chunk_bytes:
                log.warning("aicache storage: page %s has %d B, pages here are %d B",
                            k, data.shape[0], chunks.chunk_bytes)
                results[i] = False
                continue
            sk = self._skey(k)
            if sk in self._held or sk in where:
                m.already_held += 1
                continue
            if gate.offer(sk, Offer(now=now)):
                where[sk] = i
                todo.append((sk, data))
        if not todo:
            return results
        out = chunks.write(todo, self._ns,
                           {sk: ev for sk, _ in todo if (ev := gate.evidence(sk)) is not None})
        self._held.update(out.ok)
        self._held.difference_update(out.dropped)
        m.pages_dropped += len(out.dropped)
        m.pages_written += len(out.ok)
        m.bytes_written += len(out.ok) * chunks.chunk_bytes
        m.write_failures += len(out.failed)
        for sk in out.failed:
            results[where[sk]] = False
        return results

    def set(self, key: str, value: torch.Tensor | None = None,
            target_location: object | None = None, target_sizes: object | None = None) -> bool:
        if value is None:
            return False
        with self._lock:
            return all(self._offer([key], [_flat_u8(value)]))

    def batch_set(self, keys: list[str], values: Sequence[torch.Tensor] | None = None,
                  target_locations: object | None = None,
                  target_sizes: object | None = None) -> bool:
        if values is None or len(values) != len(keys):
            return False
        with self._lock:
            return all(self._offer(keys, [_flat_u8(v) for v in values]))

    def batch_set_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Back up pages from the host pool (page ``i`` starts at ``host_indices[i ·
        page_size]``)."""
        pool = self._pool()
        ps = pool.page_size
        if host_indices.numel() != len(keys) * ps:
            return [False] * len(keys)
        idx = host_indices.tolist()
        with self._lock:
            pages = [_flat_u8(pool.get_data_page(int(idx[i * ps]), flat=True))
                     for i in range(len(keys))]
            return self._offer(keys, pages)

    # ------------------------------------------------------------------ reads
    def _read(self, key: str, dst: np.ndarray) -> bool:
        chunks = self._chunks
        sk = self._skey(key)
        if chunks is None or sk not in self._held:
            return False
        if chunks.read(sk, dst):
            self.m.pages_read += 1
            self.m.bytes_read += chunks.chunk_bytes
            return True
        self.m.read_failures += 1  # corrupt or gone: a miss from now on
        self._held.discard(sk)
        return False

    def get(self, key: str, target_location: torch.Tensor | None = None,
            target_sizes: object | None = None) -> torch.Tensor | None:
        """Fill ``target_location`` (a flat page tensor) with the page; None if missing."""
        if target_location is None:
            return None
        with self._lock:
            if self._chunks is None:
                return None
            if target_location.numel() * target_location.element_size() != self._chunks.chunk_bytes:
                return None
            if target_location.is_contiguous():
                ok = self._read(key, target_location.view(torch.uint8).reshape(-1).numpy())
            else:
                buf = np.empty(self._chunks.chunk_bytes, dtype=np.uint8)
                ok = self._read(key, buf)
                if ok:
                    target_location.view(-1).copy_(
                        torch.from_numpy(buf).view(target_location.dtype))
            return target_location if ok else None

    def batch_get(self, keys: list[str], target_locations: Sequence[torch.Tensor] | None = None,
                  target_sizes: object | None = None) -> list[torch.Tensor | None]:
        targets: list[torch.Tensor | None] = [None] * len(keys)
        if target_locations:
            targets = list(target_locations)
        return [self.get(k, t) for k, t in zip(keys, targets)]

    def batch_get_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Load pages into the host pool through one staging page (the pool's layout may
        not keep a page contiguous)."""
        pool = self._pool()
        ps = pool.page_size
        if host_indices.numel() != len(keys) * ps:
            return [False] * len(keys)
        idx = host_indices.tolist()
        out: list[bool] = []
        with self._lock:
            staging = self._staging
            if staging is None:
                staging = self._staging = pool.get_dummy_flat_data_page()
            view = staging.view(torch.uint8).reshape(-1).numpy()
            for i, k in enumerate(keys):
                ok = self._read(k, view)
                if ok:
                    pool.set_from_flat_data_page(int(idx[i * ps]), staging)
                out.append(ok)
        return out

    def _pool(self) -> PageHostPool:
        pool: PageHostPool | None = getattr(self, "mem_pool_host", None)
        if pool is None:
            raise BadInput("aicache storage: the v1 calls need the host pool "
                           "(register_mem_pool_host) first")
        return pool

    # ------------------------------------------------------------------ lifecycle
    def clear(self) -> None:
        """Forget every page of this rank (its slab directory is removed)."""
        with self._lock:
            chunks = self._chunks
            if chunks is None:
                return
            page_bytes = chunks.chunk_bytes
            chunks.close()
            self._chunks = None
            shutil.rmtree(self.dir, ignore_errors=True)
            self._held.clear()
            self._tail = None
            self._open(page_bytes)

    def close(self) -> None:
        with self._lock:
            if self._chunks is not None:
                self._chunks.close()
                self._chunks = None

    def metrics(self) -> dict[str, float | int | str | None]:
        """Counters as a JSON-able dict: pages written, admissions declined, lifetime."""
        with self._lock:
            m = self.m
            out: dict[str, float | int | str | None] = {
                k: getattr(m, k) for k in BackendMetrics.__slots__}
            out["admission"] = self.admission.label
            out["pages_held"] = len(self._held)
            if self._gate is not None:
                g = self._gate.c
                out.update(admissions=g.admitted, admissions_declined=g.declined,
                           reuses_counted=g.references)
            if self._chunks is not None:
                out.update(self._chunks.ssd_metrics(self._clock() - self._t0))
            b = self.write_budget
            out["ssd_write_budget_bps"] = b.bytes_per_s if b is not None else None
            out["ssd_budget_refusals"] = b.refused if b is not None else None
            return out

    def held(self, key: str) -> bool:
        """Whether ``key`` is on the SSD, without counting a reuse (tests)."""
        with self._lock:
            return self._chunks is not None and self._skey(key) in self._held


def _namespace(c: HiCacheStorageConfig, page_bytes: int, dtype: str) -> str:
    """A store namespace naming the KV layout: pages of another model, page geometry,
    layout, dtype or parallel layout never match."""
    parts = [str(c.model_name), str(page_bytes), dtype, f"mla={c.is_mla_model}",
             f"page_first={c.is_page_first_layout}", f"tp{c.tp_size}pp{c.pp_size}",
             f"cp{c.attn_cp_size}dcp{c.dcp_rank}/{c.dcp_size}",
             f"split={c.should_split_heads}"]
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()
    return f"sglang-{digest}"


def _as_bool(v: object) -> bool:
    if isinstance(v, str):
        return v.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(v)


def _positive_int(cfg: dict[str, object], name: str, what: str, default: int | None = None) -> int:
    v = cfg.get(name, default)
    n = 0
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, str) and v.strip().isdigit():
        n = int(v)
    if n <= 0:
        raise BadInput(f"SGLang storage backend aicache: set \"{name}\" to {what} "
                       f"(a positive integer; got {v!r})")
    return n


__all__ = ["SariaHiCacheStorage", "PageHostPool"]
