"""The end-to-end multi-phase job: a PyTorch DataLoader reading a W1-like dataset from S3
through the real cache, under each system, measuring JCT and CHR per phase.

The job (seed Table 2, W1, scaled): many ~110 KB image-like files in an S3 bucket (moto,
with ``latency_s`` injected per request by :class:`~aicache.datacache.remote.SlowFileSystem`),
a cache budget of ``cache_fraction`` of the dataset (W1: 1 GiB for 1.395 GiB), and one
DataLoader with ``workers`` worker processes running the phases back to back:

1. ``sequential`` — a data-preparation pass in path order;
2. ``random`` × ``epochs`` — shuffled training epochs;
3. ``skewed`` — weighted sampling (hard-case mining): ``hot_fraction`` of the files carry
   ``hot_weight`` of the probability mass.

Every worker reads through ``aicache`` with ``daemon="connect"``: the one policy daemon
of the cache directory (started here) sees the whole access stream, as the architecture
requires. A worker returns, per sample, a checksum of the bytes (checked against the
source) and how many of its blocks hit; the main process times phase boundaries.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import xxhash

MiB = 1024 * 1024


@dataclass(slots=True)
class JobParams:
    files: int = 200
    file_size: int = 110_000
    cache_fraction: float = 1.0 / 1.395
    latency_s: float = 0.02
    compute_s: float = 0.002
    epochs: int = 3
    workers: int = 2
    batch_size: int = 8
    hot_fraction: float = 0.1
    hot_weight: float = 0.9
    block_size: int = 4 * MiB
    seed: int = 0
    #: Chiron knobs for a job of seconds, not hours (reviews scale with the run length)
    chiron: dict[str, Any] = field(default_factory=lambda: {
        "first_review_s": 1.0, "routine_interval_s": 3.0, "reflection_interval_s": 3.0,
        "early_retry_s": 0.5, "round_s": 1.0, "min_window": 50, "min_round_accesses": 20})


def phase_plan(p: JobParams) -> list[tuple[str, list[int]]]:
    """The job's phases as (pattern, sample indices), deterministic in ``p.seed``."""
    rng = random.Random(p.seed)
    n = p.files
    plan: list[tuple[str, list[int]]] = [("sequential", list(range(n)))]
    for _ in range(p.epochs):
        perm = list(range(n))
        rng.shuffle(perm)
        plan.append(("random", perm))
    hot = rng.sample(range(n), max(1, int(n * p.hot_fraction)))
    hot_set = set(hot)
    cold = [i for i in range(n) if i not in hot_set]
    skewed = [rng.choice(hot) if (rng.random() < p.hot_weight or not cold) else rng.choice(cold)
              for _ in range(n)]
    plan.append(("skewed", skewed))
    return plan


class _Samples:
    """A torch map-style dataset over (phase number, file index) items. The cache
    filesystem is built lazily in each worker process (after fork)."""

    def __init__(self, root: str, names: list[str], s3_options: dict[str, Any], cache_dir: str,
                 capacity: int, p: JobParams) -> None:
        self.root, self.names, self.s3_options = root, names, s3_options
        self.cache_dir, self.capacity, self.p = cache_dir, capacity, p
        self._fs: Any = None

    def __len__(self) -> int:
        return len(self.names)

    def _open(self) -> Any:
        import fsspec

        from aicache.datacache.fs import AICacheFileSystem
        from aicache.datacache.remote import SlowFileSystem

        s3 = fsspec.filesystem("s3", **self.s3_options)
        slow = SlowFileSystem(fs=s3, latency=self.p.latency_s, seed=os.getpid())
        return AICacheFileSystem(fs=slow, cache_dir=self.cache_dir, cache_size=self.capacity,
                                 block_size=self.p.block_size, daemon="connect",
                                 root=self.root, skip_instance_cache=True)

    def __getitem__(self, item: tuple[int, int]) -> tuple[int, int, int, int, int]:
        if self._fs is None:
            self._fs = self._open()
        phase, i = item
        m = self._fs.engine.metrics
        h0, m0 = m.value("hits"), m.value("misses")
        data = self._fs.cat_file(f"{self.root}/{self.names[i]}")
        if self.p.compute_s:
            time.sleep(self.p.compute_s)
        return (phase, i, xxhash.xxh3_64_intdigest(data), int(m.value("hits") - h0),
                int(m.value("misses") - m0))


