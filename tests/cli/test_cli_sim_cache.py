"""``aicache sim cache`` and :func:`aicache.sim.cache_sim.simulate`: the ``--json`` contract,
one-line errors with exit 2, and the numbers against plain reference implementations."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.cli.main import main
from aicache.errors import BadInput, UnknownName
from aicache.sim.cache_sim import JSON_KEYS, simulate
from aicache.traces.formats._common import make_batch
from aicache.traces.io import write_trace

CLI_KEYS = ["trace", "policy", "prefetch", "size_mode", "cache_size", "requests", "hits",
            "miss_ratio", "byte_miss_ratio", "wall_seconds", "requests_per_second"]


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    ids = rng.zipf(1.3, 3000) % 400
    sizes = (ids % 7 + 1) * 100
    p = tmp_path / "t.csv"
    write_trace(str(p), "block-csv", [make_batch(list(range(3000)), ids.tolist(), sizes.tolist(),
                                                 unit=[0] * 3000)], ["data"])
    return p


# ---------------------------------------------------------------------------- references
def reference_lru(ids: list[int], sizes: list[int], cap: int, objects: bool) -> tuple[int, int]:
    """Obviously-correct LRU with libCacheSim's accounting: (hits, bytes hit)."""
    order: OrderedDict[int, int] = OrderedDict()
    used = hits = bhit = 0
    for k, s in zip(ids, sizes):
        w = 1 if objects else s
        if k in order:
            order.move_to_end(k)
            hits += 1
            bhit += s
            continue
        if w > cap:
            continue
        while used + w > cap:
            _, v = order.popitem(last=False)
            used -= v
        order[k] = w
        used += w
    return hits, bhit


def reference_belady_hits(ids: list[int], cap: int) -> int:
    """Objects-mode Belady by brute force: evict the resident object used furthest ahead."""
    resident: set[int] = set()
    hits = 0
    for i, k in enumerate(ids):
        if k in resident:
            hits += 1
            continue
        if len(resident) >= cap:
            def nxt(o: int) -> int:
                for j in range(i + 1, len(ids)):
                    if ids[j] == o:
                        return j
                return len(ids) + 1
            resident.remove(max(sorted(resident), key=nxt))
        resident.add(k)
    return hits


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=300), st.integers(1, 40),
       st.sampled_from(["objects", "bytes"]))
def test_simulate_lru_matches_reference(tmp_path_factory: pytest.TempPathFactory, ids: list[int],
                                        pct: int, mode: str) -> None:
    sizes = [(k * 37) % 500 + 1 for k in ids]  # one size per object
    p = tmp_path_factory.mktemp("lru") / "t.bin"
    write_trace(str(p), "oracle-general", [make_batch(list(range(len(ids))), ids, sizes)])
    distinct = dict(zip(ids, sizes))
    ws = len(distinct) if mode == "objects" else sum(distinct.values())
    cap = max(1, ws * pct // 100)
    r = simulate(str(p), "lru", cap, size_mode=mode)
    hits, bhit = reference_lru(ids, sizes, cap, mode == "objects")
    assert (r.requests, r.hits) == (len(ids), hits)
    assert r.byte_miss_ratio == pytest.approx(1 - bhit / sum(sizes))
    assert r.working_set == ws


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=120), st.integers(1, 6))
def test_simulate_feeds_belady_true_next_access(tmp_path_factory: pytest.TempPathFactory,
                                                ids: list[int], cap: int) -> None:
    """The pre-pass's next-access times make the registered Belady optimal (lcs-txt carries
    no next-access column, so they must come from the pre-pass)."""
    cap = min(cap, len(set(ids)))
    p = tmp_path_factory.mktemp("bel") / "t.txt"
    p.write_text("\n".join(map(str, ids)) + "\n")
    assert simulate(str(p), "belady", cap).hits == reference_belady_hits(ids, cap)


def test_percentage_of_working_set_objects_and_bytes(trace: Path) -> None:
    ids = np.random.default_rng(1).zipf(1.3, 3000) % 400
    distinct = np.unique(ids)
    ws_bytes = int(((distinct % 7 + 1) * 100).sum())
    r = simulate(str(trace), "lru", "10%")
    assert (r.working_set, r.cache_size) == (len(distinct), int(len(distinct) * 0.10))
    r = simulate(str(trace), "lru", "10%", size_mode="bytes")
    assert (r.working_set, r.cache_size) == (ws_bytes, int(ws_bytes * 0.10))
    assert simulate(str(trace), "lru", "100%").cache_size == len(distinct)  # equal is allowed


def test_same_seed_same_numbers_and_prefetch_path(tmp_path: Path) -> None:
    n = 2000  # two sequential passes over 400 blocks: a stride prefetcher must find them
    ids = [i % 400 for i in range(n)]
    p = tmp_path / "seq.csv"
    write_trace(str(p), "block-csv", [make_batch(list(range(n)), ids, [4096] * n, unit=[0] * n)], ["f"])
    plain = simulate(str(p), "lru", 100)
    assert plain.hits == 0  # LRU on a loop larger than the cache never hits
    pf = simulate(str(p), "lru", 100, prefetch="stride")
    assert pf.prefetch_hits > 0 and pf.hits == pf.prefetch_hits and pf.prefetched >= pf.prefetch_hits
    again = simulate(str(p), "lru", 100, prefetch="stride")
    assert (again.hits, again.prefetched) == (pf.hits, pf.prefetched)


