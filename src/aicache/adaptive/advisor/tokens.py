"""Token counts of advisor exchanges that no server was asked about.

A live or replayed LLM run counts the endpoint's own ``usage``. Offline arms (the
statistical advisor standing in for an LLM, the oracle) are charged for the prompts an LLM
advisor would have been sent; this module counts them:

* :class:`ModelTokens` — the local model's own tokenizer (Gemma 3 270M's vocabulary, read
  by llama.cpp with ``vocab_only``, no weights loaded), applied to the prompt exactly as
  the local server renders it: one user turn holding the system prompt and the runtime
  prompt (:mod:`aicache.adaptive.advisor.local_llm`), Gemma's turn markers, BOS. Its prompt
  count equals the server's ``usage.prompt_tokens`` for the same request (tested against
  the running server).
* :class:`EstimatedTokens` — one token per word, number or punctuation mark: the fallback
  when the ``llm`` extra (llama-cpp-python and the model package) is not installed.

:func:`default_counter` picks the tokenizer when it can be loaded and the estimate
otherwise (``AICACHE_TOKENS=estimate`` forces the estimate); ``source`` says which, and
every result that carries such counts carries the source with it.
"""

from __future__ import annotations

import atexit
import os
import re
from abc import ABC, abstractmethod
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar

from aicache.adaptive.advisor.local_llm import model_path
from aicache.errors import BadInput

if TYPE_CHECKING:
    from llama_cpp import Llama

_TOKEN = re.compile(r"\w+|[^\w\s]")


def estimate_tokens(text: str) -> int:
    """Deterministic token estimate: words, numbers and punctuation marks (a BPE tokenizer
    gives the same order of magnitude on JSON-and-number prompts)."""
    return len(_TOKEN.findall(text))


class TokenCounter(ABC):
    """Counts the tokens of one advisor exchange."""

    #: what the counts come from, as results report it
    source: ClassVar[str] = ""

    @abstractmethod
    def prompt_tokens(self, system: str, runtime: str) -> int:
        """Tokens of the request carrying this system and runtime prompt."""

    @abstractmethod
    def text_tokens(self, text: str) -> int:
        """Tokens of a bare text (an answer)."""


class EstimatedTokens(TokenCounter):
    source: ClassVar[str] = "estimate"

    def prompt_tokens(self, system: str, runtime: str) -> int:
        return estimate_tokens(system) + estimate_tokens(runtime)

    def text_tokens(self, text: str) -> int:
        return estimate_tokens(text)


class ModelTokens(TokenCounter):
    """The local model's tokenizer; see the module docstring."""

    source: ClassVar[str] = "tokenizer:gemma3-270m"

    def __init__(self) -> None:
        import llama_cpp  # the llm extra: optional, hence imported only here

        self._vocab: Llama = llama_cpp.Llama(str(model_path()), vocab_only=True, verbose=False)
        # freed while the interpreter still runs: llama.cpp's finaliser fails once its
        # library handles are torn down at exit (an error message, never a wrong count)
        atexit.register(self._vocab.close)

    def render(self, system: str, runtime: str) -> str:
        """The prompt text the local server builds for this exchange (llama-cpp-python's
        ``gemma`` chat format over the single user turn the advisor sends it)."""
        from llama_cpp.llama_chat_format import format_gemma

        return str(format_gemma([{"role": "user", "content": system + "\n\n" + runtime}]).prompt)

    def prompt_tokens(self, system: str, runtime: str) -> int:
        # the server tokenizes its rendered prompt with BOS and special tokens parsed
        return len(self._vocab.tokenize(self.render(system, runtime).encode("utf-8"), add_bos=True, special=True))

    def text_tokens(self, text: str) -> int:
        return len(self._vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))


@lru_cache(maxsize=1)
def default_counter() -> TokenCounter:
    """The local model's tokenizer if it loads, else the estimate (see module docstring)."""
    if os.environ.get("AICACHE_TOKENS", "").strip().lower() == "estimate":
        return EstimatedTokens()
    try:
        return ModelTokens()
    except (ImportError, BadInput, OSError, ValueError, RuntimeError):  # no extra, or no readable model
        return EstimatedTokens()
