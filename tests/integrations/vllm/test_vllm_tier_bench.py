"""``benchmarks/vllm_tier.py``'s arms for the field's rules and the budgeted admission, without
an engine: every peer's name builds a ``SariaSSDTier`` admission, a ``budgeted@ARM`` arm's
tier config holds it to ARM's write volume (checked by offering chunks through the tier's own
gate until the budget refuses), and a ``--budget-of`` naming no arm of the run is refused
before any engine starts."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from aicache.integrations.chunk_tier import AdmissionGate, Offer, make_admission, tier_write_budget

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "benchmarks" / "vllm_tier.py"
PEERS = ("sglang-selective", "vllm-reuse-filter", "lmcache-gate", "kvbm-frequency",
         "mooncake-on-evict")


def _bench():
    spec = importlib.util.spec_from_file_location("vllm_tier_bench", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("peer", PEERS)
def test_peer_arms_build_their_rule_in_the_tier(peer: str, tmp_path: Path) -> None:
    b = _bench()
    a = argparse.Namespace(layers=4, ssd_fraction=1.0, oracle_keys=None, budget_bytes=None)
    tier = b.saria_tier(f"saria:{peer}", tmp_path, 100, a)
    assert tier["admission"] == peer and "ssd_write_budget" not in tier
    assert make_admission(str(tier["admission"])).label == peer


def test_budgeted_arm_writes_at_most_the_reference_volume(tmp_path: Path) -> None:
    """The reference arm wrote 37 chunks: the budgeted arm's tier admits at most 37 chunks
    of payload over the run, and does admit that many when offered more (every offer is
    a first eviction here; the run is one budget window)."""
    b = _bench()
    chunk = b.chunk_bytes(argparse.Namespace(layers=4))
    a = argparse.Namespace(layers=4, ssd_fraction=1.0, oracle_keys=None,
                           budget_bytes=37 * chunk)
    tier = b.saria_tier(b.budget_arm("kvbm-frequency"), tmp_path, 500, a)
    assert tier["admission"] == "budgeted"
    budget = tier_write_budget(tier["ssd_write_budget"], tier["ssd_write_window"],
                               int(tier["ssd_bytes"]))
    assert budget is not None and budget.window == b.BUDGET_WINDOW_S
    assert 37 * chunk - b.BUDGET_WINDOW_S < budget.allowance <= 37 * chunk
    gate = AdmissionGate(make_admission("budgeted", args=tier["admission_args"],
                                        size_of=lambda n: chunk, budget=budget), 10_000)
    # a run of a few minutes, far shorter than the window: paced over the whole window,
    # the first offers may spend all of it
    n = 400
    admitted = sum(gate.offer(("ns", b"%d" % i), Offer("r", -1, i * 0.5)) for i in range(n))
    assert admitted == 36 or admitted == 37  # the rate is rounded down to whole B/s
    assert admitted * chunk <= 37 * chunk


def test_chunks_written_reads_fs_files_and_our_counter() -> None:
    b = _bench()
    assert b.chunks_written({"chunks_written": 5, "ssd_bytes_written": 1, "chunk_bytes": 1}) == 5
    assert b.chunks_written({"ssd_bytes_written": 6 * 65536, "chunk_bytes": 65536}) == 6


def test_budget_of_an_arm_not_in_the_run_is_refused() -> None:
    r = subprocess.run([sys.executable, str(BENCH), "--admission", "sglang-selective",
                        "--budget-of", "kvbm-frequency"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert "--budget-of kvbm-frequency" in r.stderr and "sglang-selective" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
