"""The statistical analyzer against the seed's worked example (docs/design/chiron.md) and against a
plain, obviously-correct reference written here with loops and Counter."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.adaptive.analyzer import analyze, format_sequence, format_stats, stats_table, tail_length

# ---------------------------------------------------------------------------- reference


def ref_stats(xs: list[int]) -> dict[str, Any]:
    """The analyzer's statistics (docs/design/chiron.md) computed the slow, literal way."""
    n = len(xs)
    counts = Counter(xs)
    m = len(counts)
    if m > 1:
        entropy = -sum((c / n) * math.log2(c / n) for c in counts.values()) / math.log2(m)
    else:
        entropy = 0.0
    asc = sorted(counts.values())
    gini = sum((2 * j - m - 1) * asc[j - 1] for j in range(1, m + 1)) / (m * n) if m else 0.0
    top5 = sum(sorted(counts.values(), reverse=True)[:5]) / n if n else 0.0
    last: dict[int, int] = {}
    gaps: list[int] = []
    for i, x in enumerate(xs):
        if x in last:
            gaps.append(i - last[x])
        last[x] = i
    r = len(gaps)
    short = sum(1 for d in gaps if d < 10) / r if r else 0.0
    mrd = sum(gaps) / r if r else float(n)
    steps: dict[str, Any] = {
        "zero ratio": 0.0,
        "pm1 ratio": 0.0,
        "small jump ratio": 0.0,
        "large jump ratio": 0.0,
        "dominant steps": [],
    }
    if n > 1:
        deltas = [xs[i + 1] - xs[i] for i in range(n - 1)]
        q = Counter(deltas)  # insertion order = first appearance
        k = n - 1
        steps = {
            "zero ratio": round(q[0] / k, 3),
            "pm1 ratio": round((q[-1] + q[1]) / k, 3),
            "small jump ratio": round(sum(c for d, c in q.items() if 0 < abs(d) <= 5) / k, 3),
            "large jump ratio": round(sum(c for d, c in q.items() if abs(d) > 100) / k, 3),
            # sorted() is stable: equal counts keep first-appearance order
            "dominant steps": [
                {"delta": d, "count": c} for d, c in sorted(q.items(), key=lambda kv: -kv[1])[:5]
            ],
        }
    return {
        "length": n,
        "unique ratio": round(m / n, 3) if n else 0.0,
        "access entropy": round(entropy, 3),
        "gini": round(gini, 3),
        "top 5 access": round(top5, 3),
        "reuse ratio": round(r / n, 3) if n else 0.0,
        "short reuse ratio": round(short, 3),
        "mean reuse distance": round(mrd, 1),
        "adjacent steps": steps,
    }