@pytest.mark.parametrize("policy", ["lru", "belady"])
def test_retained_and_restreamed_replays_agree(trace: Path, policy: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Small traces are replayed from the pre-pass's batches, large ones re-read: same numbers."""
    import aicache.sim.cache_sim as cs

    kept = simulate(str(trace), policy, "7%", size_mode="bytes", batch_size=256)
    monkeypatch.setattr(cs, "RETAIN_BYTES", 0)
    again = simulate(str(trace), policy, "7%", size_mode="bytes", batch_size=256)
    assert (kept.hits, kept.evictions, kept.byte_miss_ratio) == (again.hits, again.evictions,
                                                                  again.byte_miss_ratio)
    assert kept.requests == again.requests == 3000


def test_forced_progress_bar_changes_nothing(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet = simulate(str(trace), "lru", 40, progress=False)
    shown = simulate(str(trace), "lru", 40, progress=True)
    assert (shown.hits, shown.evictions) == (quiet.hits, quiet.evictions)
    assert capsys.readouterr().out == ""  # the bar never writes to stdout (JSON stays clean)


def test_simulate_bad_inputs(trace: Path) -> None:
    with pytest.raises(UnknownName, match="valid: .*lru"):
        simulate(str(trace), "nosuch", 10)
    with pytest.raises(UnknownName, match="prefetch"):
        simulate(str(trace), "lru", 10, prefetch="nosuch")
    with pytest.raises(BadInput, match="size mode 'pages'"):
        simulate(str(trace), "lru", 10, size_mode="pages")
    with pytest.raises(BadInput, match="0.01%"):
        simulate(str(trace), "lru", "0.01%")  # rounds to 0 objects
    empty = trace.parent / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(BadInput, match="no requests"):
        simulate(str(empty), "lru", 1)


# ---------------------------------------------------------------------------- the CLI
def test_cli_json_keys_exactly_the_contract(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sim", "cache", "--trace", str(trace), "--policy", "lru", "--cache-size", "10%",
               "--size-mode", "bytes", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    d = json.loads(out)
    assert list(d)[:len(CLI_KEYS)] == CLI_KEYS == list(JSON_KEYS)
    table = simulate(str(trace), "lru", "10%", size_mode="bytes").to_full_dict()
    assert set(d) == set(table) and d["format"] == "block-csv"  # everything the table shows
    direct = simulate(str(trace), "lru", "10%", size_mode="bytes")
    timing = ("wall_seconds", "requests_per_second", "scan_seconds")
    assert {k: d[k] for k in CLI_KEYS if k not in timing} == \
        {k: v for k, v in direct.to_dict().items() if k in CLI_KEYS and k not in timing}
    assert d["requests_per_second"] == pytest.approx(d["requests"] / d["wall_seconds"])


def test_cli_table_by_default(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "cache", "--trace", str(trace), "--policy", "lru", "--cache-size", "50"]) == 0
    out = capsys.readouterr().out
    assert "miss_ratio" in out and "lru" in out and not out.lstrip().startswith("{")


def test_cli_subprocess(trace: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aicache.cli.main", "sim", "cache", "--trace", str(trace),
         "--format", "block-csv", "--policy", "lru", "--cache-size", "25", "--seed", "4", "--json"],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert list(d)[:len(CLI_KEYS)] == CLI_KEYS and d["cache_size"] == 25 and d["requests"] == 3000
    assert d["hits"] == simulate(str(trace), "lru", 25).hits


def _bad(tmp: Path, trace: Path) -> list[tuple[list[str], str]]:
    malformed = tmp / "bad.csv"
    malformed.write_text("timestamp,unit,obj_id,size\n1,u,1,10\n2,u,two,10\n")
    return [
        (["--trace", str(trace), "--policy", "nosuch", "--cache-size", "10"], "nosuch"),
        (["--trace", str(malformed), "--policy", "lru", "--cache-size", "1"], "record 3"),
        (["--trace", str(tmp / "missing.csv"), "--policy", "lru", "--cache-size", "1"], "missing.csv"),
        (["--trace", str(tmp), "--policy", "lru", "--cache-size", "1"], str(tmp)),
        (["--trace", str(trace), "--policy", "lru", "--cache-size", "0"], "cache size '0'"),
        (["--trace", str(trace), "--policy", "lru", "--cache-size", "12 parsecs"], "12 parsecs"),
        (["--trace", str(trace), "--policy", "lru", "--cache-size", "5", "--format", "parquet"], "parquet"),
    ]


def test_cli_bad_input_is_one_line_exit_2(trace: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for args, needle in _bad(tmp_path, trace):
        rc = main(["sim", "cache", *args])
        out, err = capsys.readouterr()
        assert rc == 2, (args, err)
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (args, err)


def test_cli_skip_bad_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("timestamp,unit,obj_id,size\n1,u,1,10\n2,u,two,10\n3,u,1,10\n4,u,x,\n")
    assert main(["sim", "cache", "--trace", str(p), "--policy", "lru", "--cache-size", "1",
                 "--skip-bad", "--json"]) == 0
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert (d["requests"], d["hits"]) == (2, 1)
    assert "skipped 2 malformed" in err
