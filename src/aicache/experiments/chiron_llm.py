"""Real-LLM scenarios of Chiron's experiments: recorded once against the local model,
replayed offline, deterministically, in every later run (and in CI).

A *scenario* fixes everything that decides which prompts the advisor is sent — workload,
scale, generator seed, controller parameters, whether statistics are in the prompt, and how
late answers arrive — so a transcript recorded for it (``record:``) answers every diagnosis
of a replay of the same scenario (``replay:``): same prompts, same keys, same answers.
Changing any of those knobs changes the windows the controller snapshots, hence the prompts;
such a run needs its own recording, which is why every knob lives in :data:`SCENARIOS`.

Recording (minutes per scenario on 2 cores; the model's prefill dominates)::

    python -m aicache.experiments.chiron_llm record W3-s0.05 [more names] [--threads 2]

starts Gemma 3 270M behind llama-cpp-python's server on loopback
(:mod:`aicache.adaptive.advisor.local_llm`) and writes ``transcripts/gemma3-270m-NAME.jsonl``
next to this module. Any other OpenAI-compatible model records the same scenarios::

    python -m aicache.experiments.chiron_llm record W1-s0.05-evidence \
        --base-url http://HOST:PORT/v1 --model NAME [--tag TAG] [--out-dir DIR]

into ``DIR/TAG-NAME.jsonl`` (TAG defaults to the model name made file-safe); the figure
experiments find transcripts in the committed folder and in every folder of
``$AICACHE_TRANSCRIPTS``, and each tag is an arm of its own (Fig. 15).
``python -m aicache.experiments.chiron_llm list`` shows what is recorded.

Latency: the simulator runs on virtual time. Most scenarios release an answer a fixed
virtual delay after the snapshot (the advisor's expected latency, 1 s for ``openai``),
so the measured wall-clock latency of the real model is recorded but does not shape the
run. ``delay="measured"`` scenarios release each answer after the latency the model really
took for it (:class:`MeasuredDelayRunner`): the asynchrony the seed argues about, with the
real model's own timing, reproduced exactly on replay from the recorded latencies.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import shutil
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest
from aicache.adaptive.advisor.local_llm import MODEL_ALIAS
from aicache.adaptive.controller import AdvisorRunner
from aicache.errors import BadInput
from aicache.units import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from aicache.adaptive.advisor.openai_advisor import OpenAIAdvisor, RawReply

TRANSCRIPT_DIR = Path(__file__).parent / "transcripts"
#: the tag of the local model's transcripts (the name its server serves it under)
MODEL_TAG = MODEL_ALIAS


class MeasuredDelayRunner(AdvisorRunner):
    """Simulation runner whose delay is each call's own measured latency.

    The advisor answers at submission (as :class:`VirtualDelayRunner`); the answer becomes
    visible ``latency`` virtual seconds later, where ``latency`` is what the call added to
    ``advisor.counters.latency_s_total`` — the wall-clock time of a live call, the recorded
    time on replay (so a replay releases every answer exactly when the recording did).
    Answers are released in order of release time (a heap), ties in submission order.
    """

    def __init__(self, advisor: Advisor, floor_s: float = 0.001) -> None:
        self.advisor = advisor
        self.floor_s = floor_s
        self._pending: list[tuple[float, int, DiagnosisRequest, Advice | None]] = []
        self._seq = 0
        self.delays: list[float] = []

    def submit(self, request: DiagnosisRequest, now: float) -> None:
        before = self.advisor.counters.latency_s_total
        try:
            advice = self.advisor.advise(request)
        except Exception:  # noqa: BLE001 - an advisor must never break the read path
            advice = None
        delay = max(self.floor_s, self.advisor.counters.latency_s_total - before)
        self.delays.append(delay)
        heapq.heappush(self._pending, (now + delay, self._seq, request, advice))
        self._seq += 1

    def poll(self, now: float) -> list[tuple[DiagnosisRequest, Advice | None]]:
        out = []
        p = self._pending
        while p and p[0][0] <= now:
            _, _, req, adv = heapq.heappop(p)
            out.append((req, adv))
        return out

    def next_ready(self) -> float:
        return self._pending[0][0] if self._pending else float("inf")


@dataclass(frozen=True)
class Scenario:
    """Everything that decides the prompts of one recorded run (see module docstring)."""

    name: str
    workload: str
    scale: float
    seed: int = 0
    chiron: Mapping[str, Any] = field(default_factory=dict)
    statistics: bool = True
    delay: str = "fixed"  # "fixed" (the advisor's expected latency) | "measured"
    note: str = ""

    @property
    def transcript(self) -> Path:
        return TRANSCRIPT_DIR / f"{MODEL_TAG}-{self.name}.jsonl"

    def params(self) -> dict[str, Any]:
        p = dict(self.chiron)
        if not self.statistics:
            p["statistics"] = False
        return p


#: the seed's confidence gate alone (``--gate seed``), under which the first transcripts were
#: recorded; the ``-evidence`` scenarios run the default gate (confidence + evidence check)
SEED_GATE = {"gate_mode": "seed"}

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("W1-s0.05", "W1", 0.05, chiron=SEED_GATE, note="W1, the seed's gate (1,000-ID windows)"),
    Scenario("W2-s0.1", "W2", 0.1, chiron=SEED_GATE, note="W2, the seed's gate"),
    Scenario("W3-s0.05", "W3", 0.05, chiron=SEED_GATE, note="W3, the seed's gate"),
    Scenario("W1-s0.05-evidence", "W1", 0.05, note="W1 default controller (gate: confidence + evidence check)"),
    Scenario("W2-s0.1-evidence", "W2", 0.1, note="W2 default controller"),
    Scenario("W3-s0.05-evidence", "W3", 0.05, note="W3 default controller"),
    Scenario("W3-s0.05-nostats", "W3", 0.05, statistics=False, chiron=SEED_GATE,
             note="W3, the seed's gate, structured statistics left out of the prompt (Fig. 14a)"),
    Scenario("W3-s0.05-nostats-evidence", "W3", 0.05, statistics=False,
             note="W3 default controller, structured statistics left out of the prompt (Fig. 14a)"),
    Scenario("W1-s0.25-measured", "W1", 0.25, delay="measured", chiron=SEED_GATE,
             note="W1, the seed's gate, each answer released after the model's own measured latency"),
    Scenario("W1-s0.25-measured-evidence", "W1", 0.25, delay="measured",
             note="W1 default controller, each answer released after the model's own measured latency"),
    Scenario("W1-s0.05-nogate", "W1", 0.05, chiron={"gate": False},
             note="W1 with the confidence gate off (Fig. 9)"),
)}


def scenario(name: str) -> Scenario:
    sc = SCENARIOS.get(name)
    if sc is None:
        raise BadInput(f"unknown LLM scenario {name!r}; valid: {', '.join(SCENARIOS)}")
    return sc


def run_scenario(sc: Scenario, advisor: Advisor | str) -> dict[str, Any]:
    """Simulate ``sc`` with ``advisor`` (an instance or a spec); the result's dict plus the
    grader's answer log (``log``: judged answers with their phase labels) and, for measured delay, the delays used."""
    from aicache.adaptive.advisor.registry import make_advisor
    from aicache.datacache.policy.registry import make_system
    from aicache.sim.datacache import load_workload, simulate_datacache
    from aicache.sim.grading import ChironGrader

    adv = make_advisor(advisor, seed=sc.seed) if isinstance(advisor, str) else advisor
    wl = load_workload(sc.workload, scale=sc.scale, seed=sc.seed)
    runner: AdvisorRunner | None = MeasuredDelayRunner(adv) if sc.delay == "measured" else None
    capacity = wl.default_cache_bytes
    assert capacity is not None
    # the same construction as ``simulate_datacache(wl, "chiron", ...)``, kept in hand for its runner
    system = make_system("chiron", capacity, DEFAULT_BLOCK_SIZE, advisor=adv, seed=sc.seed, runner=runner, **sc.params())
    grader = ChironGrader()
    res = simulate_datacache(wl, system, capacity, seed=sc.seed, grader=grader)
    d = res.to_dict()
    d["log"] = list(grader.log)
    if isinstance(runner, MeasuredDelayRunner):
        d["delays_s"] = [round(x, 3) for x in runner.delays]
    return d


