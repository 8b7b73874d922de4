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
next to this module. ``python -m aicache.experiments.chiron_llm list`` shows them.

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
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aicache.adaptive.advisor.base import Advice, Advisor, DiagnosisRequest
from aicache.adaptive.controller import AdvisorRunner
from aicache.errors import BadInput

TRANSCRIPT_DIR = Path(__file__).parent / "transcripts"
MODEL_TAG = "gemma3-270m"


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
    Scenario("W1-s0.25-measured", "W1", 0.25, delay="measured", chiron=SEED_GATE,
             note="W1, the seed's gate, each answer released after the model's own measured latency"),
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
    system = make_system("chiron", capacity, 4 << 20, advisor=adv, seed=sc.seed, runner=runner, **sc.params())
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
    this only saves the prefill; the recorded usage and latency are kept, as on replay."""

    name = "openai"  # its exchanges are the model's own (the transcript meta names the advisor)

    def __init__(self, inner: Any, known: Mapping[str, Mapping[str, Any]]) -> None:
        super().__init__()
        self.inner, self.known = inner, known
        self.counters = inner.counters
        self.expected_latency_s = inner.expected_latency_s
        self.include_stats = inner.include_stats
        self.prompt = inner.prompt
        self.reused = 0

    def prompts(self, request: DiagnosisRequest) -> tuple[str, str]:
        return self.inner.prompts(request)  # type: ignore[no-any-return]

    def complete(self, request: DiagnosisRequest) -> Any:
        from aicache.adaptive.advisor.openai_advisor import RawReply
        from aicache.adaptive.prompt import prompt_key

        system, runtime = self.prompts(request)
        e = self.known.get(prompt_key(system, runtime))
        if e is None:
            return self.inner.complete(request)
        self.reused += 1
        usage = {k: int(v) for k, v in (e.get("usage") or {}).items()}
        return RawReply(system, runtime, e.get("response"), usage, float(e.get("latency_s", 0.0)), e.get("error"))

    def account(self, reply: Any) -> Advice | None:
        return self.inner.account(reply)  # type: ignore[no-any-return]

    def advise(self, request: DiagnosisRequest) -> Advice | None:
        return self.account(self.complete(request))

    def close(self) -> None:
        self.inner.close()


def known_exchanges(model_tag: str = MODEL_TAG, extra: Sequence[Path] = ()) -> dict[str, dict[str, Any]]:
    """prompt key -> the first recorded exchange of it, over every committed transcript of
    ``model_tag`` (and the transcripts ``extra``, e.g. an interrupted recording's); the key
    covers the prompt text, statistics included or not."""
    known: dict[str, dict[str, Any]] = {}
    for path in [*sorted(TRANSCRIPT_DIR.glob(f"{model_tag}-*.jsonl")), *extra]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                obj = json.loads(line)
                if "key" in obj and obj.get("error") is None:
                    known.setdefault(obj["key"], obj)
    return known


def record(names: list[str], threads: int = 2, timeout_s: float = 900.0,
           reuse: bool = True, reuse_from: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """Record each scenario against the local model (one server for all). ``reuse``: a
    prompt some committed transcript of the model already answered is answered from it."""
    from aicache.adaptive.advisor.local_llm import LocalLLMServer
    from aicache.adaptive.advisor.openai_advisor import OpenAIAdvisor
    from aicache.adaptive.advisor.replay import RecordingAdvisor

    scs = [scenario(n) for n in names]
    TRANSCRIPT_DIR.mkdir(parents=True, exist_ok=True)
    out = []
    known = known_exchanges(extra=reuse_from) if reuse else {}
    scratch = Path(tempfile.mkdtemp(prefix="aicache-record-"))
    with LocalLLMServer(threads=threads, log=scratch / "server.log") as server:
        env = server.env()
        for sc in scs:
            live = OpenAIAdvisor(model=env["AICACHE_OPENAI_MODEL"], base_url=env["AICACHE_OPENAI_BASE_URL"],
                                 api_key="local", timeout=timeout_s, max_tokens=24, structured="grammar",
                                 system_role=False, include_stats=sc.statistics)
            inner = _Reusing(live, known)
            tmp = scratch / sc.transcript.name  # moved into place only once complete
            rec = RecordingAdvisor(inner, tmp)
            d = run_scenario(sc, rec)
            rec.close()
            shutil.move(str(tmp), sc.transcript)
            summary = {"scenario": sc.name, "jct_seconds": d["jct_seconds"], "chr": d["chr"],
                       "advisor_calls": d["advisor_calls"], "rejected_advice": d["rejected_advice"],
                       "no_advice": d["no_advice"], "reused_answers": inner.reused}
            print(json.dumps(summary), flush=True)
            out.append(summary)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aicache.experiments.chiron_llm",
                                 description="Record / list the real-LLM transcripts of Chiron's experiments.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record scenarios against the local Gemma 3 270M server")
    r.add_argument("names", nargs="+", choices=list(SCENARIOS))
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--no-reuse", action="store_true",
                   help="ask the model every prompt, even those a committed transcript already answers")
    r.add_argument("--reuse-from", nargs="*", type=Path, default=[], metavar="JSONL",
                   help="further transcripts of the same model to answer known prompts from")
    sub.add_parser("list", help="the scenarios and whether a transcript is committed")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for sc in SCENARIOS.values():
            print(f"{sc.name:20s} {'recorded' if sc.transcript.exists() else 'missing ':8s} {sc.note}")
        return 0
    try:
        record(args.names, args.threads, reuse=not args.no_reuse, reuse_from=args.reuse_from)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
