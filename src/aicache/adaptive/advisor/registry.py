"""Advisors by name, and the spec strings the CLI and experiment configs use.

Valid specs::

    statistical            the built-in classifier (default; offline, deterministic)
    openai                 OpenAI-compatible endpoint (env: AICACHE_OPENAI_BASE_URL, AICACHE_OPENAI_MODEL, OPENAI_API_KEY)
    oracle                 the generator's true phase label (experiments only)
    noisy:P                the oracle lying with probability P in [0, 1] (experiments only)
    record:FILE[:INNER]    call INNER (default: openai) and write a transcript to FILE
    replay:FILE            answer from a transcript recorded with record:FILE

Keyword arguments of :func:`make_advisor` go to the advisor's constructor (for ``record``,
to the inner advisor), e.g. ``make_advisor("openai", model="qwen3", timeout=5)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from aicache.adaptive.advisor.base import Advisor
from aicache.errors import BadInput
from aicache.registry import Registry

#: name -> advisor class (lazy). Parametrised forms (noisy:P, record:, replay:) are parsed
#: by :func:`make_advisor`.
ADVISORS: Registry[Callable[..., Advisor]] = Registry("advisor")
ADVISORS.register("statistical", "aicache.adaptive.advisor.statistical:StatisticalAdvisor", "built-in statistical classifier (default)")
ADVISORS.register("openai", "aicache.adaptive.advisor.openai_advisor:OpenAIAdvisor", "OpenAI-compatible chat-completions endpoint")
ADVISORS.register("oracle", "aicache.adaptive.advisor.oracle:OracleAdvisor", "true phase label (experiments only)")
ADVISORS.register("noisy", "aicache.adaptive.advisor.oracle:NoisyAdvisor", "oracle that lies with probability P: noisy:P")
ADVISORS.register("record", "aicache.adaptive.advisor.replay:RecordingAdvisor", "record:FILE[:INNER] writes a transcript")
ADVISORS.register("replay", "aicache.adaptive.advisor.replay:ReplayAdvisor", "replay:FILE answers from a transcript")

DEFAULT_ADVISOR = "statistical"
VALID_FORMS = "statistical, openai, oracle, noisy:P (0<=P<=1), record:FILE[:INNER], replay:FILE"


def _bad(spec: str, why: str) -> BadInput:
    return BadInput(f"advisor {spec!r}: {why}; valid forms: {VALID_FORMS}")


def make_advisor(spec: str, *, seed: int = 0, **kw: Any) -> Advisor:
    """Build an advisor from its spec string. ``seed`` seeds the randomness of the advisors
    that have any (``noisy``). A bad spec raises :class:`BadInput` listing the valid forms."""
    if not isinstance(spec, str) or not spec.strip():
        raise _bad(str(spec), "empty advisor name")
    spec = spec.strip()
    name, sep, arg = spec.partition(":")
    if name not in ADVISORS:
        raise _bad(spec, f"unknown advisor {name!r}")
    cls = ADVISORS.get(name)
    if name == "noisy":
        try:
            p = float(arg)
        except ValueError:
            raise _bad(spec, "noisy needs a lie probability, e.g. noisy:0.3") from None
        if not 0.0 <= p <= 1.0:
            raise _bad(spec, "the lie probability must be in [0, 1]")
        return cls(p, random.Random(seed), **kw)
    if name == "record":
        path, _, inner_spec = arg.partition(":")
        if not path:
            raise _bad(spec, "record needs a transcript path, e.g. record:run.jsonl")
        inner_spec = inner_spec or "openai"
        if inner_spec.split(":", 1)[0] in ("record", "replay"):
            raise _bad(spec, "record cannot wrap record/replay")
        return cls(make_advisor(inner_spec, seed=seed, **kw), path)
    if name == "replay":
        if not arg:
            raise _bad(spec, "replay needs a transcript path, e.g. replay:run.jsonl")
        return cls(arg, **kw)
    if sep:
        raise _bad(spec, f"advisor {name!r} takes no argument")
    return cls(**kw)
