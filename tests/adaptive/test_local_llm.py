"""The ``openai`` advisor against a real LLM: Gemma 3 270M served by llama-cpp-python on
loopback (aicache.adaptive.advisor.local_llm), through the simulator and the real engine.

Kept short for CI: 128-ID windows, a grammar-bounded answer of ~15 tokens, at most a few
advisor calls per run (each a prefill of ~1,500 tokens: seconds to tens of seconds on
2 busy cores). What is checked is what the harness promises whatever the model says:
every answer is parsed advice or counted no-advice, the confidence gate decides, no read
waits on the model, and a recorded run replays byte-identically.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest
from aicache.adaptive.advisor.openai_advisor import OpenAIAdvisor
from aicache.adaptive.advisor.replay import RecordingAdvisor, ReplayAdvisor
from aicache.adaptive.gate import ConfidenceGate
from aicache.adaptive.prompt import parse_advice

TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "gemma3-270m-W1.jsonl"
#: the scenario of the committed transcript (and of the simulator test)
WORKLOAD, SCALE, SEED = "W1", 0.02, 0
#: recorded under the seed's confidence gate (the checks below are that gate's rule)
CHIRON = {"window": 128, "min_window": 64, "gate_mode": "seed"}
MAX_CALLS = 3
TAU = 0.70


class FirstCalls(Advisor):
    """Asks ``inner`` for the first ``n`` diagnoses only and answers *no advice* after, so a
    run's LLM time stays bounded; wraps a replay the same way so both runs see one script."""

    name = "first-calls"

    def __init__(self, inner: Advisor, n: int) -> None:
        super().__init__()
        self.inner, self.n = inner, n
        self.counters = inner.counters
        self.expected_latency_s = inner.expected_latency_s
        self.asked = 0
        self.entered = threading.Event()
        self.returned = threading.Event()
        #: set by default; a test clears it to hold the answer back until it sets it
        self.hold = threading.Event()
        self.hold.set()

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        if self.asked >= self.n:
            return None
        self.asked += 1
        self.entered.set()
        try:
            advice = self.inner.advise(request)
            self.hold.wait(600)
            return advice
        finally:
            self.returned.set()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from aicache.adaptive.advisor.local_llm import LocalLLMServer

    log = tmp_path_factory.mktemp("llm") / "server.log"
    with LocalLLMServer(threads=2, log=log) as server:
        yield server.env()


def _advisor(env: dict[str, str]) -> OpenAIAdvisor:
    return OpenAIAdvisor(model=env["AICACHE_OPENAI_MODEL"], base_url=env["AICACHE_OPENAI_BASE_URL"],
                         api_key="local", timeout=600, max_tokens=24, structured="grammar",
                         system_role=False)


def _simulate(advisor: Advisor) -> dict[str, object]:
    from aicache.sim.datacache import load_workload, simulate_datacache

    wl = load_workload(WORKLOAD, scale=SCALE, seed=SEED)
    res = simulate_datacache(wl, "chiron", None, advisor=advisor, seed=SEED, system_params=dict(CHIRON))
    return res.to_dict()


