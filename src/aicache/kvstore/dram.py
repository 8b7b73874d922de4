"""Host-DRAM tier of the real KV store: one preallocated buffer cut into fixed-size slots.

Why fixed slots in one buffer: KV blocks of one model all have the same size, so a slot
pool needs no allocator, never fragments, and costs nothing per block on the hot path
(vLLM's CPU offloading and SGLang's ``HostKVCache`` do the same). When torch with CUDA is
present the buffer is *pinned* host memory, so DRAM→HBM copies are true DMA transfers;
otherwise it is a plain numpy ``uint8`` array.

Invariants
* ``free + draining + used == n_slots``; a slot is in exactly one of the three states.
* A slot that is the source of an in-flight SSD write is *fenced*: releasing it only puts
  it on the draining queue, and :meth:`DramPool.alloc` hands it out again only after the
  write finished (SARIA: "the DRAM copy stays readable until the write completes").
* The pool knows nothing about blocks or policies; the store keeps the node → slot map.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import Any

import numpy as np

#: slot stride alignment in bytes (cache line; keeps numpy copies vectorised)
SLOT_ALIGN = 64


class PoolExhausted(RuntimeError):
    """No free slot and nothing draining: the caller's accounting is wrong."""


def _pinned_buffer(nbytes: int) -> tuple[np.ndarray, Any] | None:
    """A pinned host buffer viewed as numpy, when torch+CUDA are usable; else None."""
    try:
        import torch  # noqa: PLC0415 (optional, heavy)
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    except Exception:  # pinned allocation can fail (ulimit -l); fall back to pageable
        return None
    return t.numpy(), t


class DramPool:
    """``n_slots`` slots of ``slot_bytes`` each in one contiguous buffer.

    ``pinned="auto"`` pins when torch+CUDA are present; ``True`` requires it.
    """

    __slots__ = ("slot_bytes", "stride", "n_slots", "buf", "tensor", "pinned", "_free",
                 "_draining", "_used")

    def __init__(self, slot_bytes: int, n_slots: int, *, pinned: bool | str = "auto") -> None:
        if slot_bytes <= 0 or n_slots < 0:
            raise ValueError("slot_bytes must be positive and n_slots non-negative")
        self.slot_bytes = int(slot_bytes)
        self.stride = -(-self.slot_bytes // SLOT_ALIGN) * SLOT_ALIGN
        self.n_slots = int(n_slots)
        nbytes = max(1, self.stride * self.n_slots)
        got = _pinned_buffer(nbytes) if pinned else None
        if pinned is True and got is None:
            raise RuntimeError("pinned DRAM pool requested but torch with CUDA is not available")
        if got is not None:
            flat, self.tensor = got
            self.pinned = True
        else:
            flat, self.tensor = np.zeros(nbytes, dtype=np.uint8), None
            self.pinned = False
        self.buf = flat[: self.stride * self.n_slots].reshape(self.n_slots, self.stride)
        # a stack: pop() hands out slot 0 first, and recently freed slots (warm) again first
        self._free: list[int] = list(range(self.n_slots - 1, -1, -1))
        self._draining: deque[tuple[int, Future[Any]]] = deque()
        self._used = 0

    @staticmethod
    def slots_for(budget_bytes: int, slot_bytes: int) -> int:
        """How many slots a DRAM budget buys (slots are ``SLOT_ALIGN``-aligned)."""
        stride = -(-int(slot_bytes) // SLOT_ALIGN) * SLOT_ALIGN
        return max(0, int(budget_bytes) // stride)

    # -- allocation --------------------------------------------------------------------
    @property
    def used(self) -> int:
        return self._used

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def alloc(self) -> int:
        """A free slot; waits for the oldest fenced slot when no slot is free."""
        free = self._free
        if not free:
            self._reap(block=True)
        if not free:
            raise PoolExhausted(f"all {self.n_slots} DRAM slots are in use")
        self._used += 1
        return free.pop()

    def release(self, slot: int, after: Future[Any] | None = None) -> None:
        """Give ``slot`` back; with ``after`` it becomes free only once that I/O is done."""
        self._used -= 1
        if after is not None and not after.done():
            self._draining.append((slot, after))
        else:
            self._free.append(slot)
        if self._draining:
            self._reap(block=False)

    def _reap(self, block: bool) -> None:
        dr = self._draining
        while dr:
            slot, fut = dr[0]
            if not fut.done():
                if not block:
                    return
                fut.exception()  # wait; an I/O error does not keep the slot fenced
                block = False
            dr.popleft()
            self._free.append(slot)

    def drain(self) -> None:
        """Wait for every fenced slot (used before closing)."""
        while self._draining:
            self._reap(block=True)

    # -- bytes -------------------------------------------------------------------------
    def view(self, slot: int, nbytes: int | None = None) -> np.ndarray:
        """The slot's bytes (a view, no copy)."""
        return self.buf[slot, : self.slot_bytes if nbytes is None else nbytes]

    def write(self, slot: int, src: np.ndarray) -> None:
        """Copy ``src`` (a flat uint8 array of at most ``slot_bytes``) into ``slot``."""
        n = src.shape[0]
        if n > self.slot_bytes:
            raise ValueError(f"payload of {n} bytes does not fit a {self.slot_bytes}-byte slot")
        np.copyto(self.buf[slot, :n], src)
