"""``sim cache`` with several policies × sizes: one parse, each cell equal to its single run."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from aicache.cli.main import main
from aicache.sim import cache_sim, sweep as sweep_mod
from aicache.sim.cache_sim import simulate
from aicache.sim.sweep import sweep
from aicache.traces.base import RequestBatch
from aicache.traces.formats._common import make_batch
from aicache.traces.io import open_trace, write_trace

TIMING = ("wall_seconds", "requests_per_second", "scan_seconds")


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    rng = np.random.default_rng(7)
    ids = rng.zipf(1.2, 4000) % 300
    sizes = (ids % 5 + 1) * 64
    p = tmp_path / "t.csv"
    write_trace(str(p), "lcs-csv", [make_batch(list(range(4000)), ids.tolist(), sizes.tolist())])
    return p


def _strip(d: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in d.items() if k not in TIMING}


@pytest.mark.parametrize("mode", ["objects", "bytes"])
def test_every_cell_equals_its_single_run(trace: Path, mode: str) -> None:
    policies = ["lru", "s3fifo", "arc", "2-random", "lecar", "belady"]
    sizes = ["5%", "20%", "100%", "150%", "37"]
    cells = sweep(str(trace), policies, sizes, size_mode=mode, seed=3)
    assert [(c.policy, c.cache_size) for c in cells] == \
        [(p, cache_sim.resolve_cache_size(s, cache_sim.scan(open_trace(str(trace))), mode, str(trace)))
         for p in policies for s in sizes]
    for c in cells:
        single = simulate(str(trace), c.policy, c.cache_size, size_mode=mode, seed=3)
        assert _strip(c.to_dict()) == _strip(single.to_dict())


def test_a_cache_beyond_the_working_set_misses_only_compulsorily(trace: Path) -> None:
    (c,) = sweep(str(trace), ["lru"], ["200%"])
    distinct = len(set(np.concatenate([b.obj_id for b in open_trace(str(trace)).batches()]).tolist()))
    assert c.cache_size == 2 * distinct and c.requests - c.hits == distinct and c.evictions == 0


class _Counting:
    """Wraps a source, counting how often the file is parsed."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.parses = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def batches(self, batch_size: int = 65536) -> Iterator[RequestBatch]:
        self.parses += 1
        return self.inner.batches(batch_size)  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("retain", [cache_sim.RETAIN_BYTES, 0])
def test_one_parse_whatever_the_grid(trace: Path, retain: int, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _Counting(open_trace(str(trace)))
    monkeypatch.setattr(sweep_mod, "RETAIN_BYTES", retain)
    monkeypatch.setattr(sweep_mod, "_open", lambda s, f, b: s)
    cells = sweep(src, ["lru", "s3fifo", "arc"], ["5%", "10%", "50%"], batch_size=500)  # type: ignore[arg-type]
    assert len(cells) == 9
    assert src.parses == (1 if retain else 2)  # the pre-pass, plus one replay if not kept


def test_cli_csv_and_json_agree_with_single_runs(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "cache", "--trace", str(trace), "--policy", "lru,s3fifo", "--cache-size", "10%,50%"]
    assert main([*argv, "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "lcs-csv" and len(d["results"]) == len(rows) == 4
    for row, res in zip(rows, d["results"]):
        single = simulate(str(trace), row["policy"], int(row["cache_size"])).to_dict()
        assert int(row["hits"]) == res["hits"] == single["hits"]
        assert float(row["miss_ratio"]) == res["miss_ratio"] == single["miss_ratio"]
        assert list(row) == list(single)
    assert main([*argv]) == 0
    table = capsys.readouterr().out
    assert "s3fifo" in table and str(d["results"][3]["hits"]) in table


def test_cli_sweep_bad_input(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra, needle in ((["--policy", "lru,", "--cache-size", "10%"], "empty item"),
                          (["--policy", "lru,nosuch", "--cache-size", "10%"], "nosuch"),
                          (["--policy", "lru,arc", "--cache-size", "10%", "--prefetch", "stride"],
                           "--prefetch")):
        assert main(["sim", "cache", "--trace", str(trace), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err
