"""KV replay: CHAR against an unlimited-capacity replay (by hand), TTFT by hand, the CLI
JSON contract, determinism, bad input, and the session generators' statistics."""

from __future__ import annotations

import json

import pytest

from aicache.cli.main import main
from aicache.errors import BadInput
from aicache.sim.kv import JSON_KEYS, KVSimParams, prepare, simulate_kv
from aicache.traces.base import KVRequest
from aicache.traces.gen_agent import AGENT, WEKA, generate_agent, generate_weka, session_stats
from aicache.traces.io import write_kv_jsonl

BPT = 36 * 8 * 128 * 2 * 2  # Qwen3-8B KV bytes per token (config.json)


def _req(ts: float, blocks: list[int], session: str | None = "s1", turn: int = 0) -> KVRequest:
    return KVRequest(timestamp=ts, input_length=512 * len(blocks), output_length=1,
                     hash_ids=blocks, block_tokens=512, session_id=session, turn=turn,
                     session_type="agentic" if session else None)


TRACE = [_req(0.0, [1, 2], turn=0), _req(10.0, [1, 2, 3], turn=1), _req(20.0, [1, 2, 3, 4], turn=2)]


def test_char_and_ttft_by_hand() -> None:
    # DRAM = 2 blocks, LRU. r1 stores {1,2}; r2 hits 1,2 (2 of 2 achievable), storing 3
    # evicts 1; r3 finds block 1 gone -> 0 hits of 3 achievable.
    res = simulate_kv(list(TRACE), KVSimParams(system="dram-only", dram_tokens=1024, in_flight=1))
    m = res.metrics
    assert (m["hit_blocks"], m["achievable_blocks"]) == (2, 5)
    assert m["char"] == pytest.approx(2 / 5)
    assert m["char_p25bad"] == pytest.approx(0.0)   # worst quarter of 2 eligible = r3
    transfer_r2 = 2 * 512 * BPT / 48e9               # DRAM only -> unthrottled 48 GB/s
    want = [1024 / 6500, transfer_r2 + 512 / 6500, 2048 / 6500]
    assert res.ttft.tolist() == pytest.approx(want)
    assert m["ttft_mean_s"] == pytest.approx(sum(want) / 3)
    assert m["transfer_mean_s"] == pytest.approx(transfer_r2 / 3)
    # r2 evicts 1; r3 stores 1,2,3,4 into 2 slots, evicting 2, 3, 1, 2 in turn
    assert m["dram_evictions"] == 5
    unlimited = simulate_kv(list(TRACE), KVSimParams(system="dram-only", dram_tokens=10**6,
                                                     in_flight=1)).metrics
    assert unlimited["char"] == 1.0 and unlimited["hit_blocks"] == 5


def test_full_duplicate_recovers_from_ssd() -> None:
    m = simulate_kv(list(TRACE), KVSimParams(system="full-duplicate", dram_tokens=1024,
                                             ssd_tokens=10**6, in_flight=1)).metrics
    assert m["char"] == 1.0
    assert m["ssd_write_bytes"] == 4 * 512 * BPT      # every new block written once
    assert m["ssd_read_blocks"] >= 1


def test_json_keys_and_determinism(tmp_path, capsys) -> None:
    argv = ["sim", "kv", "--workload", "agent", "--sessions", "4", "--json", "--seed", "3"]
    assert main(argv) == 0
    a = json.loads(capsys.readouterr().out)
    assert list(a)[:len(JSON_KEYS)] == list(JSON_KEYS)
    assert main(argv) == 0
    b = json.loads(capsys.readouterr().out)
    volatile = {"wall_seconds", "block_events_per_second"}
    assert {k: v for k, v in a.items() if k not in volatile} == \
        {k: v for k, v in b.items() if k not in volatile}


