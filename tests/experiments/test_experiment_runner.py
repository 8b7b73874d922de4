"""The experiment runner: process pool == serial, resumable after SIGKILL, torn lines,
failing cells, and the HTML report built from stored rows."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicache.cli.main import main
from aicache.experiments import EXPERIMENTS
from aicache.experiments.base import Experiment, ReportSection, Table, cell_key
from aicache.experiments.cache_policies import CachePolicies
from aicache.experiments.plots import aggregate
from aicache.experiments.report import write_report
from aicache.experiments.runner import CellStore, RunResult, run_experiment, select_cells

NAME = "cache-policies"


def metrics(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row without its bookkeeping (``_`` keys: run id, wall time, host...)."""
    return {k: v for k, v in row.items() if not k.startswith("_")}


def by_key(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["_key"]: metrics(r) for r in rows}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """One uninterrupted process-pool run of the quick grid, shared by the tests below."""
    return run_experiment(NAME, quick=True, out=tmp_path_factory.mktemp("quick"), workers=2,
                          progress=False)


def test_process_pool_equals_serial_in_process_run(quick_run: RunResult) -> None:
    res = quick_run
    cells = CachePolicies().cells(True)
    assert res.ok and res.ran == len(cells) == len(res.rows) and res.skipped == 0
    assert res.executor == "process-pool(2)"
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip() or "unknown"
    for params, row in zip(cells, res.rows):
        # the reference: the cell function called directly, in this process
        expected = {**params, **CachePolicies.run_cell(params)}
        assert metrics(row) == expected
        assert row["_key"] == cell_key(NAME, params)
        assert row["_seed"] == params["seed"]
        assert row["_git_commit"] == head
        assert row["_run_id"] == res.run_id and row["_wall_s"] >= 0 and row["_host"]
    # the results file holds the same rows
    import pyarrow.parquet as pq

    table = pq.read_table(res.results_path).to_pylist()
    assert [r["_key"] for r in table] == [r["_key"] for r in res.rows]
    assert [r["miss_ratio"] for r in table] == [r["miss_ratio"] for r in res.rows]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_sigkill_halfway_then_rerun_runs_only_missing_cells(tmp_path: Path, quick_run: RunResult) -> None:
    total = len(CachePolicies().cells(True))
    killed = tmp_path / "killed"
    cells_file = killed / NAME / "cells.jsonl"
    env = {**os.environ, "AICACHE_NO_PROGRESS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "aicache.cli.main", "experiment", "run", NAME, "--quick",
         "--workers", "1", "--out", str(killed), "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 45
        while _lines(cells_file) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        # the whole process group we started: the CLI and its pool worker
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    first = CellStore(cells_file).load()
    assert 3 <= len(first) < total, "the run must be killed part-way for this test to mean anything"

    res = run_experiment(NAME, quick=True, out=killed, workers=2, progress=False)
    assert res.ok
    # only the missing cells ran: counted by the rows the new run produced
    new_rows = [r for r in res.rows if r["_run_id"] == res.run_id]
    assert len(new_rows) == res.ran == total - len(first)
    assert {r["_key"] for r in new_rows}.isdisjoint(first)
    # the killed run's rows were kept as they were
    for r in res.rows:
        if r["_key"] in first:
            assert r == first[r["_key"]]
    # every cell computed exactly once overall
    assert _lines(cells_file) == total

    # and the final results equal those of an uninterrupted run
    assert by_key(res.rows) == by_key(quick_run.rows)


def test_truncated_last_line_is_ignored_and_repaired(tmp_path: Path) -> None:
    sel = {"trace": "zipf-1.0", "size_pct": 10.0}
    res = run_experiment(NAME, quick=True, out=tmp_path, workers=0, progress=False, select=sel)
    path = tmp_path / NAME / "cells.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == len(res.rows) >= 3
    # the process died while writing the last row: drop it, keep half of it
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    assert len(CellStore(path).load()) == len(lines) - 1

    again = run_experiment(NAME, quick=True, out=tmp_path, workers=0, progress=False, select=sel)
    assert again.ran == 1 and again.skipped == len(lines) - 1
    assert by_key(again.rows) == by_key(res.rows)
    # the torn tail was cut off before appending: every line is whole JSON again
    rows = [json.loads(x) for x in path.read_bytes().splitlines()]
    assert len(rows) == len(lines)


@given(rows=st.lists(st.fixed_dictionaries({"_key": st.sampled_from("abcdef"),
                                            "v": st.integers() | st.floats(allow_nan=False) | st.text()}),
                     max_size=12),
       tail=st.binary(max_size=40).filter(lambda b: b"\n" not in b))
def test_cell_store_last_row_wins_and_torn_tail_ignored(tmp_path_factory: Any, rows: list[dict[str, Any]],
                                                        tail: bytes) -> None:
    path = tmp_path_factory.mktemp("store") / "cells.jsonl"
    store = CellStore(path)
    for r in rows:
        store.append(r)
    with open(path, "ab") as f:
        f.write(tail)
    expected: dict[str, dict[str, Any]] = {}
    for r in rows:  # reference: a plain dict update in order
        expected[r["_key"]] = r
    assert store.load(repair=True) == expected
    assert path.read_bytes().endswith(b"\n") or not rows
    store.append({"_key": "z", "v": 1})
    assert store.load() == {**expected, "z": {"_key": "z", "v": 1}}


class _Flaky(Experiment):
    """Test-only experiment: cell x == 2 raises."""

    name = "test-flaky"

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        return [{"x": i, "seed": 0} for i in range(5)]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        if params["x"] == 2:
            raise ValueError("cell two is broken")
        return {"y": params["x"] ** 2}

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        return ReportSection(
            "flaky", tables=[Table("squares", [{"x": r["x"], "y": r["y"]} for r in rows])],
            published=[{"x": 3, "y (paper)": 9}],
            goals=[{"goal": "all cells succeed", "met": len(rows) == 5, "value": f"{len(rows)}/5"},
                   {"goal": "needs x = 9", "met": None, "value": "no such cell"}])


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(EXPERIMENTS._entries, _Flaky.name, _Flaky)
    return _Flaky.name


def test_failing_cell_is_recorded_others_kept_exit_1_and_retried(
        tmp_path: Path, flaky: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["experiment", "run", flaky, "--out", str(tmp_path), "--workers", "2", "--json"])
    assert rc == 1
    out = json.loads(capsys.readouterr().out)
    assert out["experiments"][0]["failed"] == 1 and out["ok"] is False
    rows = CellStore(tmp_path / flaky / "cells.jsonl").load()
    assert len(rows) == 5
    by_x = {r["x"]: r for r in rows.values()}
    assert "ValueError: cell two is broken" in by_x[2]["_error"]
    assert all(by_x[x]["y"] == x * x and "_error" not in by_x[x] for x in (0, 1, 3, 4))
    html = (tmp_path / "report.html").read_text()
    assert "Failed cells (1)" in html and "cell two is broken" in html
    # the unmet goal is flagged, the published numbers sit beside ours
    assert re.search(r"<tr class='goal-not'><td class='t'>all cells succeed</td><td class='t'>4/5</td>"
                     r"<td class='t'><span class='badge not'>not met</span>", html)
    assert "Published (paper)" in html and "y (paper)" in html
    assert re.search(r"<tr class='goal-na'><td class='t'>needs x = 9</td>.*?not evaluated", html)
    # a rerun retries only the failed cell
    res = run_experiment(flaky, out=tmp_path, workers=2, progress=False)
    assert res.ran == 1 and res.failed == 1


def test_report_references_existing_pngs_and_contains_tables(quick_run: RunResult) -> None:
    res = quick_run
    path = write_report(res.out_dir.parent, [NAME])
    html = path.read_text()
    srcs = re.findall(r'<img src="([^"]+)"', html)
    traces = sorted({r["trace"] for r in res.rows})
    assert len(srcs) == len(traces)
    for s in srcs:
        assert not Path(s).is_absolute()
        png = (path.parent / s)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for tr in traces:
        assert f"Miss ratio on {tr}" in html
    # a measured number appears in the table as the report formats it
    lru = next(r for r in res.rows if r["policy"] == "lru" and r["trace"] == traces[0])
    assert f"{lru['miss_ratio']:.4g}" in html
    assert res.meta["git_commit"] in html and "process-pool(2)" in html
    assert "badge met" in html  # goals are highlighted


def test_published_results_without_cells_log_report_the_same_rows(
        quick_run: RunResult, tmp_path: Path) -> None:
    """A results folder as published (``run.json`` + ``results.parquet`` + PNGs, no
    ``cells.jsonl``) rebuilds the same rows and the same report tables."""
    import shutil

    from aicache.experiments.runner import load_rows

    pub = tmp_path / "pub"
    shutil.copytree(quick_run.out_dir, pub / NAME)
    (pub / NAME / "cells.jsonl").unlink()
    rows, meta = load_rows(pub, NAME)
    assert meta["keys"] == [r["_key"] for r in quick_run.rows]
    assert by_key(rows) == by_key(quick_run.rows)
    html = write_report(pub, [NAME]).read_text()
    lru = next(r for r in quick_run.rows if r["policy"] == "lru")
    assert f"{lru['miss_ratio']:.4g}" in html and "(no rows)" not in html


def test_stored_only_over_published_results_keeps_them(
        quick_run: RunResult, tmp_path: Path) -> None:
    """``--stored-only`` over a published folder (no ``cells.jsonl``) reports its rows and
    rewrites its results file with the same rows, not an empty one."""
    import shutil

    from aicache.experiments.runner import load_rows

    pub = tmp_path / "pub"
    shutil.copytree(quick_run.out_dir, pub / NAME)
    (pub / NAME / "cells.jsonl").unlink()
    res = run_experiment(NAME, quick=True, out=pub, stored_only=True, progress=False)
    assert res.ran == 0 and by_key(res.rows) == by_key(quick_run.rows)
    rows, _ = load_rows(pub, NAME)
    assert by_key(rows) == by_key(quick_run.rows)


def test_select_cells_filters_and_rejects_bad_filters() -> None:
    cells = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "x"}]
    assert select_cells(cells, {"b": "x"}) == [cells[0], cells[2]]
    assert select_cells(cells, {"a": [2, 3], "b": ["x"]}) == [cells[2]]
    from aicache.errors import BadInput

    with pytest.raises(BadInput, match="valid: a, b"):
        select_cells(cells, {"c": 1})
    with pytest.raises(BadInput, match="matches no cell"):
        select_cells(cells, {"a": 9})


