"""SARIA's lazy partial promotion: the promotion modes, the DRAM share ``r`` and its
bandwidth-balanced value ``r*``, the per-request promotion target and the P_τ guard
(``docs/design/saria.md``). Pure functions; :class:`~aicache.kv.saria.KVIndex` applies them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class PromotionMode(str, Enum):
    PARTIAL = "partial"  #: SARIA: lazy partial promotion toward a DRAM share r
    ZERO = "zero"        #: FlexKV / Dynamo KVBM: SSD hits go to the GPU only
    FULL = "full"        #: HiCache: every SSD hit is kept in DRAM


@dataclass(frozen=True, slots=True)
class PromotionParams:
    mode: PromotionMode = PromotionMode.PARTIAL
    r: float = 0.4
    p_tau: float = 60.0
    #: how many eviction candidates to inspect for one that passes the P_τ guard
    scan_limit: int = 32


def r_star(b_disk: float, b_gpu: float) -> float:
    """Bandwidth-balanced DRAM share ``r* = 1 − B_disk / B_GPU`` (both paths finish
    together while the GPU ingress link stays full), clamped to [0, 1]."""
    if b_gpu <= 0:
        raise ValueError("B_GPU must be positive")
    return min(1.0, max(0.0, 1.0 - b_disk / b_gpu))


def promotion_target(r: float, d0: int, s0: int) -> int:
    """``P_target = max(0, r·(D0 + S0) − D0)`` blocks, rounded down, at most ``S0``."""
    x = r * (d0 + s0) - d0
    return max(0, min(s0, math.floor(x + 1e-9)))


def promotion_allowed(now: float, t_reuse: float, p_tau: float) -> bool:
    """P_τ guard: promotion may evict a block only if it was not reused within ``p_tau``."""
    return now - t_reuse >= p_tau