def replay_spec(sc: Scenario) -> str:
    return f"replay:{sc.transcript}"


class _Reusing(Advisor):
    """A live text advisor that answers a prompt already answered in ``known`` (recorded
    exchanges of the same model, by prompt key) from that record instead of asking again.
    At temperature 0 with a fixed server seed the model's answer to a prompt is fixed, so
    this only saves the prefill; the recorded usage and latency are kept, as on replay.
    ``max_live``: after that many questions to the model, a new prompt is not asked and is
    recorded as the no-advice kind :data:`NOT_ASKED` (a replay answers it the same way)."""

    name = "openai"  # its exchanges are the model's own (the transcript meta names the advisor)

    def __init__(self, inner: OpenAIAdvisor, known: Mapping[str, Mapping[str, Any]],
                 max_live: int | None = None) -> None:
        super().__init__()
        self.inner, self.known, self.max_live = inner, known, max_live
        self.counters = inner.counters
        self.expected_latency_s = inner.expected_latency_s
        self.include_stats = inner.include_stats
        self.prompt = inner.prompt
        self.model = inner.model
        self.reused = 0
        self.live = 0

    def prompts(self, request: DiagnosisRequest) -> tuple[str, str]:
        return self.inner.prompts(request)

    def complete(self, request: DiagnosisRequest) -> RawReply:
        from aicache.adaptive.advisor.openai_advisor import RawReply
        from aicache.adaptive.prompt import prompt_key

        system, runtime = self.prompts(request)
        e = self.known.get(prompt_key(system, runtime))
        if e is None:
            if self.max_live is not None and self.live >= self.max_live:
                return RawReply(system, runtime, None, {}, 0.0, NOT_ASKED)
            self.live += 1
            return self.inner.complete(request)
        self.reused += 1
        usage = {k: int(v) for k, v in (e.get("usage") or {}).items()}
        return RawReply(system, runtime, e.get("response"), usage, float(e.get("latency_s", 0.0)), e.get("error"))

    def account(self, reply: RawReply) -> Advice | None:
        return self.inner.account(reply)

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        return self.account(self.complete(request))

    def close(self) -> None:
        self.inner.close()


