"""The SSD model of the KV replay on hand-computed cases: the write queue (a block is served
from DRAM until its write completes), read/write sharing of one SSD, the uncoordinated
overlap and the coordinator's overhead, and striping over two SSDs (docs/design/saria.md,
Fig. 16; docs/results/ssd-model.md)."""

from __future__ import annotations

import pytest

from aicache.kv.models import ModelSpec
from aicache.kv.radix import Tier
from aicache.kv.admission import AdmissionRule
from aicache.kv.saria import KVIndex, KVIndexParams
from aicache.kv.transfer import (
    GB, IDEAL_SHARING, Bandwidths, SharingModel, TransferCoordinator, schedule,
)
from aicache.sim.kv import KVSimParams, simulate_kv
from aicache.traces.base import KVRequest

# 1 layer x 1 head x dim 1 x (K,V) x 1 byte = 2 bytes/token; 4-token blocks = 8 bytes
TINY = ModelSpec("tiny", 1, 1, 1, dtype_bytes=1, block_tokens=4)
NS = ("tiny", None)
T4 = [4, 4]


def deferred_index(dram_blocks: int, ssd_blocks: int, rule: AdmissionRule,
                   write_bps: float | None = None) -> KVIndex:
    return KVIndex(KVIndexParams(model=TINY, dram_bytes=dram_blocks * 8,
                                 ssd_bytes=ssd_blocks * 8, admission=rule,
                                 deferred_writes=True, prewrite_write_bps=write_bps))


# --------------------------------------------------------------------- write queue
def test_block_is_served_from_dram_until_its_write_completes() -> None:
    ix = deferred_index(2, 10, AdmissionRule(None, None, True))  # full duplicate
    m = ix.store(NS, [1, 2], 0.0, tokens=T4)
    n1, n2 = m.ssd_writes
    assert ix.writing == {n1: 8, n2: 8} and ix.ssd_used == 16 and ix.dram_used == 16
    assert ix.lookup(NS, [1, 2], 0.5).sources == [Tier.DRAM, Tier.DRAM]
    # 3, 4 push 1 and 2 out of DRAM while their writes run: they drain (room handed on,
    # copy kept as the write's source), and reads still come from DRAM
    m = ix.store(NS, [3, 4], 1.0, tokens=T4)
    assert m.dram_drops == [] and ix.draining == {n1, n2} and ix.dram_used == 16
    assert ix.lookup(NS, [1, 2], 1.5).sources == [Tier.DRAM, Tier.DRAM]
    done = ix.complete_write(n1, 2.0)
    assert done.dram_drops == [n1] and n1 not in ix.draining
    assert ix.lookup(NS, [1, 2], 2.5).sources == [Tier.SSD, Tier.DRAM]
    ix.complete_write(n2, 3.0)
    assert ix.lookup(NS, [1, 2], 3.5).sources == [Tier.SSD, Tier.SSD]
    assert ix.stats.ssd_writes_completed == 2 and ix.stats.ssd_write_bytes == 4 * 8


def test_dram_copy_dropped_before_the_write_completes_loses_the_block() -> None:
    ix = deferred_index(4, 10, AdmissionRule(None, None, True))
    (n1,) = ix.store(NS, [1], 0.0, tokens=[4]).ssd_writes
    m = ix.lose_copy(n1, Tier.DRAM)
    assert m.write_cancels == [n1] and m.dram_drops == [n1]
    assert ix.lookup(NS, [1], 1.0).hit_blocks == 0   # on neither tier
    assert ix.ssd_used == 0 and ix.dram_used == 0 and ix.stats.ssd_write_bytes == 0
    assert ix.stats.ssd_writes_cancelled == 1
    assert ix.complete_write(n1, 2.0).dram_drops == []  # a late completion changes nothing


def test_a_queued_write_is_never_an_ssd_eviction_victim() -> None:
    ix = deferred_index(8, 1, AdmissionRule(None, None, True))
    m = ix.store(NS, [1, 2], 0.0, tokens=T4)
    assert len(m.ssd_writes) == 1 and m.ssd_drops == []  # no room for 2 while 1 is written
    ix.complete_write(m.ssd_writes[0], 1.0)
    m = ix.store(NS, [1, 2], 2.0, tokens=T4)
    assert len(m.ssd_writes) == 1 and len(m.ssd_drops) == 1  # now 1's copy makes room


