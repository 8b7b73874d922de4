"""Record an advisor's answers once, replay them exactly, offline and for free.

A transcript is JSONL. The first line is ``{"meta": {...}}`` (format version, the recorded
advisor, whether statistics were in the prompt, its expected latency, the model asked where
the advisor names one); every other line is
one exchange::

    {"key": sha256(system_prompt + runtime_prompt), "response": raw text or null,
     "usage": {"prompt_tokens": .., "completion_tokens": ..}, "latency_s": .., "error": null|kind}

Replay recomputes the key from the request, so it answers only the exact prompt that was
recorded. A key seen several times (the same window asked twice) answers with its recorded
responses in order — an LLM may have answered differently each time — and reuses the last
one when the replay asks more often than the recording did. Failures are recorded too
(``response`` null, ``error`` = kind), so a replay reproduces the recorded run's *no
advice* outcomes, token counts and latencies byte for byte; a missing key is no advice,
counted as ``missing key``.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest
from aicache.adaptive.advisor.openai_advisor import RawReply, advice_from_reply
from aicache.adaptive.prompt import DEFAULT_PROMPT, check_prompt, format_advice, prompt_key, prompts_for
from aicache.errors import BadInput

TRANSCRIPT_FORMAT = 1


def _prompts(inner: Advisor, request: DiagnosisRequest) -> tuple[str, str]:
    prompts = getattr(inner, "prompts", None)
    if callable(prompts):
        system, runtime = prompts(request)
        return str(system), str(runtime)
    return prompts_for(request, True)


class RecordingAdvisor(Advisor):
    """Wraps ``inner`` and writes every exchange to ``path`` (a fresh file by default).

    A text advisor (one with ``complete``/``account``, such as ``openai``) is recorded raw;
    any other advisor's advice is recorded as the compact JSON it stands for. The wrapper
    shares ``inner``'s counters, so it reports exactly what ``inner`` did.
    """

    name: ClassVar[str] = "record"

    def __init__(self, inner: Advisor, path: str | Path, append: bool = False) -> None:
        super().__init__()
        self.inner = inner
        self.counters = inner.counters
        self.expected_latency_s = inner.expected_latency_s
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not (append and self.path.exists() and self.path.stat().st_size > 0)
            self._fh = self.path.open("a" if append else "w", encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"record:{path}: cannot write the transcript ({exc.strerror}); choose a writable path") from None
        self._lock = threading.Lock()
        if fresh:
            meta = {
                "format": TRANSCRIPT_FORMAT,
                "advisor": inner.name,
                "include_stats": bool(getattr(inner, "include_stats", True)),
                "prompt": str(getattr(inner, "prompt", DEFAULT_PROMPT)),
                "expected_latency_s": inner.expected_latency_s,
            }
            model = getattr(inner, "model", None)
            if isinstance(model, str) and model:
                meta["model"] = model  # provenance only: replay never reads it
            self._write({"meta": meta})

    def _write(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._fh.write(json.dumps(obj, separators=(",", ":")) + "\n")
            self._fh.flush()

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        try:
            system, runtime = _prompts(self.inner, request)
        except Exception as exc:
            self.counters.calls += 1
            self.counters.error(type(exc).__name__)
            return None
        complete, account = getattr(self.inner, "complete", None), getattr(self.inner, "account", None)
        if callable(complete) and callable(account):
            reply: RawReply = complete(request)
            advice: Advice | None = account(reply)
            text, usage, latency, error = reply.text, reply.usage, reply.latency_s, reply.error
            if advice is None and error is None:
                error = advice_from_reply(reply)[1]
        else:
            before = dict(self.counters.errors)
            advice = self.inner.advise(request)
            text = format_advice(advice) if advice is not None else None
            usage = (
                {"prompt_tokens": advice.input_tokens, "completion_tokens": advice.output_tokens}
                if advice is not None
                else {}
            )
            latency = advice.latency_s if advice is not None else 0.0
            new = [k for k, v in self.counters.errors.items() if v != before.get(k, 0)]
            error = None if advice is not None else (new[0] if new else "no advice")
        self._write(
            {
                "key": prompt_key(system, runtime),
                "response": text,
                "usage": usage,
                "latency_s": latency,
                "error": error,
            }
        )
        return advice

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()
        self.inner.close()


class ReplayAdvisor(Advisor):
    """Answers from a transcript written by :class:`RecordingAdvisor`; no network."""

    name: ClassVar[str] = "replay"

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.meta: dict[str, Any] = {}
        self._entries: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._cursor: dict[str, int] = defaultdict(int)
        self.reused = 0
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BadInput(f"replay:{path}: cannot read the transcript ({exc.strerror}); record one with record:{path}") from None
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise BadInput(f"replay:{path}: line {no} is not JSON; re-record the transcript") from None
            if not isinstance(obj, dict):
                raise BadInput(f"replay:{path}: line {no} is not a JSON object; re-record the transcript")
            if "meta" in obj:
                self.meta = dict(obj["meta"])
                continue
            if not isinstance(obj.get("key"), str):
                raise BadInput(f"replay:{path}: line {no} has no key; re-record the transcript")
            self._entries[obj["key"]].append(obj)
        self.include_stats = bool(self.meta.get("include_stats", True))
        try:
            self.prompt = check_prompt(str(self.meta.get("prompt", DEFAULT_PROMPT)))
        except BadInput:
            raise BadInput(f"replay:{path}: the transcript names an unknown prompt; re-record it") from None
        self.expected_latency_s = float(self.meta.get("expected_latency_s", 0.0))

    def prompts(self, request: DiagnosisRequest) -> tuple[str, str]:
        return prompts_for(request, self.include_stats, self.prompt)

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        self.counters.calls += 1
        try:
            key = prompt_key(*self.prompts(request))
        except Exception as exc:
            self.counters.error(type(exc).__name__)
            return None
        entries = self._entries.get(key)
        if not entries:
            self.counters.error("missing key")
            return None
        i = self._cursor[key]
        if i >= len(entries):
            self.reused += 1
            i = len(entries) - 1
        self._cursor[key] = i + 1
        e = entries[i]
        usage = {k: int(v) for k, v in (e.get("usage") or {}).items()}
        reply = RawReply("", "", e.get("response"), usage, float(e.get("latency_s", 0.0)), e.get("error"))
        self.counters.input_tokens += usage.get("prompt_tokens", 0)
        self.counters.output_tokens += usage.get("completion_tokens", 0)
        self.counters.latency_s_total += reply.latency_s
        advice, err = advice_from_reply(reply)
        if advice is None:
            self.counters.error(err or "unknown")
        return advice
