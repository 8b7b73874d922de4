"""Offline oracle admission (persist exactly the blocks a later request references) on a
tiny trace computed by hand, and its frontier property on a generated workload."""

from __future__ import annotations

import pytest

from aicache.sim.kv import KVSimParams, prepare, simulate_kv
from aicache.traces.base import KVRequest
from aicache.traces.gen_agent import generate_agent

BPT = 36 * 8 * 128 * 2 * 2  # Qwen3-8B KV bytes per token


def _req(ts: float, blocks: list[int]) -> KVRequest:
    return KVRequest(timestamp=ts, input_length=512 * len(blocks), output_length=1,
                     hash_ids=blocks, block_tokens=512)


# DRAM holds 2 blocks (LRU). r2 stores 3, 4, evicting 1 (r3 will reference it: written)
# and 2 (no later reader: not written). r3 reads 1 from SSD and stores 5, evicting 3
# (r4 will reference it: written). r4 reads 3 from SSD and 4 from DRAM.
TRACE = [_req(0, [1, 2]), _req(10, [3, 4]), _req(20, [1, 5]), _req(30, [3, 4])]


def _run(system: str, **kw: object) -> dict:
    return simulate_kv(list(TRACE), KVSimParams(system=system, dram_tokens=1024,
                                                ssd_tokens=10**6, in_flight=1, **kw)).metrics


def test_oracle_on_a_tiny_trace_by_hand() -> None:
    m = _run("oracle")
    assert m["admission"] == "oracle"
    assert m["ssd_write_blocks"] == 2 and m["ssd_write_bytes"] == 2 * 512 * BPT
    assert m["ssd_read_blocks"] == 2 and m["ssd_writes_never_read_frac"] == 0.0
    assert (m["hit_blocks"], m["achievable_blocks"]) == (3, 3)
    assert m["dram_evictions"] == 3
    # full duplicate writes all five blocks for the same hits; E2 recomputes every reused
    # block and prewrites the three that come back to DRAM after one eviction (1 in r3;
    # 3 and 4 in r4), none of which is read again
    fd = _run("full-duplicate")
    assert fd["ssd_write_blocks"] == 5 and fd["hit_blocks"] == 3
    e2 = _run("saria", theta_e=2)
    assert e2["ssd_write_blocks"] == 3 and e2["hit_blocks"] == 0
    assert _run("saria", admission="oracle")["ssd_write_blocks"] == 2


def test_oracle_with_room_on_ssd_loses_no_reuse_and_writes_nothing_unread() -> None:
    reqs = prepare(generate_agent(12, seed=5), 512)
    kw = dict(dram_tokens=200_000, ssd_tokens=10**9, session_window=3600.0)
    o = simulate_kv(reqs, KVSimParams(system="oracle", **kw)).metrics
    fd = simulate_kv(reqs, KVSimParams(system="full-duplicate", **kw)).metrics
    assert o["dram_evictions"] > 0
    assert o["char"] == pytest.approx(1.0)
    assert o["ssd_writes_never_read_frac"] == 0.0
    assert 0 < o["ssd_write_bytes"] < fd["ssd_write_bytes"]


def test_cli_admission_flag(tmp_path, capsys) -> None:
    import json

    from aicache.cli.main import main
    from aicache.traces.io import write_kv_jsonl

    path = tmp_path / "t.jsonl"
    write_kv_jsonl(str(path), TRACE)
    base = ["sim", "kv", "--trace", str(path), "--dram-tokens", "1024", "--in-flight", "1",
            "--json"]
    assert main(base + ["--admission", "oracle"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["admission"] == "oracle" and m["ssd_write_blocks"] == 2
    assert main(base + ["--admission", "full-duplicate"]) == 0
    assert json.loads(capsys.readouterr().out)["ssd_write_blocks"] == 5
    assert main(base + ["--admission", "Q7"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "oracle" in err
