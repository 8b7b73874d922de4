"""One real vLLM engine run (CPU backend) with aicache's SSD tier; prints a JSON report.

``python tests/vllm_engine_run.py WORKDIR [--policy]``. Builds a tiny random-weight Llama
in WORKDIR (no download), starts an in-process engine whose offloading stack is vLLM's
tiering spec with the CPU copy worker, host DRAM of a few chunks and ``SariaSSDTier``
(``E2`` admission) under it, optionally with ``SessionAdaptiveHostPolicy`` on the DRAM
tier. Prompt A runs three times with two flushing prompts in between each time, which
evict A from the engine's cache and from DRAM: run 1 computes A, run 2 recomputes it (its
re-offered chunks are admitted), run 3 is served from the SSD tier. The report has each
run's greedy tokens and top logprobs and the tier's counters around run 3.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

BLOCK = 32
from harness.tiny_model import VOCAB  # noqa: E402  (tests/ is this script's sys.path[0])


def build_model(d: Path) -> Path:
    from harness.tiny_model import build_tiny_llama

    return build_tiny_llama(d)


def main() -> None:
    work = Path(sys.argv[1])
    use_policy = "--policy" in sys.argv[2:]
    model = build_model(work)
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    from aicache.integrations.vllm.tier import SariaSSDTier

    chunk_bytes = 2 * 2 * BLOCK * 2 * 64 * 2  # layers × (K,V) × tokens × kv heads × dim × bf16
    extra: dict[str, object] = {
        "spec_name": "CPUCopyTieringSpec",
        "spec_module_path": "aicache.integrations.vllm.cpu_worker",
        "cpu_bytes_to_use": 8 * chunk_bytes,
        "secondary_tiers": [{
            "type": "SariaSSDTier", "module_path": "aicache.integrations.vllm.tier",
            "root_dir": str(work / "ssd"), "ssd_bytes": 64 * (chunk_bytes + 4096),
            "admission": "E2"}],
    }
    if use_policy:
        extra["eviction_policy"] = "SessionAdaptiveHostPolicy"
        extra["cache_policy_module_path"] = "aicache.integrations.vllm.policy"
    llm = LLM(model=str(model), dtype="bfloat16", enforce_eager=True, block_size=BLOCK,
              max_model_len=512, num_gpu_blocks_override=24, seed=0,
              kv_transfer_config=KVTransferConfig(
                  kv_connector="OffloadingConnector", kv_role="kv_both",
                  kv_connector_extra_config=extra))
    import numpy as np
    rng = np.random.default_rng(7)
    prompt_a = rng.integers(3, VOCAB, 8 * BLOCK + 5).tolist()
    fillers = [rng.integers(3, VOCAB, 8 * BLOCK + 5).tolist() for _ in range(6)]
    sp = SamplingParams(temperature=0.0, max_tokens=8, logprobs=5)
    params = {"aicache": {"session": "chat-a", "turn": 1}} if use_policy else None

    def manager():
        # the in-process engine's scheduler → offloading connector → tiering manager
        core = llm.llm_engine.engine_core.engine_core
        return core.scheduler.connector.connector_scheduler.manager

    def tier() -> SariaSSDTier:
        (t,) = manager().secondary_tiers
        assert isinstance(t, SariaSSDTier)
        return t

    def run(tokens: list[int], kvp: dict | None = None) -> dict[str, object]:
        p = sp
        if kvp is not None:  # how a client sends kv_transfer_params through LLM.generate
            p = sp.clone()
            p.extra_args = {"kv_transfer_params": kvp}
        o = llm.generate([TokensPrompt(prompt_token_ids=tokens)], p, use_tqdm=False)[0]
        c = o.outputs[0]
        lps = [sorted(((int(t), float(lp.logprob)) for t, lp in step.items()))
               for step in (c.logprobs or [])]
        return {"tokens": list(c.token_ids), "logprobs": lps,
                "cached_tokens": int(o.num_cached_tokens or 0)}

    runs = []
    before = {}
    for i in range(3):
        if i == 2:
            before = dict(tier().metrics())
        runs.append(run(prompt_a, params))
        for f in fillers[3 * i: 3 * i + 3] if i < 2 else ():  # evict A from engine and DRAM
            run(f)
    after = dict(tier().metrics())
    pol = manager().primary_tier._policy
    sessions = sorted({str(n.session) for n, _ in getattr(pol, "_chunks", {}).values()})
    print("AICACHE-E2E " + json.dumps({"runs": runs, "before": before, "after": after,
                                       "dram_policy": type(pol).__name__,
                                       "policy_sessions": sessions}))
    sys.stdout.flush()
    del llm


if __name__ == "__main__":
    main()