def _entries(path: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [e for e in lines if "meta" not in e]


def _check_transcript_against_run(entries: list[dict[str, object]], d: dict[str, object]) -> None:
    """Each exchange is parsed advice or counted no-advice, and the gate took exactly the
    parsed answers with c >= tau."""
    parsed = [parse_advice(e["response"])[0] if e["error"] is None else None for e in entries]  # type: ignore[arg-type]
    advices = [a for a in parsed if a is not None]
    for e, a in zip(entries, parsed):
        assert a is not None or e["error"] is not None or parse_advice(e["response"])[1]  # type: ignore[arg-type]
    assert 1 <= len(entries) <= MAX_CALLS
    gate = ConfidenceGate(TAU)
    rejected = sum(not gate.check(a).accepted for a in advices)
    assert d["rejected_advice"] == rejected
    # no-advice: the failed/unparseable exchanges plus the diagnoses past the call budget
    assert d["no_advice"] == d["advisor_calls"] - len(advices)  # type: ignore[operator]
    assert d["advisor_input_tokens"] == sum(int(e["usage"].get("prompt_tokens", 0))  # type: ignore[union-attr]
                                            for e, a in zip(entries, parsed) if a is not None)


def test_real_llm_in_the_simulator_records_and_replays_byte_identically(llm: dict[str, str], tmp_path: Path) -> None:
    rec_path = tmp_path / "rec.jsonl"
    recorded = _simulate(FirstCalls(RecordingAdvisor(_advisor(llm), rec_path), MAX_CALLS))
    entries = _entries(rec_path)
    _check_transcript_against_run(entries, recorded)
    # the server's own token counts: a 1,000-token-class prompt, a ~15-token answer
    for e in entries:
        if e["error"] is None:
            assert int(e["usage"]["prompt_tokens"]) > 500  # type: ignore[index]
            assert 0 < int(e["usage"]["completion_tokens"]) <= 24  # type: ignore[index]
    # the simulator ran on virtual time: seconds of real LLM latency changed nothing, so the
    # offline replay (no server, no latency) gives the identical result, byte for byte
    replayed = _simulate(FirstCalls(ReplayAdvisor(rec_path), MAX_CALLS))
    assert json.dumps(replayed, sort_keys=True) == json.dumps(recorded, sort_keys=True)


def test_committed_transcript_replays_every_exchange() -> None:
    """The committed real-LLM transcript answers every diagnosis of its scenario (no missing
    key: today's prompts are byte-identical to the recorded ones), twice identically."""
    replay = ReplayAdvisor(TRANSCRIPT)
    first = _simulate(FirstCalls(replay, MAX_CALLS))
    assert "missing key" not in replay.counters.errors
    assert replay.counters.calls == len(replay) == len(_entries(TRANSCRIPT))
    _check_transcript_against_run(_entries(TRANSCRIPT), first)
    assert json.dumps(_simulate(FirstCalls(ReplayAdvisor(TRANSCRIPT), MAX_CALLS)), sort_keys=True) \
        == json.dumps(first, sort_keys=True)


def test_real_llm_never_slows_engine_reads(llm: dict[str, str], tmp_path: Path) -> None:
    """The real engine with the real model as Chiron's advisor: reads go on, with the right
    bytes, while the model is still computing its answer; the answer, when it comes, is
    advice the gate judged or counted no-advice."""
    from aicache.adaptive.observer import DecisionLog
    from aicache.datacache.policy.registry import make_system
    from aicache.datacache.engine import CacheEngine, EngineParams
    from aicache.testing import SlowFileSystem

    block = 64 * 1024
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(11)
    path = str(src / "shard-0")
    data = rng.randbytes(16 * block + 123)
    Path(path).write_bytes(data)
    advisor = FirstCalls(_advisor(llm), 1)
    advisor.hold.clear()
    system = make_system("chiron", 1 << 30, block, advisor=advisor, runner="thread",
                         first_review_s=0.01, early_retry_s=0.01, routine_interval_s=0.02,
                         reflection_interval_s=0.02, min_window=10, window=64, round_s=0.05,
                         gate_mode="seed")
    decisions = DecisionLog()
    system.add_observer(decisions)  # type: ignore[attr-defined]
    e = CacheEngine(SlowFileSystem(), str(tmp_path / "cache"), 1 << 30, policy=system,
                    params=EngineParams(block_size=block))
    try:
        assert e.read(path) == data
        e.wait_prefetches()
        deadline = time.monotonic() + 120
        i = 0
        while i < 200 or not advisor.entered.is_set():
            assert time.monotonic() < deadline, "the advisor was never consulted"
            off = (i * 7 % 16) * block
            assert e.read(path, off, block) == data[off:off + block]
            i += 1
        # every read above returned while the call had not returned (``hold`` keeps it from
        # returning until released): no read waited on the model
        assert not advisor.returned.is_set()
        advisor.hold.set()
        assert advisor.returned.wait(600), "the model never answered"
        deadline = time.monotonic() + 60
        while not decisions.judgements:  # the controller judges the answer on a later access
            assert time.monotonic() < deadline, "the answer was never judged"
            assert e.read(path, 0, block) == data[:block]
            time.sleep(0.01)
        judged = decisions.judgements[0]
        assert system.no_advice + system.rejected_advice <= 1
        c = advisor.counters
        assert c.calls == 1 and c.no_advice in (0, 1)
        if c.no_advice == 0:
            assert c.input_tokens > 100 and c.output_tokens > 0  # the server's usage
        # the gate, and only the gate, decided: adopted iff parsed with c >= tau
        assert judged.accepted == (judged.pattern is not None and judged.confidence is not None
                                   and judged.confidence >= TAU)
    finally:
        advisor.hold.set()
        e.close()


FULL_TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "gemma3-270m-W1-scale0.05.jsonl"


def test_full_window_transcript_replays_through_the_cli(tmp_path: Path) -> None:
    """A recorded real-LLM run of W1 at scale 0.05 with the default controller (1,000-ID
    windows, the seed's gate it was recorded under): ``aicache sim datacache --gate seed
    --advisor replay:FILE`` answers every diagnosis from it (no missing key) and prints the
    same JSON twice; the gate took exactly the recorded answers with c >= tau."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "aicache.cli.main", "sim", "datacache", "--workload", "W1",
           "--scale", "0.05", "--system", "chiron", "--gate", "seed", "--advisor", f"replay:{FULL_TRANSCRIPT}", "--json"]
    outs = [subprocess.run(cmd, capture_output=True, check=True).stdout for _ in range(2)]
    assert outs[0] == outs[1]
    d = json.loads(outs[0])
    replay = ReplayAdvisor(FULL_TRANSCRIPT)
    from aicache.sim.datacache import load_workload, simulate_datacache

    again = simulate_datacache(load_workload("W1", scale=0.05, seed=0), "chiron", None, advisor=replay, seed=0,
                               system_params={"gate_mode": "seed"}).to_dict()
    assert "missing key" not in replay.counters.errors and replay.reused == 0
    assert replay.counters.calls == len(replay) == d["advisor_calls"]
    entries = _entries(FULL_TRANSCRIPT)
    advices = [a for a in (parse_advice(e["response"])[0] for e in entries) if a is not None]  # type: ignore[arg-type]
    assert d["rejected_advice"] == sum(a.confidence < TAU for a in advices)
    assert d["no_advice"] == len(entries) - len(advices)
    assert again["jct_seconds"] == d["jct_seconds"]


def _record_cli(*args: str) -> "subprocess.CompletedProcess[str]":
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "aicache.experiments.chiron_llm", "record", *args],
                          capture_output=True, text=True, timeout=900)


def test_record_from_another_endpoint_joins_fig15_as_its_own_arm(llm: dict[str, str], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``chiron_llm record --base-url --model --tag --out-dir`` against an endpoint it did not
    start (this module's server), asking the model one prompt (``--max-calls 1``): the
    transcript replays its scenario exactly, and with ``AICACHE_TRANSCRIPTS`` pointing at the
    folder, Fig. 15 (``chiron-advisors``) has the tag as an arm of its own, goals included."""
    from aicache.adaptive.advisor.tokens import ModelTokens
    from aicache.experiments.chiron_figs import Advisors, run_arm
    from aicache.experiments.chiron_llm import NOT_ASKED, SCENARIOS, run_scenario

    url = llm["AICACHE_OPENAI_BASE_URL"]
    out = tmp_path / "other"
    p = _record_cli("W1-s0.05-evidence", "--base-url", url, "--model", llm["AICACHE_OPENAI_MODEL"],
                    "--tag", "other-endpoint", "--out-dir", str(out), "--structured", "grammar",
                    "--no-system-role", "--max-calls", "1", "--no-reuse")
    assert p.returncode == 0, p.stderr
    path = out / "other-endpoint-W1-s0.05-evidence.jsonl"
    meta = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["meta"]
    assert meta["model"] == llm["AICACHE_OPENAI_MODEL"] and meta["include_stats"] is True
    entries = _entries(path)
    asked = [e for e in entries if e["error"] != NOT_ASKED]
    assert len(asked) == 1 and len(entries) > 1  # one question to the model, the rest not asked
    assert asked[0]["error"] is None and parse_advice(asked[0]["response"])[0] is not None  # type: ignore[arg-type]
    assert int(asked[0]["usage"]["prompt_tokens"]) > 500  # type: ignore[index]

    sc = SCENARIOS["W1-s0.05-evidence"]
    first = run_scenario(sc, ReplayAdvisor(path))
    again = run_scenario(sc, ReplayAdvisor(path))
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert first["advisor_calls"] == len(entries)

    monkeypatch.setenv("AICACHE_TRANSCRIPTS", str(out))
    exp = Advisors()
    cells = [c for c in exp.cells(quick=True)
             if c["system"] != "chiron" or c["arm"] in ("counting", "other-endpoint")]
    assert [c["gate"] for c in cells if c["arm"] == "other-endpoint"] == ["aicache"]
    rows = [{**c, **run_arm(c)} for c in cells]
    section = exp.report(rows, tmp_path)
    (table,) = section.tables
    (arm,) = [r for r in table.rows if r["arm"] == "other-endpoint"]
    assert arm["workload"] == "W1" and arm["calls"] == len(entries)
    assert arm["JCT (s)"] == pytest.approx(first["jct_seconds"])
    assert any(g["goal"].startswith("W1 (other-endpoint)") for g in section.goals)
    # the server counted the prompt the way the local model's tokenizer counts it
    rec_row = [r for r in rows if r["arm"] == "other-endpoint"][0]
    assert rec_row["tokens_counted_by"] == "server usage"
    assert ModelTokens().prompt_tokens(*ReplayAdvisor(path).prompts(_first_request(sc))) \
        == int(asked[0]["usage"]["prompt_tokens"])  # type: ignore[index]


def _first_request(sc: object) -> DiagnosisRequest:
    """The first diagnosis request of a scenario (what its first prompt was built from)."""
    from aicache.experiments.chiron_llm import run_scenario

    class First(Advisor):
        name = "first"

        def __init__(self) -> None:
            super().__init__()
            self.requests: list[DiagnosisRequest] = []

        def advise(self, request: DiagnosisRequest) -> Advice | None:
            self.requests.append(request)
            return None

    a = First()
    run_scenario(sc, a)  # type: ignore[arg-type]
    return a.requests[0]


def test_record_bad_endpoint_input_is_one_line_exit_2(llm: dict[str, str], tmp_path: Path) -> None:
    """Every bad flag of ``record`` is one line naming it, exit 2, before anything is recorded
    (the served-model check asks the live endpoint's ``/models``)."""
    url, out = llm["AICACHE_OPENAI_BASE_URL"], str(tmp_path)
    cases = {
        "--model": ["--base-url", url, "--model", "no-such-model", "--out-dir", out],
        "--base-url": ["--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--out-dir", out],
        "--base-url ": ["--base-url", "127.0.0.1:8000", "--model", "m", "--out-dir", out],
        "--base-url needs --model": ["--base-url", url, "--out-dir", out],
        "--model ": ["--model", "m", "--out-dir", out],
        "--out-dir": ["--base-url", url, "--model", "gemma3-270m", "--out-dir", "/proc/nope"],
        "--max-calls": ["--base-url", url, "--model", "gemma3-270m", "--max-calls", "0", "--out-dir", out],
    }
    for flag, args in cases.items():
        p = _record_cli("W1-s0.05-evidence", *args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {flag.strip()}"), (args, p.stderr)
    assert not list(tmp_path.iterdir())  # nothing recorded
