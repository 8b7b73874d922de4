"""Every registered experiment's quick version runs cleanly and reports; and the
``cache-policies`` experiment measures what it claims (traces, next-access, miss counts
against libCacheSim)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicache.experiments import EXPERIMENTS
from aicache.experiments.base import ReportSection
from aicache.experiments.cache_policies import (
    SCAN_FRACTION,
    available_policies,
    make_trace,
    next_access,
    simulate_miss_ratio,
)
from aicache.experiments.report import render_sections, write_report
from aicache.experiments.runner import run_experiment


@pytest.mark.parametrize("name", EXPERIMENTS.names())
def test_quick_version_runs_every_cell_and_renders(name: str, tmp_path: Path) -> None:
    exp = EXPERIMENTS.get(name)()
    cells = exp.cells(True)
    assert cells, f"{name}: the quick grid is empty"
    res = run_experiment(name, quick=True, out=tmp_path, progress=False)
    assert len(res.rows) == len(cells)
    for params, row in zip(cells, res.rows):
        assert "_error" not in row, f"{name} cell {dict(params)} failed: {row.get('_error')}"
        produced = {k for k in row if not k.startswith("_")} - set(params)
        assert produced, f"{name} cell {dict(params)} returned no metrics"
    (sec,) = render_sections(tmp_path, [name])
    assert sec.error is None, sec.error
    assert isinstance(sec.section, ReportSection)
    assert sec.section.tables or sec.section.figures, f"{name}: the report section is empty"
    for fig in sec.section.figures:
        assert Path(fig.path).is_file(), f"{name}: figure {fig.path} was not written"
    html = write_report(tmp_path, [name], [sec]).read_text()
    for t in sec.section.tables:
        assert t.title in html or t.title.replace("'", "&#x27;") in html


# -- cache-policies: the traces ----------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.8, 1.0, 1.2])
def test_zipf_trace_has_the_requested_skew(alpha: float) -> None:
    n_obj, n_req = 2000, 200_000
    ids = make_trace(f"zipf-{alpha}", 3, n_obj, n_req)
    assert ids.min() >= 0 and ids.max() < n_obj and len(ids) == n_req
    counts = np.sort(np.bincount(ids, minlength=n_obj))[::-1].astype(float)
    # reference: the Zipf law itself, P(rank i) = i^-alpha / H(n, alpha)
    ranks = np.arange(1, n_obj + 1, dtype=float)
    p = ranks ** -alpha / np.sum(ranks ** -alpha)
    top = 50  # well-sampled head ranks: relative error of the expected counts is small
    np.testing.assert_allclose(counts[:top] / n_req, p[:top], rtol=0.08)
    # and the log-log slope of the well-sampled head is -alpha
    slope = np.polyfit(np.log(ranks[:200]), np.log(counts[:200]), 1)[0]
    assert slope == pytest.approx(-alpha, abs=0.08)


def test_scan_mix_trace_is_zipf_plus_sequential_scans() -> None:
    n_obj, n_req = 1000, 20_000
    ids = make_trace("scan-mix", 0, n_obj, n_req)
    scan = ids >= n_obj
    assert ids.max() < 2 * n_obj
    # the scan share is the configured fraction (scans never overlap)
    assert scan.mean() == pytest.approx(SCAN_FRACTION, abs=0.005)
    # scanned ids come in runs of consecutive ids
    idx = np.flatnonzero(scan)
    consecutive = (np.diff(idx) == 1) & (np.diff(ids[idx]) == 1)
    assert consecutive.mean() > 0.9


def test_traces_are_deterministic_in_the_seed() -> None:
    a = make_trace("zipf-1.0", 7, 500, 5000)
    make_trace.cache_clear()
    b = make_trace("zipf-1.0", 7, 500, 5000)
    c = make_trace("zipf-1.0", 8, 500, 5000)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@given(st.lists(st.integers(0, 6), max_size=60))
def test_next_access_matches_a_reverse_scan(keys: list[int]) -> None:
    ids = np.asarray(keys, dtype=np.int64)
    seen: dict[int, int] = {}
    expected = [-1] * len(keys)
    for i in range(len(keys) - 1, -1, -1):  # reference: the obvious backwards pass
        expected[i] = seen.get(keys[i], -1)
        seen[keys[i]] = i
    assert next_access(ids).tolist() == expected


# -- cache-policies: the miss counts, against libCacheSim -------------------------------

#: policies whose aicache and libCacheSim definitions agree exactly in objects mode
_EXACT = {"lru": "LRU", "fifo": "FIFO", "belady": "Belady"}


@pytest.mark.parametrize("policy", [p for p in _EXACT if p in available_policies()])
@pytest.mark.parametrize("trace", ["zipf-0.8", "scan-mix"])
def test_miss_counts_equal_libcachesim(policy: str, trace: str) -> None:
    import libcachesim as lcs

    ids = make_trace(trace, 1, 800, 8000)
    nxt = next_access(ids).tolist()
    for cap in (8, 80, 200):
        ref = getattr(lcs, _EXACT[policy])(cache_size=cap)
        misses = 0
        for k, n in zip(ids.tolist(), nxt):
            req = lcs.Request()
            req.obj_id, req.obj_size = k, 1
            req.next_access_vtime = n if n >= 0 else 2**62
            misses += not ref.get(req)
        assert simulate_miss_ratio(ids, policy, cap, 0)["misses"] == misses, (policy, trace, cap)
