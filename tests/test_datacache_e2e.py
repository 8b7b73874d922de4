"""End to end: a PyTorch DataLoader (2 worker processes) runs a W1-like multi-phase job
(sequential pass, 3 shuffled epochs, weighted sampling) on moto S3 with 20 ms injected
latency, through the real cache and its policy daemon, under nocache / alluxio / juicefs /
chiron. Every sample's bytes are checked against the source; the hit ratios must show
what each system is: nothing cached, a cache that retains, readahead that works across
workers, and an advisor that was consulted. Small (40 files) so it stays well under a
minute; ``benchmarks/datacache_e2e.py`` runs the larger table."""

from __future__ import annotations

from s3fixtures import s3  # noqa: F401

from aicache.datacache.job import JobParams, run_job


def test_multi_phase_job_through_the_cache(s3) -> None:  # noqa: F811
    p = JobParams(files=40, epochs=3, workers=2, latency_s=0.02, compute_s=0.001, batch_size=4)
    out = run_job(["nocache", "alluxio", "juicefs", "chiron"], p, s3=s3)
    rows = {r["system"]: r for r in out["rows"]}
    for r in rows.values():
        assert r["bad_samples"] == 0  # every byte through every system was right
        assert r["requests"] == 5 * p.files  # 1 sequential + 3 epochs + 1 skewed pass
        assert [ph["pattern"] for ph in r["phases"]] == ["sequential", "random", "random", "random", "skewed"]
    assert rows["nocache"]["chr"] == 0.0
    for name in ("alluxio", "juicefs", "chiron"):
        later_epochs = rows[name]["phases"][2:4]
        assert all(ph["chr"] > 0 for ph in later_epochs), name  # the cache retained data
    # readahead serves a sequential pass split over two worker processes (one policy)
    assert rows["juicefs"]["phases"][0]["chr"] >= 0.5
    # without prefetch a first pass misses (but for the odd sample the other worker read in
    # the overlap of two phases' batches)
    assert rows["alluxio"]["phases"][0]["chr"] < rows["juicefs"]["phases"][0]["chr"] - 0.3
    assert rows["chiron"]["advisor_calls"] >= 1
    assert rows["chiron"]["jct_seconds"] < rows["nocache"]["jct_seconds"]
