"""The SSD write budget: parsing, the projected drive life against its formula, the
window invariant by brute force (every window of the ledger's clock, on random charges
and through the simulator on small generated traces), the ranked demand window against a
brute-force sum, and the budgeted admissions' order (the default's classes, first come;
``budgeted-ranked``'s ranks by class and decayed use count; ``budgeted-threshold``'s
decisions against a brute-force reference)."""

from __future__ import annotations

import math
import random

import pytest

import aicache.sim.kv as simkv
from aicache.errors import BadInput
from aicache.kv.admissions import AdmissionContext, make_ssd_admission
from aicache.kv.budgeted_admission import (
    ClassPacedAdmission, RankedBudgetedAdmission, ThresholdBudgetedAdmission,
)
from aicache.kv.radix import RadixNode
from aicache.kv.write_budget import (
    RankedDemandWindow, WriteBudget, life_years, parse_write_budget,
)
from aicache.sim.kv import KVSimParams, prepare, simulate_kv
from aicache.traces.gen_agent import generate_agent


def _max_window(history: list[tuple[float, int]], window: float) -> int:
    """The most bytes any window [a, a + window) holds, trying every start: a window's
    content only changes when a charge enters or leaves it, so the starts worth trying
    are the charge times."""
    best = 0
    for a, _ in history:
        best = max(best, sum(s for t, s in history if a <= t < a + window))
    return best


def test_parse_budget_in_dwpd_and_rates() -> None:
    assert parse_write_budget("1DWPD", 86_400_000).bytes_per_s == pytest.approx(1000.0)
    assert parse_write_budget("0.5 dwpd", 86_400_000).bytes_per_s == pytest.approx(500.0)
    assert parse_write_budget("200MB/s", 1).bytes_per_s == 200e6
    assert parse_write_budget("1GiB/s", 1).bytes_per_s == 2 ** 30
    for bad in ("fast", "0DWPD", "0MB/s", "200MB"):
        with pytest.raises(BadInput) as e:
            parse_write_budget(bad, 10 ** 9)
        assert "\n" not in str(e.value) and "--ssd-write-budget" in str(e.value)


def test_projected_life_is_endurance_over_the_write_rate() -> None:
    # 1 DWPD x 5 years on a 1 TB drive is 1,825 TB; writing 1 TB a day uses it in 5 years
    assert life_years(10 ** 12, 86_400.0, 10 ** 12) == pytest.approx(5.0)
    assert life_years(2 * 10 ** 12, 86_400.0, 10 ** 12) == pytest.approx(2.5)
    assert life_years(0, 86_400.0, 10 ** 12) is None


@pytest.mark.parametrize("seed", range(5))
def test_ledger_never_exceeds_the_allowance_in_any_window(seed: int) -> None:
    rng = random.Random(seed)
    b = WriteBudget(100.0, 10.0, keep_history=True)  # 1,000 B per 10 s window
    t = 0.0
    for _ in range(400):
        t += rng.expovariate(2.0)
        size = rng.randint(1, 400)
        if b.fits(size, t):
            b.charge(size, t)
    assert b.history and b.refused > 0  # the limit was reached
    assert _max_window(b.history, 10.0) <= b.allowance
    assert b.max_window == _max_window(b.history, 10.0)


@pytest.mark.parametrize("seed", range(3))
def test_ranked_demand_window_matches_a_brute_force_sum(seed: int) -> None:
    rng = random.Random(seed)
    w = RankedDemandWindow(50.0, 16)
    offers: list[tuple[float, int, int]] = []
    t = 0.0
    for _ in range(300):
        t += rng.expovariate(0.5)
        b, s = rng.randrange(16), rng.randint(1, 100)
        w.add(b, s, t)
        offers.append((t, b, s))
        q = rng.randrange(16)
        live = [(bb, ss) for tt, bb, ss in offers if tt > t - 50.0]
        assert w.at_least(q, t) == sum(ss for bb, ss in live if bb >= q)
        assert w.total(t) == sum(ss for _, ss in live)


