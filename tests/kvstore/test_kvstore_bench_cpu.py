"""The benchmark scripts' CPU parts run end to end at small sizes and move correct bytes
(this machine and CI have no GPU; ``gpu_transfer.py`` must say so and still measure)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from script_module import load_script

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    return load_script(BENCH / f"{name}.py", f"bench_{name}")


def _pos(x: float) -> bool:
    return math.isfinite(x) and x > 0


def test_kvstore_speed_small(tmp_path: Path) -> None:
    ks = _load("kvstore_speed")
    ssd = ks.bench_ssd(tmp_path, 64 * 1024, 32, io_threads=2, repeat=1)
    assert ssd["checksums_ok"] and ssd["ssd_bytes"] == 32 * 64 * 1024
    assert all(_pos(ssd[k]) for k in ("write_ratio", "read_ratio", "store_write_gbps",
                                      "store_read_gbps", "plain_write_gbps", "plain_read_gbps"))
    # headers + 4 KiB alignment: 64 KiB payload + 4 KiB header per block (+ invalidations: none)
    assert ssd["device_bytes_per_payload_byte"] == pytest.approx(68 / 64)
    dram = ks.bench_dram(block_kib=144, dram_mib=4, repeat=2)
    assert dram["bytes_ok"] and dram["blocks"] == 4 * 1024 // 144 and _pos(dram["ratio"])
    look = ks.bench_lookup(20_000, 50, lookups=500)
    assert look["index_blocks"] == 20_000 and _pos(look["lookups_per_s"])
    # a query is a random stored prefix of 1..50 blocks plus one unknown block
    assert 1 <= look["mean_hit_blocks"] <= 50


def test_gpu_transfer_cpu_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gt = _load("gpu_transfer")
    assert gt.main(["--mib", "4", "--block-kib", "288", "--dir", str(tmp_path), "--cpu",
                    "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"] == "cpu" and "CPU part only" in out["note"]
    assert _pos(out["paths"]["dram_gbps"]) and _pos(out["paths"]["file_gbps"])
    rows = {r["mode"]: r for r in out["reload"]}
    assert set(rows) == {"serial", "overlap", "coordinated"}
    n = out["bytes"] // out["block_bytes"]
    for r in rows.values():
        assert r["bytes_ok"] and _pos(r["completion_s"]) and _pos(r["model_completion_s"])
        assert r["ssd_blocks"] == n // 2 and r["dram_blocks"] == n - n // 2
    # the model's serial time is DRAM bytes at B_DRAM, then SSD bytes at B_disk
    bb = out["block_bytes"]
    p = out["paths"]
    serial = (n - n // 2) * bb / (p["dram_gbps"] * 1e9) + (n // 2) * bb / (p["file_gbps"] * 1e9)
    assert rows["serial"]["model_completion_s"] == pytest.approx(serial, rel=1e-6)
