"""AI data-workflow generators: the published evaluation's workloads W1–W3 and T1–T6
(docs/design/chiron.md, "Evaluation workloads").

Each generator builds a *dataset* (files sorted by path, each mapped to a consecutive range
of 4 MiB blocks, so a sorted traversal is a stride — the JuiceFS chunk layout) and a list
of *phases* over it. A phase reads *items* (a small file, an image+caption pair, or one
block of a large shard):

* ``sequential`` — every item once in path order (``passes`` times);
* ``random`` — ``passes`` shuffled epochs, a new permutation each;
* ``skewed`` — ``draws`` items, ``hot_share`` of them from a hot set of ``hot_fraction``
  of the items. The hot set is made of short runs of neighbouring items (a popular
  directory, neighbouring embedding rows) and is drawn afresh for every phase.

Sizes at ``scale=1`` are the seed's (dataset bytes exact to the byte, GiB = 2^30); the
cache budget scales with the dataset. Each phase has a compute cost per *read* (a sample's
compute divided over its reads) and the workload a loader concurrency; the trace's
``timestamp`` is the zero-I/O schedule (cumulative compute / workers), which the datacache
simulator turns back into per-read compute.

Deterministic: the same (name, scale, seed) gives the same trace, byte for byte.
:func:`generate_workflow` materialises it; :func:`plan_workflow` gives the same reads as a
replayable stream of chunks (O(dataset) memory, for the ~1 TB runs).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import Phase
from aicache.units import DEFAULT_BLOCK_SIZE

GiB = 1 << 30
KiB = 1 << 10
MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class PhaseSpec:
    """One phase of a workflow (see module docstring for ``kind``)."""

    name: str
    kind: str  # "sequential" | "random" | "skewed"
    compute_ms: float  # per read
    passes: int = 1
    draws_per_item: float = 0.0  # skewed: draws = draws_per_item * items
    hot_fraction: float = 0.1
    hot_share: float = 0.8


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    """One published evaluation workload. ``file_mean`` / ``file_sigma``: log-normal file sizes (sigma 0 =
    equal shards); ``pair_ext`` / ``pair_mean``: each item is a (data, sidecar) file pair,
    the sidecar with extension ``pair_ext`` and mean ``pair_mean`` bytes; ``item_is_block``:
    large shards are read block by block; ``subdirs``: files spread over that many
    directories; ``workers``: the loader concurrency."""

    id: str
    title: str
    dataset: str
    dataset_gib: float
    cache_gib: float
    file_mean: int
    file_sigma: float
    ext: str
    phases: tuple[PhaseSpec, ...]
    workers: int = 8
    item_is_block: bool = False
    pair_ext: str = ""
    pair_mean: int = 0
    subdirs: int = 1



#: The published workloads. File sizes follow the named datasets (ImageNet JPEGs ~110 KB, PDEBench HDF5
#: shards, LAION image+caption pairs, C4 json shards ~300 MiB, Qwen2.5-3B's two safetensors
#: files, COCO images ~160 KB, Speech Commands clips ~32 KB, Criteo embedding shards,
#: Wikipedia passage files); compute per read is a plausible per-sample cost of the phase.
SPECS: dict[str, WorkflowSpec] = {
    "W1": WorkflowSpec(
        "W1", "ResNet-50 workflow", "imagenet", 1.395, 1.0, 110 * KiB, 0.45, "JPEG",
        (PhaseSpec("data preparation", "sequential", 6.0),
         PhaseSpec("training", "random", 4.0, passes=3),
         PhaseSpec("hard-case mining", "skewed", 3.0, draws_per_item=1.5, hot_fraction=0.1, hot_share=0.8)),
        workers=8, subdirs=100),
    "W2": WorkflowSpec(
        "W2", "Minimal-FNO workflow", "pdebench", 7.67, 4.0, 160 * MiB, 0.0, "hdf5",
        (PhaseSpec("data preparation", "sequential", 30.0),
         PhaseSpec("training", "random", 25.0, passes=4),
         PhaseSpec("weighted sampling", "skewed", 25.0, draws_per_item=2.0, hot_fraction=0.15, hot_share=0.8)),
        workers=4, item_is_block=True),
    "W3": WorkflowSpec(
        "W3", "Stable Diffusion 1.5 LoRA workflow", "laion", 3.87, 1.0, 390 * KiB, 0.5, "jpg",
        (PhaseSpec("LoRA training", "random", 15.0, passes=3),
         PhaseSpec("evaluation", "sequential", 8.0)),
        workers=8, subdirs=20),  # captions: one metadata.jsonl read at start (diffusers imagefolder)
    "T1": WorkflowSpec(
        "T1", "tokenization", "c4", 2.37, 2.0, 300 * MiB, 0.05, "json.gz",
        (PhaseSpec("tokenization", "sequential", 60.0, passes=2),),
        workers=4, item_is_block=True),
    "T2": WorkflowSpec(
        "T2", "weight loading", "qwen2.5-3b", 5.75, 4.0, int(2.875 * GiB), 0.0, "safetensors",
        (PhaseSpec("weight loading", "sequential", 2.0, passes=3),),
        workers=2, item_is_block=True),
    "T3": WorkflowSpec(
        "T3", "ViT fine-tuning", "coco2014", 6.09, 1.0, 160 * KiB, 0.4, "jpg",
        (PhaseSpec("fine-tuning", "random", 4.0, passes=2),), workers=8, subdirs=40),
    "T4": WorkflowSpec(
        "T4", "wav2vec2 fine-tuning", "speech-commands", 2.48, 1.0, 32 * KiB, 0.15, "wav",
        (PhaseSpec("fine-tuning", "random", 3.0, passes=2),), workers=8, subdirs=35),
    "T5": WorkflowSpec(
        "T5", "DLRM training", "criteo", 1.99, 1.0, 64 * MiB, 0.0, "bin",
        (PhaseSpec("training", "skewed", 3.0, draws_per_item=40.0, hot_fraction=0.1, hot_share=0.85),),
        workers=8, item_is_block=True),
    "T6": WorkflowSpec(
        "T6", "RAG retrieval", "wikipedia", 3.04, 0.5, 24 * KiB, 0.6, "txt",
        (PhaseSpec("retrieval", "skewed", 2.0, draws_per_item=0.8, hot_fraction=0.05, hot_share=0.8),),
        workers=8, subdirs=200),
}


#: Generator variants, for checks on workloads Chiron was not built against: W3 with each
#: image's caption in its own small sidecar file (a LAION-webdataset-like layout), so a
#: sample is two reads of neighbouring blocks and a shuffled epoch is half +1 steps.
VARIANTS: dict[str, dict[str, WorkflowSpec]] = {
    "W3": {"captions": replace(SPECS["W3"], pair_ext="txt", pair_mean=600)},
}


@dataclass(slots=True)
class Dataset:
    """Files sorted by path with their sizes and block ranges (``first_block``)."""

    name: str
    paths: list[str]
    sizes: np.ndarray  # int64 bytes per file
    first_block: np.ndarray  # int64, len(paths) + 1 (prefix sums of blocks per file)
    block_size: int

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())

    @property
    def n_blocks(self) -> int:
        return int(self.first_block[-1])

    def block_sizes(self) -> np.ndarray:
        """Bytes of every block (the last block of a file may be short)."""
        nb = np.diff(self.first_block)
        out = np.full(self.n_blocks, self.block_size, dtype=np.int64)
        last = self.first_block[1:] - 1
        tail = self.sizes - (nb - 1) * self.block_size
        out[last[nb > 0]] = tail[nb > 0]
        return out

    def block_files(self) -> np.ndarray:
        """File index of every block."""
        return np.repeat(np.arange(len(self.paths), dtype=np.int64), np.diff(self.first_block))


@dataclass(slots=True)
class PhaseRange:
    name: str
    pattern: str
    start: int  # first request index
    end: int  # one past the last
    compute_s: float  # per read


@dataclass(slots=True)
class WorkflowTrace:
    """A generated block trace: one row per demand read (block granularity)."""

    workload: str
    spec: WorkflowSpec
    dataset: Dataset
    obj_id: np.ndarray  # int64 block ids
    obj_size: np.ndarray  # int64 block bytes
    file: np.ndarray  # int64 file index per read (unit code)
    phase: np.ndarray  # int8 Phase value per read
    timestamp: np.ndarray  # float64 zero-I/O schedule
    phases: list[PhaseRange] = field(default_factory=list)
    cache_bytes: int = 0
    workers: int = 8

    def __len__(self) -> int:
        return int(self.obj_id.shape[0])


def _file_sizes(spec: WorkflowSpec, total: int, rng: np.random.Generator) -> list[tuple[str, int]]:
    """(relative path, bytes) per file, in path order, summing to exactly ``total``."""
    unit = spec.file_mean + spec.pair_mean
    n_items = max(1, round(total / unit))
    if spec.file_sigma > 0:
        raw = rng.lognormal(mean=0.0, sigma=spec.file_sigma, size=n_items)
        raw = raw / raw.mean() * spec.file_mean
    else:
        raw = np.full(n_items, float(spec.file_mean))
    if spec.pair_mean:
        cap = rng.lognormal(0.0, 0.3, size=n_items)
        cap = cap / cap.mean() * spec.pair_mean
        sizes = np.empty(2 * n_items)
        sizes[0::2], sizes[1::2] = raw, cap
    else:
        sizes = raw
    sizes = np.maximum(1, np.floor(sizes / sizes.sum() * total)).astype(np.int64)
    sizes[-1 if not spec.pair_mean else -2] += total - int(sizes.sum())
    if sizes.min() < 1:
        raise BadInput(f"scale too small for {spec.id}: files would be empty; use a larger --scale")
    width = max(5, len(str(n_items)))
    sub = max(1, min(spec.subdirs, n_items))
    per = math.ceil(n_items / sub)
    out: list[tuple[str, int]] = []
    for i in range(n_items):
        d = f"{i // per:04d}/" if sub > 1 else ""
        if spec.pair_mean:
            out.append((f"{spec.dataset}/{d}{i:0{width}d}.{spec.ext}", int(sizes[2 * i])))
            out.append((f"{spec.dataset}/{d}{i:0{width}d}.{spec.pair_ext}", int(sizes[2 * i + 1])))
        else:
            out.append((f"{spec.dataset}/{d}{spec.dataset}-{i:0{width}d}.{spec.ext}", int(sizes[i])))
    out.sort(key=lambda t: t[0])
    return out


def build_dataset(spec: WorkflowSpec, scale: float, seed: int, block_size: int = DEFAULT_BLOCK_SIZE) -> Dataset:
    """The dataset of ``spec`` at ``scale`` (no bytes are written)."""
    total = int(round(spec.dataset_gib * GiB * scale))
    rng = np.random.default_rng([seed, 1])
    files = _file_sizes(spec, total, rng)
    sizes = np.array([s for _, s in files], dtype=np.int64)
    nb = (sizes + block_size - 1) // block_size
    first = np.zeros(len(files) + 1, dtype=np.int64)
    np.cumsum(nb, out=first[1:])
    return Dataset(spec.dataset, [p for p, _ in files], sizes, first, block_size)


def _items(spec: WorkflowSpec, ds: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Item → [start, end) block ranges: blocks of shards, file pairs, or files."""
    if spec.item_is_block:
        starts = np.arange(ds.n_blocks, dtype=np.int64)
        return starts, starts + 1
    fb = ds.first_block
    if spec.pair_mean:
        return fb[0:-1:2].copy(), fb[2::2].copy()
    return fb[:-1].copy(), fb[1:].copy()