#: the recorded error of a prompt past ``--max-calls``: no advice, and never reused
NOT_ASKED = "not asked (call budget)"


def transcript_dirs() -> list[Path]:
    """Where the figure experiments look for transcripts: the committed folder, then every
    folder in ``$AICACHE_TRANSCRIPTS`` (``os.pathsep``-separated; a recording's ``--out-dir``)."""
    extra = [Path(p) for p in os.environ.get("AICACHE_TRANSCRIPTS", "").split(os.pathsep) if p.strip()]
    return [TRANSCRIPT_DIR, *extra]


def transcripts(sc: Scenario) -> list[tuple[str, Path]]:
    """(model tag, path) of every transcript recorded for ``sc``, one per tag, sorted by tag;
    a tag found in several folders is taken from the last one in :func:`transcript_dirs`
    (a fresh recording pointed at explicitly wins over the committed one)."""
    found: dict[str, Path] = {}
    suffix = f"-{sc.name}.jsonl"
    for d in transcript_dirs():
        for p in sorted(d.glob(f"*{suffix}")) if d.is_dir() else []:
            tag = p.name[: -len(suffix)]
            if tag:
                found[tag] = p
    return sorted(found.items())


def known_exchanges(model_tag: str = MODEL_TAG, extra: Sequence[Path] = (),
                    dirs: Sequence[Path] = (TRANSCRIPT_DIR,)) -> dict[str, dict[str, Any]]:
    """prompt key -> the first recorded exchange of it, over every transcript of
    ``model_tag`` in ``dirs`` (and the transcripts ``extra``, e.g. an interrupted
    recording's); the key covers the prompt text, statistics included or not."""
    known: dict[str, dict[str, Any]] = {}
    paths = [p for d in dirs if d.is_dir() for p in sorted(d.glob(f"{model_tag}-*.jsonl"))]
    for path in [*paths, *extra]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                obj = json.loads(line)
                if "key" in obj and obj.get("error") is None:
                    known.setdefault(obj["key"], obj)
    return known


_TAG = re.compile(r"[^A-Za-z0-9._]+")


def model_tag(model: str) -> str:
    """A model name as a transcript's file-name prefix (``Qwen/Qwen3-0.6B`` -> ``Qwen-Qwen3-0.6B``)."""
    return _TAG.sub("-", model).strip("-.")


