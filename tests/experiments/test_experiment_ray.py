"""Cells on a real local Ray cluster (loopback only) give the process pool's numbers.

The test starts a one-node cluster in this process (``ray.init``, 2 CPUs, no dashboard,
bound to 127.0.0.1), then runs ``aicache experiment run --ray-address HOST:PORT`` as a
separate driver that connects to it by address — the path a user with a cluster takes —
and finally shuts the cluster down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import ray._private.ray_constants as ray_constants

from aicache.experiments.runner import CellStore, run_experiment

NAME = "cache-policies"
SELECT = {"trace": "scan-mix", "size_pct": [1.0, 10.0]}


def test_ray_cluster_gives_the_process_pool_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = run_experiment(NAME, quick=True, out=tmp_path / "pool", workers=2, progress=False,
                          select=SELECT)
    assert pool.ok and pool.ran >= 2

    # Ray binds to the host's routable address unless told it is a single-machine setup;
    # this (Ray's own switch, read at call time) keeps every socket on loopback.
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        address = ctx.address_info["gcs_address"]
        assert address.startswith("127.0.0.1:")
        env = {**os.environ, "AICACHE_NO_PROGRESS": "1", "RAY_ADDRESS": "",
               ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR: "0"}
        proc = subprocess.run(
            [sys.executable, "-m", "aicache.cli.main", "experiment", "run", NAME, "--quick",
             "--select", "trace=scan-mix", "--select", "size_pct=1.0,10.0",
             "--ray-address", address, "--out", str(tmp_path / "ray"), "--json"],
            capture_output=True, text=True, timeout=120, env=env)
    finally:
        ray.shutdown()
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    (exp,) = out["experiments"]
    assert exp["executor"] == f"ray({address})"
    assert exp["ran"] == pool.ran and exp["failed"] == 0

    ray_rows = CellStore(tmp_path / "ray" / NAME / "cells.jsonl").load()
    assert set(ray_rows) == {r["_key"] for r in pool.rows}
    for r in pool.rows:
        got = ray_rows[r["_key"]]
        assert {k: v for k, v in got.items() if not k.startswith("_")} == \
               {k: v for k, v in r.items() if not k.startswith("_")}
    assert Path(out["report"]).is_file()
