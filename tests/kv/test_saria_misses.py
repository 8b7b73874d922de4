"""``benchmarks/saria_misses.py`` against the replay's own counters: its per-block
accounting of lost hits and of writes adds up to the metrics ``simulate_kv`` reports, and
it leaves the index unpatched."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import saria_misses  # noqa: E402

from aicache.kv import saria  # noqa: E402


@pytest.mark.parametrize("model", ["qwen3.5-9b", "qwen3-8b"])
def test_accounting_matches_replay(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    lookup = saria.KVIndex.lookup
    assert saria_misses.main(["--sessions", "12", "--model", model, "--json"]) == 0
    assert saria.KVIndex.lookup is lookup
    out = json.loads(capsys.readouterr().out)
    for label, arm in out["arms"].items():
        # every FD hit the arm lacks is charged to one cause; net of gains it is the
        # difference of the replays' hit counters
        assert sum(arm["lost_by_cause"].values()) == arm["lost_blocks"]
        assert arm["fd_hit_blocks"] - arm["hit_blocks"] == arm["lost_blocks"] - arm[
            "gained_blocks"]
        # the tracked writes are exactly the index's counted writes
        tracked = sum(w["bytes_vs_fd"] for w in arm["writes"].values())
        assert tracked == pytest.approx(arm["writes_vs_fd"], rel=1e-9)
        assert 0 < arm["writes_vs_fd"]
        if label == "E2":
            assert arm["writes"]["learned"]["writes"] == 0
        if model == "qwen3-8b":  # no checkpoints: nothing held is cut
            assert arm["lost_held_but_cut"] == 0


def test_a30_links_and_admission_arm_match_the_experiment_cell(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--links a30`` and an ``E2∨R1`` arm replay exactly the cell ``saria-admission`` runs."""
    from aicache.experiments.saria import A30_LINKS, run_sim_cell

    argv = ["--sessions", "12", "--model", "qwen3-1.7b-seed", "--links", "a30",
            "--arms", "E2∨R1", "--dram-tokens", "200000", "--json"]
    assert saria_misses.main(argv) == 0
    arm = json.loads(capsys.readouterr().out)["arms"]["E2∨R1"]
    cell = {"workload": "agent", "sessions": 12, "session_window": 12 * 3600.0 * 12 / 350,
            **A30_LINKS, "model": "qwen3-1.7b-seed", "system": "saria", "admission": "E2∨R1",
            "dram_tokens": 200000, "seed": 0}
    m = run_sim_cell(cell)
    assert m["ssd_write_bytes"] > 0  # the SSD path is exercised
    assert arm["hit_blocks"] == m["hit_blocks"]
    tracked = sum(w["bytes_vs_fd"] for w in arm["writes"].values())
    assert tracked == pytest.approx(arm["writes_vs_fd"], rel=1e-9)
