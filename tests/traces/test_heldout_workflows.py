"""The held-out workflow family (H1–H5): each phase is what its docstring says, checked with
the statistical analyzer (docs/design/chiron.md) and plain counting, and the generator is deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from aicache.adaptive.analyzer import analyze
from aicache.traces.base import Phase
from aicache.traces.heldout import SPECS, generate_heldout

SCALE = 0.05


@pytest.mark.parametrize("name", list(SPECS))
def test_deterministic_consistent_and_labelled(name: str) -> None:
    a, b = generate_heldout(name, SCALE, 3), generate_heldout(name, SCALE, 3)
    assert np.array_equal(a.obj_id, b.obj_id) and np.array_equal(a.phase, b.phase)
    assert not np.array_equal(a.obj_id, generate_heldout(name, SCALE, 4).obj_id)
    ds = a.dataset
    assert ds.paths == sorted(ds.paths)
    # every read's size and file come from the merged block table
    assert np.array_equal(a.obj_size, ds.block_sizes()[a.obj_id])
    assert np.array_equal(a.file, ds.block_files()[a.obj_id])
    assert [p.start for p in a.phases][1:] == [p.end for p in a.phases][:-1] and a.phases[-1].end == len(a)
    for p in a.phases:
        labels = set(a.phase[p.start:p.end].tolist())
        if p.pattern == "mixed":
            assert labels == {int(Phase.SEQUENTIAL), int(Phase.RANDOM)}
        else:
            assert labels == {int(Phase[p.pattern.upper()])}


def _unit(trace, i: int) -> str:
    return trace.dataset.paths[int(trace.file[i])].split("/", 1)[0]


def test_h1_checkpoint_loads_are_whole_sequential_reads_of_their_own_unit() -> None:
    t = generate_heldout("H1", SCALE, 0)
    ck = [p for p in t.phases if "checkpoint" in p.name]
    assert len(ck) == 3
    for p in ck:
        ids = t.obj_id[p.start:p.end]
        assert {_unit(t, i) for i in range(p.start, p.end)} == {"ckpt"}
        assert np.array_equal(ids, np.arange(ids[0], ids[0] + ids.size))  # the whole checkpoint, in order
    others = [p for p in t.phases if "checkpoint" not in p.name]
    assert all(_unit(t, i) == "frames" for p in others for i in range(p.start, p.end, 7))


def test_h2_reads_two_datasets_at_once_each_with_its_own_pattern() -> None:
    t = generate_heldout("H2", SCALE, 0)
    p = t.phases[0]
    units = np.array([_unit(t, i) for i in range(p.start, p.end)])
    assert set(units) == {"coco", "text"}
    text = t.obj_id[p.start:p.end][units == "text"]
    seq = t.phase[p.start:p.end][units == "text"]
    assert np.all(np.diff(text) == 1) and np.all(seq == int(Phase.SEQUENTIAL))  # the scan, in order
    # interleaved, not one after the other: text reads spread over the whole phase
    where = np.flatnonzero(units == "text")
    assert where[0] < 0.2 * units.size and where[-1] > 0.8 * units.size


def test_h3_hot_set_drifts() -> None:
    t = generate_heldout("H3", 0.2, 0)
    p = t.phases[1]
    ids = t.obj_id[p.start:p.end]
    steps = np.array_split(ids, 8)

    def hot(x: np.ndarray) -> set[int]:  # drawn twice or more: almost only hot items
        u, c = np.unique(x, return_counts=True)
        return set(u[c >= 2].tolist())

    first, second, last = hot(steps[0]), hot(steps[1]), hot(steps[-1])
    # neighbouring steps share part of their hot items, distant ones share much less
    assert len(first & second) / len(first) > 0.2
    assert len(first & last) < 0.5 * len(first & second)
    assert analyze(tuple(steps[0][:1000].tolist()))["window"]["reuse ratio"] > 0.3


def test_h4_reads_shards_with_a_stable_stride() -> None:
    t = generate_heldout("H4", 0.2, 0)
    first, _, ev = t.phases
    s1 = analyze(tuple(t.obj_id[first.start:first.start + 200].tolist()))["window"]
    assert s1["adjacent steps"]["dominant steps"][0]["delta"] == 4
    s3 = analyze(tuple(t.obj_id[ev.start:ev.end].tolist()))["window"]
    assert s3["adjacent steps"]["dominant steps"][0]["delta"] == 8


def test_h5_phases_are_near_the_window_length() -> None:
    t = generate_heldout("H5", 1.0, 0)
    assert [p.pattern for p in t.phases] == ["sequential", "random", "skewed"] * 2
    assert all(p.end - p.start == 1200 for p in t.phases)
