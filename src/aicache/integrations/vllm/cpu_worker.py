"""A test harness: vLLM's tiering offloading stack on vLLM's CPU backend.

vLLM's ``CPUOffloadingSpec.get_worker`` refuses a non-GPU platform: its worker copies
between device KV pages and the host offload region with CUDA streams. The scheduler side
(the host-DRAM tier, the secondary tiers, the promotion and cascade logic) is
platform-free. :class:`CPUCopyTieringSpec` is vLLM's ``TieringOffloadingSpec`` with only
``get_worker`` overridden: :class:`CPUCopyWorker` copies engine KV blocks to and from rows
of the same shared offload region with plain torch copies, synchronously, with vLLM's
block↔chunk arithmetic (``blocks_per_chunk`` sub-blocks per chunk, a partial first chunk
per KV group located by ``block_indices``). Select it with ``"spec_name":
"CPUCopyTieringSpec", "spec_module_path": "aicache.integrations.vllm.cpu_worker"``.

This exists so the tests can run a real engine end to end on a CPU; on a GPU, leave
``spec_name`` at ``TieringOffloadingSpec`` and vLLM's own worker is used — the secondary
tier and the host policy are unchanged. Only the direct KV layout is supported (not
``canonical_layout``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from vllm.v1.kv_offload.base import (
    BlockIDsLoadStoreSpec, CanonicalKVCaches, GPULoadStoreSpec, LoadStoreSpec, OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from aicache.errors import BadInput


class CPUCopyWorker(OffloadingWorker):
    """Synchronous torch copies between engine KV blocks and offload-region chunks."""

    def __init__(self, kv_caches: CanonicalKVCaches, blocks_per_chunk: int,
                 region: SharedOffloadRegion) -> None:
        self._region: SharedOffloadRegion | None = region
        self.bpc = blocks_per_chunk
        self.dev: list[torch.Tensor] = []
        self.host: list[torch.Tensor] = []
        for t in kv_caches.tensors:
            page = t.page_size_bytes
            self.dev.append(t.tensor.view(torch.int8).view(-1, page))
            self.host.append(region.create_next_worker_view(page * blocks_per_chunk))
        self.refs = kv_caches.group_data_refs
        self._done: list[TransferResult] = []

    def _copy(self, job_id: int, dev_spec: GPULoadStoreSpec, host_spec: LoadStoreSpec,
              to_host: bool) -> bool:
        assert isinstance(host_spec, BlockIDsLoadStoreSpec)
        t0 = time.perf_counter()
        dev_blocks: Sequence[int] = dev_spec.block_ids.tolist()
        chunks: Sequence[int] = host_spec.block_ids.tolist()
        bpc, moved = self.bpc, 0
        d_off = c_off = 0
        for g, (size, first) in enumerate(zip(dev_spec.group_sizes, dev_spec.block_indices)):
            if size == 0:
                continue
            skip = first % bpc  # the group starts inside its first chunk
            n_chunks = -(-(size + skip) // bpc)
            for ref in self.refs[g]:
                dev, host = self.dev[ref.tensor_idx], self.host[ref.tensor_idx]
                sub = dev.shape[1]
                nb = ref.page_size_bytes
                for j in range(size):
                    b = dev_blocks[d_off + j]
                    c = chunks[c_off + (skip + j) // bpc]
                    o = ((skip + j) % bpc) * sub
                    if to_host:
                        host[c, o:o + nb].copy_(dev[b, :nb])
                    else:
                        dev[b, :nb].copy_(host[c, o:o + nb])
                    moved += nb
            d_off += size
            c_off += n_chunks
        self._done.append(TransferResult(job_id, True, moved, time.perf_counter() - t0))
        return True

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec,
                     dst_spec: LoadStoreSpec) -> bool:
        return self._copy(job_id, src_spec, dst_spec, True)

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec,
                    expedited: bool = False) -> bool:
        return self._copy(job_id, dst_spec, src_spec, False)

    def get_finished(self) -> list[TransferResult]:
        out, self._done = self._done, []
        return out

    def wait(self, job_ids: set[int]) -> None:
        return  # copies finish inside submit_*

    def shutdown(self) -> None:
        # the region's views must go before its mmap closes, or the close fails
        self.host.clear()
        self.dev.clear()
        if self._region is not None:
            self._region.cleanup()
            self._region = None


class CPUCopyTieringSpec(TieringOffloadingSpec):
    """vLLM's tiering spec with :class:`CPUCopyWorker` (a test harness; module docstring)."""

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._worker is None:
            if self.config.canonical_layout:
                raise BadInput("CPUCopyTieringSpec copies the direct KV layout only; remove "
                               "canonical_layout from kv_connector_extra_config")
            rank = 0 if self.replicated_layout else self.config.parallel.rank
            region = SharedOffloadRegion(
                engine_id=self._engine_id, num_chunks=self.num_chunks, rank=rank,
                kv_bytes_per_chunk=self.kv_bytes_per_chunk,
                cpu_page_size=self.cpu_page_size_per_worker)
            try:
                self._worker = CPUCopyWorker(  # type: ignore[assignment]  # vLLM declares its GPU worker's type
                    kv_caches, self.blocks_per_chunk, region)
            except Exception:
                region.cleanup()
                raise
        return self._worker  # type: ignore[return-value]  # as above: vLLM's narrower declaration