def test_trace_file_same_as_generator(tmp_path, capsys) -> None:
    path = tmp_path / "a.jsonl"
    write_kv_jsonl(str(path), generate_agent(3, seed=1))
    assert main(["sim", "kv", "--trace", str(path), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    direct = simulate_kv(prepare(generate_agent(3, seed=1), 512), KVSimParams()).metrics
    assert from_file["ttft_mean_s"] == pytest.approx(direct["ttft_mean_s"])
    assert from_file["ssd_write_bytes"] == direct["ssd_write_bytes"]


def test_malformed_trace_and_impossible_budget_are_one_line_errors(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1], '
                   '"session_id": "a", "block_tokens": 512}\n{"timestamp": "x"}\n')
    assert main(["sim", "kv", "--trace", str(bad), "--format", "kv-jsonl"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "record 2" in err
    assert main(["sim", "kv", "--workload", "agent", "--sessions", "2", "--dram-tokens", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--dram-tokens" in err
    with pytest.raises(BadInput):
        simulate_kv(list(TRACE), KVSimParams(in_flight=0))
    with pytest.raises(BadInput):
        simulate_kv(list(TRACE), KVSimParams(promotion=1.5))
    odd = KVRequest(0.0, 100, 1, [1, 2], 48, "s", 0)
    with pytest.raises(BadInput):
        simulate_kv([odd], KVSimParams())


def test_timestamp_replay_without_sessions() -> None:
    reqs = [_req(t, [1, 2, 3], session=None) for t in (0.0, 100.0, 200.0)]
    m = simulate_kv(reqs, KVSimParams(system="saria")).metrics
    assert m["replay"] == "timestamps"
    assert (m["hit_blocks"], m["achievable_blocks"]) == (6, 6)
    # the last request hits its whole prompt: only its 3-block DRAM transfer remains
    assert m["duration_s"] == pytest.approx(200.0 + 3 * 512 * BPT / 48e9, rel=1e-9)


def test_fine_grained_trace_blocks_are_regrouped() -> None:
    # 64-token trace ids (WEKA-like): 8 ids form one 512-token cache block
    ids = list(range(100, 116))
    a = KVRequest(0.0, 1024, 1, ids, 64, "s", 0)
    b = KVRequest(5.0, 1024 + 64, 1, ids + [999], 64, "s", 1)
    m = simulate_kv([a, b], KVSimParams(system="dram-only", in_flight=1)).metrics
    assert (m["hit_blocks"], m["achievable_blocks"]) == (2, 2)


def _close(got: float, want: float, tol: float) -> bool:
    return abs(got - want) <= tol * want


def test_agent_generator_statistics_small_scale() -> None:
    reqs = list(generate_agent(40, seed=0))
    s = session_stats(reqs)
    assert s["sessions"] == 40 and s["requests"] == round(AGENT.requests / AGENT.sessions * 40)
    assert _close(s["mean_prompt_tokens"], AGENT.mean_prompt_tokens, 0.05)
    assert _close(s["mean_gap_s"], AGENT.mean_gap_s, 0.35)
    assert s["max_prompt_tokens"] <= AGENT.context_limit
    assert all(r.block_types is not None and len(r.block_types) == len(r.hash_ids) for r in reqs)
    assert all(len(r.hash_ids) == -(-r.input_length // 512) for r in reqs)
    # each request extends its predecessor's full blocks, except at a prefix reset
    extends = total = 0
    prev: dict[str, KVRequest] = {}
    for r in reqs:
        p = prev.get(str(r.session_id))
        if p is not None:
            total += 1
            full = p.input_length // 512
            extends += r.hash_ids[:full] == p.hash_ids[:full]
        prev[str(r.session_id)] = r
    assert extends / total > 0.9
    assert list(generate_agent(3, seed=5)) == list(generate_agent(3, seed=5))


def test_weka_generator_statistics_small_scale() -> None:
    reqs = list(generate_weka(8, seed=0))
    s = session_stats(reqs)
    assert s["sessions"] == 8 and s["requests"] == round(WEKA.requests / WEKA.sessions * 8)
    assert all(r.block_tokens == 64 for r in reqs)
    assert _close(s["mean_prompt_tokens"], WEKA.mean_prompt_tokens, 0.05)


def test_mooncake_shaped_trace_same_results_in_two_formats(tmp_path) -> None:
    from aicache.traces.gen_agent import generate_mooncake_like
    from aicache.traces.io import open_trace, write_trace

    reqs = list(generate_mooncake_like(300, seed=2, rate=1.0))
    assert all(r.session_id is None for r in reqs)
    moon, kvj = tmp_path / "t.mooncake.jsonl", tmp_path / "t.kv.jsonl"
    write_trace(str(moon), "mooncake", reqs)
    write_trace(str(kvj), "kv-jsonl", reqs)
    p = KVSimParams(system="saria", dram_tokens=50_000, ssd_tokens=500_000)
    a = simulate_kv(prepare(open_trace(str(moon), "mooncake").requests(), 512), p).metrics
    b = simulate_kv(prepare(open_trace(str(kvj), "kv-jsonl").requests(), 512), p).metrics
    assert a["replay"] == b["replay"] == "timestamps"
    for k in JSON_KEYS:
        assert a[k] == pytest.approx(b[k], rel=1e-9) if isinstance(a[k], float) else a[k] == b[k]
    assert a["requests"] == 300 and 0 < a["char"] <= 1


def test_gen_sessions_cli_round_trips(tmp_path, capsys) -> None:
    from aicache.traces.io import open_trace

    out = tmp_path / "agent.jsonl"
    assert main(["gen", "sessions", "agent", "--out", str(out), "--sessions", "2", "--seed", "4"]) == 0
    assert "wrote" in capsys.readouterr().out
    back = list(open_trace(str(out)).requests())
    want = list(generate_agent(2, seed=4))
    assert len(back) == len(want)
    assert [(r.session_id, r.turn, r.input_length, r.hash_ids, r.block_types) for r in back] == \
        [(r.session_id, r.turn, r.input_length, r.hash_ids, r.block_types) for r in want]
    assert main(["gen", "sessions", "nope", "--out", str(out)]) == 2
    assert "valid:" in capsys.readouterr().err


def test_skip_bad_counts_records(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"timestamp": 0, "input_length": 1024, "output_length": 1,
                       "hash_ids": [1, 2], "session_id": "a", "block_tokens": 512})
    bad.write_text(good + '\n{"timestamp": "x"}\n')
    assert main(["sim", "kv", "--trace", str(bad), "--format", "kv-jsonl", "--skip-bad",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 1 and out["bad_records"] == 1


def test_registered_saria_experiments_have_valid_cells() -> None:
    from aicache.experiments import EXPERIMENTS
    from aicache.experiments.saria import Coordination, run_sim_cell

    names = [n for n in EXPERIMENTS.names() if n.startswith("saria-")]
    assert {"saria-agent", "saria-ablation", "saria-coordination"} <= set(names)
    for n in names:
        for quick in (True, False):
            assert EXPERIMENTS.get(n)().cells(quick)
    p = 135_168 // 2 * BPT
    c = Coordination.run_cell({"gds_gbps": 8.0, "est_gds_gbps": 8.0, "mode": "serial"})
    assert c["completion_s"] == pytest.approx(p / 24e9 + p / 8e9)
    row = run_sim_cell({"workload": "agent", "sessions": 2, "system": "saria", "theta_e": 3,
                        "session_window": 600.0, "label": "E3", "seed": 0})
    assert row["admission"] == "E3" and row["requests"] > 0 and "wall_seconds" not in row