def ref_tail_length(n: int) -> int:
    return min(n, 200, max(10, n // 2))


def assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    # entropy sums floats in a different order: allow one unit in the last rounded digit
    assert abs(got["access entropy"] - want["access entropy"]) <= 1e-3 + 1e-12
    g = {k: v for k, v in got.items() if k != "access entropy"}
    w = {k: v for k, v in want.items() if k != "access entropy"}
    assert g == w


# ---------------------------------------------------------------- the seed's worked example


def test_seed_worked_example_a1() -> None:
    w = list(range(0, 800, 2))  # W = (0, 2, ..., 798)
    stats = analyze(w)
    win, tail = stats["window"], stats["recent tail"]
    assert win["length"] == 400
    assert win["unique ratio"] == 1.0
    assert win["access entropy"] == 1.0
    assert win["gini"] == 0.0
    assert win["top 5 access"] == 0.013
    assert win["reuse ratio"] == 0.0
    assert win["short reuse ratio"] == 0.0
    assert win["mean reuse distance"] == 400.0
    assert win["adjacent steps"] == {
        "zero ratio": 0.0,
        "pm1 ratio": 0.0,
        "small jump ratio": 1.0,
        "large jump ratio": 0.0,
        "dominant steps": [{"delta": 2, "count": 399}],
    }
    assert tail["length"] == 200
    assert tail["unique ratio"] == 1.0
    assert tail["access entropy"] == 1.0
    assert tail["gini"] == 0.0
    assert tail["top 5 access"] == 0.025
    assert tail["reuse ratio"] == 0.0
    assert tail["short reuse ratio"] == 0.0
    assert tail["mean reuse distance"] == 200.0
    assert tail["adjacent steps"]["small jump ratio"] == 1.0
    assert tail["adjacent steps"]["dominant steps"] == [{"delta": 2, "count": 199}]
    # the prompt rendering keeps the seed's field order and parses back to the same values
    text = format_stats(stats)
    assert text.startswith('{"window": {"length": 400, "unique ratio": 1.0, "access entropy": 1.0')
    assert json.loads(text) == stats
    assert format_sequence(w[:4]) == "[0,2,4,6]"


@pytest.mark.parametrize(
    ("n", "t"),
    [(0, 0), (1, 1), (9, 9), (10, 10), (19, 10), (20, 10), (21, 10), (22, 11), (399, 199), (400, 200), (1000, 200)],
)
def test_tail_length_rule(n: int, t: int) -> None:
    assert tail_length(n) == t == ref_tail_length(n)


def test_hand_computed_small_sequence() -> None:
    # X = 5 5 6 5 9: counts {5:3, 6:1, 9:1}; repeats at i=1 (d=1) and i=3 (d=2)
    s = stats_table([5, 5, 6, 5, 9]).as_dict()
    assert s["unique ratio"] == 0.6
    assert s["gini"] == round(((2 * 1 - 4) * 1 + 0 * 1 + (2 * 3 - 4) * 3) / 15, 3)  # = 0.267
    assert s["top 5 access"] == 1.0
    assert s["reuse ratio"] == 0.4
    assert s["short reuse ratio"] == 1.0
    assert s["mean reuse distance"] == 1.5
    # steps 0, +1, -1, +4: first appearance breaks the 1-1-1-1 tie
    assert s["adjacent steps"]["dominant steps"] == [
        {"delta": 0, "count": 1},
        {"delta": 1, "count": 1},
        {"delta": -1, "count": 1},
        {"delta": 4, "count": 1},
    ]
    assert s["adjacent steps"]["zero ratio"] == 0.25
    assert s["adjacent steps"]["pm1 ratio"] == 0.5
    assert s["adjacent steps"]["small jump ratio"] == 0.75


def test_degenerate_sequences() -> None:
    assert stats_table([]).as_dict() == ref_stats([])
    one = stats_table([7]).as_dict()
    assert one == ref_stats([7])
    assert one["mean reuse distance"] == 1.0  # fallback: n when nothing repeats
    same = stats_table([3] * 50).as_dict()
    assert same["access entropy"] == 0.0 and same["gini"] == 0.0 and same["top 5 access"] == 1.0
    assert same["adjacent steps"]["zero ratio"] == 1.0
    # all values are plain Python numbers (JSON-serialisable as is)
    json.dumps(analyze(np.arange(30, dtype=np.int32)))


# ---------------------------------------------------------------------------- property

ids_small = st.lists(st.integers(0, 30), max_size=300)
ids_wide = st.lists(st.integers(-(2**40), 2**40), max_size=200)
ids_mixed = st.lists(st.one_of(st.integers(0, 8), st.integers(0, 5000)), max_size=300)


@settings(max_examples=150, deadline=None)
@given(st.one_of(ids_small, ids_wide, ids_mixed))
def test_matches_reference(xs: list[int]) -> None:
    assert_same(stats_table(xs).as_dict(), ref_stats(xs))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 400), st.integers(0, 2**32 - 1))
def test_window_and_tail_match_reference(n: int, span: int, seed: int) -> None:
    xs = [int(v) for v in np.random.default_rng(seed).integers(0, span, n)]
    stats = analyze(xs)
    t = ref_tail_length(n)
    assert_same(stats["window"], ref_stats(xs))
    assert_same(stats["recent tail"], ref_stats(xs[n - t :]))
    assert stats["recent tail"]["length"] == t
