"""PrefetchCredit: a stream speculates only as far as its prefetches are read.

Checked against a brute-force ledger (every block charged, returned or lost, kept in a
list) on random event sequences. Through the real engine: tests/datacache/engine/test_engine_prefetch_storm.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aicache.policies.prefetch.credit import PrefetchCredit


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("gumlr"), st.integers(0, 40)), max_size=300),
       st.integers(0, 8), st.integers(0, 8), st.sampled_from([0.0, 1.0 / 16, 0.5]),
       st.sampled_from([0.0, 0.25, 1.0 / 64]))
def test_credit_matches_a_brute_force_ledger(events: list[tuple[str, int]], initial: int, extra: int,
                                             gain: float, refill: float) -> None:
    cap = max(1, initial + extra)
    cr = PrefetchCredit(initial=initial, cap=cap, gain=gain, refill=refill)
    resident: set[int] = set()
    charged: list[int] = []  # the reference: blocks charged and not yet resolved, in order
    misses = 0
    reads = 0  # charged blocks that were read
    spent = 0  # charged blocks evicted unread
    for op, b in events:
        if op == "g":  # the prefetcher names b, b+1, b+2
            names = [b, b + 1, b + 2]
            credit = cr.credit
            got = list(cr.grant(names, resident))
            expect, c = [], credit
            for x in names:
                if x in resident:
                    continue
                if x in charged or x in expect:
                    expect.append(x)
                elif c >= 1.0:
                    c -= 1.0
                    expect.append(x)
                    charged.append(x)
            assert got == expect
        elif op == "u":  # a read of b, which a prefetch brought in
            if b in charged:
                charged.remove(b)
                reads += 1
            cr.used(b)
            resident.add(b)
        elif op == "m":  # a demand miss of b (a late prefetch, if b was charged)
            misses += 1
            if b in charged:
                charged.remove(b)
                reads += 1
            cr.missed(b)
            resident.add(b)
        elif op == "l":  # b evicted unread
            if b in charged:
                charged.remove(b)
                spent += 1
            cr.lost(b)
            resident.discard(b)
        else:  # "r": b evicted after being read
            resident.discard(b)
        assert cr.pending == set(charged)
        # the bound: what was charged and never read
        assert spent + len(charged) <= initial + gain * reads + refill * misses + 1e-9
        assert 0.0 <= cr.credit <= cap


def test_credit_spent_on_resident_or_charged_blocks_only_once() -> None:
    cr = PrefetchCredit(initial=3, cap=3, gain=0.0, refill=0.0)
    assert list(cr.grant([1, 2], resident={1})) == [2]
    assert list(cr.grant([2, 3, 4, 5], resident=set())) == [2, 3, 4]  # 2 is already charged
    assert list(cr.grant([6], resident=set())) == []
    cr.used(3)  # read: its credit comes back
    assert list(cr.grant([6, 7], resident=set())) == [6]
    assert cr.accuracy() == 1 / 4
