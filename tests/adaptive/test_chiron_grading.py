"""Chiron's controller decides; the simulator's grader grades (``aicache.sim.grading``).

* a scripted run graded by hand: accuracy, confusion, macro F1 (no advice = a miss),
  recovery time, the answer log with submission-time labels;
* observers never change a decision: the same replay with and without a grader;
* the oracle reads ground truth only through a bound grader (none on the real engine);
* ``aicache.adaptive`` has no import cycle, function-level imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest
from aicache.adaptive.controller import ChironParams, ChironSystem
from aicache.adaptive.observer import ChironObserver, DecisionLog, Judgement
from aicache.datacache.policy.driver import SystemDriver
from aicache.sim.datacache import _run, CostModel, load_workload, simulate_datacache
from aicache.sim.grading import ChironGrader


class Scripted(Advisor):
    name = "scripted"

    def __init__(self, answers: list[tuple[str, float] | None]) -> None:
        super().__init__()
        self.answers = list(answers)

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        a = self.answers.pop(0) if self.answers else None
        return None if a is None else Advice(a[0], a[1])


#: the seed's confidence gate alone, so that the scripted answers decide (the evidence check
#: would reject a confident "random" on this sequential stream: tests/adaptive/test_gate_evidence.py)
PARAMS = ChironParams(min_window=10, first_review_s=1.0, early_retry_s=2.0, routine_interval_s=30.0,
                      reflection_interval_s=45.0, round_s=1.0, min_round_accesses=5, advisor_delay_s=0.0,
                      retry_backoff=1.0, gate_mode="seed")


class Switches(ChironObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str]] = []

    def on_switch(self, unit: str, old: str | None, new: str, now: float) -> None:
        self.seen.append((unit, old, new))


def drive(sys: ChironSystem, t0: float, t1: float, grader: ChironGrader | None = None,
          label_at: dict[float, str] | None = None) -> None:
    """A sequential stream, one read every 0.1 s; ``label_at`` = {time: new true label}."""
    t, b = t0, 0
    while t < t1:
        if grader is not None and label_at and t in label_at:
            grader.observe_label(label_at[t], t)
        sys.tick(t)
        sys.on_access("ds/f", b, 4096, False, t)
        b += 1
        t = round(t + 0.1, 6)


def test_scripted_run_graded_by_hand() -> None:
    # answers, in order: wrong & accepted (switch to random), right & rejected (0.5 < tau,
    # early retry), right & accepted (switch back), no advice
    adv = Scripted([("random", 0.9), ("sequential", 0.5), ("sequential", 0.9), None])
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS)
    grader, log, switches = ChironGrader(), DecisionLog(), Switches()
    assert grader.attach(sys)
    sys.add_observer(log)
    sys.add_observer(switches)
    sys.add_observer(log)  # attaching twice has no effect
    drive(sys, 0.0, 95.0, grader, {0.0: "sequential"})
    rows = grader.log
    assert [(r["pattern"], r["accepted"], r["label"]) for r in rows] == [
        ("random", True, "sequential"), ("sequential", False, "sequential"),
        ("sequential", True, "sequential"), (None, False, "sequential")]
    assert [j.as_dict() for j in log.judgements] == [{k: v for k, v in r.items() if k != "label"} for r in rows]
    assert switches.seen == [("ds", None, "random"), ("ds", "random", "sequential")]
    st = grader.stats()
    assert st["diagnosis_accuracy"] == pytest.approx(2 / 3)  # no advice is left out
    assert st["diagnosis_confusion"] == {"sequential": {"random": 1, "sequential": 2}}
    # F1 counts no advice as a miss: precision 2/2, recall 2/4
    assert st["diagnosis_f1"] == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    # recovery: from the label's start (t=0) to the first accepted "sequential"
    assert st["recovery_s"] == [rows[2]["t"]]
    # the controller itself holds no ground truth and grades nothing
    assert not hasattr(sys, "observe_label")
    assert not {"diagnosis_accuracy", "diagnosis_confusion", "recovery_s"} & set(sys.stats())


def test_recovery_is_measured_from_the_label_change() -> None:
    adv = Scripted([("sequential", 0.9), ("random", 0.9)])
    sys = ChironSystem(1 << 30, advisor=adv, params=PARAMS)
    grader = ChironGrader()
    grader.attach(sys)
    drive(sys, 0.0, 50.0, grader, {0.0: "sequential", 20.0: "random"})
    rows = grader.log
    assert [r["label"] for r in rows] == ["sequential", "random"]
    assert grader.recovery_s == pytest.approx([rows[0]["t"], rows[1]["t"] - 20.0])


def test_observers_never_change_a_decision() -> None:
    wl = load_workload("W1", scale=0.02, seed=0)
    cap = wl.default_cache_bytes
    assert cap is not None

    def run(observed: bool) -> dict[str, object]:
        sys = ChironSystem(cap, advisor="statistical", seed=0)
        grader = None
        if observed:
            grader = ChironGrader()
            grader.attach(sys)
            sys.add_observer(DecisionLog())
        d = _run(wl, SystemDriver(sys, 4 << 20, capacity=cap), "chiron", cap, CostModel(),
                 grader).to_dict()
        sys.close()
        return d

    plain, graded = run(False), run(True)
    graded_keys = {"diagnosis_accuracy", "diagnosis_confusion", "diagnosis_f1", "recovery_s"}
    assert plain["diagnosis_accuracy"] is None and graded["diagnosis_accuracy"] is not None
    assert {k: v for k, v in plain.items() if k not in graded_keys} == \
        {k: v for k, v in graded.items() if k not in graded_keys}


def test_oracle_reads_truth_only_through_a_grader() -> None:
    wl = load_workload("W1", scale=0.02, seed=0)
    grader = ChironGrader()
    d = simulate_datacache(wl, "chiron", advisor="oracle", grader=grader).to_dict()
    assert d["diagnosis_accuracy"] == 1.0 and d["no_advice"] == 0 and d["switches"] >= 2
    assert all(r["pattern"] == r["label"] for r in grader.log)
    # unbound (as on the real engine): the oracle has nothing to say
    sys = ChironSystem(1 << 30, advisor="oracle", params=PARAMS)
    drive(sys, 0.0, 5.0)
    assert sys.stats()["no_advice"] >= 1 and sys.stats()["switches"] == 0


def test_adaptive_has_no_import_cycle() -> None:
    """Every import inside ``aicache.adaptive`` (module level or in a function) follows
    one direction: the graph of its modules has no cycle."""
    root = Path(__file__).resolve().parents[2] / "src" / "aicache" / "adaptive"
    mods = {".".join(("aicache", "adaptive", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): p
            for p in root.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for m, p in mods.items():
        deps = edges.setdefault(m, set())
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for n in names:
                while n and n not in mods:
                    n = n.rpartition(".")[0]
                if n and n != m and not m.startswith(n + "."):  # a package's own __init__ is not a cycle
                    deps.add(n)
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges[m]):
            assert state.get(d) != 1, "import cycle: " + " -> ".join([*path, m, d])
            if d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])
    assert "aicache.datacache.policy.registry" not in edges["aicache.adaptive.controller"]


def test_judgement_is_small_and_typed() -> None:
    j = Judgement(1.23456, "u", "periodic retry", None, None, False)
    assert not hasattr(j, "__dict__")
    assert j.as_dict() == {"t": 1.235, "unit": "u", "trigger": "periodic retry", "pattern": None,
                           "confidence": None, "accepted": False, "adopted": None}
