"""Token counts of offline advisor arms (aicache.adaptive.advisor.tokens) against the
server's own counts: every exchange of a committed real-LLM transcript carries the
llama.cpp server's ``usage.prompt_tokens`` for a prompt the replay rebuilds byte for byte;
the local model's tokenizer must give exactly that number. The estimate is the fallback
only, and rows say which counter counted."""

from __future__ import annotations

import json

import pytest

from aicache.adaptive.advisor.base import DiagnosisRequest, ReviewContext
from aicache.adaptive.advisor.replay import ReplayAdvisor
from aicache.adaptive.advisor.statistical import StatisticalAdvisor
from aicache.adaptive.advisor.tokens import EstimatedTokens, ModelTokens, default_counter, estimate_tokens
from aicache.adaptive.analyzer import analyze
from aicache.experiments.chiron import PromptCountingAdvisor, simulate_cell
from aicache.experiments.chiron_llm import SCENARIOS, run_scenario


@pytest.fixture(scope="module")
def tok() -> ModelTokens:
    return ModelTokens()


class _Prompts(ReplayAdvisor):
    """A replay that keeps the (system, runtime) prompts it was asked."""

    def __init__(self, path) -> None:  # type: ignore[no-untyped-def]
        super().__init__(path)
        self.asked: list[tuple[str, str]] = []

    def advise(self, request: DiagnosisRequest):  # type: ignore[no-untyped-def]
        self.asked.append(self.prompts(request))
        return super().advise(request)


@pytest.mark.parametrize("name", ["W1-s0.05-evidence", "W3-s0.05-nostats"])
def test_model_tokenizer_counts_what_the_server_counted(name: str, tok: ModelTokens) -> None:
    sc = SCENARIOS[name]
    replay = _Prompts(sc.transcript)
    run_scenario(sc, replay)
    entries = [json.loads(line) for line in sc.transcript.read_text(encoding="utf-8").splitlines()[1:]]
    assert len(replay.asked) == len(entries) >= 4
    est = EstimatedTokens()
    for (system, runtime), e in zip(replay.asked, entries):
        assert tok.prompt_tokens(system, runtime) == e["usage"]["prompt_tokens"]
    # the estimate it replaces is not that number (so the test can tell them apart)
    assert any(est.prompt_tokens(s, r) != e["usage"]["prompt_tokens"] for (s, r), e in zip(replay.asked, entries))


def test_default_counter_is_the_tokenizer_and_falls_back_to_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    import aicache.adaptive.advisor.tokens as tokens

    default_counter.cache_clear()
    try:
        assert default_counter().source == "tokenizer:gemma3-270m"  # the llm extra is part of the test extra
        default_counter.cache_clear()
        monkeypatch.setenv("AICACHE_TOKENS", "estimate")
        assert isinstance(default_counter(), EstimatedTokens)
        default_counter.cache_clear()
        monkeypatch.delenv("AICACHE_TOKENS")

        def no_extra() -> None:
            raise ImportError("llama_cpp")

        monkeypatch.setattr(tokens, "ModelTokens", no_extra)
        assert default_counter().source == "estimate"
    finally:
        default_counter.cache_clear()


def test_prompt_counting_charges_each_counter_and_rows_name_it(tok: ModelTokens) -> None:
    window = tuple(range(0, 400, 2))
    req = DiagnosisRequest("u", window, analyze(window), ReviewContext(recent_tail_length=100))
    counted = PromptCountingAdvisor(StatisticalAdvisor(), tokens=tok).advise(req)
    est = PromptCountingAdvisor(StatisticalAdvisor(), tokens=EstimatedTokens()).advise(req)
    assert counted is not None and est is not None and counted.pattern == est.pattern
    from aicache.adaptive.prompt import format_advice, prompts_for

    system, runtime = prompts_for(req, True)
    assert est.input_tokens == estimate_tokens(system) + estimate_tokens(runtime)
    assert counted.input_tokens == tok.prompt_tokens(system, runtime) != est.input_tokens
    assert counted.output_tokens == tok.text_tokens(format_advice(counted)) > 0
    row = simulate_cell({"workload": "W3", "scale": 0.02, "seed": 0, "system": "chiron", "advisor": "counting"})
    assert row["tokens_counted_by"] == default_counter().source and row["advisor_tokens"] > 0
    stat = simulate_cell({"workload": "W3", "scale": 0.02, "seed": 0, "system": "chiron", "advisor": "statistical"})
    assert stat["tokens_counted_by"] is None and stat["advisor_tokens"] == 0
