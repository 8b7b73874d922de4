"""``--gate`` and ``--prompt``: the Chiron flags ``aicache sim datacache`` and the real
engine's commands (``mount``, ``record``, ``warmup``) share, so the seed's gate and prompt
are one flag away on the simulator and on a real mount alike."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec

#: the systems whose controller has a gate
CHIRON_SYSTEMS = ("chiron", "chiron-seed")


def add_gate_prompt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", default=None, choices=("aicache", "seed"),
                   help="system prompt of an LLM advisor: aicache (ours, default) or seed (the published design's, verbatim)")
    p.add_argument("--gate", default=None, choices=("aicache", "seed"),
                   help="chiron's gate: aicache (default: confidence + an evidence check of the advice against "
                        "the recorded accesses) or seed (the published design's confidence gate alone)")


def check_prompt_advisor(advisor: str | None, prompt: str | None) -> None:
    """``--prompt`` needs an advisor that sends one: openai, or record:FILE over it."""
    if prompt is None:
        return
    spec = advisor or "statistical"
    base = spec.split(":", 1)[0]
    record_inner = spec.split(":", 2)[2] if base == "record" and spec.count(":") >= 2 else "openai"
    if base not in ("openai", "record") or record_inner.split(":", 1)[0] != "openai":
        raise BadInput(f"--prompt applies to the openai advisor (or record:FILE over it), not {spec!r}; "
                       "a replay uses the prompt its transcript was recorded with")


def prompted_advisor(advisor: str | None, prompt: str | None, seed: int) -> AdvisorSpec | None:
    """The advisor spec as given, or, with ``--prompt``, the advisor built with that prompt."""
    if prompt is None:
        return advisor
    check_prompt_advisor(advisor, prompt)
    from aicache.adaptive.advisor.registry import make_advisor

    return make_advisor(advisor or "statistical", seed=seed, prompt=prompt)


def gate_params(gate: str | None, system: str, flag: str) -> dict[str, Any]:
    """Chiron's system parameters for ``--gate`` (empty without it); ``flag`` names the
    option that chose ``system`` in the error."""
    if gate is None:
        return {}
    if system not in CHIRON_SYSTEMS:
        raise BadInput(f"--gate applies to {flag} chiron, not {system!r}")
    return {"gate_mode": gate}
