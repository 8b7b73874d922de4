"""Helpers for the SGLang HiCache storage tests: a host page pool, configs, chains, pages.

SGLang's own host pool (``MHATokenToKVPoolHost``) cannot be imported on this CPU build:
its module imports SGLang's model configs, which import torchvision, and PyPI's
torchvision wheels need CUDA torch libraries. :class:`HostPages` keeps the part a storage
backend touches — a ``[2, layers, tokens, heads, head_dim]`` tensor (SGLang's
``layer_first`` layout) with the same three page calls — so the v1 paths and HiCacheFile's
v2 paths copy real, non-contiguous pages.
"""

from __future__ import annotations

import hashlib
import random

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

LAYERS, HEADS, DIM, PAGE = 2, 2, 8, 4
DTYPE = torch.bfloat16
PAGE_BYTES = 2 * LAYERS * PAGE * HEADS * DIM * 2
MODULE = "aicache.integrations.sglang.storage"


class HostPages:
    """A host KV pool of ``pages`` pages in SGLang's layer-first layout."""

    def __init__(self, pages: int) -> None:
        self.page_size = PAGE
        self.size = pages * PAGE
        self.dtype = DTYPE
        self.kv_buffer = torch.zeros((2, LAYERS, self.size, HEADS, DIM), dtype=DTYPE)

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        page = self.kv_buffer[:, :, index:index + PAGE, :, :]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros((2, LAYERS, PAGE, HEADS, DIM), dtype=DTYPE).flatten()

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        self.kv_buffer[:, :, index:index + PAGE, :, :] = data_page.reshape(
            2, LAYERS, PAGE, HEADS, DIM)

    def put(self, slot: int, page: torch.Tensor) -> None:
        self.set_from_flat_data_page(slot * PAGE, page)

    def page(self, slot: int) -> torch.Tensor:
        return self.get_data_page(slot * PAGE).clone()


def indices(slots: list[int]) -> torch.Tensor:
    """Host token indices of whole pages (what SGLang hands a v1/v2 call)."""
    return torch.tensor([s * PAGE + t for s in slots for t in range(PAGE)], dtype=torch.int64)


def storage_config(extra: dict | None = None, model: str = "tiny-llama",
                   tp_rank: int = 0, tp_size: int = 1) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
                                enable_storage_metrics=False, is_page_first_layout=False,
                                model_name=model, extra_config=extra)


def chain(parent: str | None, tokens: list[int]) -> str:
    """A page hash chained from the previous one (SHA-256 hex, as SGLang's)."""
    h = hashlib.sha256(bytes.fromhex(parent) if parent else b"")
    h.update(b"".join(t.to_bytes(4, "little") for t in tokens))
    return h.hexdigest()


def chains(rng: random.Random, n: int, max_pages: int = 6) -> list[list[str]]:
    """``n`` page chains sharing prefixes: each extends a random earlier chain's prefix."""
    out: list[list[str]] = []
    for _ in range(n):
        base: list[str] = []
        if out and rng.random() < 0.7:
            other = rng.choice(out)
            base = other[:rng.randint(1, len(other))]
        keys = list(base)
        for _ in range(rng.randint(1, max_pages)):
            keys.append(chain(keys[-1] if keys else None, [rng.randrange(512) for _ in range(PAGE)]))
        out.append(keys)
    return out


def payload(key: str) -> torch.Tensor:
    """A page's bytes, derived from its key (random bit patterns, NaNs included)."""
    g = torch.Generator().manual_seed(int(key[:15], 16))
    raw = torch.randint(0, 256, (PAGE_BYTES,), dtype=torch.uint8, generator=g)
    return raw.view(DTYPE)
