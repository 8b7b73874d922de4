"""N nodes' first epoch over one origin: each node alone (Mountpoint-style per-node caches)
against the same nodes with a shared tier under their local caches.

    python benchmarks/shared_tier.py [--nodes 4] [--files 40] [--mib 24] [--block-size 1MiB]
        [--latency-ms 10] [--shared-latency-ms 1] [--threads 4] [--policy chiron]
        [--schedules staggered[,together]] [--seed 0] [--json]

What runs, all on loopback:

- the origin: a moto S3 server in a child process that counts at the server every GET of an
  object and its body bytes (``aicache.testing.s3count``), behind a TCP delay line
  (``aicache.testing.delayline``): each request reaches it ``--latency-ms`` later;
- the shared tier: a *second* counting moto S3, behind its own delay line
  (``--shared-latency-ms``, a store near the nodes);
- a dataset of ``--files`` files (``--mib`` MiB in all, sizes drawn from ``--seed``), each
  file's SHA-256 kept;
- each node is a process of its own with a fresh cache directory, reading every file whole
  through the ``aicache`` fsspec filesystem in its own shuffled order on ``--threads``
  threads, checking every byte against its digest.

Runs (``--schedules``): *staggered* (the default), node i starts when node i-1 has finished
(a node that joins later, a job restarted on other nodes); *together*, all nodes start at
once (each its own order). Per schedule, three systems: ``per-node`` (no shared tier: every node reads the
whole dataset from the origin), ``shared`` (``shared_cache=`` on every node), and
``shared+warmup`` (``aicache warmup --shared-cache`` first, once for the cluster; its
origin GETs and time are reported apart and included in the totals).

Per (schedule, system): origin GETs and GET bytes counted at the origin server, the same per
node, each node's epoch time (first read to last byte checked, in the node) and the job's
time (first node started to last node done: with process start-up and each node's exit,
which waits for its tier writes), shared hits, errors, skipped calls and dropped writes; and
the ratios of origin GETs, summed epoch time and job time (warmup included) against
``per-node``. The default run (staggered only) takes about a minute on a loaded 2-core
machine; both schedules about two and a half.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from aicache.testing.delayline import DelayLine
from aicache.testing.s3count import CountingS3, RequestCounts, start_counting_s3

ORIGIN, SHARED, PREFIX = "origin", "shared", "data"
MiB = 1 << 20
SYSTEMS = ("per-node", "shared", "shared+warmup")
SCHEDULES = ("staggered", "together")
#: a node past this is hung (the benchmark fails rather than waits)
NODE_TIMEOUT_S = 600


def _s3(endpoint: str) -> Any:
    import fsspec

    return fsspec.filesystem("s3", key="testing", secret="testing", skip_instance_cache=True,
                             use_listings_cache=False, client_kwargs={"endpoint_url": endpoint})


def make_dataset(origin: CountingS3, files: int, total_mib: float, seed: int) -> dict[str, str]:
    """Write ``files`` files of ``total_mib`` MiB in all; returns path -> SHA-256."""
    rng = random.Random(seed)
    weights = [rng.uniform(0.25, 1.75) for _ in range(files)]
    scale = total_mib * MiB / sum(weights)
    fs = _s3(origin.endpoint_url)
    fs.mkdir(ORIGIN)
    out = {}
    for i, w in enumerate(weights):
        data = rng.randbytes(max(1, int(w * scale)))
        path = f"{ORIGIN}/{PREFIX}/f{i:04d}.bin"
        fs.pipe_file(path, data)
        out[path] = hashlib.sha256(data).hexdigest()
    return out


# -- one node (a child process) ----------------------------------------------------------------
def node_main(spec_text: str) -> None:
    """Read every file through the cache in this node's order; print one JSON line."""
    spec = json.loads(spec_text)
    import fsspec

    import aicache.datacache.fs  # noqa: F401 - registers the "aicache" protocol
    from aicache.datacache.counters import PERSISTED

    creds = {"key": "testing", "secret": "testing"}
    opts: dict[str, Any] = dict(
        target_protocol="s3", cache_dir=spec["cache_dir"], cache_size="4GiB",
        target_options={**creds, "use_listings_cache": False,
                        "client_kwargs": {"endpoint_url": spec["origin"]}},
        block_size=spec["block_size"], policy=spec["policy"], skip_instance_cache=True)
    if spec["shared"]:
        opts.update(shared_cache=f"s3://{SHARED}/{PREFIX}",
                    shared_cache_options={**creds, "client_kwargs": {"endpoint_url": spec["shared"]}})
    fs = fsspec.filesystem("aicache", **opts)
    want: dict[str, str] = spec["files"]
    order = sorted(want)
    random.Random(spec["order_seed"]).shuffle(order)
    fs.engine.target.exists(f"{ORIGIN}/{PREFIX}")  # the origin's client set up, as the tier's is
    t0 = time.monotonic()

    def read(path: str) -> bool:
        return hashlib.sha256(fs.cat_file(path)).hexdigest() == want[path]

    with cf.ThreadPoolExecutor(spec["threads"]) as pool:
        ok = all(pool.map(read, order))
    epoch_s = time.monotonic() - t0
    engine = fs.engine
    engine.close()  # waits for the shared tier's writer
    stats = {k: engine.metrics.value(k) for k in PERSISTED}
    print(json.dumps({"ok": ok, "epoch_s": epoch_s, "stats": stats}), flush=True)


