"""The committed real-LLM transcripts of Chiron's figure experiments replay their scenarios
exactly (every prompt answered, nothing reused, the same result twice), and the
measured-latency runner releases each answer after the latency recorded for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest, ReviewContext
from aicache.adaptive.advisor.replay import ReplayAdvisor
from aicache.experiments.chiron_figs import macro_f1
from aicache.experiments.chiron_llm import SCENARIOS, MeasuredDelayRunner, run_scenario

RECORDED = [n for n, sc in SCENARIOS.items() if sc.transcript.exists()]


def _entries(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if "meta" not in r]


def test_the_default_scenarios_are_recorded() -> None:
    # W1-W3 with the default controller (and with the seed's gate) are what must-show 2 is judged on
    assert {"W1-s0.05", "W2-s0.1", "W3-s0.05", "W1-s0.05-evidence", "W2-s0.1-evidence",
            "W3-s0.05-evidence"} <= set(RECORDED)


@pytest.mark.parametrize("name", RECORDED)
def test_transcript_answers_every_prompt_of_its_scenario(name: str) -> None:
    sc = SCENARIOS[name]
    replay = ReplayAdvisor(sc.transcript)
    first = run_scenario(sc, replay)
    entries = _entries(sc.transcript)
    assert "missing key" not in replay.counters.errors and replay.reused == 0
    assert replay.counters.calls == len(entries) == first["advisor_calls"]
    # the server's own usage, summed over the answers that parsed and arrived before the end
    # (an answer may land after the workflow finished: never judged; with a fixed delay only
    # the last one can, if it was asked within the delay of the end)
    judged = entries[: len(first["log"])]
    assert sc.delay == "measured" or len(entries) - len(judged) <= 1
    assert first["advisor_input_tokens"] == sum(
        e["usage"].get("prompt_tokens", 0) for e in judged if e["error"] is None)
    tau = 0.0 if sc.params().get("gate") is False else 0.70
    accepted = [e for e in first["log"] if e["accepted"]]
    assert all(e["confidence"] >= tau for e in accepted)
    assert first["rejected_advice"] == sum(1 for e in first["log"] if e["pattern"] and not e["accepted"])
    if sc.params().get("gate_mode") == "seed" or tau == 0.0:
        # the seed's gate: rejected iff below tau, and nothing but accepted advice adopted
        assert first["rejected_advice"] == sum(1 for e in first["log"] if e["pattern"] and e["confidence"] < tau)
        assert all(e["adopted"] == (e["pattern"] if e["accepted"] else None) for e in first["log"])
        assert first["contradicted_advice"] == first["evidence_adopted"] == 0
    again = run_scenario(sc, ReplayAdvisor(sc.transcript))
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)
    if sc.delay == "measured":
        # each answer was released after the latency the model really took for it
        assert first["delays_s"] == [round(max(0.001, e["latency_s"]), 3) for e in entries]


class _Timed(Advisor):
    """Answers ``sequential`` and reports the next latency from a script."""

    name = "timed"

    def __init__(self, latencies: list[float]) -> None:
        super().__init__()
        self.latencies = list(latencies)

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        lat = self.latencies.pop(0)
        self.counters.calls += 1
        self.counters.latency_s_total += lat
        return Advice("sequential", 0.9, latency_s=lat)


def _req(unit: str) -> DiagnosisRequest:
    return DiagnosisRequest(unit, (1, 2, 3), {}, ReviewContext())


def test_measured_delay_runner_releases_in_order_of_measured_latency() -> None:
    r = MeasuredDelayRunner(_Timed([3.0, 1.0]))
    r.submit(_req("a"), 0.0)
    r.submit(_req("b"), 1.0)
    assert r.next_ready() == 2.0
    assert r.poll(1.9) == []
    assert [q.unit for q, _ in r.poll(2.0)] == ["b"]
    assert r.next_ready() == 3.0
    assert [q.unit for q, _ in r.poll(10.0)] == ["a"] and r.next_ready() == float("inf")


def test_macro_f1_against_hand_counts() -> None:
    # sequential: tp 3, fn 1 (said random), fp 0 -> 6/7; random: tp 2, fp 1, fn 2 (none) -> 4/7
    conf = {"sequential": {"sequential": 3, "random": 1}, "random": {"random": 2, "none": 2}}
    assert macro_f1(conf) == pytest.approx((6 / 7 + 4 / 7) / 2)


def test_transcripts_of_every_tag_in_every_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures find a scenario's transcripts in the committed folder and in each folder of
    $AICACHE_TRANSCRIPTS, one per tag; a tag recorded again in such a folder replaces the
    committed one; a model name becomes a file-safe tag."""
    import shutil

    from aicache.experiments.chiron_llm import model_tag, transcripts

    sc = SCENARIOS["W1-s0.05-evidence"]
    assert transcripts(sc) == [("gemma3-270m", sc.transcript)]
    shutil.copy(sc.transcript, tmp_path / f"Qwen-Qwen3-0.6B-{sc.name}.jsonl")
    shutil.copy(sc.transcript, tmp_path / f"gemma3-270m-{sc.name}.jsonl")
    shutil.copy(sc.transcript, tmp_path / "other-W1-s0.05-evidence-extra.jsonl")  # another scenario's name
    monkeypatch.setenv("AICACHE_TRANSCRIPTS", str(tmp_path))
    assert transcripts(sc) == [("Qwen-Qwen3-0.6B", tmp_path / f"Qwen-Qwen3-0.6B-{sc.name}.jsonl"),
                               ("gemma3-270m", tmp_path / f"gemma3-270m-{sc.name}.jsonl")]
    assert model_tag("Qwen/Qwen3-0.6B") == "Qwen-Qwen3-0.6B" and model_tag("gemma3-270m") == "gemma3-270m"
