"""Speed work on the datacache simulator must not change a single number.

* :func:`reference_run` is the plain replay loop (the simulator before it was optimised:
  a closure per arrival, ``heappop``/``heappush`` on the worker pool, ``tick`` every read);
  the optimised :func:`aicache.sim.datacache._run` must give the same counters, clock and
  per-phase results for every system, on materialised and on streamed workloads.
* A streamed workflow (:func:`plan_workflow`) must yield exactly the reads of the
  materialised one (:func:`generate_workflow`) for every workload, variant and chunk size.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import pytest

from aicache.policies.system import DataCacheSystem
from aicache.datacache.policy.registry import make_system
from aicache.sim.datacache import (
    _CHUNK,
    BlockWorkload,
    CostModel,
    PhaseResult,
    load_workload,
    simulate_datacache,
)
from aicache.sim.grading import ChironGrader
from aicache.traces.workflows import SPECS, VARIANTS, generate_workflow, plan_workflow

def reference_run(wl: BlockWorkload, system: DataCacheSystem, capacity: int,
                  cm: CostModel) -> dict[str, Any]:
    """The straightforward replay loop (one dict lookup per step, no chunk tricks)."""
    hit_s = cm.hit_ms / 1000.0
    miss_s = cm.miss_ms / 1000.0
    bw = float(cm.remote_bw)
    units = wl.units
    bsize_of = wl.block_size_of
    bunit_of = wl.block_unit_of
    dense = isinstance(bsize_of, list)
    nblocks = len(bsize_of)

    store: dict[int, int] = {}  # resident block -> bytes
    used = 0
    inflight: dict[int, tuple[float, bool, float]] = {}  # block -> (arrival, is_prefetch, start)
    arrivals: list[tuple[float, int, int]] = []  # (arrival, seq, block)
    seq = 0
    pslots = [0.0] * cm.prefetch_slots
    pf_pending = 0
    unread: set[int] = set()  # prefetched, resident or in flight, not read yet

    hits = late = prefetched = pf_used = dropped = evictions = rejected = 0
    remote = 0
    io_wait = 0.0
    on_access = system.on_access
    tick = system.tick
    grader = ChironGrader()
    observe = grader.observe_label if grader.attach(system) else None
    table = wl.block_unit_of

    def file_of(block: int) -> str | None:  # the simulator's block table, as it gives it
        code = (table[block] if 0 <= block < len(table) else None) if isinstance(table, list) \
            else table.get(block)
        return None if code is None else units[int(code)]

    system.use_metadata(wl.file_extents().get, file_of)

    def arrive(block: int, t: float, is_pf: bool) -> None:
        nonlocal used, evictions, rejected, pf_pending
        del inflight[block]
        if is_pf:
            pf_pending -= 1
        if block in store:
            return
        size = bsize_of[block]
        uname = units[bunit_of[block]]
        if size > capacity or not system.admit(uname, block, size, used, t):
            rejected += 1
            unread.discard(block)
            return
        while used + size > capacity:
            v = system.victim(t)
            used -= store.pop(v)
            evictions += 1
            if v in unread:
                unread.discard(v)
                system.on_prefetch_wasted(v, t)
        store[block] = size
        used += size
        if system.on_insert(uname, block, size, t, is_pf) is False:
            used -= store.pop(block)
            unread.discard(block)

    def drain(t: float) -> None:
        while arrivals and arrivals[0][0] <= t:
            at, _, b = heapq.heappop(arrivals)
            fl = inflight.get(b)
            if fl is not None and fl[0] == at:  # else superseded or already stored
                arrive(b, at, fl[1])

    phases: list[PhaseResult] = []
    clock = 0.0
    W = max(1, wl.workers)
    for seg in wl.segments:
        workers = [clock] * W
        comp = seg.compute_s
        comp_list = comp.tolist() if isinstance(comp, np.ndarray) else None
        comp_const = float(comp) if comp_list is None else 0.0
        seg_hits = 0
        label = seg.pattern
        if observe is not None:
            observe(label if label in ("sequential", "random", "skewed") else None, clock)
        for c0 in range(seg.start, seg.end, _CHUNK):
            c1 = min(seg.end, c0 + _CHUNK)
            # per-chunk Python lists: fast indexing without a list per column of the trace
            ids = wl.obj_id[c0:c1].tolist()
            sizes = wl.obj_size[c0:c1].tolist()
            ucodes = wl.unit[c0:c1].tolist()
            comps = comp_list[c0 - seg.start:c1 - seg.start] if comp_list else None
            for j in range(c1 - c0):
                now = heapq.heappop(workers)
                if arrivals and arrivals[0][0] <= now:
                    drain(now)
                tick(now)
                b = ids[j]
                size = sizes[j]
                if b in store:
                    hit = True
                    lat = hit_s
                else:
                    fl = inflight.get(b)
                    if fl is not None and (not fl[1] or fl[2] <= now):
                        # a fetch already on the wire: wait for the rest, then it is stored
                        at, is_pf, _ = fl
                        lat = at - now + hit_s
                        arrive(b, now, is_pf)
                        hit = is_pf
                        if is_pf:
                            late += 1
                    else:
                        if fl is not None:
                            # a prefetch still queued behind others: the read does not wait
                            # for the queue; it fetches on demand (the queued fetch is wasted)
                            del inflight[b]
                            pf_pending -= 1
                            unread.discard(b)
                        hit = False
                        lat = miss_s + size / bw
                        remote += size
                        inflight[b] = (now + lat, False, now)
                        seq += 1
                        heapq.heappush(arrivals, (now + lat, seq, b))
                if hit:
                    hits += 1
                    seg_hits += 1
                if b in unread:
                    unread.discard(b)
                    pf_used += 1
                    system.on_prefetch_used(b, now)
                # the system sees residency (a read joining a demand fetch uses the stored block)
                pf = on_access(units[ucodes[j]], b, size, b in store, now)
                if pf:
                    for p in pf:
                        if p in store or p in inflight:
                            continue
                        if dense:
                            if not 0 <= p < nblocks:
                                continue
                            psize = bsize_of[p]  # type: ignore[index]
                        else:
                            psize = bsize_of.get(p)  # type: ignore[union-attr]
                            if psize is None:
                                continue
                        if pf_pending >= cm.prefetch_inflight:
                            dropped += 1
                            continue
                        start = heapq.heappop(pslots)
                        if start < now:
                            start = now
                        done = start + miss_s + psize / bw
                        heapq.heappush(pslots, done)
                        inflight[p] = (done, True, start)
                        seq += 1
                        heapq.heappush(arrivals, (done, seq, p))
                        pf_pending += 1
                        prefetched += 1
                        remote += psize
                        unread.add(p)
                io_wait += lat
                heapq.heappush(workers, now + lat + (comps[j] if comps else comp_const))
        end = max(workers) if workers else clock
        n = seg.end - seg.start
        phases.append(PhaseResult(seg.name, seg.pattern, n, seg_hits / n if n else 0.0, end - clock))
        clock = end
    drain(clock)
    return {"hits": hits, "late": late, "prefetched": prefetched, "pf_used": pf_used,
            "dropped": dropped, "evictions": evictions, "rejected": rejected, "remote": remote,
            "io_wait": io_wait, "jct": clock,
            "phases": [(p.name, p.requests, p.chr, p.seconds) for p in phases]}


def _optimised(wl: BlockWorkload, system: str, cache: str) -> dict[str, Any]:
    r = simulate_datacache(wl, system, cache)
    return {"hits": r.hits, "late": r.late_prefetch_reads, "prefetched": r.prefetched_blocks,
            "dropped": r.prefetch_dropped, "evictions": r.evictions, "rejected": r.rejected,
            "remote": r.remote_bytes, "io_wait": r.io_wait_seconds, "jct": r.jct_seconds,
            "phases": [(p.name, p.requests, p.chr, p.seconds) for p in r.phases],
            "accuracy": r.prefetch_accuracy}


def _reference(wl: BlockWorkload, system: str, cache: str) -> dict[str, Any]:
    from aicache.units import parse_size

    cap = parse_size(cache, total=wl.dataset_bytes, what="cache size")
    params = {"trace": wl.all_ids()} if system == "clairvoyant" else {}
    sysobj = make_system(system, cap, 4 << 20, seed=0, **params)
    try:
        out = reference_run(wl, sysobj, cap, CostModel())
    finally:
        sysobj.close()
    out["accuracy"] = out["pf_used"] / out["prefetched"] if out["prefetched"] else None
    del out["pf_used"]
    return out


SYSTEMS = ["nocache", "juicefs", "alluxio", "juicefs-adaptive", "chiron", "clairvoyant"]


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("workload,scale,cache", [("W1", 0.1, "25%"), ("W3", 0.1, "10%")])
def test_optimised_loop_equals_the_reference_loop(workload, scale, cache, system):
    wl = load_workload(workload, scale=scale, stream=False)
    assert _optimised(wl, system, cache) == _reference(wl, system, cache)


@pytest.mark.parametrize("system", ["juicefs", "chiron", "clairvoyant"])
def test_streamed_workload_gives_the_same_result(system):
    mat = load_workload("W2", scale=0.1, stream=False)
    st = load_workload("W2", scale=0.1, stream=True)
    assert st.obj_id is None and len(st) == len(mat)
    a = simulate_datacache(mat, system, "25%").to_dict()
    b = simulate_datacache(st, system, "25%").to_dict()
    assert a == b


@pytest.mark.parametrize("name,variant", [*((n, None) for n in SPECS),
                                          *((n, v) for n, vs in VARIANTS.items() for v in vs)])
def test_stream_yields_the_materialised_trace(name, variant):
    scale = 0.05
    tr = generate_workflow(name, scale, 3, variant=variant)
    plan = plan_workflow(name, scale, 3, variant=variant)
    assert len(plan) == len(tr)
    assert [(p.name, p.pattern, p.start, p.end, p.compute_s) for p in plan.phases] == \
        [(p.name, p.pattern, p.start, p.end, p.compute_s) for p in tr.phases]
    for k, ph in enumerate(plan.phases):
        for chunk in (1, 777, _CHUNK):  # replayable, chunking does not matter
            got = np.concatenate(list(plan.chunks(k, chunk)))
            assert np.array_equal(got, tr.obj_id[ph.start:ph.end])


def test_stream_chunks_are_bounded():
    plan = plan_workflow("W1", 0.5, 0)
    sizes = [c.size for k in range(len(plan.phases)) for c in plan.chunks(k, 1000)]
    # an item (file) is a few blocks at most: chunks overshoot by at most one item
    assert max(sizes) <= 1000 + int(np.diff(plan.dataset.first_block).max())
    assert sum(sizes) == len(plan)
