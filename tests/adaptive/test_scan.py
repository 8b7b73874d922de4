"""Epoch scans (:mod:`aicache.adaptive.scan`): the scan test's run length against the exact
probability that draws with replacement make it, the scan's bookkeeping, and the walk that
finds a unit's files in the block map."""

from __future__ import annotations

import math
import random

import pytest

from aicache.adaptive.scan import SCAN_ALPHA, EpochScan, scan_run, unit_firsts


def _all_distinct(n: int, k: int) -> float:
    """P(k draws with replacement from n items are all distinct), exactly."""
    return math.prod(1 - i / n for i in range(k))


@pytest.mark.parametrize("n", [2, 3, 10, 50, 300, 500, 5000, 65536])
def test_the_run_is_significant_for_draws_with_replacement(n: int) -> None:
    k = scan_run(n)
    if k > n:  # no run of n files can tell a scan from draws of n (or fewer) items
        assert _all_distinct(n, n) > SCAN_ALPHA
        return
    assert _all_distinct(n, k) <= SCAN_ALPHA < _all_distinct(n, k - 1)  # the shortest such run
    assert abs(k - math.sqrt(2 * n * math.log(1 / SCAN_ALPHA))) <= 2 + 0.1 * k  # the estimate


def test_a_simulated_stream_with_replacement_rarely_passes() -> None:
    """Monte Carlo against the bound: uniform draws with replacement from 300 files, runs
    of distinct files as the scan counts them (a re-read starts a new run)."""
    n, rng = 300, random.Random(1)
    need = scan_run(n)
    runs = passed = 0
    for _ in range(400):
        seen: set[int] = set()
        while True:
            f = rng.randrange(n)
            if f in seen:
                break
            seen.add(f)
        runs += 1
        passed += len(seen) >= need
    assert passed / runs <= 2 * SCAN_ALPHA


def test_scan_notes_restarts_and_searches_unread_files() -> None:
    firsts = list(range(0, 40, 2))  # 20 files, first blocks 0, 2, ..., 38
    scan = EpochScan(firsts)
    assert scan.needed == scan_run(20)
    for b in firsts[:scan.needed - 1]:
        scan.note(b)
    assert not scan.scanning()
    scan.note(firsts[scan.needed - 1])
    assert scan.scanning()
    held = {firsts[scan.needed]}  # held in the cache, or in flight
    got = scan.unread(3, held.__contains__)
    assert got == firsts[scan.needed + 1:scan.needed + 4]  # unread, not held, in order
    held.update(got)  # asked for: in flight now
    assert scan.unread(100, held.__contains__) == firsts[scan.needed + 4:]  # the rest, once
    assert scan.unread(5, lambda b: True) == [] and scan.exhausted  # a lap found nothing
    assert scan.unread(5, lambda b: False) == []  # not searched again in this scan
    scan.note(firsts[0])  # a re-read: the next epoch begins
    assert len(scan.read) == 1 and not scan.scanning() and not scan.exhausted


def test_unit_firsts_walks_the_units_consecutive_files() -> None:
    # a/0: 0-1, a/1: 2, b/x: 3-4, a/2: 5 (after another unit's file), a/3: 7 (after a gap)
    files = {0: "a/0", 1: "a/0", 2: "a/1", 3: "b/x", 4: "b/x", 5: "a/2", 7: "a/3"}
    ext = {"a/0": (0, 1), "a/1": (2, 2), "b/x": (3, 4), "a/2": (5, 5), "a/3": (7, 7)}

    def unit(path: str) -> str:
        return path.split("/")[0]

    assert unit_firsts(2, "a", files.get, ext.get, unit) == [0, 2]  # stops at b/x
    assert unit_firsts(5, "a", files.get, ext.get, unit) == [5]  # b/x before, a gap after
    assert unit_firsts(3, "b", files.get, ext.get, unit) == [3]
    assert unit_firsts(6, "a", files.get, ext.get, unit) is None  # no file there
    assert unit_firsts(2, "a", files.get, ext.get, unit, limit=1) is None  # too many files
