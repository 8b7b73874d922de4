"""Workflow generators: the published sizes at scale 1 (computed, not materialised), labelled
phases, epochs, hot sets, determinism, and materialised sizes at a tiny scale."""

from __future__ import annotations

import os

import numpy as np
import pytest

from aicache.errors import BadInput
from aicache.traces.base import Phase
from aicache.traces.gen import WORKFLOWS
from aicache.units import DEFAULT_BLOCK_SIZE
from aicache.traces.workflows import (
    SPECS,
    PhaseSpec,
    _phase_order,
    build_dataset,
    generate_workflow,
    materialize,
)

GiB = 1 << 30
#: the published workloads (docs/design/chiron.md): dataset GiB, cache GiB, patterns in order
TABLE2 = {
    "W1": (1.395, 1, ["sequential", "random", "skewed"]),
    "W2": (7.67, 4, ["sequential", "random", "skewed"]),
    "W3": (3.87, 1, ["random", "sequential"]),
    "T1": (2.37, 2, ["sequential"]),
    "T2": (5.75, 4, ["sequential"]),
    "T3": (6.09, 1, ["random"]),
    "T4": (2.48, 1, ["random"]),
    "T5": (1.99, 1, ["skewed"]),
    "T6": (3.04, 0.5, ["skewed"]),
}


def test_registry_has_all_nine():
    assert sorted(WORKFLOWS.names()) == sorted(TABLE2)


