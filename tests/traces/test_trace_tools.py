"""``aicache trace summary`` against brute force; ``aicache trace convert`` round trips."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aicache.cli.main import main
from aicache.sim.cache_sim import simulate
from aicache.traces.formats._common import make_batch
from aicache.traces.gen_agent import generate_agent
from aicache.traces.io import open_trace, write_trace
from aicache.traces.summary import summarize, zipf_alpha


def _block_trace(path: Path, n: int = 1500, seed: int = 2) -> tuple[list[int], list[int], list[int]]:
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, n) % 200).tolist()
    sizes = [(i % 7 + 1) * 10 for i in ids]
    ts = sorted(rng.integers(0, 10_000, n).tolist())
    write_trace(str(path), "lcs-csv", [make_batch(ts, ids, sizes)])
    return ts, ids, sizes


def test_summary_equals_brute_force(tmp_path: Path) -> None:
    ts, ids, sizes = _block_trace(tmp_path / "t.csv")
    s = summarize(open_trace(str(tmp_path / "t.csv")))
    counts: dict[int, int] = {}
    for k in ids:
        counts[k] = counts.get(k, 0) + 1
    times, dists, secs = [], [], []
    last: dict[int, int] = {}
    for i, k in enumerate(ids):
        if k in last:
            p = last[k]
            times.append(i - p)
            dists.append(len(set(ids[p + 1:i]) - {k}))
            secs.append(ts[i] - ts[p])
        last[k] = i
    assert (s.requests, s.objects) == (len(ids), len(counts))
    assert s.one_hit_wonders == sum(c == 1 for c in counts.values())
    assert s.working_set_bytes == sum((k % 7 + 1) * 10 for k in counts)
    assert s.bytes_requested == sum(sizes) and s.time_span == ts[-1] - ts[0]
    assert s.reuse_requests == len(times)
    for got, ref in ((s.reuse_time, times), (s.reuse_distance, dists), (s.reuse_seconds, secs)):
        assert got.mean == pytest.approx(np.mean(ref)) and got.max == max(ref)
        assert got.p90 == pytest.approx(np.percentile(ref, 90))
    top = sorted(counts.values(), reverse=True)
    assert s.top_10pct_share == pytest.approx(sum(top[:int(np.ceil(len(top) * 0.1))]) / len(ids))


@pytest.mark.parametrize("alpha", [0.6, 1.0, 1.4])
def test_zipf_alpha_recovers_the_generating_exponent(alpha: float) -> None:
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, 301) ** alpha
    counts = rng.multinomial(2_000_000, p / p.sum())
    assert zipf_alpha(counts[counts > 0]) == pytest.approx(alpha, abs=0.03)


def test_summary_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _block_trace(tmp_path / "t.csv")
    assert main(["trace", "summary", str(tmp_path / "t.csv"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "lcs-csv" and d["requests"] == 1500 and set(d["reuse_distance"]) >= {"p50", "p99"}
    assert main(["trace", "summary", str(tmp_path / "t.csv")]) == 0
    assert "one_hit_wonder_ratio" in capsys.readouterr().out


def _cols(path: Path) -> tuple[list[float], list[int], list[int]]:
    bs = list(open_trace(str(path)).batches())
    return ([t for b in bs for t in b.timestamp.tolist()], [k for b in bs for k in b.obj_id.tolist()],
            [s for b in bs for s in b.obj_size.tolist()])


def test_block_round_trip_through_every_block_writer(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ts, ids, sizes = _block_trace(tmp_path / "t.csv")
    prev = tmp_path / "t.csv"
    for i, fmt in enumerate(["oracle-general", "block-csv", "lcs-csv"]):
        out = tmp_path / f"step{i}"
        assert main(["trace", "convert", str(prev), "--to", fmt, "--out", str(out), "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["to"] == fmt and d["records"] == len(ids)
        assert open_trace(str(out)).format == fmt
        assert _cols(out) == (ts, ids, sizes)
        prev = out
    assert main(["trace", "convert", str(prev), "--to", "lcs-txt", "--out", str(tmp_path / "ids")]) == 0
    assert "drops" in capsys.readouterr().err
    assert _cols(tmp_path / "ids")[1] == ids
    assert simulate(str(tmp_path / "ids"), "lru", 20).hits == simulate(str(tmp_path / "t.csv"), "lru", 20).hits


def test_kv_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aicache.traces.io import write_kv_jsonl

    src = tmp_path / "a.jsonl"
    write_kv_jsonl(str(src), generate_agent(4, 1))
    orig = list(open_trace(str(src)).requests())
    assert main(["trace", "convert", str(src), "--to", "mooncake", "--out", str(tmp_path / "m.jsonl")]) == 0
    assert main(["trace", "convert", str(tmp_path / "m.jsonl"), "--to", "kv-jsonl",
                 "--out", str(tmp_path / "b.jsonl")]) == 0
    back = list(open_trace(str(tmp_path / "b.jsonl")).requests())
    assert open_trace(str(tmp_path / "m.jsonl")).format == "mooncake"
    key = [(r.timestamp, r.input_length, r.output_length, r.hash_ids, r.block_tokens) for r in orig]
    assert [(r.timestamp, r.input_length, r.output_length, r.hash_ids, r.block_tokens) for r in back] == key
    assert main(["trace", "convert", str(src), "--to", "kv-jsonl", "--out", str(tmp_path / "c.jsonl")]) == 0
    assert list(open_trace(str(tmp_path / "c.jsonl")).requests()) == orig
    # KV → block: the prefix-block expansion, as sim cache replays it
    assert main(["trace", "convert", str(src), "--to", "lcs-csv", "--out", str(tmp_path / "k.csv")]) == 0
    assert simulate(str(tmp_path / "k.csv"), "lru", "10%").hits == simulate(str(src), "lru", "10%").hits
    capsys.readouterr()


def test_convert_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _block_trace(tmp_path / "t.csv")
    for argv, needle in ((["--to", "kv-jsonl", "--out", str(tmp_path / "x")], "block formats only"),
                         (["--to", "parquet", "--out", str(tmp_path / "x")], "parquet"),
                         (["--to", "lcs-csv", "--out", str(tmp_path / "t.csv")], "is the input")):
        assert main(["trace", "convert", str(tmp_path / "t.csv"), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err
