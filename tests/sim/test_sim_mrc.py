"""``aicache sim mrc``: LRU's one-pass curve equals ``sim cache`` at every size and a
brute-force stack-distance reference; the sampled curve of other policies stays within a
stated bound of full simulation; bad sizes exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aicache.cli.main import main
from aicache.errors import BadInput
from aicache.sim.cache_sim import simulate
from aicache.sim.mrc import JSON_KEYS, miss_ratio_curve
from aicache.traces.stackdist import stack_distances
from aicache.traces.formats._common import make_batch
from aicache.traces.io import write_trace

SIZES = ["0.5%", "1%", "2%", "5%", "10%", "20%", "50%", "100%"]
#: the sampled curve's largest error against full simulation, at rate 0.1 on a Zipf trace
#: (measured: at most 0.005 on this trace)
SHARDS_MAX_ERROR = 0.02


def _zipf(n: int, n_obj: int, alpha: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_obj + 1) ** alpha
    ids = rng.permutation(n_obj)[rng.choice(n_obj, size=n, p=p / p.sum())].astype(np.int64)
    obj_size = np.exp(rng.uniform(0, np.log(1 << 16), n_obj)).astype(np.int64) + 1
    return ids + 1, obj_size[ids]  # one size per object, some larger than the small caches


def _write(path: Path, fmt: str, ids: np.ndarray, sizes: np.ndarray) -> Path:
    write_trace(str(path), fmt, [make_batch(list(range(len(ids))), ids.tolist(), sizes.tolist())])
    return path


def brute_force_distances(ids: list[int], weights: list[int]) -> list[int]:
    """The LRU stack as a list, searched per request: O(n * distinct)."""
    stack: list[int] = []  # most recent first
    w = dict(zip(ids, weights))
    out = []
    for k in ids:
        if k in stack:
            i = stack.index(k)
            out.append(sum(w[x] for x in stack[:i + 1]))
            stack.pop(i)
        else:
            out.append(-1)
        stack.insert(0, k)
    return out


def test_stack_distances_match_brute_force() -> None:
    rng = np.random.default_rng(2)
    ids = (rng.zipf(1.2, 2_000) % 150).tolist()
    sizes = {k: int(rng.integers(1, 50)) for k in set(ids)}
    weights = [sizes[k] for k in ids]
    prev: list[int] = []
    last: dict[int, int] = {}
    for i, k in enumerate(ids):
        prev.append(last.get(k, -1))
        last[k] = i
    assert stack_distances(prev, weights) == brute_force_distances(ids, weights)
    assert stack_distances(prev, [1] * len(ids)) == brute_force_distances(ids, [1] * len(ids))
    # objects too large for a size weigh 0 (bytes mode); 150 objects over 2,000 requests
    # also renumber the tree's positions many times
    zeroed = [0 if sizes[k] > 40 else sizes[k] for k in ids]
    assert stack_distances(prev, zeroed) == brute_force_distances(ids, zeroed)


@pytest.mark.parametrize("fmt", ["oracle-general", "lcs-csv"])
@pytest.mark.parametrize("mode", ["objects", "bytes"])
def test_lru_curve_equals_sim_cache_at_every_size(tmp_path: Path, fmt: str, mode: str) -> None:
    ids, sizes = _zipf(20_000, 3_000, 0.9, seed=4)
    sizes[np.isin(ids, ids[:10])] = 1 << 24  # too large for the small sizes, not the large
    trace = _write(tmp_path / f"t.{fmt}", fmt, ids, sizes)
    res = miss_ratio_curve(trace, "lru", SIZES, size_mode=mode, fmt=fmt)
    assert res.method == "stack-distance" and res.sample_rates == [1.0] * len(SIZES)
    for spec, cap, mr, bmr in zip(SIZES, res.sizes, res.miss_ratios, res.byte_miss_ratios):
        one = simulate(trace, "lru", spec, size_mode=mode, fmt=fmt, progress=False)
        assert one.cache_size == cap
        assert (mr, bmr) == (one.miss_ratio, one.byte_miss_ratio), spec
    if mode == "objects":  # inclusion: a larger LRU holds a superset
        assert res.miss_ratios == sorted(res.miss_ratios, reverse=True)
    else:  # the small sizes leave out objects that never fit: several passes
        assert res.sizes[0] < 1 << 24 < res.sizes[-1]


def test_lru_bytes_with_changing_sizes_falls_back_to_simulation(tmp_path: Path) -> None:
    ids, sizes = _zipf(3_000, 400, 0.9, seed=6)
    sizes = sizes + (np.arange(len(sizes)) % 3)  # an object's size changes between requests
    trace = _write(tmp_path / "t.og", "oracle-general", ids, sizes)
    res = miss_ratio_curve(trace, "lru", ["5%", "20%"], size_mode="bytes")
    assert res.method == "simulation"
    for spec, mr, bmr in zip(["5%", "20%"], res.miss_ratios, res.byte_miss_ratios):
        one = simulate(trace, "lru", spec, size_mode="bytes", progress=False)
        assert (mr, bmr) == (one.miss_ratio, one.byte_miss_ratio)


@pytest.mark.parametrize("policy", ["s3fifo", "arc", "clock"])
def test_sampled_curve_within_bound_of_full_simulation(tmp_path: Path, policy: str) -> None:
    ids, sizes = _zipf(200_000, 40_000, 0.9, seed=8)
    trace = _write(tmp_path / "t.og", "oracle-general", ids, sizes)
    sizes_spec = ["1%", "5%", "10%", "50%"]
    est = miss_ratio_curve(trace, policy, sizes_spec, sample_rate=0.1)
    full = miss_ratio_curve(trace, policy, sizes_spec, sample_rate=1.0)
    assert est.method == "shards" and full.method == "simulation"
    assert est.sample_rates[-1] == 0.1 and est.sample_rates[0] == 1.0  # 1% is too small at 0.1
    err = max(abs(a - b) for a, b in zip(est.miss_ratios, full.miss_ratios))
    assert err <= SHARDS_MAX_ERROR, (est.miss_ratios, full.miss_ratios)
    one = simulate(trace, policy, "10%", progress=False)
    assert full.miss_ratios[2] == one.miss_ratio


def test_cli_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids, sizes = _zipf(5_000, 600, 1.0, seed=3)
    trace = _write(tmp_path / "t.og", "oracle-general", ids, sizes)
    png = tmp_path / "mrc.png"
    assert main(["sim", "mrc", "--trace", str(trace), "--policy", "lru", "--sizes", "1%,10%,50%",
                 "--size-mode", "bytes", "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == list(JSON_KEYS)
    assert len(out["sizes"]) == len(out["miss_ratios"]) == len(out["byte_miss_ratios"]) == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["sim", "mrc", "--trace", str(trace), "--policy", "lru", "--sizes", "5%"]) == 0
    assert "stack-distance" in capsys.readouterr().out


def test_sizes_beyond_the_working_set_give_the_compulsory_miss_ratio(tmp_path: Path) -> None:
    ids, s = _zipf(1_000, 100, 1.0, seed=1)
    trace = _write(tmp_path / "t.og", "oracle-general", ids, s)
    curve = miss_ratio_curve(trace, "lru", ["100%", "200%", "99999999"])
    assert curve.miss_ratios == pytest.approx([len(set(ids.tolist())) / len(ids)] * 3, abs=1e-12)


@pytest.mark.parametrize("sizes", ["", "1%,,5%", "0", "0%", "ten", "10%,-5"])
def test_bad_sizes_exit_2_with_one_line(tmp_path: Path, sizes: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    ids, s = _zipf(1_000, 100, 1.0, seed=1)
    trace = _write(tmp_path / "t.og", "oracle-general", ids, s)
    assert main(["sim", "mrc", "--trace", str(trace), "--policy", "lru", "--sizes", sizes]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aicache: error:") and "\n" not in err


def test_bad_sample_rate_and_policy(tmp_path: Path) -> None:
    ids, s = _zipf(1_000, 100, 1.0, seed=1)
    trace = _write(tmp_path / "t.og", "oracle-general", ids, s)
    for rate in (0.0, 1.5):
        with pytest.raises(BadInput, match="sample rate"):
            miss_ratio_curve(trace, "arc", ["10%"], sample_rate=rate)
    with pytest.raises(BadInput, match="lruu"):
        miss_ratio_curve(trace, "lruu", ["10%"])


def test_too_small_unsampled_size_advises_a_larger_size_not_a_higher_rate(tmp_path: Path) -> None:
    """A size so small that SHARDS runs it unsampled (rate clamped to 1) and the policy
    rejects it: raising --sample-rate cannot help, so the error says to raise the size."""
    ids, s = _zipf(1_000, 100, 1.0, seed=1)
    trace = _write(tmp_path / "t.og", "oracle-general", ids, s)
    with pytest.raises(BadInput) as exc:
        miss_ratio_curve(trace, "2q", ["2"], sample_rate=0.5)
    msg = str(exc.value)
    assert "2q: capacity 2" in msg and msg.endswith("raise the size") and "--sample-rate" not in msg


@pytest.mark.parametrize("policy", ["s3fifo", "arc", "clock", "lru"])
@pytest.mark.parametrize("mode", ["objects", "bytes"])
def test_slot_core_replay_of_a_sample_equals_cache(tmp_path: Path, policy: str, mode: str) -> None:
    """SHARDS replays a sample's sparse slot ids through the policy's slot core; the counts
    equal :class:`aicache.sim.cache.Cache` replaying the same requests by trace id."""
    from aicache.sim import mrc
    from aicache.sim.cache import Cache
    from aicache.sim.cache_sim import _open
    from aicache.policies import make_eviction

    ids, sizes = _zipf(30_000, 4_000, 0.9, seed=5)
    trace = _write(tmp_path / "t.og", "oracle-general", ids, sizes)
    tr = mrc._load(_open(trace, "oracle-general", False))
    keys = np.empty(tr.objects, dtype=np.uint64)
    keys[tr.slots] = tr.ids
    sample = tr.subset(mrc.shards_sample(keys, 0.3)[tr.slots])
    assert 0 < len(sample.slots) < len(tr.slots)
    cap = 300 if mode == "objects" else int(sample.sizes.sum()) // 50
    got = mrc.simulate_arrays(sample, policy, cap, mode, seed=0)
    cache = Cache(cap, make_eviction(policy, cap), mode)
    cache.request_batch(sample.ids.tolist(), sample.sizes.tolist(), sample.times.tolist(), None)
    assert got == (cache.stats.miss_ratio, cache.stats.byte_miss_ratio)
