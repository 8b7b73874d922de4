"""An LLM advisor over any OpenAI-compatible chat-completions endpoint.

Works with hosted APIs and with local servers (vLLM, SGLang, Ollama, llama.cpp) alike:
configuration comes from constructor arguments, else the environment —
``AICACHE_OPENAI_BASE_URL`` (or ``OPENAI_BASE_URL``), ``AICACHE_OPENAI_MODEL``,
``OPENAI_API_KEY`` (a local server usually needs none; a placeholder is sent then).

The call is bounded (``timeout``, default 10 s) and never retried inside the client: the
harness already retries on its own schedule, and a retry storm inside one diagnosis would
only make its snapshot staler. Every failure — connection, timeout, HTTP status, malformed
or out-of-range answer — is *no advice*, counted by kind in ``counters.errors``; tokens
reported by the endpoint are counted even when the answer is unusable (they were paid for).

Structured output (``structured``): ``json_schema`` is OpenAI's and vLLM's
``response_format``; ``json_object`` is the ``{"type": "json_object", "schema": ...}`` form
of llama.cpp's servers; ``grammar`` sends a GBNF grammar (llama.cpp) that admits exactly
``{"p":"<pattern>","c":<0..1, two decimals>}``, so a small model can neither ramble nor
run past ``max_tokens`` mid-number; ``off`` sends none. ``auto`` (the default) tries
``json_schema``, then ``json_object``, then none, moving on only when the server rejects
the ``response_format`` itself, and keeps the first form it accepts. The answer is parsed
the same way in every mode: structure narrows what a model can say, the parser still
decides what counts as advice.

``system_role=False`` sends the system prompt at the top of the user turn instead of as a
system message — what Gemma's own chat template does (it has no system role), for servers
whose Gemma chat format drops system messages.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest
from aicache.adaptive.advisor.tokens import EstimatedTokens, estimate_tokens
from aicache.adaptive.prompt import ADVICE_SCHEMA, DEFAULT_PROMPT, check_prompt, parse_advice, prompts_for
from aicache.errors import BadInput

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_TOKENS = 256
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "grammar", "off")
#: ``auto``'s order of attempts.
_AUTO_ORDER = ("json_schema", "json_object", "off")

#: GBNF of the advice: a known pattern and a confidence in [0, 1] with at most two decimals.
ADVICE_GRAMMAR = r"""root ::= "{\"p\":\"" pat "\",\"c\":" num "}"
pat ::= "sequential" | "random" | "skewed"
num ::= "0" ("." [0-9] [0-9]?)? | "1" (".0")?
"""


def _response_options(mode: str) -> dict[str, Any]:
    """Request options of one structured-output mode."""
    if mode == "json_schema":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "advice", "strict": True, "schema": ADVICE_SCHEMA}}}
    if mode == "json_object":
        return {"response_format": {"type": "json_object", "schema": ADVICE_SCHEMA}}
    if mode == "grammar":
        return {"extra_body": {"grammar": ADVICE_GRAMMAR}}
    return {}


def _rejects_format(exc: BaseException) -> bool:
    """The server refused the request because of its ``response_format`` (so another form
    may work), not for any other reason."""
    import openai

    return isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422, 500) \
        and "response_format" in str(exc)


@dataclass(frozen=True, slots=True)
class RawReply:
    """One exchange with a text advisor: what was asked and what came back (``text`` is
    None when the exchange failed; ``error`` then names the failure)."""

    system: str
    runtime: str
    text: str | None
    usage: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0
    error: str | None = None


def advice_from_reply(reply: RawReply) -> tuple[Advice | None, str | None]:
    """Parse a reply into advice carrying its usage and latency (or an error kind)."""
    if reply.error is not None:
        return None, reply.error
    advice, err = parse_advice(reply.text)
    if advice is None:
        return None, err
    return (
        Advice(
            advice.pattern,
            advice.confidence,
            advice.reason,
            input_tokens=int(reply.usage.get("prompt_tokens", 0)),
            output_tokens=int(reply.usage.get("completion_tokens", 0)),
            latency_s=reply.latency_s,
        ),
        None,
    )


def _error_kind(exc: BaseException) -> str:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIStatusError):
        return f"http {exc.status_code}"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.APIError):
        return "api error"
    return type(exc).__name__


class OpenAIAdvisor(Advisor):
    """Chat-completions advisor; see the module docstring. Never raises from ``advise``.

    ``temperature`` defaults to 0 (the same window should get the same diagnosis);
    ``temperature=None`` / ``max_tokens=None`` leave them to the server (some reasoning
    models reject both); ``extra_body`` passes server-specific options (e.g. vLLM's
    ``{"chat_template_kwargs": {"enable_thinking": False}}``)."""

    name: ClassVar[str] = "openai"
    #: A typical hosted-model diagnosis (the seed reports < 1.3 s); the simulator's default.
    expected_latency_s = 1.0

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        include_stats: bool = True,
        temperature: float | None = 0.0,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        extra_body: dict[str, Any] | None = None,
        prompt: str | None = None,
        structured: str | None = None,
        system_role: bool | None = None,
    ) -> None:
        super().__init__()
        self.model = model or os.environ.get("AICACHE_OPENAI_MODEL") or ""
        if not self.model:
            raise BadInput("openai advisor: no model; set AICACHE_OPENAI_MODEL or pass model=")
        if not (timeout > 0):
            raise BadInput(f"openai advisor timeout={timeout!r} must be a positive number of seconds")
        self.base_url = base_url or os.environ.get("AICACHE_OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        self.timeout = float(timeout)
        self.include_stats = include_stats
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = extra_body
        self.prompt = check_prompt(prompt or os.environ.get("AICACHE_OPENAI_PROMPT") or DEFAULT_PROMPT)
        mode = structured or os.environ.get("AICACHE_OPENAI_STRUCTURED") or "auto"
        if mode not in STRUCTURED_MODES:
            raise BadInput(f"openai advisor structured={mode!r} is not one of {', '.join(STRUCTURED_MODES)}")
        self.structured = mode
        #: the structured form in use (``auto`` settles on one at the first accepted call)
        self._modes: tuple[str, ...] = _AUTO_ORDER if mode == "auto" else (mode,)
        if system_role is None:
            system_role = os.environ.get("AICACHE_OPENAI_SYSTEM_ROLE", "1") not in ("0", "false", "no")
        self.system_role = system_role
        import openai

        self._client = openai.OpenAI(
            base_url=self.base_url,
            # local servers ignore the key; the client insists on one
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=self.timeout,
            max_retries=0,
        )

    def prompts(self, request: DiagnosisRequest) -> tuple[str, str]:
        """Statistics are sent unless ``include_stats`` is off or the request carries none."""
        return prompts_for(request, self.include_stats, self.prompt)

    def messages(self, system: str, runtime: str) -> list[ChatCompletionMessageParam]:
        """The chat messages of one exchange (see ``system_role``)."""
        if self.system_role:
            return [{"role": "system", "content": system}, {"role": "user", "content": runtime}]
        return [{"role": "user", "content": system + "\n\n" + runtime}]

    def _create(self, messages: list[ChatCompletionMessageParam], options: dict[str, Any]) -> Any:
        """One request, trying the structured forms still in ``_modes`` in order."""
        while True:
            mode = self._modes[0]
            opts = dict(options)
            extra = dict(self.extra_body or {})
            for k, v in _response_options(mode).items():
                if k == "extra_body":
                    extra.update(v)
                else:
                    opts[k] = v
            if extra:
                opts["extra_body"] = extra
            try:
                resp = self._client.chat.completions.create(model=self.model, messages=messages, **opts)
            except Exception as exc:
                if len(self._modes) > 1 and _rejects_format(exc):
                    self._modes = self._modes[1:]
                    continue
                raise
            self._modes = (mode,)
            return resp

    def complete(self, request: DiagnosisRequest) -> RawReply:
        """One chat-completions exchange; never raises (failures are in ``error``)."""
        system, runtime = self.prompts(request)
        t0 = time.perf_counter()
        try:
            options: dict[str, Any] = {}
            if self.temperature is not None:
                options["temperature"] = self.temperature
            if self.max_tokens is not None:
                options["max_tokens"] = self.max_tokens
            resp = self._create(self.messages(system, runtime), options)
        except Exception as exc:
            return RawReply(system, runtime, None, {}, time.perf_counter() - t0, _error_kind(exc))
        latency = time.perf_counter() - t0
        usage: dict[str, int] = {}
        try:  # a non-conforming server may answer anything, even a bare string
            if resp.usage is not None:
                usage = {
                    "prompt_tokens": int(resp.usage.prompt_tokens or 0),
                    "completion_tokens": int(resp.usage.completion_tokens or 0),
                }
            text = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError, ValueError):
            return RawReply(system, runtime, None, usage, latency, "bad response")
        if not usage:
            # a server that reports no usage still spent tokens: count them with the
            # estimate (its own tokenizer is unknown here) and say so in the usage record
            usage = {
                "prompt_tokens": EstimatedTokens().prompt_tokens(system, runtime),
                "completion_tokens": estimate_tokens(text or ""),
                "estimated": 1,
            }
        return RawReply(system, runtime, text, usage, latency, None if text else "empty response")

    def account(self, reply: RawReply) -> Advice | None:
        """Count tokens/latency/errors of a reply and turn it into advice."""
        self.counters.calls += 1
        self.counters.input_tokens += reply.usage.get("prompt_tokens", 0)
        self.counters.output_tokens += reply.usage.get("completion_tokens", 0)
        self.counters.latency_s_total += reply.latency_s
        advice, err = advice_from_reply(reply)
        if advice is None:
            self.counters.error(err or "unknown")
        return advice

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        try:
            reply = self.complete(request)
        except Exception as exc:  # prompt building on a malformed request, etc.
            self.counters.calls += 1
            self.counters.error(type(exc).__name__)
            return None
        return self.account(reply)

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:
            pass