def test_plot_aggregate_is_mean_min_max_over_duplicates() -> None:
    rows = [{"p": "lru", "s": 1, "m": 0.5}, {"p": "lru", "s": 1, "m": 0.7},
            {"p": "lru", "s": 5, "m": 0.2}, {"p": "fifo", "s": 1, "m": 0.9},
            {"p": "fifo", "s": 5}]  # a failed cell without the metric is ignored
    agg = aggregate(rows, "s", "m", "p")
    assert list(agg) == ["lru", "fifo"]
    (a, b), (c,) = agg["lru"], agg["fifo"]
    assert (a.x, a.mean, a.lo, a.hi, a.n) == (1, pytest.approx(0.6), 0.5, 0.7, 2)
    assert (b.x, b.mean, b.n) == (5, 0.2, 1)
    assert (c.x, c.mean) == (1, 0.9)


def test_a_second_concurrent_run_into_the_same_directory_is_refused(tmp_path: Path) -> None:
    from aicache.errors import BadInput

    exp_dir = tmp_path / NAME
    exp_dir.mkdir()
    # another process holds the run lock (as a running `aicache experiment run` does)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
         "fcntl.lockf(f.fileno(), fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
         str(exp_dir / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(BadInput, match="another run is writing"):
            run_experiment(NAME, quick=True, out=tmp_path, workers=0, progress=False)
        assert not (exp_dir / "cells.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    # once the holder is gone the run proceeds
    res = run_experiment(NAME, quick=True, out=tmp_path, workers=0, progress=False,
                         select={"policy": "lru", "trace": "zipf-1.0"})
    assert res.ok and res.ran == len(res.rows) > 0


_MIXED = [{"_key": "a", "p": 1, "v": 0.5, "tags": [1, 2], "note": "x"},
          {"_key": "b", "p": "two", "v": 1.5, "_error": "boom"}]


def test_results_parquet_keeps_every_row_and_types_mixed_columns_as_text(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from aicache.experiments.runner import write_results

    path = write_results(_MIXED, tmp_path)
    assert path.name == "results.parquet"
    got = pq.read_table(path).to_pylist()
    assert [r["_key"] for r in got] == ["a", "b"]
    assert [r["v"] for r in got] == [0.5, 1.5]
    assert [r["p"] for r in got] == ["1", "two"]  # int/str mix stored as text, not dropped
    assert json.loads(got[0]["tags"]) == [1, 2] and got[1]["tags"] is None
    assert got[1]["_error"] == "boom" and got[0]["_error"] is None


def test_results_fall_back_to_csv_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import csv

    from aicache.experiments.runner import write_results

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = write_results(_MIXED, tmp_path)
    assert path.name == "results.csv"
    with open(path, newline="") as f:
        got = list(csv.DictReader(f))
    assert [r["_key"] for r in got] == ["a", "b"]
    assert [float(r["v"]) for r in got] == [0.5, 1.5]
    assert got[0]["tags"] == "[1, 2]" and got[1]["_error"] == "boom"


def test_stored_only_reports_the_finished_cells_and_runs_nothing(
        tmp_path: Path, flaky: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--stored-only``: a partial grid (here: 2 of 5 cells stored) is reported as it is;
    nothing is computed, and a later plain run still fills in the rest."""
    run_experiment(flaky, out=tmp_path, workers=0, progress=False, select={"x": [0, 3]})
    before = (tmp_path / flaky / "cells.jsonl").read_text()
    rc = main(["experiment", "run", flaky, "--out", str(tmp_path), "--stored-only", "--json"])
    out = json.loads(capsys.readouterr().out)
    exp = out["experiments"][0]
    assert exp["ran"] == 0 and exp["cells"] == 2 and exp["failed"] == 0
    assert sorted(r["x"] for r in exp["tables"][0]["rows"]) == [0, 3]
    assert exp["goals"][0]["value"] == "2/5" and rc == 0
    assert (tmp_path / flaky / "cells.jsonl").read_text() == before  # nothing appended
    res = run_experiment(flaky, out=tmp_path, workers=0, progress=False)
    assert res.ran == 3  # x = 1, 2, 4