def test_decayed_use_count_is_the_sum_of_halving_weights() -> None:
    """``log_count`` against ``log2 Σ 2^(−(now − t_i)/half_life)`` written out; a block
    that came back quickly outranks one used as often but long ago."""
    adm = RankedBudgetedAdmission(WriteBudget(1.0, 1000.0), lambda n: 1, pace_window=100.0)
    quick, slow, fresh = RadixNode(1, None, 1), RadixNode(2, None, 1), RadixNode(3, None, 1)
    adm.on_store([quick, slow], 0, 0.0, None)          # first stores count one use each
    adm.on_reference(slow, 50.0)
    adm.on_reference(quick, 900.0)
    adm.on_reference(quick, 950.0)
    now = 1000.0
    for node, uses in ((quick, (0.0, 900.0, 950.0)), (slow, (0.0, 50.0))):
        want = math.log2(sum(2.0 ** (-(now - t) / 100.0) for t in uses))
        assert adm.log_count(node, now) == pytest.approx(want)
    assert adm.log_count(fresh, now) == -math.inf
    quick.R = slow.R = 1
    quick.E = slow.E = fresh.E = 1
    assert adm.rank(quick, now) > adm.rank(slow, now) > adm.rank(fresh, now)


def test_budgeted_admission_reserves_only_for_better_ranked_demand() -> None:
    """Worked example (pace window 100 s, rate 1 B/s, first eviction at 2 s: room at t is
    t − 2 + 100 − written; nothing is written here, so only the reserves differ):
    a reused block waits only for the demand ranked above it, so a block used often
    goes first under a tight budget, and once the better demand fits, the rest is
    written too; a returning block is limited by the ledger alone."""
    size = lambda n: 10  # noqa: E731
    adm = RankedBudgetedAdmission(WriteBudget(1.0, 1000.0), size, pace_window=100.0)
    hot = [RadixNode(i, None, 1) for i in range(10)]
    cold, cold2, back = RadixNode(20, None, 1), RadixNode(21, None, 1), RadixNode(30, None, 1)
    for n in hot:
        for t in (0.0, 1.0, 2.0):
            adm.on_reference(n, t)
        n.E, n.R = 1, 3
    adm.on_reference(cold, 0.0)
    adm.on_reference(cold2, 0.0)
    cold.E = cold.R = cold2.E = cold2.R = 1
    # nothing written yet: room = 100 B; 9 hot offers = 90 B of better demand, + 10 fits
    for n in hot[:9]:
        assert adm.at_eviction(n, 2.0)
    assert adm.at_eviction(cold, 2.0)
    # a tenth hot offer: 100 B above the cold block, which no longer fits
    assert adm.at_eviction(hot[9], 2.0)
    assert not adm.at_eviction(cold2, 2.0)
    back.E, back.R = 2, 1
    assert adm.at_eviction(back, 2.0)                # returning: the ledger alone
    # a pace window later the hot demand has passed: the cold block is written
    assert adm.at_eviction(cold2, 103.0)
    assert (adm.offered, adm.admitted) == ([1, 13, 0], [1, 12, 0])


def test_budgeted_ranked_is_one_name_away_and_spends_the_budget_itself() -> None:
    b = WriteBudget(1.0, 10.0)
    ctx = AdmissionContext(size_of=lambda n: 1, budget=b)
    d, r = make_ssd_admission("budgeted", ctx), make_ssd_admission("budgeted-ranked", ctx)
    th = make_ssd_admission("budgeted-threshold", ctx)
    assert isinstance(d, ClassPacedAdmission) and d.label == "budgeted"
    assert isinstance(r, RankedBudgetedAdmission) and r.label == "budgeted-ranked"
    assert isinstance(th, ThresholdBudgetedAdmission) and th.label == "budgeted-threshold"
    for name in ("budgeted-ranked", "budgeted-threshold"):
        with pytest.raises(BadInput, match="--ssd-write-budget"):
            make_ssd_admission(name, AdmissionContext())
    with pytest.raises(BadInput, match="returning_share"):
        make_ssd_admission("budgeted-threshold", AdmissionContext(
            size_of=lambda n: 1, budget=b, args={"returning_share": 2}))


