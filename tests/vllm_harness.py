"""Drive vLLM's own offloading managers without an engine (as vLLM's unit tests do).

``Host`` is vLLM's ``TieringOffloadingManager`` over a ``CPUPrimaryTierOffloadingManager``
whose region is a plain numpy buffer; ``put`` plays the GPU→DRAM store of a request's
chunks (bytes written into the rows vLLM hands out, then ``complete_store``, which cascades
to the secondary tier), ``get`` a later request: lookups until every answer is final,
promotions flushed at step ends, then the longest hit prefix read back from DRAM rows.
"""

from __future__ import annotations

import itertools
import mmap
import time
from dataclasses import dataclass

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext, ScheduleEndContext, make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig, OffloadingConfig, OffloadingGroupConfig, OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.base import SecondaryTierManager
from vllm.v1.kv_offload.tiering.manager import CPUPrimaryTierOffloadingManager, TieringOffloadingManager

ROW = 4096
_ids = itertools.count()


@dataclass
class FakeSpec:
    """The parts of an ``OffloadingSpec`` a secondary tier reads."""

    config: OffloadingConfig
    blocks_per_chunk: int = 1

    @property
    def kv_events_config(self):  # the fs tier reads it
        from vllm.v1.kv_offload.base import OffloadingKVEventsConfig
        return OffloadingKVEventsConfig(False, False)


def fake_spec(model: str = "tiny-llama", dtype: str = "bfloat16") -> FakeSpec:
    par = OffloadingParallelConfig(0, 1, 1, 1, 1, 1, 0, 1, None, True)
    cfg = OffloadingConfig(
        groups=(OffloadingGroupConfig(32, ("model.layers.0.attn", "model.layers.1.attn"), 0),),
        worker_kv_bytes_per_block=ROW, enable_kv_cache_events=False, extra_config={},
        engine_id="test", model=OffloadingModelConfig(model, dtype),
        cache=OffloadingCacheConfig(32, 1), parallel=par)
    return FakeSpec(cfg)


class NumpyRegion:
    """Stands in for ``SharedOffloadRegion``: a (num_chunks, ROW) byte buffer."""

    def __init__(self, num_chunks: int, row: int = ROW) -> None:
        # page-aligned, as the real mmap region is (vLLM's fs tier reads it with O_DIRECT)
        self._mm = mmap.mmap(-1, num_chunks * row)
        self.buf = np.frombuffer(self._mm, dtype=np.int8).reshape(num_chunks, row)

    def create_kv_memoryview(self) -> memoryview:
        return memoryview(self.buf)

    def cleanup(self) -> None:
        pass


def key(i: int) -> OffloadKey:
    return make_offload_key(i.to_bytes(32, "big"), 0)


def payload(k: OffloadKey, version: int = 0) -> np.ndarray:
    seed = int.from_bytes(k[:32], "big") % (1 << 32)
    return np.random.default_rng([seed, version]).integers(0, 256, ROW, dtype=np.uint8)


class Host:
    """vLLM's tiering manager with ``num_chunks`` DRAM chunks over ``tiers``."""

    def __init__(self, num_chunks: int, make_tier, policy: str = "lru",
                 policy_module: str | None = None) -> None:
        self.region = NumpyRegion(num_chunks)
        self.primary = CPUPrimaryTierOffloadingManager(
            num_chunks=num_chunks, mmap_region=self.region, cache_policy=policy,
            cache_policy_module_path=policy_module)
        view = self.primary.get_kv_memoryview()
        self.tier: SecondaryTierManager = make_tier(view)
        self.mgr = TieringOffloadingManager(self.primary, [self.tier])
        self.rows = self.region.buf.view(np.uint8)

    def step(self) -> None:
        self.mgr.on_schedule_end(ScheduleEndContext((), ()))

    def settle(self) -> None:
        for _ in range(3):
            self.tier.drain_jobs()
            self.step()
            self._await_lookups()

    def _await_lookups(self) -> None:
        """vLLM's fs tier answers lookups from a background thread: wait until every
        probe it has in flight is resolved, so both tiers see the same call sequence."""
        lm = getattr(self.tier, "_lookup_manager", None)
        if lm is None:
            return
        from vllm.v1.kv_offload.tiering.async_lookup import LookupPhase
        deadline = time.monotonic() + 30
        while any(st.phase is LookupPhase.IN_FLIGHT for st in lm._lookup_state.values()):
            assert time.monotonic() < deadline, "fs tier lookups never resolved"
            lm.drain_results()
            time.sleep(0.001)

    def _ctx(self, params: dict | None = None) -> ReqContext:
        ctx = ReqContext(req_id=f"r{next(_ids)}", kv_transfer_params=params)
        self.mgr.on_new_request(ctx)
        return ctx

    def put(self, keys: list[OffloadKey], data: dict[OffloadKey, np.ndarray],
            params: dict | None = None) -> bool:
        ctx = self._ctx(params)
        out = self.mgr.prepare_store(keys, ctx)
        if out is None:
            self.mgr.on_request_finished(ctx)
            return False
        for k, cid in zip(out.keys_to_store, out.store_spec.chunk_ids):
            self.rows[int(cid)] = data[k]
        if out.keys_to_store:  # as the connector: a store only for chunks not yet held
            self.mgr.complete_store(out.keys_to_store, ctx)
        self.mgr.on_request_finished(ctx)
        self.settle()
        return True

    def get(self, keys: list[OffloadKey], params: dict | None = None
            ) -> tuple[list[LookupResult], list[np.ndarray]]:
        """Final lookup answers (HIT once promoted) and the bytes of the hit prefix."""
        ctx = self._ctx(params)
        answers: list[LookupResult] = []
        for _ in range(10):
            answers = []
            for k in keys:  # as vLLM's scheduler: stop at the first miss
                answers.append(self.mgr.lookup(k, ctx))
                if answers[-1] is LookupResult.MISS:
                    break
            if all(a in (LookupResult.HIT, LookupResult.MISS) for a in answers):
                break
            self.settle()
        hits = list(itertools.takewhile(lambda a: a is LookupResult.HIT, answers))
        got: list[np.ndarray] = []
        if hits:
            spec = self.mgr.prepare_load(keys[:len(hits)], ctx)
            got = [self.rows[int(c)].copy() for c in spec.block_ids]
            self.mgr.complete_load(keys[:len(hits)], ctx)
        self.mgr.on_request_finished(ctx)
        self.settle()
        return answers, got

    def dram_keys(self, keys: list[OffloadKey]) -> list[bool]:
        ctx = ReqContext(req_id="probe")
        return [self.primary.lookup(k, ctx) is LookupResult.HIT for k in keys]

    def close(self) -> None:
        self.mgr.shutdown()
