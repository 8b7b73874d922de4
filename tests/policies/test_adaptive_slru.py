"""AdaptiveSLRU (Chiron's skewed executor): ARC's adaptation rule on SLRU's two segments.

References: a brute-force model written from the rule's statement (lists scanned
linearly), and hand cases that show the protected share moving the way ARC moves its
target: a ghost hit on a never-re-read key (ARC's B1) lengthens probation, one on a
re-read key (B2) enlarges protected, each by max(1, other ghost / this ghost) / n."""

from __future__ import annotations

import random

import pytest

from aicache.policies import EVICTION
from aicache.policies.eviction.slru import AdaptiveSLRU, SegmentedLRU


class NaiveAdaptiveSLRU:
    def __init__(self, share: float, promote: bool) -> None:
        self.share, self.promote = share, promote
        self.prob: list[int] = []
        self.prot: list[int] = []
        self.unread: set[int] = set()
        self.demoted: set[int] = set()
        self.gprob: list[int] = []
        self.gprot: list[int] = []
        self.pending: int | None = None

    def n(self) -> int:
        return max(len(self.prob) + len(self.prot), 1)

    def miss(self, k: int) -> None:
        b1, b2 = len(self.gprob), len(self.gprot)
        if k in self.gprob:
            self.gprob.remove(k)
            self.share = max(0.0, self.share - max(1.0, b2 / b1) / self.n())
            self.pending = k
        elif k in self.gprot:
            self.gprot.remove(k)
            self.share = min(1.0, self.share + max(1.0, b1 / b2) / self.n())
            self.pending = k

    def trim(self) -> None:
        while len(self.prot) > self.share * (len(self.prob) + len(self.prot)):
            k = self.prot.pop(0)
            self.prob.append(k)
            self.demoted.add(k)

    def hit(self, k: int) -> None:
        if k in self.prot:
            self.prot.remove(k)
            self.prot.append(k)
        elif k in self.unread:
            self.unread.discard(k)
            self.prob.remove(k)
            self.prob.append(k)
        else:
            self.prob.remove(k)
            self.demoted.discard(k)
            self.prot.append(k)
            self.trim()

    def insert(self, k: int, prefetched: bool) -> None:
        if prefetched:
            self.gprob = [g for g in self.gprob if g != k]
            self.gprot = [g for g in self.gprot if g != k]
            self.prob.append(k)
            self.unread.add(k)
            return
        if self.promote and self.pending == k:
            self.prot.append(k)
            self.trim()
        else:
            self.prob.append(k)
        self.pending = None

    def ghost(self, g: list[int], k: int) -> None:
        g.append(k)
        del g[:max(len(g) - self.n(), 0)]

    def victim(self) -> int:
        if self.prob:
            k = self.prob.pop(0)
            if k in self.unread:
                self.unread.discard(k)
            elif k in self.demoted:
                self.demoted.discard(k)
                self.ghost(self.gprot, k)
            else:
                self.ghost(self.gprob, k)
            return k
        k = self.prot.pop(0)
        self.ghost(self.gprot, k)
        return k


@pytest.mark.parametrize("promote", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_adaptive_slru_matches_a_brute_force_model(promote: bool, seed: int) -> None:
    rng = random.Random(seed)
    fast, ref = AdaptiveSLRU(10**9, promote_ghosts=promote), NaiveAdaptiveSLRU(0.8, promote)
    resident: set[int] = set()
    shares = set()
    for _ in range(5000):
        # a hot set that drifts every 1000 reads over a cold tail; some inserts prefetched
        hot0 = (_ // 1000) * 7
        k = hot0 + rng.randrange(12) if rng.random() < 0.6 else rng.randrange(200)
        if k in resident:
            fast.on_hit(k, 1, 0.0)
            ref.hit(k)
        else:
            pf = rng.random() < 0.2
            if pf:
                fast.on_prefetch_insert(k, 1, 0.0)
            else:
                assert fast.on_miss(k, 1, 0.0) is True
                ref.miss(k)
                fast.on_insert(k, 1, 0.0)
            ref.insert(k, pf)
            resident.add(k)
            while len(resident) > 40:
                v = fast.victim(0.0)
                assert v == ref.victim()
                resident.discard(v)
        assert list(fast.keys()) == ref.prob + ref.prot
        assert fast.protected_share == pytest.approx(ref.share)
        shares.add(round(fast.protected_share, 6))
    assert len(shares) > 10  # the stream exercised both directions of the rule


def _full(ev: AdaptiveSLRU, keys: range) -> None:
    for k in keys:
        ev.on_miss(k, 1, 0.0)
        ev.on_insert(k, 1, 0.0)


def test_a_ghost_hit_on_a_one_off_key_shrinks_protected() -> None:
    ev = AdaptiveSLRU(10**9)
    _full(ev, range(10))
    assert ev.victim(0.0) == 0  # never re-read: remembered as a probation ghost
    ev.on_miss(0, 1, 0.0)  # it comes back: probation was too short for its second read
    assert ev.protected_share == pytest.approx(0.8 - 1 / 9)
    ev.on_insert(0, 1, 0.0)  # a ghost hit is a re-read: it enters protected
    assert list(ev.keys())[-1] == 0 and ev.victim(0.0) == 1


def test_a_ghost_hit_on_a_reread_key_grows_protected_by_arcs_ratio() -> None:
    ev = AdaptiveSLRU(10**9, protected_share=0.2)
    _full(ev, range(10))
    ev.on_hit(5, 1, 0.0)
    ev.on_hit(6, 1, 0.0)  # 2 protected > 0.2 * 10: 5 is demoted to probation's recent end
    assert [ev.victim(0.0) for _ in range(3)] == [0, 1, 2]  # three probation ghosts
    for _ in range(6):  # 3, 4, 7, 8, 9, then the demoted 5 (a re-read ghost)
        ev.victim(0.0)
    assert ev.victim(0.0) == 6  # protected last; a re-read ghost too
    ev.on_miss(6, 1, 0.0)  # |ghost_prob| / |ghost_prot| = 4 (0 1 2 3 4 7 8 9 capped at n)
    assert ev.protected_share == 1.0  # 0.2 + max(1, b1 / b2) / max(n, 1) with n = 0 -> capped


def test_without_ghost_hits_it_is_segmented_lru() -> None:
    rng = random.Random(3)
    a, b = AdaptiveSLRU(10**9), SegmentedLRU(10**9)
    resident = set(range(10))
    for k in range(10):  # the hot keys, read twice: protected (10 <= 0.8 * 30), never evicted
        a.on_miss(k, 1, 0.0)
        for ev in (a, b):
            ev.on_insert(k, 1, 0.0)
            ev.on_hit(k, 1, 0.0)
    for i in range(3000):
        k = i + 10**6 if rng.random() < 0.5 else rng.randrange(10)  # new keys never return
        if k in resident:
            a.on_hit(k, 1, 0.0)
            b.on_hit(k, 1, 0.0)
        else:
            a.on_miss(k, 1, 0.0)
            a.on_insert(k, 1, 0.0)
            b.on_insert(k, 1, 0.0)
            resident.add(k)
            if len(resident) > 30:
                v = a.victim(0.0)
                assert v == b.victim(0.0)
                resident.discard(v)
    assert list(a.keys()) == list(b.keys()) and a.protected_share == 0.8
    assert EVICTION.get("aslru") is AdaptiveSLRU