@pytest.mark.parametrize("seed", range(4))
def test_budgeted_threshold_decides_as_a_brute_force_reference(seed: int) -> None:
    """Every decision of ``budgeted-threshold`` on a random sequence of first stores,
    reuses and evictions against the rule written out: rank = (2 − class) · 320 + the
    quarter-log2 bucket of ``Σ 2^(−(now − t_i)/half_life)`` over the block's uses; written
    iff size + (bytes offered in the last pace window ranked higher) ≤ rate · (now − first
    eviction + pace) − bytes written + (a quarter of the window's allowance for a
    returning block), and the window's writes plus the block fit the allowance."""
    rng = random.Random(seed)
    pace, rate, window = 100.0, 2.0, 400.0
    adm = ThresholdBudgetedAdmission(WriteBudget(rate, window), lambda n: n.tokens,
                                     pace_window=pace)
    nodes = [RadixNode(i, None, rng.randint(5, 60)) for i in range(12)]
    uses: dict[RadixNode, list[float]] = {n: [] for n in nodes}
    offers: list[tuple[float, int, int]] = []
    writes: list[tuple[float, int]] = []
    t0: float | None = None
    t, ahead_only = 0.0, 0
    for _ in range(400):
        t += rng.expovariate(0.3)
        n = rng.choice(nodes)
        if not uses[n]:                                  # its first store counts one use
            adm.on_store([n], 0, t, None)
            uses[n].append(t)
        elif rng.random() < 0.4:                         # a reuse while in DRAM
            n.R += 1
            adm.on_reference(n, t)
            uses[n].append(t)
        else:                                            # it leaves DRAM (E_b counted)
            n.E += 1
            k = 0 if n.E >= 2 else 1 if n.R >= 1 else 2
            lc = math.log2(sum(2.0 ** (-(t - u) / pace) for u in uses[n]))
            rank = (2 - k) * 320 + (0 if lc <= -64 else min(319, int((lc + 64) * 4)))
            offers.append((t, rank, n.tokens))
            t0 = t if t0 is None else t0
            better = sum(s for tt, r, s in offers if tt > t - pace and r > rank)
            room = rate * (t - t0 + pace) - sum(s for _, s in writes)
            ahead = 0.25 * rate * window if k == 0 else 0.0
            in_window = sum(s for tt, s in writes if tt > t - window)
            want = (n.tokens + better <= room + ahead
                    and in_window + n.tokens <= rate * window)
            assert adm.at_eviction(n, t) == want
            if want:
                ahead_only += n.tokens + better > room   # only the share let it in
                adm.on_write(n, n.tokens, t)
                writes.append((t, n.tokens))
            if rng.random() < 0.3:                       # recomputed later: a reuse
                uses[n].append(t)
                adm.on_reference(n, t)
    assert sum(adm.admitted) > 0 and sum(adm.offered) > sum(adm.admitted)  # both ways
    assert adm.offered[0] > 0 and ahead_only > 0


def test_budgeted_spends_on_returning_blocks_first() -> None:
    size = lambda n: 100  # noqa: E731
    b = WriteBudget(10.0, 100.0)                     # 1,000 B per window
    adm = ClassPacedAdmission(b, size, pace_window=100.0)
    back, reused, fresh = RadixNode(1, None, 1), RadixNode(2, None, 1), RadixNode(3, None, 1)
    back.E, reused.E, reused.R, fresh.E = 2, 1, 1, 1
    assert [adm.evidence_class(n) for n in (back, reused, fresh)] == [0, 1, 2]
    for i in range(8):                               # returning demand: 800 B in the window
        assert adm.at_eviction(back, float(i))
        adm.on_write(back, 100, float(i))
    # 800 B spent; a reused or first eviction would leave no room for the demand seen
    assert not adm.at_eviction(reused, 8.0) and not adm.at_eviction(fresh, 8.0)
    for t in (8.0, 9.0):                             # returning blocks still fit: 1,000 B
        assert adm.at_eviction(back, t)
        adm.on_write(back, 100, t)
    assert not adm.at_eviction(back, 9.5)            # 1,100 B would exceed the window
    assert (adm.offered, adm.admitted) == ([11, 1, 1], [10, 0, 0])
    # a window later the returning demand has passed: a reused block is written again
    assert adm.at_eviction(reused, 250.0)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("admission", [None, "budgeted-ranked", "budgeted-threshold",
                                       "full-duplicate", "sglang-selective", "shadow-follow"])
