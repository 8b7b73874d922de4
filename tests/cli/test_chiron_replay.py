"""Record a Chiron run against an (offline, loopback) OpenAI-compatible server, replay the
transcript, and get byte-identical ``--json`` output without the server."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aicache.cli.main import main


class FakeOpenAI(BaseHTTPRequestHandler):
    """Chat completions: a pattern and confidence derived from the prompt's hash (so answers
    differ between windows, as an LLM's would), with token usage."""

    calls = 0

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "".join(m["content"] for m in body["messages"])
        h = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
        pattern = ("sequential", "random", "skewed")[h % 3]
        conf = 0.5 + (h >> 8) % 50 / 100
        FakeOpenAI.calls += 1
        reply = {
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant",
                                     "content": json.dumps({"p": pattern, "c": conf})}}],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 12,
                      "total_tokens": len(prompt) // 4 + 12},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_openai(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    monkeypatch.setenv("AICACHE_OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setenv("AICACHE_OPENAI_MODEL", "fake-model")
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    FakeOpenAI.calls = 0
    yield server
    server.shutdown()
    server.server_close()


def test_record_then_replay_is_byte_identical(tmp_path, fake_openai, capsys):
    transcript = tmp_path / "w3.jsonl"
    base = ["sim", "datacache", "--workload", "W3", "--scale", "0.01", "--system", "chiron", "--json"]
    assert main([*base, "--advisor", f"record:{transcript}:openai"]) == 0
    recorded = capsys.readouterr().out
    calls = FakeOpenAI.calls
    d = json.loads(recorded)
    assert calls > 0 and d["advisor_calls"] == calls
    assert d["advisor_tokens"] > 0  # the server's usage was counted
    fake_openai.shutdown()  # replay must not need the server
    assert main([*base, "--advisor", f"replay:{transcript}"]) == 0
    replayed = capsys.readouterr().out
    assert replayed == recorded
    assert FakeOpenAI.calls == calls