@dataclass(frozen=True)
class RecordTarget:
    """Where a recording's answers come from and where its transcripts go.

    ``base_url`` None starts the local Gemma 3 270M server (its grammar, its system prompt in
    the user turn); otherwise ``model`` is asked at that OpenAI-compatible endpoint with
    ``structured`` output and, unless ``system_role`` is off, a system message. ``tag``
    prefixes the transcript names (``TAG-SCENARIO.jsonl``): the arm's name in Fig. 15."""

    base_url: str | None = None
    model: str = MODEL_ALIAS
    tag: str = MODEL_TAG
    out_dir: Path = TRANSCRIPT_DIR
    structured: str = "auto"
    system_role: bool = True
    max_calls: int | None = None
    threads: int = 2

    def transcript(self, sc: Scenario) -> Path:
        return self.out_dir / f"{self.tag}-{sc.name}.jsonl"


def check_target(base_url: str | None, model: str | None, tag: str | None, out_dir: Path | None,
                 structured: str, system_role: bool, max_calls: int | None, threads: int) -> RecordTarget:
    """The recording target of the command line, or :class:`BadInput` naming the flag and the
    fix (an unreachable endpoint, or one that does not serve ``model``, included)."""
    from aicache.adaptive.advisor.openai_advisor import STRUCTURED_MODES

    if threads < 1:
        raise BadInput(f"--threads {threads} must be at least 1")
    if max_calls is not None and max_calls < 1:
        raise BadInput(f"--max-calls {max_calls} must be at least 1 (leave it out to ask every prompt)")
    if structured not in STRUCTURED_MODES:
        raise BadInput(f"--structured {structured!r} is not one of {', '.join(STRUCTURED_MODES)}")
    if base_url is None:
        if model is not None:
            raise BadInput(f"--model {model!r} needs --base-url (the endpoint serving it); "
                           f"without it the local server serves {MODEL_ALIAS} only")
        model = MODEL_ALIAS
    else:
        u = urllib.parse.urlparse(base_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise BadInput(f"--base-url {base_url!r} is not an http(s) URL; pass the endpoint's base, "
                           "e.g. http://127.0.0.1:8000/v1")
        if not model:
            raise BadInput("--base-url needs --model (the name of the model the endpoint serves)")
        served = _served_models(base_url)
        if served and model not in served:
            raise BadInput(f"--model {model!r} is not served by {base_url} (it serves: {', '.join(served)}); "
                           "pass one of those")
    name = tag if tag is not None else (MODEL_TAG if base_url is None else model_tag(model))
    if not name or model_tag(name) != name:
        raise BadInput(f"--tag {name!r} must be letters, digits, '.', '_' and '-' (e.g. {model_tag(name) or 'my-model'})")
    out = Path(out_dir) if out_dir is not None else TRANSCRIPT_DIR
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out-dir {out}: cannot create it ({exc.strerror}); choose a writable folder") from None
    if not os.access(out, os.W_OK):
        raise BadInput(f"--out-dir {out} is not writable; choose a writable folder")
    return RecordTarget(base_url, model, name, out, structured, system_role, max_calls, threads)


def _served_models(base_url: str) -> list[str]:
    """The model ids ``GET base_url/models`` lists ([] when the endpoint lists none);
    :class:`BadInput` when nothing answers there."""
    req = urllib.request.Request(base_url.rstrip("/") + "/models")
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            body = json.loads(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"--base-url {base_url}: no OpenAI-compatible endpoint answers ({exc}); "
                       "start the server or fix the URL") from None
    data = body.get("data") if isinstance(body, dict) else None
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m] if isinstance(data, list) else []