def test_writes_stay_within_the_budget_through_the_simulator(monkeypatch, seed, admission):
    """The budget holds over every window of the replay clock, for the budgeted admission
    and for any admission capped by it; the run reports the projected life."""
    made: list[WriteBudget] = []

    class Recording(WriteBudget):
        def __init__(self, bps: float, window: float) -> None:
            super().__init__(bps, window, keep_history=True)
            made.append(self)

    monkeypatch.setattr(simkv, "WriteBudget", Recording)
    reqs = prepare(generate_agent(8, seed=seed), 512)
    kw = dict(dram_tokens=100_000, ssd_tokens=2_000_000, session_window=1800.0)
    own = {None: "budgeted", "shadow-follow": "shadow-follow",  # spend it themselves
           "budgeted-ranked": "budgeted-ranked", "budgeted-threshold": "budgeted-threshold"}
    unbudgeted = admission if admission not in own else "full-duplicate"
    free = simulate_kv(reqs, KVSimParams(admission=unbudgeted, **kw)).metrics
    rate = free["ssd_write_bytes"] / free["duration_s"] / 4  # a quarter of what FD writes
    m = simulate_kv(reqs, KVSimParams(admission=admission, ssd_write_budget=f"{int(rate)}B/s",
                                      ssd_write_window=120.0, **kw)).metrics
    (b,) = made
    assert b.history and (b.refused > 0 or m.get("shadow_refused", 0) > 0)  # it binds
    assert _max_window(b.history, 120.0) <= b.allowance
    assert m["ssd_write_bytes"] <= b.charged  # withdrawn writes only lower the real count
    assert m["ssd_write_bytes"] < free["ssd_write_bytes"]
    assert m["ssd_life_years"] == pytest.approx(life_years(
        m["ssd_write_bytes"], m["duration_s"], 2_000_000 * 147_456))
    assert m["ssd_write_budget_bps"] == pytest.approx(int(rate))
    assert m["admission"] == own.get(admission, f"{admission}@budget")


def test_budgeted_without_a_budget_is_a_one_line_error() -> None:
    with pytest.raises(BadInput, match="--ssd-write-budget"):
        simkv.validate(KVSimParams(admission="budgeted"))
    with pytest.raises(BadInput, match="--ssd-write-window"):
        simkv.validate(KVSimParams(ssd_write_budget="1DWPD", ssd_write_window=0.0))


def test_cli_budget_flags_and_unknown_admission(tmp_path, capsys) -> None:
    import json

    from aicache.cli.main import main
    from aicache.traces.io import write_kv_jsonl

    path = tmp_path / "t.jsonl"
    write_kv_jsonl(str(path), prepare_free_trace())
    base = ["sim", "kv", "--trace", str(path), "--dram-tokens", "1024", "--in-flight", "1",
            "--json"]
    assert main(base + ["--ssd-write-budget", "1DWPD", "--ssd-write-window", "1min"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["admission"] == "budgeted" and m["ssd_write_window_s"] == 60.0
    assert m["ssd_rated_endurance"] == "1 DWPD x 5 years" and "ssd_life_years" in m
    assert main(base + ["--ssd-write-budget", "lots"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--ssd-write-budget" in err
    assert main(base + ["--admission", "selective"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "sglang-selective" in err and "mooncake-on-evict" in err


def prepare_free_trace() -> list:
    from aicache.traces.base import KVRequest

    return [KVRequest(timestamp=t, input_length=1024, output_length=1, hash_ids=b,
                      block_tokens=512) for t, b in ((0, [1, 2]), (10, [3, 4]), (20, [1, 2]))]
