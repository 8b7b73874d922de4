"""Prefix-cache simulator: hand-computed LRU run, TTFT model, JSON contract, generators,
label inference and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aicache.cli.main import main
from aicache.errors import BadInput
from aicache.sim.prefix import PrefixSimParams, infer_labels, load_requests, simulate
from aicache.traces.base import KVRequest
from aicache.traces.gen_chat import (CHAT_GAP, TOOL_GAP, generate_arena, generate_chat,
                                     generate_mix, generate_tool, mix_weights)

CLI_KEYS = {"policy", "requests", "token_hit_ratio", "ttft_mean_s", "ttft_p90_s",
            "decisions_per_second"}


def _req(t: float, ids: list[int], n_tokens: int) -> KVRequest:
    return KVRequest(timestamp=t, input_length=n_tokens, output_length=0, hash_ids=ids,
                     block_tokens=4, session_id=f"s{t}", turn=1, session_type="single",
                     block_types=["user"] * len(ids))


def _tiny() -> list[KVRequest]:
    return [_req(0, [1, 2, 3], 12), _req(1, [1, 2, 4], 10), _req(2, [1, 2, 3], 12),
            _req(3, [5], 4), _req(4, [1, 2, 3], 12)]


def test_lru_hand_computed() -> None:
    # Capacity 12 tokens = three 4-token blocks; blocks are touched tail first.
    # R1 miss all (order 3,2,1). R2 hits 1,2 (8 tok); inserting 4 (2 tok) evicts 3.
    # R3 hits 1,2 (8); inserting 3 evicts 4. R4 misses; inserting 5 evicts 3.
    # R5 hits 1,2 (8) at lookup, then 3 evicts 2, 2 evicts 1, 1 evicts 5.
    res = simulate(_tiny(), "lru", 12, params=PrefixSimParams(prefill_tokens_per_s=1000.0,
                                                              request_overhead_s=0.0))
    assert res.hit_tokens == 24
    assert res.input_tokens == 50
    assert res.token_hit_ratio == pytest.approx(24 / 50)
    assert res.evictions == 6
    # No queueing here: TTFT = uncached tokens / 1000 tok/s: 12, 2, 4, 4, 4 tokens.
    assert res.ttft_mean_s == pytest.approx((12 + 2 + 4 + 4 + 4) / 5 / 1000)
    assert res.working_set_tokens == 4 * 4 + 2


def test_ttft_queueing() -> None:
    reqs = [_req(0, [1], 4), _req(0, [2], 4)]
    res = simulate(reqs, "lru", 100, params=PrefixSimParams(prefill_tokens_per_s=4.0,
                                                            request_overhead_s=0.5))
    # first: 0.5 + 1 s; second waits 1.5 s then takes 1.5 s
    assert res.ttft_mean_s == pytest.approx((1.5 + 3.0) / 2)
    assert res.ttft_p90_s == pytest.approx(1.5 + 0.9 * 1.5)


def test_cli_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sim", "prefix", "--workload", "arena", "--sessions", "60", "--policy", "lru",
               "--capacity-tokens", "10%", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert CLI_KEYS <= set(out)
    assert out["requests"] == 60 and out["labels"] == "given"
    assert 0.0 <= out["token_hit_ratio"] <= 1.0


@pytest.mark.parametrize("argv", [
    ["--workload", "chat", "--policy", "nope", "--capacity-tokens", "10%"],
    ["--workload", "chat", "--policy", "lru", "--capacity-tokens", "ten"],
    ["--workload", "agent", "--policy", "lru", "--capacity-tokens", "10%"],
    ["--trace", "/nonexistent/t.jsonl", "--policy", "lru", "--capacity-tokens", "100"],
    ["--workload", "chat", "--sessions", "0", "--policy", "lru", "--capacity-tokens", "10%"],
])
def test_cli_bad_input_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "prefix", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aicache: error:") and "\n" not in err


def test_bad_input_api() -> None:
    with pytest.raises(BadInput):
        simulate(_tiny(), "lru", "0")
    with pytest.raises(BadInput):
        simulate(list(reversed(_tiny())), "lru", 12)
    with pytest.raises(BadInput):
        load_requests(trace="x", workload="chat")
    with pytest.raises(BadInput):
        list(generate_chat(sessions=-1))


@pytest.mark.parametrize("gen", [generate_chat, generate_arena, generate_tool, generate_mix])
def test_generators_label_every_block(gen) -> None:  # type: ignore[no-untyped-def]
    reqs = list(gen(sessions=40, seed=3))
    assert reqs
    ts = [r.timestamp for r in reqs]
    assert ts == sorted(ts)
    for r in reqs:
        assert r.block_types is not None and len(r.block_types) == len(r.hash_ids)
        assert set(r.block_types) <= {"system", "user", "assistant", "reasoning", "tool", "decode"}
        assert r.session_type in {"single", "chat", "agentic"}
        assert len(r.hash_ids) == math.ceil(r.input_length / r.block_tokens)
        assert set(r.extra["output_block_types"]) <= {"reasoning", "decode"}
    # determinism: same seed, same stream; another seed, another stream
    again = list(gen(sessions=40, seed=3))
    assert [(r.timestamp, r.hash_ids) for r in again] == [(r.timestamp, r.hash_ids) for r in reqs]
    other = list(gen(sessions=40, seed=4))
    assert [r.hash_ids for r in other] != [r.hash_ids for r in reqs]


def _log_gaps(reqs: list[KVRequest]) -> np.ndarray:
    last: dict[str, float] = {}
    gaps = []
    for r in reqs:
        if r.session_id in last:
            gaps.append(r.timestamp - last[r.session_id])
        last[str(r.session_id)] = r.timestamp
    return np.log(np.array(gaps))


@pytest.mark.parametrize("gen,model", [(generate_chat, CHAT_GAP), (generate_tool, TOOL_GAP)])
def test_generator_gaps_are_lognormal_with_stated_parameters(gen, model) -> None:  # type: ignore[no-untyped-def]
    x = _log_gaps(list(gen(sessions=350, seed=11)))
    assert len(x) > 500
    assert x.mean() == pytest.approx(model.mu, abs=0.1)
    assert x.std() == pytest.approx(model.sigma, rel=0.08)
    # log-normal, not exponential: the log gaps are symmetric (skew ~ 0)
    skew = float(((x - x.mean()) ** 3).mean() / x.std() ** 3)
    assert abs(skew) < 0.3
    assert CHAT_GAP.mu - TOOL_GAP.mu > 1.0  # chat and tool gaps differ


def test_mix_composition_shifts() -> None:
    reqs = list(generate_mix(sessions=600, seed=5))
    apps: dict[str, str] = {}
    for r in reqs:
        apps.setdefault(str(r.session_id), str(r.extra["app"]))
    order = sorted(apps, key=lambda s: int(s.split("-")[1]))
    third = len(order) // 3
    first = [apps[s] for s in order[:third]]
    last = [apps[s] for s in order[-third:]]
    assert first.count("chat") > 2 * last.count("chat")
    assert last.count("tool") > 2 * first.count("tool")
    assert mix_weights(0.0) == pytest.approx((0.7, 0.1, 0.2))
    assert mix_weights(1.0) == pytest.approx((0.1, 0.7, 0.2))


def test_label_inference_for_unlabelled_traces() -> None:
    reqs = [KVRequest(timestamp=float(i), input_length=8, output_length=0, hash_ids=ids,
                      block_tokens=4, session_id=sid)
            for i, (ids, sid) in enumerate([([1, 2], "a"), ([1, 3], "b"), ([1, 3], "b")])]
    out, labels = infer_labels(reqs)
    assert labels == "inferred"
    assert out[0].block_types == ["user", "user"]
    assert out[1].block_types == ["system", "user"]  # block 1 was seen by session a
    assert out[2].block_types == ["system", "user"]  # block 3 only by b itself
    assert [r.turn for r in out] == [1, 1, 2]
    res = simulate(out, "saecache", 100, labels=labels)
    assert res.labels == "inferred"


def test_same_trace_in_kv_jsonl_gives_same_result(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from aicache.traces.io import write_trace

    path = str(tmp_path / "t.jsonl")
    write_trace(path, "kv-jsonl", generate_tool(sessions=15, seed=2))
    from_file, _ = load_requests(trace=path)
    generated, _ = load_requests(workload="tool", sessions=15, seed=2)
    a = simulate(from_file, "saecache", "15%").to_dict()
    b = simulate(generated, "saecache", "15%").to_dict()
    for k in ("wall_seconds", "decisions_per_second", "cpu_seconds"):
        a.pop(k), b.pop(k)
    assert a == b


def test_inconsistent_block_counts_never_hit_more_than_the_prompt() -> None:
    # 3 blocks of 512 tokens named, but the prompt has only 600 tokens
    reqs = [KVRequest(timestamp=float(t), input_length=600, output_length=0, hash_ids=[1, 2, 3],
                      block_tokens=512) for t in range(3)]
    reqs, labels = infer_labels(reqs)
    res = simulate(reqs, "lru", 10_000, labels=labels)
    assert res.hit_tokens == 2 * 600
    assert res.token_hit_ratio <= 1.0 and res.ttft_mean_s > 0


@pytest.mark.parametrize("name", ["saecache", "saecache-seed", "saecache-priority", "saecache-duel", "saecache-reuse", "lru", "lfu", "lpc", "s3fifo", "sieve", "belady"])
def test_every_prefix_policy_keeps_the_cache_contract(name: str) -> None:
    """Every registered policy, on a shifting mix: capacity never exceeded and the policy's
    resident set equals the cache's (both asserted inside ``simulate``), hits never exceed
    the prompt, and the same seed gives the same numbers."""
    from aicache.kv.prefix_policies import PREFIX_POLICIES

    assert name in PREFIX_POLICIES
    reqs, labels = load_requests(workload="mix", sessions=40, seed=6)
    a = simulate(reqs, name, "8%", labels=labels).to_dict()
    b = simulate(reqs, name, "8%", labels=labels).to_dict()
    assert a["evictions"] > 0
    assert 0.0 <= a["token_hit_ratio"] <= 1.0
    for r in (a, b):
        r.pop("wall_seconds"), r.pop("decisions_per_second"), r.pop("cpu_seconds")
    assert a == b


def test_belady_beats_lru_on_generated_chat() -> None:
    reqs, labels = load_requests(workload="chat", sessions=120, seed=4)
    bel = simulate(reqs, "belady", "10%", labels=labels)
    lru = simulate(reqs, "lru", "10%", labels=labels)
    assert bel.token_hit_ratio > lru.token_hit_ratio


def test_default_saecache_is_the_reuse_variant_and_the_seed_is_one_flag_away() -> None:
    """``saecache`` names the reuse-probability policy (its old name ``saecache-reuse`` gives
    the same replay); the seed's formula and the engineered seed priority keep their own."""
    from aicache.kv.prefix_policies import make_prefix_policy

    kinds = {n: type(make_prefix_policy(n, 1000)).__name__
             for n in ("saecache", "saecache-reuse", "saecache-seed", "saecache-priority")}
    assert kinds == {"saecache": "SAECacheReuse", "saecache-reuse": "SAECacheReuse",
                     "saecache-seed": "SAECacheSeed", "saecache-priority": "SAECache"}
    reqs, labels = load_requests(workload="chat", sessions=30, seed=3)
    a = simulate(reqs, "saecache", "10%", labels=labels)
    b = simulate(reqs, "saecache-reuse", "10%", labels=labels)
    assert a.policy == b.policy == "saecache"
    assert (a.hit_tokens, a.evictions) == (b.hit_tokens, b.evictions)
    assert simulate(reqs, "saecache-priority", "10%", labels=labels).policy == "saecache-priority"
