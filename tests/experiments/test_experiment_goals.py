"""The experiments' goal rows on hand-built results: SAECache's (``experiments.saecache.saecache_goals``)
and SARIA's frontier (``experiments.saria._frontier_goals``); and the SARIA Fig. 14 grid
differing from SARIA in its lookup only."""

from __future__ import annotations

from aicache.experiments.saecache import saecache_goals
from aicache.experiments.saria import METADATA_ARMS, Metadata, _frontier, _frontier_goals

BASES = ("lru", "lfu", "s3fifo", "sieve", "lpc")


def _grid(values: dict[tuple[int, int, str], float]) -> tuple[dict, dict]:
    """(mean by (trace, cap, policy), cells by (trace, seed, cap, policy)) for trace "t"."""
    cells = {("t", s, c, p): v for (s, c, p), v in values.items()}
    acc: dict[tuple, list[float]] = {}
    for (s, c, p), v in values.items():
        acc.setdefault(("t", c, p), []).append(v)
    return {k: sum(v) / len(v) for k, v in acc.items()}, cells


def test_gain_row_compares_with_the_best_of_five_and_reports_belady_share() -> None:
    vals: dict[tuple[int, int, str], float] = {}
    for c in (5, 10, 20, 30, 50):
        for s in (4, 5):
            vals.update({(s, c, b): 0.30 for b in BASES})
            vals[(s, c, "sieve")] = 0.32          # the best baseline, not LRU
            vals[(s, c, "belady")] = 0.50
            vals[(s, c, "saecache")] = 0.38 if c == 5 else 0.36
            vals[(s, c, "saecache-seed")] = 0.30
            vals[(s, c, "saecache-priority")] = 0.30
    vals[(5, 50, "saecache-seed")] = 0.294   # 0.6 pt below LRU on one replay only
    mean, cells = _grid(vals)
    goals = {g["goal"]: g for g in saecache_goals(mean, cells, ["t"], ["t"], " (held out)", "seed")}
    g5 = goals["saecache, t (held out), 5%: CHR ≥ best of LRU/LFU/S3-FIFO/SIEVE/LPC + 5 pts"]
    # 0.38 − 0.32 = +6 pts vs SIEVE; (0.38 − 0.30) / (0.50 − 0.30) = 40% of the headroom
    assert g5["met"] is True
    assert g5["value"] == "+6.00 pts vs sieve (0.320); 40% of Belady's headroom over LRU"
    g10 = goals["saecache, t (held out), 10%: CHR ≥ best of LRU/LFU/S3-FIFO/SIEVE/LPC + 5 pts"]
    assert g10["met"] is False and g10["value"].startswith("+4.00 pts vs sieve")
    below = "t (held out): never > 0.5 pt below LRU at 5–50%"
    assert goals[f"saecache, {below}"]["met"] is True
    # the mean over seeds is only 0.3 pt below, but one replay is 0.6 below: not met
    seed = goals[f"saecache-seed, {below}"]
    assert seed["met"] is False and seed["value"].startswith("worst -0.60 pts (seed 5, 50%)")


def test_missing_capacities_are_not_evaluated_and_fail_the_range() -> None:
    vals = {(4, c, p): 0.3 for c in (10, 30) for p in (*BASES, "belady", "saecache",
                                                        "saecache-seed", "saecache-priority")}
    mean, cells = _grid(vals)
    goals = {g["goal"]: g for g in saecache_goals(mean, cells, ["t"], ["t"], "", "seed")}
    assert goals["saecache, t, 5%: CHR ≥ best of LRU/LFU/S3-FIFO/SIEVE/LPC + 5 pts"]["met"] is None
    rng = goals["saecache, t: never > 0.5 pt below LRU at 5–50%"]
    assert rng["met"] is False and rng["value"].endswith("capacities 10/30%")


def test_fig14_arms_differ_in_lookup_alone() -> None:
    for quick in (True, False):
        cells = Metadata().cells(quick)
        assert len(cells) == len(METADATA_ARMS) * (1 if quick else 2)
        by_model: dict[str, list[dict]] = {}
        for c in cells:
            by_model.setdefault(c["model"], []).append(dict(c))
        for arms in by_model.values():
            assert {a["lookup"] for a in arms} == {"tier-prefix", "unified"}
            strip = [{k: v for k, v in a.items() if k not in ("lookup", "label")} for a in arms]
            assert all(s == strip[0] for s in strip)
            assert strip[0]["theta_e"] == 2 and strip[0]["gpu_gbps"] == 24.0


def test_frontier_goal_needs_all_three_ratios() -> None:
    def row(label: str, char: float, writes: int) -> dict:
        return {"model": "m", "label": label, "char": char, "ssd_write_bytes": writes,
                "ttft_mean_s": 1.0}
    rows = [row("FD", 0.80, 1000), row("OR", 0.80, 300),
            row("E2", 0.77, 440),     # CHAR 0.9625×, writes 0.44× FD, 1.47× oracle: met
            row("LA", 0.78, 460),     # 0.975×, 0.46× FD but 1.53× oracle: not met
            row("E3", 0.60, 200)]     # not a judged arm
    goals = {g["goal"].split(", ")[2].split(":")[0]: g for g in _frontier_goals(_frontier(rows), "t")}
    assert set(goals) == {"E2", "LA"}
    assert goals["E2"]["met"] is True
    assert goals["E2"]["value"] == "CHAR 0.9625× / writes 0.4400× FD / 1.47× oracle"
    assert goals["LA"]["met"] is False and goals["LA"]["value"].endswith("1.53× oracle")
