"""The advisor's prompts and the parser of its answer.

The system prompt is fixed (cacheable by the endpoint); the runtime prompt has exactly the
seed's three parts — access sequence, structured statistics for the window and its recent
tail, review context — and contains block IDs and numbers only, never paths or names, so
nothing about the user's data leaves the machine but the shape of its access.

The answer must be one compact JSON object ``{"p": pattern, "c": confidence, "r": reason}``;
surrounding whitespace and a Markdown code fence are tolerated, nothing else: anything that
does not parse, names an unknown pattern, or has a confidence outside [0, 1] is *no advice*.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from aicache.adaptive.advisor.base import PATTERNS, Advice, DiagnosisRequest
from aicache.adaptive.analyzer import analyze, format_sequence, format_stats, tail_length

_TASK = """\
You diagnose the access pattern of one cache unit (a file or a dataset directory) of an AI \
data pipeline. Blocks are numbered so that files sorted by path occupy consecutive ID ranges; \
reading a file front to back therefore walks consecutive IDs. Name the pattern that the \
cache should prepare for now: exactly one of "sequential", "random", "skewed".

Patterns:
- sequential: the IDs advance in order, by +1 or by another steady step (also backwards, \
also several interleaved readers each advancing in order, also re-reads of the same block \
by small reads). Preprocessing, tokenization, evaluation passes and weight loading look like this.
- random: accesses scatter over the ID range with no steady step and no favoured IDs; \
within a shuffled epoch an ID rarely repeats, and when IDs repeat, they all repeat about \
equally often. Shuffled training epochs look like this.
- skewed: repeats pile up on a comparatively small set of IDs (hot items) while the rest \
are touched rarely. Hard-example mining, weighted sampling, recommendation and retrieval \
look like this.
"""

_INPUT_WITH_STATS = """\
Input, in three parts:
1. Access sequence: the unit's most recent block IDs, oldest first.
2. Structured statistics, precomputed exactly for the whole window ("window") and for its \
last accesses ("recent tail"): length; unique ratio (distinct IDs per access); access \
entropy (evenness of per-ID counts, 1 = all equal); gini (inequality of per-ID counts, 0 = \
all equal); top 5 access (share of accesses on the five most frequent IDs); reuse ratio \
(share of accesses that repeat an earlier ID); short reuse ratio (share of repeats within \
10 positions); mean reuse distance (positions between repeats; the length when none); \
adjacent steps (differences between consecutive IDs: zero ratio, pm1 ratio for +/-1, small \
jump ratio for 1..5 in size, large jump ratio for over 100, and the dominant steps with \
their counts).
3. Review context: why this review was requested ("periodic retry" or "chr anomaly", a \
sudden change of the cache hit ratio), the controller's previous state and committed \
pattern, whether the older part of the window may predate a phase change, and the tail length.

How to judge: weigh the sequence and the statistics together; no single number decides. A \
steady dominant step covering most moves points to sequential; reuse far above what \
accesses scattered over the whole ID range would produce, often with high gini or top-5 \
share, points to skewed; scattered large jumps with even counts point to random. When \
the window and the recent tail disagree, the workload may be changing phase: prefer what \
the tail shows if the older prefix may be stale, and lower your confidence when the \
evidence is mixed. The review context explains why you are asked again; it is not evidence \
for any pattern, and the previous pattern may be wrong or outdated.
"""

_INPUT_NO_STATS = """\
Input, in two parts:
1. Access sequence: the unit's most recent block IDs, oldest first.
2. Review context: why this review was requested ("periodic retry" or "chr anomaly", a \
sudden change of the cache hit ratio), the controller's previous state and committed \
pattern, whether the older part of the window may predate a phase change, and how many of \
the latest accesses form the recent tail.

