"""The OpenAI-compatible advisor against a real HTTP server on loopback (no mocks of the
client): what it sends, how it counts tokens, that every failure is *no advice* returned
promptly, and that record → replay reproduces the advice exactly."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aicache.adaptive.advisor import Advice, DiagnosisRequest, ReviewContext, make_advisor
from aicache.adaptive.advisor.base import TRIGGER_CHR_ANOMALY, TRIGGER_PERIODIC
from aicache.adaptive.advisor.openai_advisor import OpenAIAdvisor
from aicache.adaptive.advisor.replay import RecordingAdvisor, ReplayAdvisor
from aicache.adaptive.advisor.tokens import EstimatedTokens, estimate_tokens
from aicache.adaptive.analyzer import analyze
from aicache.adaptive.prompt import SYSTEM_PROMPT, prompt_key, system_prompt

UNIT_PATH = "/mnt/datasets/imagenet-subset/train"


@dataclass
class Script:
    """What the fake endpoint answers next: (kind, payload) items, consumed in order; when
    empty it answers ``default``."""

    queue: deque[tuple[str, Any]] = field(default_factory=deque)
    default: tuple[str, Any] = ("content", '{"p":"random","c":0.9,"r":"scattered"}')
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    #: response_format types refused the way llama-cpp-python's server refuses json_schema
    rejects: set[str] = field(default_factory=set)


def _completion(content: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def make_handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            script.paths.append(self.path)
            script.bodies.append(body)
            script.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.path != "/v1/chat/completions":
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            if (body.get("response_format") or {}).get("type") in script.rejects:
                msg = "1 validation error: body.response_format.type: Input should be 'text' or 'json_object'"
                self._send(500, json.dumps({"error": {"message": msg}}).encode())
                return
            kind, payload = script.queue.popleft() if script.queue else script.default
            if kind == "content":
                prompt_len = sum(len(m["content"]) for m in body["messages"])
                self._send(200, json.dumps(_completion(payload, prompt_len // 4, len(payload) // 4)).encode())
            elif kind == "nousage":  # a conforming reply that omits the optional usage block
                reply = _completion(payload, 0, 0)
                del reply["usage"]
                self._send(200, json.dumps(reply).encode())
            elif kind == "status":
                self._send(payload, b'{"error": {"message": "boom", "type": "server_error"}}')
            elif kind == "sleep":
                time.sleep(payload)
                self._send(200, json.dumps(_completion('{"p":"random","c":0.9}', 1, 1)).encode())
            elif kind == "garbage":
                self._send(200, payload.encode(), "text/plain")
            else:  # pragma: no cover - test bug
                raise AssertionError(kind)

    return Handler


@pytest.fixture()
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(script))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def req(window: list[int], trigger: str = TRIGGER_PERIODIC) -> DiagnosisRequest:
    ctx = ReviewContext.for_review(trigger, "stable", "random", len(window))
    return DiagnosisRequest(UNIT_PATH, tuple(window), analyze(window), ctx)


def advisor(base_url: str, timeout: float = 5.0) -> OpenAIAdvisor:
    return OpenAIAdvisor(model="test-model", base_url=base_url, api_key="sk-test", timeout=timeout)


def test_request_carries_prompts_and_no_paths(server: tuple[str, Script]) -> None:
    url, script = server
    adv = advisor(url)
    window = list(range(0, 800, 2))
    advice = adv.advise(req(window))
    assert advice is not None and (advice.pattern, advice.confidence, advice.reason) == ("random", 0.9, "scattered")
    assert script.paths == ["/v1/chat/completions"]
    body = script.bodies[0]
    assert body["model"] == "test-model"
    assert body["temperature"] == 0 and body["max_tokens"] == 256
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == SYSTEM_PROMPT
    runtime = body["messages"][1]["content"]
    parts = dict(line.split(": ", 1) for line in runtime.split("\n"))
    assert list(parts) == ["Access sequence", "Structured statistics", "Review context"]
    assert json.loads(parts["Access sequence"]) == window
    assert json.loads(parts["Structured statistics"]) == analyze(window)
    assert json.loads(parts["Review context"])["previous committed pattern"] == "random"
    raw = json.dumps(body)
    assert "imagenet" not in raw and "/mnt" not in raw and "datasets" not in raw
    assert script.headers[0].get("authorization") == "Bearer sk-test"
    # usage recorded, per call and in the counters
    want_in = (len(SYSTEM_PROMPT) + len(runtime)) // 4
    assert (advice.input_tokens, advice.output_tokens) == (want_in, len('{"p":"random","c":0.9,"r":"scattered"}') // 4)
    assert (adv.counters.calls, adv.counters.input_tokens, adv.counters.output_tokens) == (
        1,
        advice.input_tokens,
        advice.output_tokens,
    )
    assert adv.counters.no_advice == 0 and advice.latency_s > 0


def test_missing_usage_is_estimated_not_zero(server: tuple[str, Script]) -> None:
    url, script = server
    answer = '{"p":"random","c":0.9,"r":"scattered"}'
    script.queue.append(("nousage", answer))
    adv = advisor(url)
    advice = adv.advise(req(list(range(0, 800, 2))))
    assert advice is not None and advice.pattern == "random"
    body = script.bodies[0]
    system, runtime = (m["content"] for m in body["messages"])
    assert advice.input_tokens == EstimatedTokens().prompt_tokens(system, runtime) > 0
    assert advice.output_tokens == estimate_tokens(answer) > 0
    assert (adv.counters.input_tokens, adv.counters.output_tokens) == (advice.input_tokens, advice.output_tokens)


def test_statistics_off_ablation(server: tuple[str, Script]) -> None:
    url, script = server
    adv = advisor(url)
    window = [9, 4, 7, 1, 8]
    ctx = ReviewContext.for_review(TRIGGER_PERIODIC, "default", None, len(window))
    assert adv.advise(DiagnosisRequest(UNIT_PATH, tuple(window), {}, ctx)) is not None
    system, runtime = (m["content"] for m in script.bodies[-1]["messages"])
    assert system == system_prompt(include_stats=False) != SYSTEM_PROMPT
    assert [line.split(": ", 1)[0] for line in runtime.split("\n")] == ["Access sequence", "Review context"]


def test_server_defaults_and_extra_body(server: tuple[str, Script]) -> None:
    url, script = server
    adv = OpenAIAdvisor(
        model="m", base_url=url, temperature=None, max_tokens=None,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert adv.advise(req([4, 4, 4, 2])) is not None
    body = script.bodies[-1]
    assert "temperature" not in body and "max_tokens" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


def test_environment_configuration(server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    url, script = server
    monkeypatch.setenv("AICACHE_OPENAI_BASE_URL", url)
    monkeypatch.setenv("AICACHE_OPENAI_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    adv = make_advisor("openai")
    assert adv.advise(req([5, 1, 9, 3])) is not None
    assert script.bodies[-1]["model"] == "env-model"
    assert script.headers[-1].get("authorization") == "Bearer sk-env"


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (("content", "I think it is random."), "bad json"),
        (("content", '{"p":"random","c":0.9'), "bad json"),
        (("content", '{"p":"zigzag","c":0.9}'), "unknown pattern"),
        (("content", '{"p":"random","c":1.5}'), "bad confidence"),
        (("content", '{"p":"random","c":-0.2}'), "bad confidence"),
        (("content", '{"p":"random","c":90}'), "bad confidence"),
        (("status", 500), "http 500"),
        (("status", 429), "http 429"),
        (("garbage", "<html>oops</html>"), "bad response"),
        (("content", ""), "empty response"),
    ],
)
def test_failures_are_no_advice(server: tuple[str, Script], reply: tuple[str, Any], kind: str) -> None:
    url, script = server
    script.queue.append(reply)
    adv = advisor(url)
    t0 = time.perf_counter()
    assert adv.advise(req([3, 1, 4, 1, 5, 9, 2, 6])) is None
    assert time.perf_counter() - t0 < 3.0  # a safety bound: every reply here is immediate
    assert len(script.bodies) == 1  # no retries inside the read path
    assert adv.counters.calls == 1 and adv.counters.no_advice == 1
    assert adv.counters.errors == {kind: 1}
    if reply[0] == "content" and reply[1]:  # the tokens of an unusable answer were still paid for
        assert adv.counters.input_tokens > 0
    # the next call works again
    assert adv.advise(req([3, 1, 4])) is not None


def test_timeout_returns_promptly(server: tuple[str, Script]) -> None:
    url, script = server
    script.queue.append(("sleep", 3.0))
    adv = advisor(url, timeout=0.3)
    t0 = time.perf_counter()
    assert adv.advise(req([1, 2, 3])) is None
    took = time.perf_counter() - t0
    assert 0.3 <= took < 3.0  # the 0.3 s timeout fired before the server's 3 s answer
    assert adv.counters.errors == {"timeout": 1}
    assert len(script.bodies) == 1


def test_connection_refused_is_no_advice() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    adv = advisor(f"http://127.0.0.1:{port}/v1", timeout=1.0)
    assert adv.advise(req([1, 2, 3])) is None
    assert adv.counters.errors == {"connection": 1}


def test_record_then_replay_is_identical(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    rng = np.random.default_rng(0)
    windows = [list(range(i, i + 300)) for i in range(0, 5)]
    windows += [[int(v) for v in rng.integers(0, 10**6, 300)] for _ in range(4)]
    windows.append(windows[0])  # the same prompt twice, answered differently
    requests = [req(w, TRIGGER_CHR_ANOMALY if i % 3 == 0 else TRIGGER_PERIODIC) for i, w in enumerate(windows)]
    script.queue.extend(
        [
            ("content", '{"p":"sequential","c":0.93,"r":"stride +1"}'),
            ("content", '```json\n{"p":"sequential","c":0.61}\n```'),
            ("status", 500),
            ("content", "not json"),
            ("content", '{"p":"sequential","c":0.88}'),
            ("content", '{"p":"random","c":0.97,"r":"scattered"}'),
            ("content", '{"p":"skewed","c":0.4}'),
            ("content", '{"p":"random","c":1.01}'),
            ("content", '{"p":"random","c":0.72}'),
            ("content", '{"p":"sequential","c":0.55,"r":"second answer"}'),
        ]
    )
    path = tmp_path / "transcript.jsonl"
    rec = make_advisor(f"record:{path}", model="test-model", base_url=url, api_key="k", timeout=5)
    assert isinstance(rec, RecordingAdvisor)
    recorded = [rec.advise(r) for r in requests]
    rec.close()
    assert sum(a is None for a in recorded) == 3  # 500, not json, c > 1
    assert recorded[0] != recorded[-1]  # same prompt, different answers
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["meta"]["advisor"] == "openai" and len(lines) == 1 + len(requests)
    first = lines[1]
    assert first["key"] == prompt_key(*OpenAIAdvisor.prompts(rec.inner, requests[0]))  # type: ignore[arg-type]
    assert set(first) == {"key", "response", "usage", "latency_s", "error"}
    assert lines[3]["error"] == "http 500" and lines[3]["response"] is None

    calls_before = len(script.bodies)
    rep = make_advisor(f"replay:{path}")
    assert isinstance(rep, ReplayAdvisor)
    replayed = [rep.advise(r) for r in requests]
    assert len(script.bodies) == calls_before  # replay never touches the network
    assert replayed == recorded
    assert json.dumps([_as_json(a) for a in replayed]) == json.dumps([_as_json(a) for a in recorded])
    for field_name in ("calls", "no_advice", "input_tokens", "output_tokens", "latency_s_total", "errors"):
        assert getattr(rep.counters, field_name) == getattr(rec.counters, field_name), field_name
    # a prompt that was never recorded is no advice, counted
    assert rep.advise(req([42, 43, 44])) is None
    assert rep.counters.errors["missing key"] == 1


def _as_json(a: Advice | None) -> Any:
    return None if a is None else [a.pattern, a.confidence, a.reason, a.input_tokens, a.output_tokens, a.latency_s]


def test_structured_auto_falls_back_only_on_a_refused_format(server: tuple[str, Script]) -> None:
    """auto: json_schema first; a server that refuses that form gets llama.cpp's
    json_object+schema in the same call, and that form from then on."""
    from aicache.adaptive.prompt import ADVICE_SCHEMA

    url, script = server
    script.rejects = {"json_schema"}
    adv = advisor(url)
    assert adv.advise(req([1, 2, 3, 4])) is not None
    formats = [b.get("response_format") for b in script.bodies]
    assert formats[0]["type"] == "json_schema" and formats[0]["json_schema"]["schema"] == ADVICE_SCHEMA
    assert formats[1] == {"type": "json_object", "schema": ADVICE_SCHEMA}
    assert adv.advise(req([5, 6, 7, 8])) is not None
    assert len(script.bodies) == 3 and script.bodies[2]["response_format"]["type"] == "json_object"
    assert adv.counters.calls == 2 and adv.counters.no_advice == 0


def test_structured_auto_ends_with_none_and_other_errors_are_not_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.rejects = {"json_schema", "json_object"}
    adv = advisor(url)
    assert adv.advise(req([1, 2, 3, 4])) is not None
    assert [("response_format" in b) for b in script.bodies] == [True, True, False]
    script.queue.append(("status", 500))  # a 500 not about the format: no advice, one request
    n = len(script.bodies)
    assert adv.advise(req([1, 2, 3, 4])) is None
    assert len(script.bodies) == n + 1 and adv.counters.errors == {"http 500": 1}


def test_grammar_mode_and_gemma_style_messages(server: tuple[str, Script]) -> None:
    from aicache.adaptive.advisor.openai_advisor import ADVICE_GRAMMAR

    url, script = server
    adv = OpenAIAdvisor(model="m", base_url=url, structured="grammar", system_role=False)
    r = req([3, 1, 4, 1, 5])
    assert adv.advise(r) is not None
    body = script.bodies[-1]
    assert body["grammar"] == ADVICE_GRAMMAR and "response_format" not in body
    system, runtime = adv.prompts(r)
    assert body["messages"] == [{"role": "user", "content": system + "\n\n" + runtime}]


def test_grammar_compiles_in_llama_cpp() -> None:
    """The GBNF is valid for llama.cpp's own grammar compiler (a bad one would make every
    request fail); what it admits is checked by the real-model test's parsed answers."""
    from llama_cpp import llama_grammar  # the llm extra, which the test extra includes

    from aicache.adaptive.advisor.openai_advisor import ADVICE_GRAMMAR

    llama_grammar.LlamaGrammar.from_string(ADVICE_GRAMMAR, verbose=False)


def test_seed_prompt_is_one_flag_away_and_replays(server: tuple[str, Script], tmp_path: Path) -> None:
    from aicache.adaptive.prompt import SEED_SYSTEM_PROMPT

    url, script = server
    assert "exactly one pattern" in SEED_SYSTEM_PROMPT and SEED_SYSTEM_PROMPT.endswith('"optional debug reason"}')
    path = tmp_path / "seed.jsonl"
    rec = make_advisor(f"record:{path}", model="m", base_url=url, prompt="seed")
    r = req(list(range(0, 400, 2)))
    a = rec.advise(r)
    rec.close()
    assert script.bodies[-1]["messages"][0]["content"] == SEED_SYSTEM_PROMPT
    replay = ReplayAdvisor(path)
    assert replay.prompt == "seed" and replay.advise(r) == a
    assert make_advisor("openai", model="m", base_url=url).prompt == "aicache"
    from aicache.errors import BadInput

    with pytest.raises(BadInput, match="--prompt seed"):
        make_advisor("openai", model="m", base_url=url, prompt="paper")
