"""End to end on the real engine: the W1-like multi-phase PyTorch job
(:mod:`aicache.experiments.datacache_job`) over moto S3 with 20 ms per request, under nocache,
juicefs, alluxio and chiron.

References: the job's plan (phase orders from the torch samplers, sample sizes from the
workload generator) computed independently of the run; the xxh3 of the bytes written to S3;
the remote's own request counter against the engine's hit/miss counters. The goal (the
seed's headline on W1): chiron has the lowest JCT and the highest CHR of all systems; the
test checks CHR and remote requests (what JCT is made of), the benchmark measures JCT.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest

from aicache.experiments.datacache_job import (
    JOB_SYSTEMS,
    JobParams,
    build_job_dataset,
    default_time_scale,
    phase_orders,
    run_systems,
    scaled_chiron_params,
    table_rows,
)
from aicache.errors import BadInput

#: The CI size: W1 at 2% (266 files, 30 MB, a 21.5 MB budget); ~80 s quiet, ~140 s on a busy
#: 2-core machine. At 1% the last (skewed) phase holds 200 reads, fewer than one analysis
#: window, and Chiron's goal is not met (see the report of datacache-real).
PARAMS = JobParams(scale=0.02)


# -- the plan (no I/O) ---------------------------------------------------------------------------
def test_dataset_keeps_the_generators_files_and_budget() -> None:
    from aicache.traces.workflows import SPECS, build_dataset

    ds = build_job_dataset(PARAMS)
    ref = build_dataset(SPECS["W1"], PARAMS.scale, PARAMS.seed)
    assert [s for _p, s in ds.files] == ref.sizes.tolist()
    assert [p.rsplit("/", 1)[1] for p, _s in ds.files] == [p.rsplit("/", 1)[1] for p in ref.paths]
    assert ds.total_bytes == round(1.395 * 2**30 * PARAMS.scale)
    assert ds.cache_bytes == round(2**30 * PARAMS.scale)
    paths = [p for p, _s in ds.files]
    assert paths == sorted(paths)  # the block map's order is the generator's
    folders = Counter(p.rsplit("/", 1)[0] for p in paths)
    assert len(folders) == max(1, round(100 * PARAMS.scale))  # W1: 100 folders at full size
    assert all(len(s) == 1 and s[0][1] == 0 for s in ds.samples)  # W1: one whole file each


def test_phase_orders_are_the_specs_samplers() -> None:
    ds = build_job_dataset(PARAMS)
    n = len(ds.samples)
    seq, rnd, skw = phase_orders(ds, PARAMS.batch_size, PARAMS.seed)
    assert seq == list(range(n))
    epochs = [rnd[i * n:(i + 1) * n] for i in range(3)]
    assert len(rnd) == 3 * n and all(sorted(e) == list(range(n)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3  # a new permutation every epoch
    assert len(skw) == round(1.5 * n)
    hot = set(ds.phases[2].hot.tolist())  # type: ignore[union-attr]
    assert len(hot) == round(0.1 * n)
    # P(draw in hot) = 0.8 + 0.2 * |H|/n; a 5-sigma binomial band
    p = 0.8 + 0.2 * len(hot) / n
    k = sum(i in hot for i in skw)
    assert abs(k - p * len(skw)) <= 5 * math.sqrt(len(skw) * p * (1 - p))
    # same seed, same plan; another seed, another plan
    assert phase_orders(ds, PARAMS.batch_size, PARAMS.seed) == [seq, rnd, skw]
    ds1 = build_job_dataset(dataclasses.replace(PARAMS, seed=1))
    assert phase_orders(ds1, PARAMS.batch_size, 1)[1] != rnd


def test_controller_clock_is_scaled_from_the_job() -> None:
    from aicache.adaptive.controller import ChironParams

    ds = build_job_dataset(PARAMS)
    # W1 computes 6/4/3 ms per read; 2 readers at 20 ms + mean compute; 50 reads per 5 s round
    rate = 2 / (0.020 + (0.006 + 0.004 + 0.003) / 3)
    assert default_time_scale(PARAMS, ds) == pytest.approx(50 / (5.0 * rate))
    scaled = scaled_chiron_params(0.1)
    base = ChironParams()
    assert scaled["round_s"] == pytest.approx(base.round_s * 0.1)
    assert scaled["routine_interval_s"] == pytest.approx(base.routine_interval_s * 0.1)
    assert "window" not in scaled and "tau" not in scaled  # counts and ratios stay the seed's
    ChironParams(**scaled)  # a valid configuration


def test_bad_job_input_is_one_line_bad_input() -> None:
    with pytest.raises(BadInput, match="unknown workload"):
        build_job_dataset(JobParams(workload="W9"))
    with pytest.raises(BadInput, match="loader_workers"):
        JobParams(loader_workers=0)
    with pytest.raises(BadInput, match="unknown system 'lru'"):
        run_systems(PARAMS, ["lru"])


# -- the real run --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    out = run_systems(PARAMS, JOB_SYSTEMS)
    return {r.system: r for r in out}


def _table(results: dict[str, object]) -> str:
    return "\n".join(str(r) for r in table_rows(list(results.values())))  # type: ignore[arg-type]


def test_every_byte_read_matches_the_source(results: dict) -> None:
    ds = build_job_dataset(PARAMS)
    orders = phase_orders(ds, PARAMS.batch_size, PARAMS.seed)
    sizes = np.array([e - s for (_p, s, e), in ds.samples])
    want_bytes = int(sum(sizes[o].sum() for o in orders))
    for name, r in results.items():
        assert r.mismatches == 0, name
        assert r.samples_read == sum(len(o) for o in orders), name
        assert r.bytes_read == want_bytes, name


def test_counters_agree_with_the_plan_and_the_remote(results: dict) -> None:
    ds = build_job_dataset(PARAMS)
    orders = phase_orders(ds, PARAMS.batch_size, PARAMS.seed)
    for name, r in results.items():
        assert [p.requests for p in r.phases] == [len(o) for o in orders], name  # 1 block/sample
    nocache, alluxio = results["nocache"], results["alluxio"]
    assert nocache.hits == 0 and nocache.remote_requests == nocache.requests
    # no prefetch: every remote request is a demand miss
    assert alluxio.remote_requests == alluxio.requests - alluxio.hits
    # a cold first pass without prefetch misses, except where the next phase's first batches
    # (already running on the other worker) read a file first: at most the loader's
    # in-flight batches (2 per worker, torch's prefetch_factor)
    assert alluxio.phases[0].hits <= 2 * PARAMS.loader_workers * PARAMS.batch_size
    assert results["juicefs"].phases[0].hits > alluxio.phases[0].hits  # readahead serves it
    for name in ("juicefs", "alluxio", "chiron"):
        r = results[name]
        assert r.remote_requests >= r.requests - r.hits, name
        assert r.phases[1].hits > 0, name  # the epochs reuse what the cache kept
        assert r.policy["cache_used_bytes"] <= ds.cache_bytes, name  # the budget held
        assert r.policy["cache_bad_blocks"] == 0, name  # verify(): every checksum good
    assert results["chiron"].policy["advisor_calls"] >= 1


def test_chiron_has_the_highest_chr_and_the_fewest_remote_requests(results: dict) -> None:
    """The seed's goal is the lowest JCT; a wall-clock comparison belongs in the benchmark
    (``benchmarks/datacache_e2e.py``, the ``datacache-real`` experiment), not in a test run on
    a shared machine. What the JCT is made of here is checked instead: every remote request
    costs the same injected 20 ms, so the system that asks the remote least waits least."""
    chiron = results["chiron"]
    others = [r for name, r in results.items() if name != "chiron"]
    table = _table(results)
    assert all(chiron.chr > r.chr for r in others), f"CHR goal not met:\n{table}"
    assert all(chiron.remote_requests < r.remote_requests for r in others), \
        f"chiron does not ask the remote least:\n{table}"


# -- the experiment's report ---------------------------------------------------------------------
def _row(system: str, jct: float, chr_: float) -> dict[str, object]:
    return {"system": system, "scale": 0.02, "jct_seconds": jct, "chr": chr_, "remote_requests": 10,
            "remote_bytes": 10**6, "content_ok": True, "mismatches": 0, "switches": None,
            "phases": [{"pattern": "sequential", "chr": chr_, "seconds": jct / 2},
                       {"pattern": "random", "chr": chr_, "seconds": jct / 2}]}


@pytest.mark.parametrize(("chiron_jct", "chiron_chr", "met"), [(9.0, 0.8, [True, True]),
                                                               (11.0, 0.8, [False, True]),
                                                               (9.0, 0.6, [True, False])])
def test_experiment_goals_judge_chiron_against_every_other_system(
        tmp_path: object, chiron_jct: float, chiron_chr: float, met: list[bool]) -> None:
    from pathlib import Path

    from aicache.experiments.datacache_real import DatacacheReal

    exp = DatacacheReal()
    assert [c["system"] for c in exp.cells(False)] == list(JOB_SYSTEMS)
    assert exp.cells(True)[0]["scale"] < exp.cells(False)[0]["scale"]
    rows = [_row("nocache", 20.0, 0.0), _row("juicefs", 10.0, 0.7), _row("alluxio", 12.0, 0.5),
            _row("chiron", chiron_jct, chiron_chr)]
    sec = exp.report(rows, Path(str(tmp_path)))
    assert [g["met"] for g in sec.goals[:2]] == met
    assert sec.goals[2]["met"] is True  # every byte ok
    assert all(Path(f.path).is_file() for f in sec.figures) and len(sec.figures) == 3
    assert [r["system"] for r in sec.tables[0].rows] == list(JOB_SYSTEMS)
