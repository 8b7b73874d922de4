"""The replay clock (docs/design/saria.md: 6,500 computed prefill tokens = 1 s of replay
time) and the explicit queueing mode, on cases computed by hand."""

from __future__ import annotations

import json

import pytest

from aicache.cli.main import main
from aicache.sim.kv import KVSimParams, simulate_kv
from aicache.traces.base import KVRequest
from aicache.traces.io import write_kv_jsonl

BPT = 36 * 8 * 128 * 2 * 2       # Qwen3-8B KV bytes per token (config.json)
P = 13 * 512 / 6500              # 13 blocks of prefill on the 6,500 tok/s clock: 1.024 s
T = 13 * 512 * BPT / 48e9        # 13 DRAM blocks at the unthrottled 48 GB/s


def _req(ts: float, blocks: list[int], session: str | None = None, turn: int = 0) -> KVRequest:
    return KVRequest(timestamp=ts, input_length=512 * len(blocks), output_length=1,
                     hash_ids=blocks, block_tokens=512, session_id=session, turn=turn)


A = list(range(1, 14))
# A at 0; B at 0.5 extends A's prompt (13 DRAM hits + 13 new); C at 0.6 is unrelated
TRACE = [_req(0.0, A), _req(0.5, A + list(range(14, 27))), _req(0.6, list(range(100, 113)))]


def _run(**kw: object) -> tuple[list[float], dict]:
    res = simulate_kv(list(TRACE), KVSimParams(system="dram-only", in_flight=1, **kw))
    return res.ttft.tolist(), res.metrics | {"warnings": res.warnings}


def test_replay_clock_paces_arrivals_and_measures_from_submission() -> None:
    ttft, m = _run()
    # A runs 0..P. B arrived at 0.5 but is submitted when A's slot frees (P): T + P.
    # C arrived at 0.6, submitted at 2P + T, computes its 13 blocks: P.
    assert ttft == pytest.approx([P, T + P, P])
    assert m["replay_wait_mean_s"] == pytest.approx((0 + (P - 0.5) + (2 * P + T - 0.6)) / 3)
    assert m["duration_s"] == pytest.approx(3 * P + T)
    assert m["computed_prefill_tokens"] == 3 * 13 * 512
    assert m["replay_stretch"] == pytest.approx((3 * P + T) / 0.6)
    assert m["gpu_utilisation"] == pytest.approx(3 * P / (3 * P + T))
    assert m["replay_clock"] == "logical" and m["warnings"] == []


def test_queueing_mode_counts_the_wait_and_warns_above_capacity() -> None:
    ttft, m = _run(prefill_gpus=1)
    assert ttft == pytest.approx([P, (P - 0.5) + T + P, (2 * P + T - 0.6) + P])
    offered = 3 * 13 * 512 / (0.6 * 6500)          # 5.12x one GPU
    assert m["offered_load"] == pytest.approx(offered)
    assert len(m["warnings"]) == 1 and "5.12x" in m["warnings"][0]


def test_queueing_on_two_gpus_by_hand() -> None:
    # two slots: B starts at 0.5 while A still computes, so it finds nothing cached and
    # computes 26 blocks (2P) on GPU 1; C waits for A's slot (P) and computes P on GPU 0.
    # Latencies come in finish order: A (P), C (at 2P), B (at 0.5 + 2P)
    ttft, m = _run(prefill_gpus=2)
    assert ttft == pytest.approx([P, 2 * P - 0.6, 2 * P])
    assert m["computed_prefill_tokens"] == 4 * 13 * 512
    assert m["gpu_utilisation"] == pytest.approx(4 * P / (2 * (0.5 + 2 * P)))
    assert m["offered_load"] == pytest.approx(4 * 13 * 512 / (0.6 * 2 * 6500))


def test_session_successor_follows_its_idle_interval_on_the_replay_clock() -> None:
    # one session: turn 1 arrives 100 s (its recorded gap) after turn 0 finished; the
    # clock jumps over the idle interval; turn 1 reuses 13 blocks and computes 13
    reqs = [_req(0.0, A, "s", 0), _req(100.0, A + list(range(14, 27)), "s", 1)]
    res = simulate_kv(reqs, KVSimParams(system="dram-only", in_flight=1))
    assert res.ttft.tolist() == pytest.approx([P, T + P])
    assert res.metrics["duration_s"] == pytest.approx(P + 100.0 + T + P)


def test_cli_queueing_flags_and_warning(tmp_path, capsys) -> None:
    path = tmp_path / "t.jsonl"
    write_kv_jsonl(str(path), TRACE)
    assert main(["sim", "kv", "--trace", str(path), "--system", "dram-only", "--in-flight", "1",
                 "--prefill-tokens-per-s", "3250", "--json"]) == 0
    out = capsys.readouterr()
    m = json.loads(out.out)
    assert m["replay_clock"] == "queueing" and m["prefill_gpus"] == 1
    assert m["offered_load"] == pytest.approx(3 * 13 * 512 / (0.6 * 3250))
    assert "warning: offered prefill load" in out.err
    assert main(["sim", "kv", "--trace", str(path), "--prefill-gpus", "0"]) == 2
    assert "--prefill-gpus" in capsys.readouterr().err
