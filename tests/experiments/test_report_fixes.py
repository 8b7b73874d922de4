"""Report readability: a quick run reported without --quick, no dict reprs, one colour per
system across charts, log axes for bars spanning orders of magnitude, the quick-run note."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from aicache.cli.main import main
from aicache.experiments import EXPERIMENTS
from aicache.experiments.base import Experiment, ReportSection, Table
from aicache.experiments.plots import OURS, bar_chart, colour, needs_log
from aicache.experiments.report import fmt


class _TwoGrids(Experiment):
    """Test-only: the quick grid and the full grid share no cell."""

    name = "test-two-grids"

    def cells(self, quick: bool) -> Sequence[Mapping[str, Any]]:
        return [{"x": i, "seed": 0} for i in (range(2) if quick else range(10, 13))]

    @staticmethod
    def run_cell(params: Mapping[str, Any]) -> dict[str, Any]:
        return {"y": params["x"] + 1}

    def report(self, rows: Sequence[Mapping[str, Any]], outdir: Path) -> ReportSection:
        return ReportSection("two grids", tables=[Table("ys", [{"x": r["x"], "y": r["y"]} for r in rows])])


def test_stored_only_without_quick_reports_the_quick_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(EXPERIMENTS._entries, _TwoGrids.name, _TwoGrids)
    assert main(["experiment", "run", _TwoGrids.name, "--quick", "--out", str(tmp_path),
                 "--workers", "0"]) == 0
    assert main(["experiment", "run", _TwoGrids.name, "--stored-only", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    html = (tmp_path / "report.html").read_text()
    assert "<td class=''>0</td><td class=''>1</td>" in html  # the quick rows, not an empty table
    assert "Quick run." in html and "(no rows)" not in html


def test_meta_values_are_not_python_reprs() -> None:
    assert fmt({"policy": ["lru", "fifo"], "seed": 1}) == "policy=lru, fifo, seed=1"
    assert "{" not in fmt({"a": {"b": 2}}) and fmt([1.5, None]) == "1.5, –"


def test_one_colour_per_system_across_charts(tmp_path: Path) -> None:
    a = [{"x": 1, "sys": s, "y": 1.0} for s in ("lru", "chiron", "juicefs")]
    b = [{"x": 1, "sys": s, "y": 2.0} for s in ("juicefs", "alluxio", "chiron", "lru")]
    before = {s: colour(s) for s in ("lru", "chiron", "juicefs")}
    bar_chart(a, "x", "y", "sys", tmp_path / "a.png")
    bar_chart(b, "x", "y", "sys", tmp_path / "b.png")
    assert {s: colour(s) for s in before} == before  # drawing never reassigns
    names = ["lru", "chiron", "juicefs", "alluxio", *OURS]
    assert len({colour(s) for s in set(names)}) == len(set(names))


def test_log_axis_only_when_bars_span_orders_of_magnitude() -> None:
    assert needs_log([0.5, 2_000.0]) and not needs_log([1.0, 50.0])
    assert not needs_log([0.0, 5_000.0])  # a zero bar cannot go on a log axis
