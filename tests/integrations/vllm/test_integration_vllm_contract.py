"""Contract tests of aicache's vLLM tier and host policies under vLLM's own managers.

No engine: vLLM's ``TieringOffloadingManager`` over its ``CPUPrimaryTierOffloadingManager``
(a numpy region, as vLLM's unit tests build it) with ``SariaSSDTier`` as the secondary
tier, and vLLM's ``CPUOffloadingManager`` with our policies. References: the bytes each
chunk was stored with, vLLM's own ``fs`` tier on the same call sequences, vLLM's own
``LRUCachePolicy`` in lockstep.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy
from vllm.v1.kv_offload.tiering.base import TransferJob
from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager

from aicache.integrations.vllm.policy import SariaLRUHostPolicy, SessionAdaptiveHostPolicy
from aicache.integrations.vllm.tier import SariaSSDTier
from aicache.kvstore.ssd import HEADER_BYTES
from vllm_harness import ROW, Host, fake_spec, key, payload

HIT, MISS = LookupResult.HIT, LookupResult.MISS
SLOT = HEADER_BYTES + ROW  # one chunk's slot on disk
POLICY_MOD = "aicache.integrations.vllm.policy"


def saria(root, ssd_chunks: int = 64, admission: str = "E2", model: str = "tiny-llama", **kw):
    def make(view):
        return SariaSSDTier(fake_spec(model), view, "aicache", root_dir=str(root),
                            ssd_bytes=ssd_chunks * SLOT, admission=admission, **kw)
    return make


def fs_tier(root):
    def make(view):
        return FileSystemTierManager(fake_spec(), view, "fs", root_dir=str(root),
                                     n_read_threads=1, n_write_threads=1)
    return make


def keys(lo: int, hi: int) -> list:
    return [key(i) for i in range(lo, hi)]


def flush(h: Host, lo: int, n: int, data: dict) -> None:
    """Store ``n`` fresh chunks so older ones leave the DRAM tier."""
    ks = keys(lo, lo + n)
    data.update({k: payload(k) for k in ks})
    h.put(ks, data)


# --------------------------------------------------------------------------- the tier
@pytest.mark.parametrize("admission,offers", [("full-duplicate", 1), ("E2", 2)])
def test_bytes_round_trip_after_dram_eviction(tmp_path, admission, offers):
    h = Host(4, saria(tmp_path, admission=admission))
    data: dict = {}
    a = keys(0, 4)
    data.update({k: payload(k) for k in a})
    for i in range(offers):  # E2: the second offer (a recompute after eviction) is admitted
        h.put(a, data)
        flush(h, 1000 + 10 * i, 4, data)
        assert h.dram_keys(a) == [False] * 4
        if i < offers - 1:
            assert h.get(a)[0] == [MISS]  # declined at the first offer: not on the SSD
    answers, got = h.get(a)
    assert answers == [HIT] * 4
    assert all(np.array_equal(g, data[k]) for g, k in zip(got, a))
    m = h.tier.metrics()
    assert m["chunks_loaded"] == 4 and m["load_failures"] == 0
    h.close()


def test_e2_declines_chunks_seen_once(tmp_path):
    h = Host(8, saria(tmp_path, admission="E2"))
    data: dict = {}
    flush(h, 0, 8, data)
    m = h.tier.metrics()
    assert m["admissions_declined"] == 8 and m["chunks_written"] == 0
    assert m["ssd_bytes_written"] == 0
    h.close()


def test_lookup_before_a_first_store_is_not_an_eviction(tmp_path):
    """A request looks its chunks up before computing them: a chunk never offered has no
    counters, so its first store is a first offer (E2 declines it), as in the simulator."""
    h = Host(8, saria(tmp_path, admission="E2"))
    data: dict = {}
    assert h.get(keys(0, 4))[0] == [MISS]  # the first chunk's lookup misses
    flush(h, 0, 4, data)
    m = h.tier.metrics()
    assert m["admissions_declined"] == 4 and m["chunks_written"] == 0
    h.close()


def test_capacity_never_exceeded_and_hits_return_stored_bytes(tmp_path):
    rng = random.Random(3)
    cap = 12
    h = Host(6, saria(tmp_path, ssd_chunks=cap, admission="full-duplicate"))
    data: dict = {}
    served = 0
    for step in range(40):
        lo = rng.randrange(0, 30)
        ks = keys(lo, lo + rng.randrange(1, 5))
        answers, got = h.get(ks)
        for g, k in zip(got, ks):
            assert np.array_equal(g, data[k])  # never wrong bytes
        served += len(got)
        h.put(ks, {**data, **{k: data.setdefault(k, payload(k)) for k in ks}})
        tier: SariaSSDTier = h.tier  # type: ignore[assignment]
        ssd = tier._chunks.store.ssd
        assert ssd is not None and ssd.files_size() <= ssd.budget_bytes
        assert len(tier.held_keys()) <= ssd.n_slots <= cap
        tier._chunks.store.check()
    assert served > 0
    assert h.tier.metrics()["chunks_dropped"] > 0  # the SSD LRU evicted and said so
    h.close()


def test_dropped_keys_are_reported_as_removed_events(tmp_path):
    h = Host(2, saria(tmp_path, ssd_chunks=3, admission="full-duplicate"))
    data: dict = {}
    flush(h, 0, 2, data)
    flush(h, 10, 2, data)
    ev = list(h.tier.take_events())
    stored = [k for e in ev if not e.removed for k in e.keys]
    removed = [k for e in ev if e.removed for k in e.keys]
    assert set(stored) == set(keys(0, 2) + keys(10, 12))
    assert removed == [key(0)]  # the SSD LRU's victim, in vLLM's key form
    h.close()


def test_restart_serves_old_keys_and_never_a_foreign_payload(tmp_path):
    data: dict = {}
    h = Host(4, saria(tmp_path, admission="full-duplicate"))
    flush(h, 0, 4, data)
    h.close()
    h2 = Host(4, saria(tmp_path, admission="full-duplicate"))
    assert h2.tier.metrics()["recovered_chunks"] == 4
    answers, got = h2.get(keys(0, 4))
    assert answers == [HIT] * 4
    assert all(np.array_equal(g, data[k]) for g, k in zip(got, keys(0, 4)))
    h2.close()
    other = Host(4, saria(tmp_path, admission="full-duplicate", model="another-model"))
    assert other.tier.metrics()["recovered_chunks"] == 0
    assert other.get(keys(0, 4))[0] == [MISS]  # same hashes, another model: not ours
    other.close()


def test_drain_jobs_and_reset_cache(tmp_path):
    h = Host(4, saria(tmp_path, admission="full-duplicate"))
    data: dict = {}
    ks = keys(0, 4)
    data.update({k: payload(k) for k in ks})
    ctx = ReqContext(req_id="r")
    h.mgr.on_new_request(ctx)
    out = h.mgr.prepare_store(ks, ctx)
    for k, cid in zip(out.keys_to_store, out.store_spec.chunk_ids):
        h.rows[int(cid)] = data[k]
    h.mgr.complete_store(out.keys_to_store, ctx)  # cascades: writes in flight
    h.mgr.on_request_finished(ctx)
    h.mgr.reset_cache()  # drains the tier, then empties DRAM
    assert not h.tier.has_pending_work()
    assert h.dram_keys(ks) == [False] * 4
    answers, got = h.get(ks)
    assert answers == [HIT] * 4
    assert all(np.array_equal(g, data[k]) for g, k in zip(got, ks))
    h.close()


def test_in_flight_write_answers_retry(tmp_path):
    make = saria(tmp_path, admission="full-duplicate")
    h = Host(4, make)
    tier: SariaSSDTier = h.tier  # type: ignore[assignment]
    gate = __import__("threading").Event()
    tier._worker.submit(True, gate.wait)  # hold the worker: the next store stays in flight
    ks = keys(0, 1)
    ctx = ReqContext(req_id="w")
    h.mgr.on_new_request(ctx)
    out = h.mgr.prepare_store(ks, ctx)
    h.rows[int(out.store_spec.chunk_ids[0])] = payload(ks[0])
    h.mgr.complete_store(ks, ctx)
    assert tier.lookup(ks[0], ReqContext(req_id="x")) is LookupResult.RETRY
    gate.set()
    tier.drain_jobs()
    h.settle()  # the manager polls finished jobs (once a step): the write is now visible
    assert tier.lookup(ks[0], ReqContext(req_id="y")) is HIT
    h.mgr.on_request_finished(ctx)
    h.settle()
    h.close()


def test_failed_write_is_a_failed_job_and_a_miss(tmp_path):
    h = Host(4, saria(tmp_path, admission="full-duplicate"))
    tier: SariaSSDTier = h.tier  # type: ignore[assignment]
    ssd = tier._chunks.store.ssd

    def broken(*a, **k):
        raise OSError(5, "injected EIO")

    ssd._write = broken  # type: ignore[method-assign]
    results = []
    orig = tier.get_finished_jobs

    def spy():
        out = list(orig())
        results.extend(out)
        return out

    tier.get_finished_jobs = spy  # type: ignore[method-assign]
    data: dict = {}
    with pytest.warns(RuntimeWarning, match="SSD write failed"):
        flush(h, 0, 2, data)
    assert [r.success for r in results] == [False]
    assert tier.metrics()["write_failures"] == 2
    flush(h, 10, 4, data)  # evict from DRAM
    assert h.get(keys(0, 2))[0] == [MISS]
    h.close()


def test_corrupt_block_is_a_miss_never_wrong_bytes(tmp_path):
    h = Host(4, saria(tmp_path, admission="full-duplicate"))
    data: dict = {}
    flush(h, 0, 2, data)
    flush(h, 10, 4, data)
    tier: SariaSSDTier = h.tier  # type: ignore[assignment]
    for slab in tier._chunks.store.ssd.iter_slabs():  # flip a byte in every stored payload
        raw = bytearray(slab.read_bytes())
        for off in range(0, len(raw), SLOT):
            if raw[off:off + 8] == b"AICKVBLK":
                raw[off + HEADER_BYTES + 7] ^= 0xFF
        slab.write_bytes(bytes(raw))
    answers, got = h.get(keys(0, 2))
    assert got == []  # the first chunk failed its checksum: nothing served
    assert answers == [MISS]
    assert tier.metrics()["load_failures"] >= 1
    assert h.get(keys(0, 2))[0] == [MISS]  # forgotten: a miss from now on
    removed = [k for e in tier.take_events() if e.removed for k in e.keys]
    assert key(0) in removed
    h.close()


def test_partial_load_reports_each_chunk_and_never_wrong_bytes(tmp_path):
    """One load job of three chunks whose second fails its checksum: the result names the
    first and third as loaded (vLLM's ``successful_keys``), their rows hold the stored bytes,
    and the second is forgotten (a removed event, a miss from then on), never served."""
    h = Host(4, saria(tmp_path, admission="full-duplicate"))
    data: dict = {}
    flush(h, 0, 3, data)
    flush(h, 10, 4, data)  # chunks 0-2 leave DRAM: only the SSD tier holds them
    tier: SariaSSDTier = h.tier  # type: ignore[assignment]
    want = data[key(1)].tobytes()
    flipped = 0
    for slab in tier._chunks.store.ssd.iter_slabs():  # flip a byte of chunk 1's payload only
        raw = bytearray(slab.read_bytes())
        for off in range(0, len(raw), SLOT):
            body = off + HEADER_BYTES
            if raw[off:off + 8] == b"AICKVBLK" and raw[body:body + ROW] == want:
                raw[body + 7] ^= 0xFF
                flipped += 1
        slab.write_bytes(bytes(raw))
    assert flipped == 1
    ks = keys(0, 3)
    rows = tier._rows
    rows[:3] = 0
    job = TransferJob(job_id=10**6, keys=ks, chunk_ids=np.arange(3), is_promotion=True,
                      req_context=ReqContext(req_id="partial"))
    tier.submit_load(job)
    tier.drain_jobs()
    (res,) = [r for r in tier.get_finished_jobs() if r.job_id == job.job_id]
    assert not res.success and list(res.successful_keys or ()) == [key(0), key(2)]
    assert np.array_equal(rows[0], data[key(0)]) and np.array_equal(rows[2], data[key(2)])
    assert tier.metrics()["load_failures"] == 1 and tier.metrics()["chunks_loaded"] == 2
    removed = [k for e in tier.take_events() if e.removed for k in e.keys]
    assert removed == [key(1)]
    ctx = ReqContext(req_id="after")
    assert [tier.lookup(k, ctx) for k in ks] == [HIT, MISS, HIT]
    h.close()


def test_admission_by_name_oracle_key_file_and_registry(tmp_path, monkeypatch):
    """``admission`` names a registered policy: ``oracle`` writes exactly the chunks in its
    key file at their first offer; a policy added to ``SSD_ADMISSIONS`` is built from the
    tier's ``admission_args`` and sees each offer's counted evidence; an unknown name is a
    one-line error naming the choices."""
    from aicache.errors import BadInput
    from aicache.integrations import chunk_tier

    chosen = keys(0, 2)
    f = tmp_path / "keys.txt"
    f.write_text("".join(k[:32].hex() + "\n" for k in chosen))
    h = Host(4, saria(tmp_path / "o", admission="oracle", admission_args={"keys_file": str(f)}))
    data: dict = {}
    flush(h, 0, 4, data)  # one offer each: only the oracle's chunks are written
    flush(h, 100, 4, data)
    assert h.get(keys(0, 4))[0] == [HIT, HIT, MISS]  # lookups stop at the first miss
    assert h.tier.metrics()["chunks_written"] == 2 and h.tier.metrics()["admission"] == "oracle"
    h.close()

    seen: list[tuple[int, int]] = []
    offers: list = []
    refs: list[int] = []

    class SecondOffer:  # admits at a chunk's second offer, i.e. E_b ≥ 1 without prewrite
        label = "second-offer"

        def __init__(self, at: int) -> None:
            self.at = at

        def admit(self, sk, ev, offer) -> bool:
            seen.append((ev.E, ev.R))
            offers.append(offer)
            return ev.E >= self.at

        def referenced(self, sk, ev, now) -> None:
            refs.append(ev.R)

    from aicache.kv.admissions import SSD_ADMISSIONS, AdmissionEntry

    monkeypatch.setitem(SSD_ADMISSIONS._entries, "second-offer", AdmissionEntry(
        None, lambda prewrite, args: SecondOffer(int(str(args["at"])))))
    h = Host(4, saria(tmp_path / "c", admission="second-offer", admission_args={"at": 1}))
    a = keys(0, 4)
    flush(h, 0, 4, data)
    flush(h, 100, 4, data)
    assert h.get(a)[0] == [MISS]  # the first chunk's lookup: a known chunk's R_b
    h.put(a, data)  # the re-offer after eviction: E_b = 1, admitted
    flush(h, 200, 4, data)
    assert h.get(a)[0] == [HIT] * 4
    assert seen[:4] == [(0, 0)] * 4 and seen[8:12] == [(1, 1)] + [(1, 0)] * 3
    assert refs == [1, 2, 1, 1, 1]  # each known chunk a request asked for, with its R_b
    assert len({o.request for o in offers[8:12]}) == 1 and offers[8].request  # one request
    h.close()
    with pytest.raises(BadInput, match="oracle"):
        chunk_tier.make_admission("no-such-admission")


def test_hint_writes_a_continuing_conversation_at_its_first_offer(tmp_path):
    """``admission="hint"``: a request whose client sends ``{"aicache": {"continues":
    true}}`` has its chunks written at their first offer (served after DRAM eviction, with
    their bytes); a request without it (or with a non-boolean value) is left to E2, which
    declines a first offer; an admission naming itself as its rule is a one-line error."""
    from aicache.errors import BadInput
    from aicache.integrations import chunk_tier

    h = Host(4, saria(tmp_path, admission="hint"))
    data: dict = {}
    a, b_, c = keys(0, 4), keys(10, 14), keys(20, 24)
    data.update({k: payload(k) for k in a + b_ + c})
    assert h.put(a, data, params={"aicache": {"session": "s", "turn": 0, "continues": True}})
    assert h.put(b_, data, params={"aicache": {"continues": "yes"}})
    assert h.put(c, data)
    flush(h, 100, 4, data)
    assert h.dram_keys(a + b_ + c) == [False] * 12
    answers, got = h.get(a)
    assert answers == [HIT] * 4 and all(np.array_equal(g, data[k]) for g, k in zip(got, a))
    assert h.get(b_)[0] == [MISS] and h.get(c)[0] == [MISS]
    m = h.tier.metrics()
    assert m["chunks_written"] == 4 and m["admission"] == "hint+E2"
    h.close()
    with pytest.raises(BadInput, match="another admission"):
        chunk_tier.make_admission("hint", True, {"rule": "hint"})


@pytest.mark.parametrize("seed", [1, 2])
def test_same_hit_pattern_as_vllm_fs_tier(tmp_path, seed):
    """Full duplicate with room for everything is write-through, as vLLM's ``fs`` tier:
    the same calls give the same answers. Under E2 every hit of ours is a hit of ``fs``."""
    def replay(make):
        rng = random.Random(seed)
        h = Host(4, make)
        data: dict = {}
        pattern = []
        for _ in range(30):
            lo = rng.randrange(0, 16)
            ks = keys(lo, lo + rng.randrange(1, 4))
            answers, got = h.get(ks)
            pattern.append(tuple(a is HIT for a in answers))
            assert all(np.array_equal(g, data[k]) for g, k in zip(got, ks))
            for k in ks:
                data.setdefault(k, payload(k))
            h.put(ks, data)
        h.close()
        return pattern

    fs = replay(fs_tier(tmp_path / "fs"))
    ours = replay(saria(tmp_path / "fd", ssd_chunks=64, admission="full-duplicate"))
    assert ours == fs
    e2 = replay(saria(tmp_path / "e2", ssd_chunks=64, admission="E2"))
    for a, b in zip(e2, fs):
        assert sum(a) <= sum(b)
    assert sum(map(sum, e2)) > 0


# --------------------------------------------------------------------------- the policies
def _status(cid: int, ref: int = 0) -> ChunkStatus:
    s = ChunkStatus(cid)
    s.ref_cnt = ref
    return s


def test_lru_host_policy_evicts_what_vllm_lru_evicts():
    rng = random.Random(5)
    ours, ref = SariaLRUHostPolicy(16, clock=iter(range(10**6)).__next__), LRUCachePolicy(16)
    resident: list = []
    for step in range(400):
        op = rng.random()
        ctx = ReqContext(req_id=f"q{step}")
        if op < 0.4 and len(resident) < 16:
            k = make_offload_key(rng.randbytes(8), 0)
            for p in (ours, ref):
                p.insert(k, _status(step))
            resident.append(k)
        elif op < 0.7 and resident:
            ks = rng.sample(resident, min(len(resident), 3))
            ours.touch(ks, ctx)
            ref.touch(ks, ctx)
        elif resident:
            n = rng.randrange(1, 4)
            prot = set(rng.sample(resident, min(len(resident), 2)))
            a, b = ours.evict(n, prot), ref.evict(n, prot)
            assert (a is None) == (b is None)
            if a is not None:
                assert [k for k, _ in a] == [k for k, _ in b]
                for k, _ in a:
                    resident.remove(k)
        assert sorted(ours._chunks) == sorted(ref.chunks)


@pytest.mark.parametrize("cls", [SessionAdaptiveHostPolicy, SariaLRUHostPolicy])
def test_evict_is_atomic_and_skips_protected_and_pinned(cls):
    """A failed evict changes nothing: a twin that never saw it evicts the same chunks."""
    ks = [make_offload_key(bytes([i]) * 8, 0) for i in range(6)]
    ctx = ReqContext(req_id="s", kv_transfer_params={"aicache": {"session": "s1", "turn": 1}})
    twins = []
    for _ in range(2):
        p = cls(8, clock=iter(range(1, 10**6)).__next__)
        for i, k in enumerate(ks):
            p.insert(k, _status(i, ref=1 if i == 0 else 0))  # chunk 0 is being read
            p.touch([k], ctx)
        twins.append(p)
    p, twin = twins
    assert p.evict(5, {ks[1]}) is None  # only 4 evictable
    assert len(p) == 6
    twin._clock()  # the failed call read the clock once
    out, ref = p.evict(3, {ks[1]}), twin.evict(3, {ks[1]})
    assert out is not None and [k for k, _ in out] == [k for k, _ in ref]
    assert not {k for k, _ in out} & {ks[0], ks[1]}
    assert len(p) == 3 and all(p.get(k) is None for k, _ in out)


@pytest.mark.parametrize("policy", ["SessionAdaptiveHostPolicy", "SariaLRUHostPolicy"])
def test_policy_under_vllm_cpu_manager_keeps_capacity(policy):
    n = 8
    mgr = CPUOffloadingManager(num_chunks=n, cache_policy=policy, cache_policy_module_path=POLICY_MOD)
    rng = random.Random(9)
    ever = set()
    for step in range(60):
        sess = f"s{rng.randrange(3)}"
        ctx = ReqContext(req_id=f"r{step}", kv_transfer_params={
            "aicache": {"session": sess, "turn": step, "block_types": ["system", "user", "user"]}})
        mgr.on_new_request(ctx)
        base = rng.randrange(0, 20)
        ks = [make_offload_key(i.to_bytes(8, "big"), 0) for i in range(base, base + 3)]
        hits = []
        for k in ks:
            if mgr.lookup(k, ctx) is not HIT:
                break
            hits.append(k)
        if hits:
            mgr.prepare_load(hits, ctx)
            mgr.complete_load(hits, ctx)
        out = mgr.prepare_store(ks, ctx)
        if out is not None:
            mgr.complete_store(out.keys_to_store, ctx)
            ever.update(out.keys_to_store)
        mgr.on_request_finished(ctx)
        pol = mgr._policy
        assert len(pol) <= n
        held = [k for k in ever if mgr.lookup(k, ReqContext(req_id="p")) is HIT]
        assert sorted(held) == sorted(pol._chunks)
        # the request's kv_transfer_params reached every chunk it inserted
        for node, _ in pol._chunks.values():
            assert node.session in {"s0", "s1", "s2"}
            assert node.token_type == ["system", "user", "user"][node.offset]


def test_write_budget_caps_the_tier_and_reports_drive_life(tmp_path):
    """``ssd_write_budget`` on the tier: full duplicate capped at one chunk per window of the
    tier's clock writes one chunk however many are offered at once, and the metrics carry
    the budget and the projected life; a malformed budget is a one-line error."""
    from aicache.errors import BadInput

    rate = f"{ROW}B/s"  # one chunk a second, over a 1 s window
    h = Host(4, saria(tmp_path, admission="full-duplicate", ssd_write_budget=rate,
                      ssd_write_window=1.0, clock=lambda: 0.0))
    data: dict = {}
    flush(h, 0, 4, data)
    m = h.tier.metrics()
    assert m["chunks_written"] == 1 and m["admission"] == "full-duplicate@budget"
    assert m["ssd_write_budget_bps"] == ROW and m["admissions_declined"] == 3
    assert m["ssd_budget_refusals"] >= 3  # failed checks: a store and an eviction test per offer
    assert m["ssd_rated_endurance"] == "1 DWPD x 5 years" and "ssd_life_years" in m
    h.close()
    with pytest.raises(BadInput, match="ssd-write-budget"):
        saria(tmp_path / "b", ssd_write_budget="plenty")(np.zeros((4, ROW), np.uint8).data)