def _collate(batch: list[Any]) -> list[Any]:
    return batch


def upload_dataset(fs: Any, root: str, p: JobParams) -> tuple[list[str], dict[int, int]]:
    """Seeded files under ``root``; returns names and the checksum of each file."""
    rng = random.Random(p.seed + 1)
    names, digests = [], {}
    for i in range(p.files):
        name = f"train/img-{i:06d}.jpg"
        size = max(1, int(rng.gauss(p.file_size, p.file_size * 0.1)))
        data = rng.randbytes(size)
        fs.pipe_file(f"{root}/{name}", data)
        names.append(name)
        digests[i] = xxhash.xxh3_64_intdigest(data)
    return names, digests


def run_system(system: str, s3: Any, root: str, names: list[str], digests: dict[int, int],
               p: JobParams, workdir: str) -> dict[str, Any]:
    """One full job under ``system``; returns JCT and CHR, total and per phase."""
    import torch
    from torch.utils.data import DataLoader

    from aicache.adaptive.systems import make_system
    from aicache.datacache.daemon import PolicyDaemon
    from aicache.datacache.policy import LocalPolicy

    dataset_bytes = p.files * p.file_size
    capacity = int(dataset_bytes * p.cache_fraction)
    cache_dir = os.path.join(workdir, f"cache-{system}")
    os.makedirs(cache_dir, exist_ok=True)
    extra: dict[str, Any] = {"runner": "thread", **p.chiron} if system == "chiron" else {}
    sysobj = make_system(system, capacity, p.block_size, advisor="statistical", seed=p.seed, **extra)
    daemon = PolicyDaemon(cache_dir, LocalPolicy(sysobj, p.block_size))
    daemon.start_thread()
    plan = phase_plan(p)
    # batches never mix phases (the two workers still overlap the last batch of one phase
    # with the first of the next, as a real input pipeline does)
    batches = [[(k, i) for i in idx[j:j + p.batch_size]]
               for k, (_name, idx) in enumerate(plan) for j in range(0, len(idx), p.batch_size)]
    ds = _Samples(root, names, s3.storage_options, cache_dir, capacity, p)
    loader = DataLoader(ds, batch_sampler=batches, num_workers=p.workers, collate_fn=_collate,
                        generator=torch.Generator().manual_seed(p.seed))
    hits = [0] * len(plan)
    misses = [0] * len(plan)
    last = [0.0] * len(plan)
    bad = 0
    try:
        t0 = time.perf_counter()
        for batch in loader:
            now = time.perf_counter() - t0
            for phase, i, digest, h, m in batch:
                hits[phase] += h
                misses[phase] += m
                last[phase] = now
                bad += digest != digests[i]
        jct = time.perf_counter() - t0
        st = daemon.policy.stats()
    finally:
        daemon.stop()
        shutil.rmtree(cache_dir, ignore_errors=True)
    phases = []
    prev = 0.0
    for k, (name, idx) in enumerate(plan):
        reads = hits[k] + misses[k]
        phases.append({"name": f"{k}:{name}", "pattern": name, "requests": reads,
                       "chr": round(hits[k] / reads, 4) if reads else 0.0,
                       "seconds": round(last[k] - prev, 3)})
        prev = last[k]
    total = sum(hits) + sum(misses)
    return {"system": system, "jct_seconds": round(jct, 3), "chr": round(sum(hits) / total, 4),
            "requests": total, "bad_samples": bad, "cache_size_bytes": capacity,
            "advisor_calls": st.get("advisor_calls", 0), "switches": st.get("switches", 0),
            "active_patterns": st.get("active_patterns", {}), "phases": phases}


def run_job(systems: list[str], p: JobParams | None = None, s3: Any = None) -> dict[str, Any]:
    """The job under each system on one uploaded dataset; ``s3`` defaults to a fresh moto."""
    from aicache.datacache.remote import start_s3

    p = p or JobParams()
    own = s3 is None
    if own:
        s3 = start_s3()
    workdir = tempfile.mkdtemp(prefix="aicache-e2e-")
    try:
        fs = s3.filesystem()
        bucket = f"aicache-e2e-{p.seed}"
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        root = f"{bucket}/w1"
        names, digests = upload_dataset(fs, root, p)
        rows = [run_system(s, s3, root, names, digests, p, workdir) for s in systems]
        return {"params": asdict(p), "rows": rows}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if own:
            s3.stop()
