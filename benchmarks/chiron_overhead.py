"""Chiron's per-access overhead against plain LRU, on the same W1 trace, in one process.

Both systems run through :func:`aicache.sim.datacache.simulate_datacache` on one
generated ResNet workflow (W1, ``--scale`` 2 by default: 146 k reads) with the same cache
(``--cache`` 25 % of the dataset):

* ``alluxio`` — LRU eviction, no prefetch: the cheapest policy, the simulator's floor;
* ``chiron`` — the adaptive controller (per-unit executors, advisor reviews, gate).

For each it reports reads/s (best of ``--repeat`` runs; CPU time, so other processes on a
shared machine do not skew it, and wall time), then splits the CPU time into the *policy*
— every call into the system (``on_access``, ``admit``, ``on_insert``, ``victim``,
``tick``) — and the *simulator's bookkeeping* (the rest: clock, worker
pool, in-flight fetches, byte accounting). The split comes from one more run through a
transparent proxy that times each call (``perf_counter``, ~0.1 µs a pair): the policy's
share of that run's wall time, less the proxy's own measured cost, applied to the plain
run's CPU time (preemption by other processes hits both parts in proportion, so the share
survives a loaded machine; it is still an estimate, to a few percent). The proxy does not
change the replay: the benchmark checks that both runs give the same CHR and JCT.

    python benchmarks/chiron_overhead.py [--scale 2] [--cache 25%] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from aicache.policies.system import DataCacheSystem
from aicache.datacache.policy.registry import make_system
from aicache.sim.datacache import BlockWorkload, load_workload, simulate_datacache
from aicache.units import parse_size

CALLS = ("on_access", "admit", "on_insert", "victim", "on_remove", "tick")


@dataclass
class Row:
    system: str
    reads: int
    reads_per_s_cpu: float
    reads_per_s_wall: float
    us_per_read: float  # CPU µs per read, whole replay
    policy_us_per_read: float  # inside the system's calls
    simulator_us_per_read: float  # the rest
    policy_share: float
    policy_calls_per_read: float
    chr: float
    jct_seconds: float


class TimedSystem(DataCacheSystem):
    """Delegates every call to ``inner`` and adds the call's duration to ``spent``.

    ``tick`` is proxied only when ``inner`` has its own, so the
    simulator calls exactly what it would call on ``inner``.
    """

    def __init__(self, inner: DataCacheSystem) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)  # type: ignore[misc]
        self.spent = 0.0
        self.calls = 0
        for name in CALLS:
            fn = getattr(inner, name, None)
            if fn is None or (name == "tick" and type(inner).tick is DataCacheSystem.tick):
                continue
            setattr(self, name, _timed(self, fn))

    # the abstract methods (instances carry timed versions, set in __init__)
    def on_access(self, unit: str, block: int, size: int, hit: bool, now: float) -> Any:
        raise AssertionError("replaced in __init__")

    def admit(self, unit: str, block: int, size: int, used: int, now: float) -> bool:
        raise AssertionError("replaced in __init__")

    def on_insert(self, unit: str, block: int, size: int, now: float, prefetched: bool) -> None:
        raise AssertionError("replaced in __init__")

    def victim(self, now: float) -> int:
        raise AssertionError("replaced in __init__")

    def on_remove(self, block: int) -> None:
        raise AssertionError("replaced in __init__")

    def stats(self) -> dict[str, Any]:
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()


def _timed(acc: Any, fn: Any) -> Any:
    """``fn`` wrapped to add its wall duration to ``acc.spent`` (the clock of the run's
    split: cheap, ~0.1 µs a pair, so its subtraction is small and stable)."""
    clock = time.perf_counter

    def call(*a: Any) -> Any:
        t = clock()
        r = fn(*a)
        acc.spent += clock() - t
        acc.calls += 1
        return r
    return call


class _Acc:
    spent = 0.0
    calls = 0


def wrapper_costs(n: int = 100_000, batches: int = 7) -> tuple[float, float]:
    """(seconds the clock pair adds inside ``spent``, seconds the whole wrapper adds to a
    run) per call, each the fastest of several batches so other processes do not inflate it."""
    def noop(*a: Any) -> None:
        return None

    acc = _Acc()
    wrapped = _timed(acc, noop)
    clock = time.perf_counter
    inside = total = float("inf")
    for _ in range(batches):
        acc.spent = 0.0
        t0 = clock()
        for _ in range(n):
            noop(1, 2, 3, 4, 5)
        bare = clock() - t0
        t0 = clock()
        for _ in range(n):
            wrapped(1, 2, 3, 4, 5)
        total = min(total, (clock() - t0 - bare) / n)
        inside = min(inside, acc.spent / n)
    return inside, max(0.0, total)


def _sim(wl: BlockWorkload, system: Any, cache: str) -> tuple[Any, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    r = simulate_datacache(wl, system, cache)
    return r, time.process_time() - c0, time.perf_counter() - w0


def measure(wl: BlockWorkload, system: str, cache: str, repeat: int, costs: tuple[float, float]) -> Row:
    cpu = wall = float("inf")
    res = None
    for _ in range(repeat):
        res, c, w = _sim(wl, system, cache)
        cpu, wall = min(cpu, c), min(wall, w)
    cap = parse_size(cache, total=wl.dataset_bytes, what="cache size")
    proxy = TimedSystem(make_system(system, cap, 4 << 20, seed=0))
    timed_res, _, timed_wall = _sim(wl, proxy, cache)
    assert res is not None
    if (timed_res.chr, timed_res.jct_seconds) != (res.chr, res.jct_seconds):
        raise AssertionError(f"{system}: the timing proxy changed the replay")
    n = res.requests
    inside, total = costs
    # the policy's share of the proxied run (both wall clock, so time lost to other processes
    # cancels), without the wrapper's own cost; applied to the plain run's CPU time
    policy_wall = max(0.0, proxy.spent - proxy.calls * inside)
    run_wall = max(policy_wall, timed_wall - proxy.calls * total)
    share = policy_wall / run_wall if run_wall > 0 else 0.0
    policy = share * cpu
    return Row(system, n, n / cpu, n / wall, cpu / n * 1e6, policy / n * 1e6, (cpu - policy) / n * 1e6,
               share, proxy.calls / n, res.chr, res.jct_seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=2.0, help="W1 scale (default 2: 146 k reads)")
    ap.add_argument("--cache", default="25%", help="cache size (default 25%% of the dataset)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per system; the best counts")
    ap.add_argument("--systems", default="alluxio,chiron", help="comma-separated (default alluxio,chiron)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = ap.parse_args(argv)
    t = time.perf_counter()
    wl = load_workload("W1", scale=a.scale, stream=False)
    gen_s = time.perf_counter() - t
    costs = wrapper_costs()
    rows = [measure(wl, s, a.cache, max(1, a.repeat), costs) for s in a.systems.split(",")]
    by = {r.system: r for r in rows}
    ratio = (by["chiron"].reads_per_s_cpu / by["alluxio"].reads_per_s_cpu
             if "chiron" in by and "alluxio" in by else None)
    out = {"workload": "W1", "scale": a.scale, "reads": len(wl), "cache": a.cache,
           "generate_seconds": round(gen_s, 3),
           "timer_inside_us": costs[0] * 1e6, "wrapper_us": costs[1] * 1e6,
           "rows": [asdict(r) for r in rows], "chiron_over_alluxio_speed": ratio}
    if a.json:
        json.dump(out, sys.stdout)
        print()
        return 0
    print(f"W1 scale {a.scale}: {len(wl):,} reads, cache {a.cache}, generated in {gen_s:.2f} s; "
          f"timer {costs[0] * 1e6:.3f} µs, wrapper {costs[1] * 1e6:.3f} µs per call (subtracted)")
    print(f"{'system':10s} {'reads/s cpu':>12s} {'reads/s wall':>13s} {'µs/read':>8s} "
          f"{'policy µs':>10s} {'sim µs':>8s} {'policy %':>9s} {'calls/read':>10s} {'CHR':>7s} {'JCT s':>9s}")
    for r in rows:
        print(f"{r.system:10s} {r.reads_per_s_cpu:12,.0f} {r.reads_per_s_wall:13,.0f} {r.us_per_read:8.2f} "
              f"{r.policy_us_per_read:10.2f} {r.simulator_us_per_read:8.2f} {r.policy_share * 100:8.1f}% "
              f"{r.policy_calls_per_read:10.2f} {r.chr:7.4f} {r.jct_seconds:9.1f}")
    if ratio is not None:
        print(f"chiron / alluxio speed: {ratio:.3f}x "
              f"(chiron costs {by['chiron'].us_per_read - by['alluxio'].us_per_read:+.2f} µs per read)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