# -- the job -----------------------------------------------------------------------------------
@dataclass(slots=True)
class NodeResult:
    node: int
    epoch_s: float
    wall_s: float  # the node's process, start to exit (imports, setup, the tier's writes at close)
    origin_gets: int  # counted at the origin while this node ran (staggered runs only)
    shared_hits: int
    bytes_ok: bool
    shared_errors: int = 0
    shared_skipped: int = 0
    shared_write_drops: int = 0


@dataclass(slots=True)
class RunResult:
    schedule: str
    system: str
    nodes: int
    origin_gets: int
    origin_get_bytes: int
    job_s: float
    shared_hits: int
    shared_tier_gets: int
    shared_tier_puts: int
    bytes_ok: bool
    warmup_origin_gets: int = 0
    warmup_s: float = 0.0
    per_node: list[NodeResult] = field(default_factory=list)


@dataclass(slots=True)
class Env:
    origin: CountingS3
    origin_line: DelayLine
    shared: CountingS3
    shared_line: DelayLine
    files: dict[str, str]
    args: argparse.Namespace
    work: str


def _node_proc(env: Env, system: str, run: str, i: int) -> subprocess.Popen[str]:
    a = env.args
    spec = {"origin": env.origin_line.url, "shared": env.shared_line.url if system != "per-node" else None,
            "cache_dir": os.path.join(env.work, run, f"node{i}"), "block_size": a.block_size,
            "policy": a.policy, "threads": a.threads, "files": env.files,
            "order_seed": a.seed * 1000 + i}
    return subprocess.Popen([sys.executable, __file__, "--node", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen[str], started: float) -> dict[str, Any]:
    out, err = p.communicate(timeout=NODE_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError(f"a node failed (exit {p.returncode}): {err[-2000:]}")
    res: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    res["wall_s"] = time.monotonic() - started
    return res


def _clear_shared(env: Env) -> None:
    fs = _s3(env.shared.endpoint_url)
    if fs.exists(f"{SHARED}/{PREFIX}"):
        fs.rm(f"{SHARED}/{PREFIX}", recursive=True)


def _warmup(env: Env, run: str) -> float:
    a = env.args
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "aicache.cli.main", "warmup", f"s3://{ORIGIN}/{PREFIX}",
                        "--endpoint-url", env.origin_line.url,
                        "--cache-dir", os.path.join(env.work, run, "warmup"),
                        "--block-size", a.block_size, "--shared-cache", f"s3://{SHARED}/{PREFIX}",
                        "--shared-cache-endpoint-url", env.shared_line.url, "--json"],
                       capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError(f"warmup failed: {r.stderr[-2000:]}")
    return time.monotonic() - t0


def run_one(env: Env, schedule: str, system: str) -> RunResult:
    n = env.args.nodes
    run = f"{schedule}-{system}"
    _clear_shared(env)
    o0, s0 = env.origin.counts().bucket(ORIGIN), env.shared.counts().bucket(SHARED)
    warmup_s = _warmup(env, run) if system == "shared+warmup" else 0.0
    o_w = env.origin.counts().bucket(ORIGIN)
    results: list[dict[str, Any]] = []
    node_gets: list[int] = []
    t0 = time.monotonic()
    if schedule == "staggered":
        for i in range(n):
            before = env.origin.counts().bucket(ORIGIN)
            started = time.monotonic()
            results.append(_finish(_node_proc(env, system, run, i), started))
            node_gets.append(env.origin.counts().bucket(ORIGIN).minus(before).get)
    else:
        procs = [_node_proc(env, system, run, i) for i in range(n)]
        results = [_finish(p, t0) for p in procs]
        node_gets = [-1] * n  # one origin counter: per-node shares are not separable
    job_s = time.monotonic() - t0
    o1, s1 = env.origin.counts().bucket(ORIGIN), env.shared.counts().bucket(SHARED)
    origin: RequestCounts = o1.minus(o0)
    tier: RequestCounts = s1.minus(s0)
    per_node = [NodeResult(i, round(r["epoch_s"], 3), round(r["wall_s"], 3), node_gets[i],
                           int(r["stats"]["shared_hits"]), bool(r["ok"]),
                           int(r["stats"]["shared_errors"]), int(r["stats"]["shared_skipped"]),
                           int(r["stats"]["shared_write_drops"]))
                for i, r in enumerate(results)]
    return RunResult(schedule, system, n, origin.get, origin.get_bytes, round(job_s, 3),
                     sum(p.shared_hits for p in per_node), tier.get, tier.other,
                     all(p.bytes_ok for p in per_node), o_w.minus(o0).get, round(warmup_s, 3),
                     per_node)


def summary(results: list[RunResult]) -> list[dict[str, Any]]:
    """Per run, origin GETs and job time over the per-node run of its schedule."""
    base = {r.schedule: r for r in results if r.system == "per-node"}
    rows = []
    for r in results:
        b = base.get(r.schedule)
        rows.append({"schedule": r.schedule, "system": r.system, "origin_gets": r.origin_gets,
                     "origin_MiB": round(r.origin_get_bytes / MiB, 1),
                     "gets_vs_per_node": round(r.origin_gets / b.origin_gets, 3) if b and b.origin_gets else None,
                     "job_s": r.job_s, "warmup_s": r.warmup_s,
                     "job_vs_per_node": round((r.job_s + r.warmup_s) / b.job_s, 3) if b and b.job_s else None,
                     "epochs_s": round(sum(p.epoch_s for p in r.per_node), 3),
                     "epochs_vs_per_node": (round(sum(p.epoch_s for p in r.per_node)
                                                  / sum(p.epoch_s for p in b.per_node), 3) if b else None),
                     "node_epoch_s": [p.epoch_s for p in r.per_node],
                     "node_wall_s": [p.wall_s for p in r.per_node],
                     "node_origin_gets": [p.origin_gets for p in r.per_node],
                     "shared_hits": r.shared_hits,
                     "shared_errors": sum(p.shared_errors for p in r.per_node),
                     "shared_skipped": sum(p.shared_skipped for p in r.per_node),
                     "shared_write_drops": sum(p.shared_write_drops for p in r.per_node),
                     "bytes_ok": r.bytes_ok})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4, help="nodes per job (default 4)")
    ap.add_argument("--files", type=int, default=40, help="files in the dataset (default 40)")
    ap.add_argument("--mib", type=float, default=24.0, help="dataset size in MiB (default 24)")
    ap.add_argument("--block-size", default="1MiB", help="cache block size (default 1MiB)")
    ap.add_argument("--latency-ms", type=float, default=10.0, help="origin delay per request (default 10)")
    ap.add_argument("--shared-latency-ms", type=float, default=1.0,
                    help="shared tier delay per request (default 1)")
    ap.add_argument("--threads", type=int, default=4, help="reader threads per node (default 4)")
    ap.add_argument("--policy", default="chiron", help="each node's local policy (default chiron)")
    ap.add_argument("--schedules", default="staggered",
                    help="staggered (default), together, or both: staggered,together (twice the time)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--node", default=None, help=argparse.SUPPRESS)  # a node's child process
    a = ap.parse_args(argv)
    if a.node is not None:
        node_main(a.node)
        return 0
    schedules = [s.strip() for s in a.schedules.split(",") if s.strip()]
    bad = [s for s in schedules if s not in SCHEDULES]
    if bad or not schedules or a.nodes < 1 or a.files < 1 or a.mib <= 0 or a.threads < 1:
        print(f"shared_tier.py: --schedules takes {','.join(SCHEDULES)}; --nodes, --files, "
              "--threads >= 1, --mib > 0", file=sys.stderr)
        return 2
    origin, shared = start_counting_s3(), start_counting_s3()
    work = tempfile.mkdtemp(prefix="aicache-shared-bench-")
    try:
        with DelayLine(("127.0.0.1", origin.port), a.latency_ms / 1000) as oline, \
                DelayLine(("127.0.0.1", shared.port), a.shared_latency_ms / 1000) as sline:
            _s3(shared.endpoint_url).mkdir(SHARED)
            files = make_dataset(origin, a.files, a.mib, a.seed)
            env = Env(origin, oline, shared, sline, files, a, work)
            results = [run_one(env, sch, sysm) for sch in schedules for sysm in SYSTEMS]
    finally:
        origin.stop()
        shared.stop()
        shutil.rmtree(work, ignore_errors=True)
    meta = {"nodes": a.nodes, "files": a.files, "dataset_MiB": a.mib, "block_size": a.block_size,
            "latency_ms": a.latency_ms, "shared_latency_ms": a.shared_latency_ms,
            "threads": a.threads, "policy": a.policy, "seed": a.seed}
    rows = summary(results)
    if a.json:
        print(json.dumps({"meta": meta, "summary": rows, "runs": [asdict(r) for r in results]}, indent=1))
    else:
        print(f"# {a.nodes} nodes' first epoch, {a.files} files / {a.mib:g} MiB, origin +{a.latency_ms:g} ms, "
              f"tier +{a.shared_latency_ms:g} ms")
        print(f"{'schedule':10} {'system':14} {'origin GETs':>11} {'vs per-node':>11} "
              f"{'epochs s':>8} {'vs per-node':>11} {'job s':>7} {'warmup s':>8} "
              f"{'vs per-node':>11} {'shared hits':>11} bytes")
        for r in rows:
            print(f"{r['schedule']:10} {r['system']:14} {r['origin_gets']:>11} "
                  f"{r['gets_vs_per_node'] if r['gets_vs_per_node'] is not None else '-':>11} "
                  f"{r['epochs_s']:>8} {r['epochs_vs_per_node'] or '-':>11} "
                  f"{r['job_s']:>7} {r['warmup_s']:>8} {r['job_vs_per_node'] or '-':>11} "
                  f"{r['shared_hits']:>11} {'ok' if r['bytes_ok'] else 'WRONG'}")
    return 0 if all(r.bytes_ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
