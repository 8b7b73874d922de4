"""A generator's own output is accepted by every command that takes it; detection refuses
what is not a trace; ``--json`` names the format it detected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicache.cli.main import main
from aicache.errors import BadInput
from aicache.traces.gen_agent import AGENT, _by_session, generate_agent
from aicache.traces.io import TRIED, detect_format


@pytest.mark.parametrize("kind", ["agent", "weka", "chat", "tool"])
def test_generated_sessions_are_time_ordered_and_replay_everywhere(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"{kind}.jsonl"
    assert main(["gen", "sessions", kind, "--out", str(out), "--sessions", "6"]) == 0
    ts = [json.loads(line)["timestamp"] for line in out.read_text().splitlines()]
    assert ts == sorted(ts) and len(ts) > 6
    capsys.readouterr()
    assert main(["sim", "prefix", "--trace", str(out), "--policy", "lru",
                 "--capacity-tokens", "10%", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["requests"] == len(ts) and d["format"] == "kv-jsonl"
    assert main(["sim", "kv", "--trace", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["requests"] == len(ts) and d["format"] == "kv-jsonl"
    for argv in (["sim", "cache", "--trace", str(out), "--policy", "lru", "--cache-size", "10%"],
                 ["trace", "summary", str(out)]):
        assert main([*argv, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["format"] == "kv-jsonl"


def test_agent_order_is_a_stable_sort_of_the_sessions() -> None:
    """Same requests (ids included) as session by session, only interleaved by time."""
    by_session = list(_by_session(AGENT, 8, 3))
    timed = list(generate_agent(8, 3))
    assert timed == sorted(by_session, key=lambda r: r.timestamp)
    turns: dict[str, int] = {}
    for r in timed:  # each session's turns stay in order
        assert r.session_id is not None and r.turn is not None
        assert r.turn == turns.get(r.session_id, -1) + 1
        turns[r.session_id] = r.turn


def test_sim_kv_does_not_depend_on_session_interleaving() -> None:
    from aicache.sim.kv import KVSimParams, prepare, simulate_kv

    def run(reqs: list) -> dict:  # type: ignore[type-arg]
        m = simulate_kv(prepare(reqs, 512), KVSimParams(dram_tokens=20_000, ssd_tokens=200_000)).metrics
        return {k: v for k, v in m.items() if "second" not in k and "wall" not in k}

    assert run(list(_by_session(AGENT, 8, 1))) == run(list(generate_agent(8, 1)))


NOT_TRACES = {
    "log.txt": "2026-12-01 11:00:01 INFO starting demo\n2026-12-01 11:00:02 INFO done\n",
    "README.md": "# aicache\n\nAdaptive caching for AI systems.\n",
    "table.csv": "name,score\nalice,3\nbob,4\n",
}


@pytest.mark.parametrize("name", sorted(NOT_TRACES))
def test_a_non_trace_is_refused_in_one_line(name: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / name
    p.write_text(NOT_TRACES[name])
    with pytest.raises(BadInput, match="not a trace"):
        detect_format(str(p))
    for argv in (["sim", "cache", "--trace", str(p), "--policy", "lru", "--cache-size", "10%"],
                 ["sim", "prefix", "--trace", str(p), "--policy", "lru", "--capacity-tokens", "10%"],
                 ["sim", "kv", "--trace", str(p)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and str(p) in err and all(f in err for f in TRIED)


def test_real_traces_are_still_detected(tmp_path: Path) -> None:
    cases = {"ids.txt": ("17\n4\nuser-9\n\n17\n", "lcs-txt"),
             "hdr.csv": ("time,obj_id,obj_size\n1,5,100\n2,6,100\n", "lcs-csv"),
             "num.csv": ("1,5,100\n2,6,100\n", "lcs-csv"),
             "blk.csv": ("timestamp,unit,obj_id,size\n0,a,1,4096\n", "block-csv"),
             "empty.txt": ("", "lcs-txt")}
    for name, (text, fmt) in cases.items():
        (tmp_path / name).write_text(text)
        assert detect_format(str(tmp_path / name)) == fmt, name