def test_prewrite_waits_for_lead_time_and_write_bandwidth() -> None:
    # E2: a block stored again after one eviction would qualify at its next eviction
    def run(write_bps: float) -> KVIndex:
        ix = deferred_index(2, 10, AdmissionRule(2), write_bps)
        ix.store(NS, [1, 2], 0.0, tokens=T4)
        ix.store(NS, [3, 4], 10.0, tokens=T4)      # evicts 1, 2 after 10 s idle: T_char 10 s
        ix.store(NS, [1, 2], 20.0, tokens=T4)      # 1, 2 back with E = 1: prewrite due
        return ix
    fast = run(8 / 1.0)     # 8 B/s: two 8-byte writes drain in 2 s < 10 s
    assert fast.stats.prewrites == 2 and fast.stats.prewrites_gated == 0
    slow = run(8 / 6.0)     # the second would drain after 12 s > 10 s
    assert slow.stats.prewrites == 1 and slow.stats.prewrites_gated == 1
    assert slow.dram_lead_time(20.0) == pytest.approx(10.0)


# ------------------------------------------------------------- sharing one SSD
def test_reads_and_writes_share_the_device_time() -> None:
    bw = Bandwidths(gpu=48 * GB, disk=20 * GB, dram=48 * GB, disk_write=10 * GB)
    c = TransferCoordinator("coordinated", bw, sharing=IDEAL_SHARING)
    c.submit("read", 0.0, 10 * GB, 0.0)
    c.submit_write("w1", 5 * GB, 0.0)
    c.submit_write("w2", 10 * GB, 0.0)
    # while w1 is queued reads get half the device time (10 GB/s of 20) and writes the
    # other half (10 · (1 − 10/20) = 5 GB/s): read and w1 both end at 1 s; then w2 alone
    # at the full 10 GB/s ends at 2 s
    done = c.run_until_idle()
    assert done == {"read": pytest.approx(1.0), "w1": pytest.approx(1.0),
                    "w2": pytest.approx(2.0)}


def test_reads_leave_writes_what_the_link_does_not_take() -> None:
    # the GPU link caps the read at 5 GB/s, a quarter of the SSD's time: writes get 3/4
    bw = Bandwidths(gpu=5 * GB, disk=20 * GB, dram=48 * GB, disk_write=8 * GB)
    c = TransferCoordinator("coordinated", bw, sharing=IDEAL_SHARING)
    c.submit("read", 0.0, 5 * GB, 0.0)
    c.submit_write("w", 6 * GB, 0.0)
    assert c.run_until_idle() == {"read": pytest.approx(1.0), "w": pytest.approx(1.0)}


def test_uncoordinated_overlap_leaves_the_ssd_a_low_share() -> None:
    # DRAM burst takes the link; the SSD keeps 10% of its 20 GB/s: 2 GB/s, DRAM 46.
    # DRAM's 48 GB end at 48/46 s with 2·48/46 GB of SSD done; the rest at 20 GB/s
    sh = SharingModel(overlap_ssd_share=0.1, read_share=0.5, coord_overhead_s_per_byte=0.0)
    t = schedule([(48 * GB, 20 * GB)], "overlap", sharing=sh)[0]
    assert t == pytest.approx(48 / 46 + (20 - 2 * 48 / 46) / 20)
    serial = schedule([(48 * GB, 20 * GB)], "serial", sharing=sh)[0]
    assert serial == pytest.approx(2.0) and t < serial


def test_coordinator_overhead_slows_the_paced_ssd_path() -> None:
    # 0.013 s/GB of control time: the SSD path moves at 1 / (1/20 + 0.013) GB/s; DRAM is
    # paced to 28 until the SSD part ends, then runs at 48
    sh = SharingModel(0.1, 0.5, 0.013 / GB)
    d = 1 / (1 / 20 + 0.013)
    t1 = 20 / d
    t = schedule([(48 * GB, 20 * GB)], "coordinated", sharing=sh)[0]
    assert t == pytest.approx(t1 + (48 - 28 * t1) / 48)


def test_fig16_one_ssd_gains_two_striped_ssds_regress() -> None:
    """Seed Fig. 16: 135,168 tokens of Qwen3-8B KV, half DRAM half SSD, 24 GB/s ingress.
    Coordination beats serial loading on one SSD (8 or 12 GB/s) and loses to it on two
    striped SSDs (23.9 GB/s): the allowance leaves DRAM 0.1 GB/s while the coordinator's
    overhead keeps the SSD below its allowance."""
    p = 135_168 // 2 * 147_456
    out = {}
    for case, disk in (("slow", 8.0), ("fast", 12.0), ("two", 2 * 11.95)):
        bw = Bandwidths(24 * GB, disk * GB, 24 * GB)
        out[case] = {m: schedule([(p, p)], m, bw)[0] for m in ("serial", "coordinated")}
    d = 1 / (1 / 8 + 0.013) * GB  # slow SSD, by hand: DRAM paced to 16 ends first
    assert out["slow"]["coordinated"] == pytest.approx(p / d)
    assert out["slow"]["serial"] == pytest.approx(p / (24 * GB) + p / (8 * GB), rel=1e-6)
    assert out["slow"]["coordinated"] < out["slow"]["serial"]
    assert out["fast"]["coordinated"] < out["fast"]["serial"]
    assert out["two"]["coordinated"] > out["two"]["serial"]