def _hot_set(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """About ``fraction * n`` items made of short runs (mean length 4) of neighbours."""
    want = max(1, int(round(fraction * n)))
    chosen = np.zeros(n, dtype=bool)
    count = 0
    while count < want:
        start = int(rng.integers(0, n))
        length = int(min(rng.geometric(0.25), want - count))
        seg = chosen[start:start + length]
        count += int((~seg).sum())
        seg[:] = True
    return np.flatnonzero(chosen)


def _expand(order: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Block ids of the items in ``order``, each item's blocks in ascending order."""
    lens = ends[order] - starts[order]
    total = int(lens.sum())
    offs = np.repeat(np.cumsum(lens) - lens, lens)
    ids: np.ndarray = np.repeat(starts[order], lens) + (np.arange(total, dtype=np.int64) - offs)
    return ids


def _phase_order(ph: PhaseSpec, n_items: int, rng: np.random.Generator) -> np.ndarray:
    if ph.kind == "sequential":
        return np.tile(np.arange(n_items, dtype=np.int64), ph.passes)
    if ph.kind == "random":
        return np.concatenate([rng.permutation(n_items) for _ in range(ph.passes)])
    if ph.kind == "skewed":
        draws = max(1, int(round(ph.draws_per_item * n_items)))
        hot = _hot_set(n_items, ph.hot_fraction, rng)
        from_hot = rng.random(draws) < ph.hot_share
        out = rng.integers(0, n_items, size=draws)
        out[from_hot] = hot[rng.integers(0, hot.size, size=int(from_hot.sum()))]
        return out.astype(np.int64)
    raise ValueError(f"unknown phase kind {ph.kind!r}")


def _spec(name: str, variant: str | None) -> WorkflowSpec:
    spec = SPECS.get(name.upper()) if isinstance(name, str) else None
    if spec is None:
        raise BadInput(f"unknown workload {name!r}; valid: {', '.join(SPECS)}")
    if variant is not None:
        variants = VARIANTS.get(spec.id, {})
        if variant not in variants:
            raise BadInput(f"workload {spec.id} has no variant {variant!r}; valid: "
                           f"{', '.join(variants) or 'none'}")
        spec = variants[variant]
    return spec


#: bytes of memory planning a workload takes per file and per block of its dataset (the
#: path, size and block-range entries; measured peak ~216 B per file, rounded up)
PLAN_BYTES_PER_FILE = 256
PLAN_BYTES_PER_BLOCK = 32


def plan_bytes(spec: WorkflowSpec, scale: float, block_size: int = DEFAULT_BLOCK_SIZE) -> float:
    """Memory that planning ``spec`` at ``scale`` needs (files and blocks are counted
    before anything is allocated)."""
    total = spec.dataset_gib * GiB * scale
    files = total / (spec.file_mean + spec.pair_mean) * (2 if spec.pair_mean else 1)
    blocks = total / block_size + files
    return files * PLAN_BYTES_PER_FILE + blocks * PLAN_BYTES_PER_BLOCK


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_scale(scale: float, spec: WorkflowSpec | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 memory: int | None = None) -> None:
    """A positive finite scale whose plan fits in this machine's memory (``memory``:
    physical memory, by default read from the OS)."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise BadInput(f"--scale {scale!r} must be a positive number, e.g. 0.05 or 1.0")
    if spec is None:
        return
    memory = physical_memory() if memory is None else memory
    need = plan_bytes(spec, scale, block_size)
    if memory is not None and need > memory:
        from aicache.units import format_bytes

        most = memory / plan_bytes(spec, 1.0, block_size)
        raise BadInput(f"--scale {scale:g} makes {spec.id} a {format_bytes(spec.dataset_gib * GiB * scale)} "
                       f"dataset whose plan needs ~{format_bytes(need)} of memory, more than this "
                       f"machine's {format_bytes(memory)}; give at most --scale {most:.3g}")


def generate_workflow(name: str, scale: float = 1.0, seed: int = 0,
                      block_size: int = DEFAULT_BLOCK_SIZE, *, variant: str | None = None) -> WorkflowTrace:
    """Generate workload ``name`` (W1..W3, T1..T6; optionally a :data:`VARIANTS` variant)
    as an in-memory block trace."""
    spec = _spec(name, variant)
    _check_scale(scale, spec, block_size)
    ds = build_dataset(spec, scale, seed, block_size)
    starts, ends = _items(spec, ds)
    rng = np.random.default_rng([seed, 2])
    bsizes = ds.block_sizes()
    bfiles = ds.block_files()
    ids: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    ts: list[np.ndarray] = []
    phases: list[PhaseRange] = []
    pos, clock = 0, 0.0
    for ph in spec.phases:
        blocks = _expand(_phase_order(ph, starts.size, rng), starts, ends)
        n = blocks.size
        dt = ph.compute_ms / 1000.0 / spec.workers
        ids.append(blocks)
        labels.append(np.full(n, int(Phase[ph.kind.upper()]), dtype=np.int8))
        ts.append(clock + dt * np.arange(n, dtype=np.float64))
        phases.append(PhaseRange(ph.name, ph.kind, pos, pos + n, ph.compute_ms / 1000.0))
        pos += n
        clock += dt * n
    obj = np.concatenate(ids)
    return WorkflowTrace(
        workload=spec.id, spec=spec, dataset=ds, obj_id=obj, obj_size=bsizes[obj],
        file=bfiles[obj], phase=np.concatenate(labels), timestamp=np.concatenate(ts),
        phases=phases, cache_bytes=int(round(spec.cache_gib * GiB * scale)), workers=spec.workers,
    )


@dataclass(slots=True)
class WorkflowStream:
    """A generated workflow as a *plan*, replayed chunk by chunk (:meth:`chunks`).

    Same trace as :func:`generate_workflow` (same RNG draws in the same order), but no
    per-read array is ever materialised: memory is O(dataset) — the block table and one
    phase's item order (a permutation of the items, or a skewed phase's draws) — and the
    per-read columns exist only one chunk at a time. ``phases`` carries exact read ranges,
    counted in a planning pass that keeps the RNG state at each phase's start, so a phase
    can be regenerated identically, as often as needed.
    """

    workload: str
    spec: WorkflowSpec
    dataset: Dataset
    phases: list[PhaseRange]
    cache_bytes: int
    workers: int
    _starts: np.ndarray
    _ends: np.ndarray
    _states: list[Mapping[str, Any]]  # bit-generator state at each phase's start

    def __len__(self) -> int:
        return self.phases[-1].end if self.phases else 0

    def chunks(self, phase: int, chunk: int = 1 << 18) -> Iterator[np.ndarray]:
        """Block ids of phase ``phase``, in order, as int64 arrays of about ``chunk`` reads
        (a chunk boundary never splits an item; a multi-block item may overshoot)."""
        ph = self.spec.phases[phase]
        rng = np.random.default_rng()
        rng.bit_generator.state = self._states[phase]
        starts, ends = self._starts, self._ends
        lens = ends - starts
        per_item = max(1.0, float(lens.mean())) if lens.size else 1.0
        step = max(1, int(chunk / per_item))
        for order in _phase_orders(ph, starts.size, rng):
            for i in range(0, order.size, step):
                yield _expand(order[i:i + step], starts, ends)


def _phase_orders(ph: PhaseSpec, n_items: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """:func:`_phase_order` in pieces (one pass at a time), drawing from ``rng`` exactly
    as it does, so the concatenation is the same array."""
    if ph.kind == "sequential":
        for _ in range(ph.passes):
            yield np.arange(n_items, dtype=np.int64)
    elif ph.kind == "random":
        for _ in range(ph.passes):
            yield rng.permutation(n_items)
    else:
        yield _phase_order(ph, n_items, rng)


def plan_workflow(name: str, scale: float = 1.0, seed: int = 0, block_size: int = DEFAULT_BLOCK_SIZE, *,
                  variant: str | None = None) -> WorkflowStream:
    """Workload ``name`` as a :class:`WorkflowStream` (for traces too large to hold)."""
    spec = _spec(name, variant)
    _check_scale(scale, spec, block_size)
    ds = build_dataset(spec, scale, seed, block_size)
    starts, ends = _items(spec, ds)
    lens = ends - starts
    blocks_per_pass = int(lens.sum())
    rng = np.random.default_rng([seed, 2])
    phases: list[PhaseRange] = []
    states: list[Mapping[str, Any]] = []
    pos = 0
    for ph in spec.phases:
        states.append(rng.bit_generator.state)
        n = 0
        for order in _phase_orders(ph, starts.size, rng):
            n += blocks_per_pass if ph.kind != "skewed" else int(lens[order].sum())
        phases.append(PhaseRange(ph.name, ph.kind, pos, pos + n, ph.compute_ms / 1000.0))
        pos += n
    return WorkflowStream(spec.id, spec, ds, phases, int(round(spec.cache_gib * GiB * scale)),
                          spec.workers, starts, ends, states)


def write_workflow(trace: WorkflowTrace, path: str) -> int:
    """Write ``trace`` as block-csv (unit = the file's path). Returns records written."""
    from aicache.traces.base import RequestBatch
    from aicache.traces.io import write_block_csv

    batch = RequestBatch(timestamp=trace.timestamp, obj_id=trace.obj_id, obj_size=trace.obj_size,
                         unit=trace.file, phase=trace.phase)
    return write_block_csv(path, [batch], trace.dataset.paths)


def materialize(ds: Dataset, root: str, seed: int = 0) -> int:
    """Write the dataset's files under ``root`` with their exact sizes; returns bytes.

    Contents are seeded pseudo-random bytes (incompressible, like JPEGs) for the first
    64 KiB of each file, then a sparse hole up to the file's size: real sizes for the real
    engine, without writing terabytes.
    """
    head = 64 * KiB
    total = 0
    for i, (rel, size) in enumerate(zip(ds.paths, ds.sizes.tolist())):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data = np.random.default_rng([seed, 3, i]).bytes(min(head, size))
        with open(p, "wb") as f:
            f.write(data)
            if size > len(data):
                f.truncate(size)
        total += size
    return total


def _generator(name: str) -> Callable[..., WorkflowTrace]:
    def gen(scale: float = 1.0, seed: int = 0) -> WorkflowTrace:
        return generate_workflow(name, scale=scale, seed=seed)

    gen.__name__ = f"generate_{name.lower()}"
    gen.__doc__ = f"{SPECS[name].title} ({name}): see :data:`SPECS`."
    return gen


generate_w1, generate_w2, generate_w3 = (_generator(n) for n in ("W1", "W2", "W3"))
generate_t1, generate_t2, generate_t3 = (_generator(n) for n in ("T1", "T2", "T3"))
generate_t4, generate_t5, generate_t6 = (_generator(n) for n in ("T4", "T5", "T6"))