@pytest.mark.parametrize("name", sorted(TABLE2))
def test_dataset_and_cache_sizes_match_table2_at_scale_1(name):
    gib, cache_gib, patterns = TABLE2[name]
    spec = SPECS[name]
    ds = build_dataset(spec, 1.0, seed=0)
    assert ds.total_bytes == round(gib * GiB)  # exact to the byte
    assert (ds.sizes > 0).all()
    assert ds.paths == sorted(ds.paths)  # the file->block mapping follows path order
    nb = np.diff(ds.first_block)
    assert (nb == (ds.sizes + DEFAULT_BLOCK_SIZE - 1) // DEFAULT_BLOCK_SIZE).all()
    assert int(ds.block_sizes().sum()) == ds.total_bytes
    assert [p.kind for p in spec.phases] == patterns
    assert round(spec.cache_gib * GiB) == round(cache_gib * GiB)


def test_small_files_are_one_block_and_large_shards_many():
    w1 = build_dataset(SPECS["W1"], 0.05, 0)
    assert (np.diff(w1.first_block) == 1).all()
    t2 = build_dataset(SPECS["T2"], 1.0, 0)
    assert len(t2.paths) == 2 and t2.n_blocks == 1472  # 5.75 GiB in 4 MiB blocks


def test_phases_are_labelled_and_contiguous():
    tr = generate_workflow("W1", scale=0.05, seed=3)
    assert tr.phases[0].start == 0 and tr.phases[-1].end == len(tr)
    for a, b in zip(tr.phases, tr.phases[1:]):
        assert a.end == b.start
    for ph in tr.phases:
        labels = set(tr.phase[ph.start:ph.end].tolist())
        assert labels == {int(Phase[ph.pattern.upper()])}
    n = len(tr.dataset.paths)
    seq, rnd, skw = tr.phases
    assert (tr.obj_id[seq.start:seq.end] == np.arange(n)).all()  # one sorted pass
    epochs = tr.obj_id[rnd.start:rnd.end].reshape(3, n)
    for e in epochs:  # every epoch is a permutation ...
        assert sorted(e.tolist()) == list(range(n))
    assert not (epochs[0] == epochs[1]).all()  # ... and a new one each time
    # the skewed phase concentrates on a hot set
    counts = np.bincount(tr.obj_id[skw.start:skw.end], minlength=n)
    top = np.sort(counts)[::-1][: n // 10].sum() / counts.sum()
    assert top > 0.6


def test_hot_sets_differ_between_skewed_phases():
    rng = np.random.default_rng(0)
    ph = PhaseSpec("s", "skewed", 1.0, draws_per_item=20, hot_fraction=0.05, hot_share=0.9)
    a = _phase_order(ph, 2000, rng)
    b = _phase_order(ph, 2000, rng)
    hot_a = set(np.argsort(np.bincount(a, minlength=2000))[-100:].tolist())
    hot_b = set(np.argsort(np.bincount(b, minlength=2000))[-100:].tolist())
    assert len(hot_a & hot_b) < 50


def test_deterministic_and_seed_sensitive():
    a = generate_workflow("W3", scale=0.02, seed=1)
    b = generate_workflow("W3", scale=0.02, seed=1)
    c = generate_workflow("W3", scale=0.02, seed=2)
    assert (a.obj_id == b.obj_id).all() and (a.timestamp == b.timestamp).all()
    assert a.dataset.paths == b.dataset.paths
    assert not np.array_equal(a.obj_id, c.obj_id)


def test_timestamps_are_the_zero_io_schedule():
    tr = generate_workflow("T2", scale=0.02)
    ph = tr.phases[0]
    gaps = np.diff(tr.timestamp[ph.start:ph.end]) * tr.workers
    assert np.allclose(gaps, ph.compute_s)


def test_materialize_writes_exact_sizes(tmp_path):
    tr = generate_workflow("W1", scale=0.0005, seed=0)
    ds = tr.dataset
    total = materialize(ds, str(tmp_path), seed=0)
    assert total == ds.total_bytes
    for rel, size in zip(ds.paths, ds.sizes.tolist()):
        assert os.path.getsize(tmp_path / rel) == size
    # seeded: the same bytes twice
    other = tmp_path / "again"
    materialize(ds, str(other), seed=0)
    first = ds.paths[0]
    assert (tmp_path / first).read_bytes() == (other / first).read_bytes()


def test_gen_workflow_cli_writes_block_csv(tmp_path, capsys):
    from aicache.cli.main import main
    from aicache.traces.io import open_trace

    out = tmp_path / "t5.csv"
    mat = tmp_path / "data"
    assert main(["gen", "workflow", "T5", "--out", str(out), "--scale", "0.002",
                 "--materialize", str(mat)]) == 0
    src = open_trace(str(out))
    assert src.format == "block-csv"
    batches = list(src.batches())
    tr = generate_workflow("T5", scale=0.002)
    ids = np.concatenate([b.obj_id for b in batches])
    assert (ids.astype(np.int64) == tr.obj_id).all()
    assert set(np.concatenate([b.phase for b in batches]).tolist()) == {int(Phase.SKEWED)}
    assert sum(os.path.getsize(mat / p) for p in tr.dataset.paths) == tr.dataset.total_bytes


@pytest.mark.parametrize("name, scale", [("W7", 1.0), ("W1", 0.0), ("W1", -2.0), ("W1", float("nan"))])
def test_bad_names_and_scales(name, scale):
    with pytest.raises(BadInput):
        generate_workflow(name, scale=scale)


def test_caption_variant_pairs_neighbouring_files():
    tr = generate_workflow("W3", scale=0.01, seed=0, variant="captions")
    ds = tr.dataset
    assert ds.total_bytes == round(3.87 * GiB * 0.01)
    assert len(ds.paths) % 2 == 0
    assert all(a.endswith(".jpg") and b.endswith(".txt") and a[:-4] == b[:-4]
               for a, b in zip(ds.paths[0::2], ds.paths[1::2]))
    rnd = tr.phases[0]
    pairs = tr.obj_id[rnd.start:rnd.end].reshape(-1, 2)
    assert (pairs[:, 1] == pairs[:, 0] + 1).all()  # image then its caption
    with pytest.raises(BadInput, match="variant"):
        generate_workflow("W1", scale=0.01, variant="captions")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=30)
@given(st.sampled_from(sorted(TABLE2)), st.floats(0.001, 0.03), st.integers(0, 5))
def test_sizes_are_exact_at_any_scale(name, scale, seed):
    ds = build_dataset(SPECS[name], scale, seed)
    assert ds.total_bytes == round(TABLE2[name][0] * GiB * scale)
    assert int(ds.block_sizes().sum()) == ds.total_bytes
    assert (ds.block_sizes() > 0).all() and (ds.block_sizes() <= DEFAULT_BLOCK_SIZE).all()
    assert ds.block_files().tolist() == sorted(ds.block_files().tolist())