# ----------------------------------------------------------------- the replay
def _req(ts: float, blocks: list[int]) -> KVRequest:
    return KVRequest(timestamp=ts, input_length=512 * len(blocks), output_length=1,
                     hash_ids=blocks, block_tokens=512)


TRACE = [_req(0, [1, 2, 3, 4]), _req(10, [5, 6, 7, 8]), _req(20, [1, 2, 3, 4])]


def _sim(**kw: object) -> dict:
    return simulate_kv(list(TRACE), KVSimParams(system="full-duplicate", dram_tokens=2048,
                                                ssd_tokens=10**6, in_flight=1, **kw)).metrics


def test_striping_two_ssds_is_one_ssd_of_twice_the_rate() -> None:
    two = _sim(ssd_devices=2, disk_gbps=5.0, disk_write_gbps=3.0)
    one = _sim(ssd_devices=1, disk_gbps=10.0, disk_write_gbps=6.0)
    slow = _sim(ssd_devices=1, disk_gbps=5.0, disk_write_gbps=3.0)
    assert two["ssd_read_blocks"] == 4 and two["transfer_mean_s"] > 0
    assert two["transfer_mean_s"] == pytest.approx(one["transfer_mean_s"])
    assert slow["transfer_mean_s"] > one["transfer_mean_s"]


def test_replay_write_queue_matches_instant_model_when_writes_finish_in_time() -> None:
    # 10 s between requests, writes of 4 blocks take milliseconds: same hits and writes
    q, i = _sim(), _sim(ssd_writes="instant")
    assert q["ssd_write_model"] == "queued" and i["ssd_write_model"] == "instant"
    for k in ("hit_blocks", "ssd_write_bytes", "ssd_read_blocks", "dram_evictions"):
        assert q[k] == i[k]


# ------------------------------------------------------------------ the seed's models
def test_seed_models_geometry_by_hand() -> None:
    """KV bytes per token = FA layers x KV heads x head dim x 2 (K, V) x dtype bytes; a GDN
    checkpoint = layers x (v_heads·k_dim·v_dim + (2·k_heads·k_dim + v_heads·v_dim)·(kernel−1))
    x state bytes (docs/results/kv-models.md)."""
    from aicache.kv.models import get_model

    q35 = get_model("qwen3.5-9b")
    assert q35.kv_bytes_per_token == 8 * 4 * 256 * 2 * 2 == 32_768
    assert q35.checkpoint_bytes == 24 * (32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3) * 2
    assert (q35.block_tokens, q35.checkpoint_tokens) == (1024, 16384)
    assert get_model("qwen3.5-5.6b-seed").kv_bytes_per_token == 5 * 4 * 256 * 4
    assert get_model("qwen3-1.7b-seed").kv_bytes_per_token == 20 * 8 * 128 * 4
    assert get_model("qwen3-8b").kv_bytes_per_token == 36 * 8 * 128 * 4
    assert get_model("qwen3-235b-a22b-fp8").kv_bytes_per_token == 94 * 4 * 128 * 2


def test_hybrid_replay_charges_checkpoints_and_reuses_only_to_one() -> None:
    # 40 trace blocks of 512 tokens = 20 cache blocks of 1,024; checkpoints after cache
    # blocks 16 (and none at 20): the second request can reuse 16 blocks, not 20
    ids = list(range(1, 41))
    reqs = [KVRequest(0.0, 512 * 40, 1, ids, 512), KVRequest(100.0, 512 * 40, 1, ids, 512)]
    m = simulate_kv(reqs, KVSimParams(system="full-duplicate", model="qwen3.5-9b",
                                      dram_tokens=10**6, ssd_tokens=10**7, in_flight=1)).metrics
    from aicache.kv.models import get_model

    q35 = get_model("qwen3.5-9b")
    assert m["hit_blocks"] == 16 and m["achievable_blocks"] == 16
    assert m["ssd_write_bytes"] == 20 * q35.block_bytes + q35.checkpoint_bytes


def test_cli_ssd_model_flags(tmp_path, capsys) -> None:
    import json

    from aicache.cli.main import main
    from aicache.traces.io import write_kv_jsonl

    path = tmp_path / "t.jsonl"
    write_kv_jsonl(str(path), TRACE)
    assert main(["sim", "kv", "--trace", str(path), "--system", "full-duplicate",
                 "--ssd-devices", "2", "--disk-write-gbps", "5", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["ssd_devices"] == 2 and m["ssd_write_model"] == "queued"
    assert main(["sim", "kv", "--trace", str(path), "--ssd-writes", "instant", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ssd_write_model"] == "instant"
    for bad, name in ((["--ssd-devices", "0"], "--ssd-devices"),
                      (["--ssd-writes", "sometimes"], "ssd writes")):
        assert main(["sim", "kv", "--trace", str(path), *bad]) == 2
        assert name in capsys.readouterr().err