def record(names: list[str], target: RecordTarget | None = None, timeout_s: float = 900.0,
           reuse: bool = True, reuse_from: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """Record each scenario against ``target`` (default: the local model, one server for all)
    into ``target.out_dir``. ``reuse``: a prompt some transcript of the same tag (committed,
    or in the output folder) already answered is answered from it."""
    from contextlib import nullcontext

    from aicache.adaptive.advisor.local_llm import LocalLLMServer
    from aicache.adaptive.advisor.openai_advisor import OpenAIAdvisor
    from aicache.adaptive.advisor.replay import RecordingAdvisor

    t = target or RecordTarget()
    scs = [scenario(n) for n in names]
    out = []
    known = known_exchanges(t.tag, reuse_from, dirs=(TRANSCRIPT_DIR, t.out_dir)) if reuse else {}
    scratch = Path(tempfile.mkdtemp(prefix="aicache-record-"))
    local = t.base_url is None
    server = LocalLLMServer(threads=t.threads, log=scratch / "server.log") if local else None
    with server if server is not None else nullcontext():
        base_url = server.base_url if server is not None else t.base_url
        for sc in scs:
            if local:  # the local Gemma server: its grammar, no system role (see local_llm)
                live = OpenAIAdvisor(model=MODEL_ALIAS, base_url=base_url, api_key="local", timeout=timeout_s,
                                     max_tokens=24, structured="grammar", system_role=False,
                                     include_stats=sc.statistics)
            else:
                live = OpenAIAdvisor(model=t.model, base_url=base_url, timeout=timeout_s, structured=t.structured,
                                     system_role=t.system_role, include_stats=sc.statistics)
            inner = _Reusing(live, known, t.max_calls)
            dest = t.transcript(sc)
            tmp = scratch / dest.name  # moved into place only once complete
            rec = RecordingAdvisor(inner, tmp)
            d = run_scenario(sc, rec)
            rec.close()
            shutil.move(str(tmp), dest)
            summary = {"scenario": sc.name, "transcript": str(dest), "jct_seconds": d["jct_seconds"], "chr": d["chr"],
                       "advisor_calls": d["advisor_calls"], "rejected_advice": d["rejected_advice"],
                       "no_advice": d["no_advice"], "reused_answers": inner.reused, "asked": inner.live,
                       "not_asked": live.counters.errors.get(NOT_ASKED, 0)}
            print(json.dumps(summary), flush=True)
            out.append(summary)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aicache.experiments.chiron_llm",
                                 description="Record / list the real-LLM transcripts of Chiron's experiments.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record scenarios against the local Gemma 3 270M server or any "
                                      "OpenAI-compatible endpoint")
    r.add_argument("names", nargs="+", metavar="SCENARIO", help=f"one of: {', '.join(SCENARIOS)}")
    r.add_argument("--base-url", default=None, metavar="URL",
                   help="an OpenAI-compatible endpoint to ask (default: start the local Gemma 3 270M server); "
                        "the key, if it needs one, comes from $OPENAI_API_KEY and is never recorded")
    r.add_argument("--model", default=None, help="the model to ask at --base-url")
    r.add_argument("--tag", default=None, help="transcript name prefix, the arm's name in Fig. 15 "
                                               "(default: gemma3-270m locally, else --model made file-safe)")
    r.add_argument("--out-dir", type=Path, default=None, metavar="DIR",
                   help="where the transcripts go (default: the committed folder, "
                        "src/aicache/experiments/transcripts); run the figures with AICACHE_TRANSCRIPTS=DIR")
    r.add_argument("--structured", default="auto", help="structured output at --base-url: auto (default), "
                                                        "json_schema, json_object, grammar, off")
    r.add_argument("--no-system-role", action="store_true",
                   help="send the system prompt at the top of the user turn (models without a system role)")
    r.add_argument("--max-calls", type=int, default=None, metavar="N",
                   help="ask the model at most N prompts per scenario; later ones are recorded as no advice")
    r.add_argument("--threads", type=int, default=2, help="CPU threads of the local server")
    r.add_argument("--no-reuse", action="store_true",
                   help="ask the model every prompt, even those a transcript of the same tag already answers")
    r.add_argument("--reuse-from", nargs="*", type=Path, default=[], metavar="JSONL",
                   help="further transcripts of the same model to answer known prompts from")
    sub.add_parser("list", help="the scenarios and the transcripts recorded for each")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for sc in SCENARIOS.values():
            tags = ", ".join(tag for tag, _ in transcripts(sc)) or "-"
            print(f"{sc.name:28s} {tags:24s} {sc.note}")
        return 0
    try:
        for n in args.names:
            scenario(n)
        for p in args.reuse_from:
            if not p.is_file():
                raise BadInput(f"--reuse-from {p}: no such transcript; pass a recorded .jsonl file")
        target = check_target(args.base_url, args.model, args.tag, args.out_dir, args.structured,
                              not args.no_system_role, args.max_calls, args.threads)
        record(args.names, target, reuse=not args.no_reuse, reuse_from=args.reuse_from)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if target.out_dir != TRANSCRIPT_DIR:
        print(f"transcripts in {target.out_dir}: AICACHE_TRANSCRIPTS={target.out_dir} aicache experiment run "
              "chiron-advisors adds them to Fig. 15", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