How to judge: look at the order of the IDs, their steps and how often they repeat. When \
the latest accesses differ from the older ones, the workload may be changing phase: prefer \
the latest if the older prefix may be stale, and lower your confidence when the evidence is \
mixed. The review context explains why you are asked again; it is not evidence for any \
pattern, and the previous pattern may be wrong or outdated.
"""

_OUTPUT = """\
Answer with one compact JSON object and nothing else:
{"p": "sequential" | "random" | "skewed", "c": <confidence between 0 and 1>, "r": "<at most a few words, optional>"}
c is your own judgement of how clearly the evidence supports p (a number from 0 to 1, not a \
percentage); use a low c when unsure, since a low-confidence answer is not acted upon.
"""

SYSTEM_PROMPT = _TASK + "\n" + _INPUT_WITH_STATS + "\n" + _OUTPUT
SYSTEM_PROMPT_NO_STATS = _TASK + "\n" + _INPUT_NO_STATS + "\n" + _OUTPUT

#: The seed's system prompt, verbatim but for one stray space in '" skewed"' (an artefact of
#: the published text); one prompt for both statistics settings (docs/design/chiron.md,
#: "The review context").
SEED_SYSTEM_PROMPT = (
    'Classify an ordered block-ID sequence as exactly one pattern: "sequential", "random", or '
    '"skewed". Definitions: - sequential: ordered traversal or a stable stride; it need not use '
    "only \u00b11 steps. - random: broadly dispersed accesses without stable order or concentrated "
    "reuse. - skewed: repeated accesses concentrated on a comparatively small subset of IDs. Use "
    "access sequence and structured statistics jointly to assess the candidate patterns; no single "
    "statistic is a mandatory classification rule. Compare full-window and tail-window statistics "
    "to distinguish recent behavior from older accesses during a phase transition. Use review "
    "context to identify the reason for review, the previous diagnosis, and potentially outdated "
    "accesses. Treat this context as a reason to reconsider the diagnosis, not as evidence for a "
    "pattern, and do not assume the previous diagnosis remains correct. Normalize confidence to a "
    "score between 0 and 1 inclusive, not a percentage. The confidence score expresses a model "
    "judgment, not a calibrated probability. r is optional debugging output. Return only valid "
    'JSON: {"p":"sequential|random|skewed","c":<number from 0 to 1>,"r":"optional debug reason"}'
)

#: ``--prompt`` choices: ours (the default) and the seed's verbatim system prompt.
PROMPTS = ("aicache", "seed")
DEFAULT_PROMPT = "aicache"


def check_prompt(prompt: str) -> str:
    """``prompt`` if it names a system prompt, else :class:`BadInput` naming the choices."""
    if prompt not in PROMPTS:
        from aicache.errors import BadInput

        raise BadInput(f"prompt {prompt!r} is not one of {', '.join(PROMPTS)}; pick --prompt seed or --prompt aicache")
    return prompt


def system_prompt(include_stats: bool = True, prompt: str = DEFAULT_PROMPT) -> str:
    """The fixed system prompt; the "statistics off" ablation drops part 2 and its guide
    from ours (the seed's prompt is the same either way)."""
    if check_prompt(prompt) == "seed":
        return SEED_SYSTEM_PROMPT
    return SYSTEM_PROMPT if include_stats else SYSTEM_PROMPT_NO_STATS


def review_context_dict(request: DiagnosisRequest) -> dict[str, Any]:
    """Part 3 with the seed's field names (docs/design/chiron.md, "The review context")."""
    ctx = request.context
    t = ctx.recent_tail_length or tail_length(len(request.window))
    return {
        "review trigger": ctx.trigger,
        "previous control state": ctx.previous_state,
        "previous committed pattern": ctx.previous_pattern if ctx.previous_pattern in PATTERNS else None,
        "older prefix may be stale": bool(ctx.older_prefix_may_be_stale),
        "recent tail length": int(t),
    }


def build_runtime_prompt(request: DiagnosisRequest, include_stats: bool = True) -> str:
    """The runtime prompt: access sequence, structured statistics (unless ablated), review
    context — one labelled line each. Statistics missing from the request are computed."""
    parts = [f"Access sequence: {format_sequence(request.window)}"]
    if include_stats:
        stats: Mapping[str, Any] = request.stats or analyze(request.window)
        parts.append(f"Structured statistics: {format_stats(stats)}")
    parts.append(f"Review context: {json.dumps(review_context_dict(request), separators=(', ', ': '))}")
    return "\n".join(parts)


def prompts_for(request: DiagnosisRequest, include_stats: bool = True,
                prompt: str = DEFAULT_PROMPT) -> tuple[str, str]:
    """(system prompt, runtime prompt) as an LLM advisor sends them. A request with an empty
    ``stats`` mapping is the "statistics off" ablation: both prompts then omit statistics."""
    use = include_stats and bool(request.stats)
    return system_prompt(use, prompt), build_runtime_prompt(request, use)


def prompt_key(system: str, runtime: str) -> str:
    """Transcript key of one exchange: ``sha256(system_prompt + runtime_prompt)``."""
    return hashlib.sha256((system + runtime).encode("utf-8")).hexdigest()


#: The advice format as a JSON schema, for servers with structured output (the grammar then
#: admits nothing else). ``r`` is left out: it is optional debugging output in the seed, and
#: every token of it is generation time; ``c``'s range is checked by :func:`parse_advice`
#: because not every server's schema compiler enforces ``minimum``/``maximum``.
ADVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "p": {"type": "string", "enum": list(PATTERNS)},
        "c": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["p", "c"],
    "additionalProperties": False,
}


def _strip_fence(text: str) -> str:
    s = text.strip()
    if s.startswith("```"):
        first_nl = s.find("\n")
        if first_nl < 0 or not s.endswith("```"):
            return s
        lang = s[3:first_nl].strip().lower()
        if lang not in ("", "json"):
            return s
        s = s[first_nl + 1 : -3].strip()
    return s


def parse_advice(text: str | None) -> tuple[Advice | None, str | None]:
    """``(advice, None)`` or ``(None, error_kind)``. Accepted: exactly one JSON object with
    keys ``p`` (a known pattern), ``c`` (a number in [0, 1], not a bool) and optionally
    ``r`` (a string); whitespace or a ```json fence around it."""
    if text is None or not text.strip():
        return None, "empty response"
    try:
        obj = json.loads(_strip_fence(text))
    except ValueError:
        return None, "bad json"
    if not isinstance(obj, dict) or not {"p", "c"} <= obj.keys() or not obj.keys() <= {"p", "c", "r"}:
        return None, "bad schema"
    p, c, r = obj["p"], obj["c"], obj.get("r", "")
    if not isinstance(p, str) or p.strip().lower() not in PATTERNS:
        return None, "unknown pattern"
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or not 0.0 <= c <= 1.0:
        return None, "bad confidence"
    if r is None:
        r = ""
    if not isinstance(r, str):
        return None, "bad schema"
    return Advice(p.strip().lower(), float(c), r), None


def format_advice(advice: Advice) -> str:
    """The compact JSON an advisor would have answered (used to record non-LLM advisors)."""
    return json.dumps({"p": advice.pattern, "c": advice.confidence, "r": advice.reason}, separators=(",", ":"))
