"""``aicache experiment list|run`` and ``aicache demo`` from the command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aicache.cli.main import main
from aicache.experiments import EXPERIMENTS
from aicache.experiments import demo as demo_config
from aicache.experiments.demo import DemoEntry
from aicache.experiments.runner import CellStore


def test_experiment_list_json_describes_every_registered_experiment(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["experiments"]}
    assert sorted(rows) == EXPERIMENTS.names()
    for name, row in rows.items():
        exp = EXPERIMENTS.get(name)()
        assert row["cells_quick"] == len(exp.cells(True))
        assert row["cells_full"] == len(exp.cells(False))
        assert row["reproduces"] == (exp.reproduces or EXPERIMENTS.help(name))
        assert row["full_wall_time"] == exp.full_wall_time
    assert rows["cache-policies"]["cells_quick"] < rows["cache-policies"]["cells_full"]


def test_unknown_experiment_is_one_line_listing_valid_names_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "aicache.cli.main", "experiment", "run",
                           "cache-policies", "no-such-exp", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "'no-such-exp'" in lines[0]
    for name in EXPERIMENTS.names():
        assert name in lines[0]
    assert not (tmp_path / "cache-policies").exists(), "nothing may run before names are checked"


@pytest.mark.parametrize("argv, needle", [
    (["--select", "policy"], "--select 'policy'"),
    (["--select", "nope=1"], "cell filter 'nope'"),
    (["--workers", "-1"], "--workers -1"),
])
def test_bad_run_options_are_one_line_exit_2(argv: list[str], needle: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["experiment", "run", "cache-policies", "--quick", "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0]


def test_run_with_select_prints_tables_and_report_path(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["experiment", "run", "cache-policies", "--quick", "--workers", "0",
               "--select", "trace=zipf-1.0", "--select", "policy=lru,fifo", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Miss ratio on zipf-1.0" in out and "Summary over traces and sizes" in out
    m = re.search(r"report: (\S+)", out)
    assert m and Path(m.group(1)) == tmp_path / "report.html" and Path(m.group(1)).is_file()
    rows = CellStore(tmp_path / "cache-policies" / "cells.jsonl").load().values()
    assert {r["policy"] for r in rows} == {"lru", "fifo"} and {r["trace"] for r in rows} == {"zipf-1.0"}


def test_report_keeps_the_experiments_already_stored_in_out(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Running a second experiment into the same --out rewrites report.html with both
    sections (this run's first), and prints only this run's tables."""
    common = ["--quick", "--workers", "0", "--out", str(tmp_path)]
    assert main(["experiment", "run", "cache-policies", "--select", "trace=zipf-1.0",
                 "--select", "policy=lru", *common]) == 0
    capsys.readouterr()
    assert main(["experiment", "run", "chiron-diagnosis", *common]) == 0
    out = capsys.readouterr().out
    assert "== chiron-diagnosis" in out and "== cache-policies" not in out
    html = (tmp_path / "report.html").read_text()
    assert html.index("id='chiron-diagnosis'") < html.index("id='cache-policies'")
    assert "Miss ratio on zipf-1.0" in html


def test_demo_runs_registered_entries_notes_missing_ones_and_writes_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo_config, "DEMO_EXPERIMENTS", [
        DemoEntry("not-registered-yet", why="a future experiment"),
        DemoEntry("cache-policies", quick=True, select={"trace": "scan-mix", "size_pct": 10.0}),
    ])
    rc = main(["demo", "--out", str(tmp_path), "--json", "--workers", "2"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "skipping 'not-registered-yet'" in cap.err  # never a silent skip
    out = json.loads(cap.out)
    assert out["skipped"] == [{"name": "not-registered-yet", "reason": "not registered yet"}]
    (exp,) = out["experiments"]
    assert exp["name"] == "cache-policies" and exp["failed"] == 0
    rows = CellStore(tmp_path / "cache-policies" / "cells.jsonl").load().values()
    assert exp["ran"] == len(rows) > 0
    assert {r["size_pct"] for r in rows} == {10.0} and {r["trace"] for r in rows} == {"scan-mix"}
    report = Path(out["report"])
    assert report == tmp_path / "report.html"
    html = report.read_text()
    assert "Miss ratio on scan-mix" in html
    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (report.parent / src).is_file()


def test_demo_with_nothing_registered_is_bad_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo_config, "DEMO_EXPERIMENTS", [DemoEntry("nope")])
    assert main(["demo", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "skipping 'nope'" in err and "none of the configured experiments" in err


@pytest.mark.parametrize("entry", [e for e in demo_config.DEMO_EXPERIMENTS if e.name in EXPERIMENTS],
                         ids=lambda e: e.name)
def test_registered_demo_entries_select_existing_cells(entry: DemoEntry) -> None:
    """A demo filter that drifted from its experiment's params would break ``aicache demo``."""
    from aicache.experiments.runner import select_cells

    cells = EXPERIMENTS.get(entry.name)().cells(entry.quick)
    assert select_cells(cells, entry.select)  # raises BadInput on an unknown param / no match


def test_unreachable_ray_address_fails_fast_with_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    import time

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    rc = main(["experiment", "run", "cache-policies", "--quick", "--out", str(tmp_path),
               "--ray-address", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"127.0.0.1:{port}" in err[0] and "ray start" in err[0]
    assert time.monotonic() - t0 < 30  # ray.init alone would retry for minutes
    assert not (tmp_path / "cache-policies" / "cells.jsonl").exists()
