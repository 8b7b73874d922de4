"""A multi-phase PyTorch job through the real data cache, over S3: the end-to-end check.

The simulator says Chiron beats fixed policies on multi-phase AI workflows; this module
checks it on the real engine with real bytes, real processes and a real object store. A
W1-like job (the seed's ResNet-50 workflow, scaled down) is run as a real program:

1. **Dataset**: the workload generator's file layout (:func:`aicache.traces.workflows.
   build_dataset`: W1 = many ~110 KB JPEG-sized files in ~100 folders, seeded sizes) is
   written into an S3 bucket (moto's server on loopback in tests and the demo; any bucket
   for users) with *fully* seeded pseudo-random bytes, so every byte read back can be
   checked against the xxh3 digest of what was written (the generator's own
   ``materialize`` writes a 64 KiB head and a sparse hole; a hole of zeros would hide a
   misplaced block).
2. **Reader**: a ``torch.utils.data.Dataset`` whose ``__getitem__`` reads one sample (one
   file; a file pair or one block of a shard for the other workflows) through an fsspec
   filesystem — the ``aicache`` filesystem over ``slow`` (:class:`aicache.testing.SlowFileSystem`:
   20 ms per request, like a nearby object store) over ``s3``, or for ``nocache`` the
   ``slow`` s3 filesystem directly — then emulates the per-sample compute of the phase
   with a fixed sleep (a sleep, not a busy loop: the CPU is shared, a sleep costs the same
   wall time on any machine).
3. **Phases** (the workflow spec's): a sequential preprocessing pass in path order
   (``SequentialSampler``), shuffled epochs (``RandomSampler`` with a seeded generator, one
   new permutation per epoch, persistent workers), and a weighted-sampling phase
   (``WeightedRandomSampler`` whose weights put ``hot_share`` of the draws on a hot set of
   ``hot_fraction`` of the samples, made of short runs of neighbours as in the generator).
   One ``DataLoader`` with ``loader_workers`` worker processes (default 2, CPU) and
   batches of 32 (torchvision's ResNet-50 reference); a worker reads its batch in order,
   so the cache sees the workers' batches interleaved, as a real job's cache does.
4. **Measures**: JCT = wall time of all phases (worker start-up included, the same for
   every system); CHR = demand block hits / demand block reads, from each worker engine's
   own hit/miss counters (read in the worker around every sample and summed by the main
   process, per phase); remote requests and bytes (demand + prefetch), counted by the
   remote wrapper into shared-memory counters; and the policy owner's advisor calls,
   switches and active patterns.

**One policy owner.** DataLoader workers are separate processes. With ``shared_policy``
(the default) the job starts the cache directory's policy daemon
(:class:`aicache.datacache.daemon.PolicyDaemon`) in its own process before the loaders,
and every worker's filesystem connects to it (``daemon="connect"``): one access stream,
one budget, one Chiron controller (a cache directory has one policy owner). With
``shared_policy=False`` each worker decides alone (the store stays safe, but each policy
sees an interleaved fragment of the stream and manages the shared budget blindly); the
benchmark runs both to show the difference.

**Controller clock.** Chiron's review and feedback periods are wall-clock seconds chosen
for jobs whose phases last many minutes (the full-size W1 in the simulator runs ~1,000 s).
A scaled-down job has phases of seconds, so the periods are multiplied by ``time_scale``
(default :func:`default_time_scale`: one feedback round then holds the controller's
minimum number of reads at the job's cold read rate). Window sizes and thresholds are
counts and ratios and stay the seed's.

Determinism: dataset bytes, sampler orders and hot sets depend only on ``seed``; JCT is a
wall-clock measurement of a real run and varies with the machine's load.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from aicache.testing import S3Server, SlowFileSystem
from aicache.errors import BadInput
from aicache.units import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from aicache.policies.system import DataCacheSystem

#: the job's systems, in report order (the seed's baselines for the data cache + Chiron)
JOB_SYSTEMS: tuple[str, ...] = ("nocache", "juicefs", "alluxio", "chiron")

#: (path, start, end) — one ranged read of a sample
Read = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class JobParams:
    """Everything that defines a run. Defaults: W1 at 2% scale (266 files, 30 MB, a
    21.5 MB budget = the seed's 1 GiB of 1.395 GiB), 2 loader workers, batches of 32,
    20 ms per remote request."""

    workload: str = "W1"
    scale: float = 0.02
    seed: int = 0
    loader_workers: int = 2
    #: torchvision's classification reference trains ResNet-50 with 32 images per batch
    batch_size: int = 32
    #: injected per-request latency of the remote (seconds) and bandwidth (bytes/s, None = no cap)
    latency_s: float = 0.020
    bandwidth_bps: float | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    #: the cache budget in bytes; None = the workflow's budget at this scale
    cache_bytes: int | None = None
    #: multiplies the workflow's per-read compute time
    compute_scale: float = 1.0
    #: one policy owner (the cache daemon) for all loader workers
    shared_policy: bool = True
    #: multiplies Chiron's wall-clock periods; None = :func:`default_time_scale`
    time_scale: float | None = None
    advisor: str = "statistical"
    bucket: str = "aicache-e2e"

    def __post_init__(self) -> None:
        if self.loader_workers < 1:
            raise BadInput(f"loader_workers={self.loader_workers!r} must be >= 1")
        if self.batch_size < 1:
            raise BadInput(f"batch_size={self.batch_size!r} must be >= 1")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise BadInput(f"latency_s={self.latency_s!r} must be a non-negative number of seconds")
        if not (self.compute_scale >= 0 and math.isfinite(self.compute_scale)):
            raise BadInput(f"compute_scale={self.compute_scale!r} must be >= 0")
        if self.time_scale is not None and not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise BadInput(f"time_scale={self.time_scale!r} must be a positive number")


# -- the dataset ---------------------------------------------------------------------------------
@dataclass(slots=True)
class PhasePlan:
    """One phase: its sampler kind and the spec's numbers."""

    name: str
    pattern: str  # sequential | random | skewed
    compute_s: float  # per read
    passes: int
    draws: int = 0  # skewed: samples drawn
    hot: np.ndarray | None = None  # skewed: the hot samples
    hot_share: float = 0.0  # skewed: share of the draws that go to the hot set


@dataclass(slots=True)
class JobDataset:
    """Files (relative paths, sizes), samples (each a tuple of reads) and phases."""

    workload: str
    files: list[tuple[str, int]]
    samples: list[tuple[Read, ...]]
    phases: list[PhasePlan]
    cache_bytes: int
    block_size: int

    @property
    def total_bytes(self) -> int:
        return sum(s for _p, s in self.files)

    def blocks_of(self, sample: int) -> int:
        """Demand blocks one read of ``sample`` touches (what CHR counts)."""
        B = self.block_size
        return sum(((e - 1) // B - s // B + 1) if e > s else 0 for _p, s, e in self.samples[sample])


def _hot_set(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """About ``fraction * n`` samples in short runs of neighbours (mean length 4): the
    generator's shape of a hot set (a popular folder, neighbouring rows)."""
    want = max(1, int(round(fraction * n)))
    chosen = np.zeros(n, dtype=bool)
    while int(chosen.sum()) < want:
        start = int(rng.integers(0, n))
        length = int(min(rng.geometric(0.25), want - int(chosen.sum())))
        chosen[start:start + length] = True
    return np.flatnonzero(chosen)


def _rescale_folders(spec: Any, files: list[tuple[str, int]], scale: float) -> list[tuple[str, int]]:
    """Keep the full-size dataset's *files per folder* when it is scaled down.

    The generator keeps the folder count (W1: 100) at every scale, so at 2% a folder holds
    ~3 files instead of ~133 and a scaled-down run would spend its time listing folders
    (the engine lists a folder the first time one of its files is read). Here the folder
    count scales with the dataset: ``round(subdirs * scale)`` folders (at least one), files
    spread over them in path order, names kept. Path order (and so the block map) is
    unchanged."""
    if spec.subdirs <= 1:
        return files
    n_dirs = max(1, round(spec.subdirs * scale))
    per = -(-len(files) // n_dirs)
    if spec.pair_mean:  # keep a pair in one folder
        per += per % 2
    out = []
    for i, (path, size) in enumerate(files):
        head, _, name = path.partition("/")
        out.append((f"{head}/{i // per:04d}/{name.rsplit('/', 1)[-1]}", size))
    return out


def build_job_dataset(params: JobParams) -> JobDataset:
    """The workflow's dataset at ``params.scale`` as files + samples + phase plans (no I/O)."""
    from aicache.traces.workflows import SPECS, build_dataset

    spec = SPECS.get(params.workload.upper())
    if spec is None:
        raise BadInput(f"unknown workload {params.workload!r}; valid: {', '.join(SPECS)}")
    if not (params.scale > 0 and math.isfinite(params.scale)):
        raise BadInput(f"scale={params.scale!r} must be a positive number, e.g. 0.02")
    ds = build_dataset(spec, params.scale, params.seed, params.block_size)
    files = _rescale_folders(spec, [(p, int(s)) for p, s in zip(ds.paths, ds.sizes.tolist())],
                             params.scale)
    B = params.block_size
    samples: list[tuple[Read, ...]]
    if spec.item_is_block:  # large shards: a sample is one block of a shard
        samples = [((p, b * B, min(s, (b + 1) * B)),) for p, s in files for b in range(max(1, -(-s // B)))]
    elif spec.pair_mean:  # (data, caption) pairs, adjacent in path order
        samples = [((files[i][0], 0, files[i][1]), (files[i + 1][0], 0, files[i + 1][1]))
                   for i in range(0, len(files) - 1, 2)]
    else:
        samples = [((p, 0, s),) for p, s in files]
    n = len(samples)
    rng = np.random.default_rng([params.seed, 11])
    phases = []
    for ph in spec.phases:
        plan = PhasePlan(ph.name, ph.kind, ph.compute_ms / 1000.0 * params.compute_scale, ph.passes)
        if ph.kind == "skewed":
            plan.draws = max(1, int(round(ph.draws_per_item * n)))
            plan.hot = _hot_set(n, ph.hot_fraction, rng)
            plan.hot_share = ph.hot_share
            plan.passes = 1
        phases.append(plan)
    cache = params.cache_bytes
    if cache is None:
        cache = int(round(spec.cache_gib * (1 << 30) * params.scale))
    if cache <= 0:
        raise BadInput(f"cache size {cache!r} must be positive")
    return JobDataset(spec.id, files, samples, phases, cache, B)


def file_bytes(seed: int, index: int, size: int) -> bytes:
    """The content of file ``index`` of the dataset: seeded, incompressible."""
    return np.random.default_rng([seed, 3, index]).bytes(size)


def digest(data: bytes | memoryview) -> int:
    import xxhash

    return int(xxhash.xxh3_64_intdigest(data))


def materialize_s3(fs: Any, root: str, ds: JobDataset, seed: int, chunk_bytes: int = 64 << 20
                   ) -> dict[str, int]:
    """Write the dataset under ``root`` ("bucket/prefix") of the S3 filesystem ``fs``, in
    concurrent batches of about ``chunk_bytes``; returns the reference xxh3 of every sample
    (over its reads, in order), from the same seeded bytes."""
    import xxhash

    batch: dict[str, bytes] = {}
    held = 0
    for i, (rel, size) in enumerate(ds.files):
        batch[f"{root}/{rel}"] = file_bytes(seed, i, size)
        held += size
        if held >= chunk_bytes:
            fs.pipe(batch)
            batch, held = {}, 0
    if batch:
        fs.pipe(batch)
    index = {rel: i for i, (rel, _s) in enumerate(ds.files)}
    last: tuple[str, bytes] = ("", b"")  # samples of one shard are consecutive
    out: dict[str, int] = {}
    for k, reads in enumerate(ds.samples):
        h = xxhash.xxh3_64()
        for rel, s, e in reads:
            if last[0] != rel:
                last = (rel, file_bytes(seed, index[rel], ds.files[index[rel]][1]))
            h.update(last[1][s:e])
        out[str(k)] = h.intdigest()
    return out


# -- the remote, counted across processes ---------------------------------------------------------
class CountedRemote(SlowFileSystem):
    """The latency-injecting remote that also counts requests and bytes into
    shared-memory counters (so the main process sees what every worker fetched, demand and
    prefetch alike)."""

    protocol = "slow-counted"

    def __init__(self, *args: Any, counters: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counters = counters

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        data: bytes = super().cat_file(path, start=start, end=end, **kwargs)
        c = self.counters
        if c is not None:
            with c.get_lock():
                c[0] += 1
                c[1] += len(data)
        return data


@dataclass(slots=True)
class ReaderConfig:
    """What a loader worker needs to open its filesystem (inherited over fork)."""

    system: str
    storage_options: dict[str, Any]
    latency_s: float
    bandwidth_bps: float | None
    cache_dir: str
    cache_bytes: int
    block_size: int
    seed: int
    root: str
    shared_policy: bool
    #: builds the system for a worker that owns its own policy (shared_policy=False)
    make_system: Callable[[], Any] | None = None
    counters: Any = None


def _counter(c: Any) -> float:
    """Current value of a prometheus Counter (its own collect(): no registry-wide scrape,
    no daemon round trip)."""
    return float(sum(s.value for s in c.collect()[0].samples if s.name.endswith("_total")))


#: what one read of a sample reports: (phase, index, digest, hits, misses, nbytes)
Sample = tuple[int, int, int, int, int, int]


class RemoteSampleDataset:
    """A map-style dataset whose samples are read through an fsspec filesystem.

    ``__getitem__((phase, index))`` returns ``(phase, index, digest, hits, misses, nbytes)``:
    the xxh3 of the sample's bytes and the demand block hits/misses the worker's engine
    counted while reading it (a worker reads one sample at a time, so the delta is exact).
    Then it sleeps the phase's compute time per read. The filesystem is opened lazily in the worker process (after the fork), never
    shared between processes.
    """

    def __init__(self, ds: JobDataset, cfg: ReaderConfig) -> None:
        self.ds = ds
        self.cfg = cfg
        self._fs: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.ds.samples)

    def filesystem(self) -> Any:
        if self._fs is not None and self._pid == os.getpid():
            return self._fs
        import fsspec

        cfg = self.cfg
        s3 = fsspec.filesystem("s3", **{**cfg.storage_options, "skip_instance_cache": True})
        remote = CountedRemote(fs=s3, latency=cfg.latency_s, bandwidth=cfg.bandwidth_bps,
                               seed=cfg.seed, counters=cfg.counters)
        if cfg.system == "nocache":
            fs: Any = remote
        else:
            from aicache.datacache.fs import AICacheFileSystem

            policy: str | DataCacheSystem = cfg.system
            if not cfg.shared_policy and cfg.make_system is not None:
                policy = cfg.make_system()
            fs = AICacheFileSystem(fs=remote, cache_dir=cfg.cache_dir, cache_size=cfg.cache_bytes,
                                   block_size=cfg.block_size, policy=policy, seed=cfg.seed,
                                   root=cfg.root, daemon="connect" if cfg.shared_policy else False,
                                   skip_instance_cache=True)
            # close the engine when the worker exits: finishes its prefetches (so the
            # remote counters are complete) and closes the index and the daemon socket
            multiprocessing.util.Finalize(fs, fs.close, exitpriority=10)
        self._fs, self._pid = fs, os.getpid()
        return fs

    def __getitem__(self, item: tuple[int, int]) -> Sample:
        """``item`` = (phase, sample) from :class:`PhasedBatchSampler`."""
        phase, index = item
        fs = self.filesystem()
        engine = getattr(fs, "engine", None)
        h0 = m0 = 0.0
        if engine is not None:
            h0, m0 = engine.metrics.reads.hits, _counter(engine.metrics.misses)
        parts = []
        root = self.cfg.root
        for rel, s, e in self.ds.samples[index]:
            parts.append(fs.cat_file(f"{root}/{rel}", start=s, end=e))
        data = b"".join(parts)
        if engine is not None:
            hits = int(engine.metrics.reads.hits - h0)
            misses = int(_counter(engine.metrics.misses) - m0)
        else:  # no cache: every block is fetched
            hits, misses = 0, self.ds.blocks_of(index)
        compute = self.ds.phases[phase].compute_s * len(self.ds.samples[index])
        if compute > 0:
            time.sleep(compute)
        return phase, index, digest(data), hits, misses, len(data)


def _keep(batch: list[Sample]) -> list[Sample]:
    return batch


# -- results -------------------------------------------------------------------------------------
@dataclass(slots=True)
class PhaseResult:
    name: str
    pattern: str
    samples: int
    requests: int  # demand block reads
    hits: int
    seconds: float

    @property
    def chr(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pattern": self.pattern, "samples": self.samples,
                "requests": self.requests, "chr": self.chr, "seconds": self.seconds}


@dataclass(slots=True)
class JobResult:
    """One system's run. ``content_ok``: every sample's digest matched the source."""

    system: str
    workload: str
    cache_size_bytes: int
    dataset_bytes: int
    jct_seconds: float
    phases: list[PhaseResult]
    samples_read: int
    bytes_read: int
    mismatches: int
    remote_requests: int
    remote_bytes: int
    policy: dict[str, Any] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return sum(p.requests for p in self.phases)

    @property
    def hits(self) -> int:
        return sum(p.hits for p in self.phases)

    @property
    def chr(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def content_ok(self) -> bool:
        return self.mismatches == 0 and self.samples_read > 0

    def to_dict(self) -> dict[str, Any]:
        """``sim datacache --json``'s keys where they apply, plus the real run's own."""
        return {
            "system": self.system, "workload": self.workload,
            "cache_size_bytes": self.cache_size_bytes, "dataset_bytes": self.dataset_bytes,
            "requests": self.requests, "hits": self.hits, "chr": self.chr,
            "jct_seconds": self.jct_seconds, "remote_requests": self.remote_requests,
            "remote_bytes": self.remote_bytes, "samples_read": self.samples_read,
            "bytes_read": self.bytes_read, "mismatches": self.mismatches,
            "content_ok": self.content_ok,
            "advisor_calls": self.policy.get("advisor_calls"),
            "switches": self.policy.get("switches"),
            "active_patterns": self.policy.get("active_patterns"),
            "phases": [p.to_dict() for p in self.phases],
        }


# -- the job -------------------------------------------------------------------------------------
def scaled_chiron_params(time_scale: float, **overrides: Any) -> dict[str, Any]:
    """ChironParams keyword arguments with every wall-clock period (``*_s`` fields)
    multiplied by ``time_scale`` (see the module docstring)."""
    from aicache.adaptive.controller import ChironParams

    out: dict[str, Any] = {}
    for f in dataclasses.fields(ChironParams):
        v = getattr(ChironParams(), f.name)
        if f.name.endswith("_s") and isinstance(v, float):
            out[f.name] = v * time_scale
    out.update(overrides)
    return out


def default_time_scale(params: JobParams, ds: JobDataset) -> float:
    """The factor on Chiron's wall-clock periods for this job (at most 1).

    Chosen so that one feedback round holds the controller's ``min_round_accesses`` demand
    reads at the job's *cold* read rate (every read a miss: ``loader_workers`` readers,
    each paying the remote latency plus the mean compute per read): a shorter round would
    carry no CHR (the reflector ignores quiet rounds), a longer one reacts later than it
    must. Every other period (first review, early retry, routine review) keeps its ratio to
    the round, as in the seed's defaults. Derived from the job's parameters only."""
    from aicache.adaptive.controller import ChironParams

    cp = ChironParams()
    computes = [p.compute_s for p in ds.phases] or [0.0]
    per_read = params.latency_s + sum(computes) / len(computes)
    if per_read <= 0:
        return 1.0
    rate = params.loader_workers / per_read  # demand reads per second, all misses
    return min(1.0, cp.min_round_accesses / (cp.round_s * rate))


def make_job_system(system: str, params: JobParams, ds: JobDataset, *, runner: str = "thread") -> Any:
    """The DataCacheSystem of ``system`` for this job (Chiron with the scaled clock)."""
    from aicache.datacache.policy.registry import make_system

    extra: dict[str, Any] = {}
    if system == "chiron":
        ts = default_time_scale(params, ds) if params.time_scale is None else params.time_scale
        extra = {"runner": runner, **scaled_chiron_params(ts)}
    return make_system(system, ds.cache_bytes, ds.block_size, advisor=params.advisor,
                       seed=params.seed, **extra)


class _SystemFactory:
    """Picklable-enough (inherited over fork) builder of a worker's own system."""

    def __init__(self, system: str, params: JobParams, ds: JobDataset) -> None:
        self.system, self.params, self.ds = system, params, ds

    def __call__(self) -> Any:
        return make_job_system(self.system, self.params, self.ds)


@contextmanager
def _policy_owner(system: str, params: JobParams, ds: JobDataset, cache_dir: str
                  ) -> Iterator[Any]:
    """The cache directory's policy daemon, served from this process for the job."""
    if system == "nocache" or not params.shared_policy:
        yield None
        return
    from aicache.datacache.daemon import PolicyDaemon, store_driver

    # the job stops it: between phases no worker may be connected for a while
    driver = store_driver(make_job_system(system, params, ds), ds.block_size, ds.cache_bytes)
    daemon = PolicyDaemon(cache_dir, driver, idle_exit_s=float("inf"))
    daemon.start_thread()
    try:
        yield daemon
    finally:
        daemon.stop()


def _hot_weights(plan: PhasePlan, n: int) -> Any:
    """Sampling weights: ``hot_share`` of the mass uniform over the hot set, the rest
    uniform over all samples (the generator's draw: hot with probability ``hot_share``,
    else any sample)."""
    import torch

    assert plan.hot is not None
    w = np.full(n, (1.0 - plan.hot_share) / n)
    w[plan.hot] += plan.hot_share / plan.hot.size
    return torch.as_tensor(w, dtype=torch.double)


def phase_sampler(plan: PhasePlan, n: int, seed: int, phase: int) -> tuple[Any, int]:
    """``(torch sampler, passes)`` of one phase; randomness from a generator seeded by
    (seed, phase). A ``RandomSampler`` draws a new permutation every pass (epoch)."""
    import torch
    from torch.utils.data import RandomSampler, SequentialSampler, WeightedRandomSampler

    g = torch.Generator()
    g.manual_seed(int(seed) * 1_000 + phase)
    if plan.pattern == "sequential":
        return SequentialSampler(range(n)), plan.passes
    if plan.pattern == "random":
        return RandomSampler(range(n), generator=g), plan.passes
    if plan.pattern == "skewed":
        return WeightedRandomSampler(_hot_weights(plan, n), plan.draws, replacement=True,
                                     generator=g), 1
    raise BadInput(f"unknown phase pattern {plan.pattern!r}")


class PhasedBatchSampler:
    """The job's phases as one stream of batches for one ``DataLoader``.

    Each phase's torch sampler is iterated ``passes`` times and cut into batches of
    ``batch_size`` that never straddle a phase; every index is tagged with its phase
    (``(phase, sample)``), so the workers know the phase's compute time and the main
    process can attribute hits. One loader (persistent workers for the whole job) rather
    than one per phase keeps each worker's engine — and its metadata cache — alive, as a
    long-running training process would.
    """

    def __init__(self, ds: JobDataset, batch_size: int, seed: int) -> None:
        n = len(ds.samples)
        self.batch_size = batch_size
        self.plans = [phase_sampler(p, n, seed, k) for k, p in enumerate(ds.phases)]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        B = self.batch_size
        for k, (sampler, passes) in enumerate(self.plans):
            for _ in range(passes):
                batch: list[tuple[int, int]] = []
                for i in sampler:
                    batch.append((k, int(i)))
                    if len(batch) == B:
                        yield batch
                        batch = []
                if batch:
                    yield batch

    def __len__(self) -> int:
        return sum(passes * -(-len(s) // self.batch_size) for s, passes in self.plans)


def phase_orders(ds: JobDataset, batch_size: int, seed: int) -> list[list[int]]:
    """The sample order of every phase (all passes), as the loader will request it."""
    out: list[list[int]] = [[] for _ in ds.phases]
    for batch in PhasedBatchSampler(ds, batch_size, seed):
        for k, i in batch:
            out[k].append(i)
    return out


def run_job(system: str, params: JobParams, ds: JobDataset, storage_options: Mapping[str, Any],
            reference: Mapping[str, int], workdir: str) -> JobResult:
    """Run the whole job once through ``system`` with a cold cache; see the module docstring."""
    from torch.utils.data import DataLoader, Dataset

    from aicache.datacache.store import BlockStore

    if system not in JOB_SYSTEMS:
        raise BadInput(f"unknown system {system!r} for the end-to-end job; valid: {', '.join(JOB_SYSTEMS)}")
    cache_dir = tempfile.mkdtemp(prefix=f"{system[:8]}-", dir=workdir)
    counters = multiprocessing.get_context("fork").Array("q", 2)
    cfg = ReaderConfig(system=system, storage_options=dict(storage_options),
                       latency_s=params.latency_s, bandwidth_bps=params.bandwidth_bps,
                       cache_dir=cache_dir, cache_bytes=ds.cache_bytes, block_size=ds.block_size,
                       seed=params.seed, root=params.bucket, shared_policy=params.shared_policy,
                       make_system=_SystemFactory(system, params, ds), counters=counters)
    dataset = RemoteSampleDataset(ds, cfg)
    batches = PhasedBatchSampler(ds, params.batch_size, params.seed)
    nph = len(ds.phases)
    hits, reqs, count, ends = [0] * nph, [0] * nph, [0] * nph, [0.0] * nph
    mismatches = samples = nbytes = 0
    policy: dict[str, Any] = {}
    try:
        with _policy_owner(system, params, ds, cache_dir) as daemon:
            # DataLoader duck-types a map-style dataset (``__getitem__``, ``__len__``): the
            # dataset class does not subclass torch's, so importing this module needs no torch
            loader: DataLoader[Sample] = DataLoader(
                cast("Dataset[Sample]", dataset), batch_sampler=batches,
                num_workers=params.loader_workers, collate_fn=_keep, multiprocessing_context="fork")
            t0 = time.monotonic()
            for batch in loader:
                for phase, idx, dg, h, m, nb in batch:
                    samples += 1
                    nbytes += nb
                    mismatches += dg != reference[str(idx)]
                    hits[phase] += h
                    reqs[phase] += h + m
                    count[phase] += 1
                    ends[phase] = time.monotonic() - t0
            jct = time.monotonic() - t0
            del loader  # joins the workers (their engines close, prefetches finish)
            if daemon is not None:
                policy = _policy_stats(daemon, t0)
        store = BlockStore.open_existing(cache_dir) if system != "nocache" else None
        if store is not None:
            with store:
                st = store.stats()
                bad = store.verify(clean=False)
            policy.update(cache_used_bytes=st.used_bytes, cache_blocks=st.blocks,
                          cache_bad_blocks=bad.bad + bad.missing)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    starts = [0.0] + ends[:-1]
    phases = [PhaseResult(p.name, p.pattern, count[k], reqs[k], hits[k], max(0.0, ends[k] - starts[k]))
              for k, p in enumerate(ds.phases)]
    return JobResult(system, ds.workload, ds.cache_bytes, ds.total_bytes, jct, phases, samples,
                     nbytes, mismatches, int(counters[0]), int(counters[1]), policy)


def _policy_stats(daemon: Any, t0: float) -> dict[str, Any]:
    """The policy owner's counters, and Chiron's decisions on the job's clock."""
    st = dict(daemon.policy.stats())
    out = {k: st.get(k) for k in ("advisor_calls", "advisor_tokens", "switches", "active_patterns",
                                  "no_advice", "rejected_advice") if k in st}
    system = daemon.policy.system
    log = getattr(system, "log", None)
    if log:
        # the daemon's clock started just before the job's: shift its times onto the job's
        shift = daemon._t0 - t0 if hasattr(daemon, "_t0") else 0.0
        out["decisions"] = [{"t": round(d["t"] + shift, 3), "unit": d["unit"], "pattern": d["pattern"],
                             "confidence": d["confidence"], "accepted": d["accepted"]} for d in log]
    return out


def run_systems(params: JobParams, systems: Sequence[str] = JOB_SYSTEMS, *,
                server: S3Server | None = None, workdir: str | None = None,
                progress: Callable[[str], None] | None = None) -> list[JobResult]:
    """Materialise the dataset in S3 (``server``, or a moto server started here) and run
    the job once per system, one after the other, each with a cold cache."""
    from aicache.testing import start_s3

    for s in systems:
        if s not in JOB_SYSTEMS:
            raise BadInput(f"unknown system {s!r} for the end-to-end job; valid: {', '.join(JOB_SYSTEMS)}")
    ds = build_job_dataset(params)
    own = server is None
    srv = start_s3() if server is None else server
    tmp = tempfile.mkdtemp(prefix="aicache-e2e-", dir=workdir)
    try:
        fs = srv.filesystem()
        if not fs.exists(params.bucket):
            fs.mkdir(params.bucket)
        reference = materialize_s3(fs, params.bucket, ds, params.seed)
        out = []
        for s in systems:
            if progress is not None:
                progress(s)
            out.append(run_job(s, params, ds, srv.storage_options, reference, tmp))
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if own:
            srv.stop()


def table_rows(results: Sequence[JobResult]) -> list[dict[str, Any]]:
    """One row per system: the headline numbers (JCT, CHR, remote traffic, phases' CHR)."""
    rows = []
    for r in results:
        row: dict[str, Any] = {"system": r.system, "jct_s": round(r.jct_seconds, 2),
                               "chr": round(r.chr, 4), "remote_requests": r.remote_requests,
                               "remote_MB": round(r.remote_bytes / 1e6, 2),
                               "content_ok": r.content_ok}
        for p in r.phases:
            row[f"chr[{p.pattern}]"] = round(p.chr, 3)
        row["switches"] = r.policy.get("switches")
        rows.append(row)
    return rows
