"""A held-out family of multi-phase AI data workflows, H1–H5, for judging Chiron on
workloads it was never built or tuned against.

They reuse the dataset layout of :mod:`aicache.traces.workflows` (files sorted by path,
consecutive 4 MiB block ranges, an item = a file or one block of a shard) but combine
what W1–W3 and T1–T6 never do:

* **H1** checkpoint loads between small-file phases: a model checkpoint (two large
  safetensors shards) is read front to back before, between and after phases over a folder
  of small images (a shuffled epoch, then hard-case mining) — two cache units, and the
  checkpoint re-read competes with the images for the budget;
* **H2** two datasets read at once with different patterns: a tokenizer scans text shards
  in order while a training loader reads images in shuffled order, interleaved read by read;
  then the images alone, skewed;
* **H3** a hot set that drifts: an index build reads a passage corpus in order, then
  retrieval draws from a hot set that slides across the corpus in eight steps (each step
  keeps half of the previous hot items) instead of staying put;
* **H4** strided shard reads: data-parallel ranks read every 4th block of large shards
  (one rank's share per pass, a different rank offset each pass), then a shuffled epoch,
  then a strided evaluation (every 8th block);
* **H5** short phases near the window length: sequential / random / skewed phases of about
  1,200 reads each (the controller's window is 1,000), twice over.

Phase labels (for diagnosis accuracy and the oracle): strided = ``sequential`` (a stable
stride, as the seed defines it), drifting = ``skewed``; an interleaved phase carries each
read's own pattern in the per-read column and ``mixed`` as its segment label, which the
diagnosis metrics skip. Deterministic: the same (name, scale, seed) gives the same trace.
Sizes at ``scale=1`` are a few GiB, like the published workloads (docs/design/chiron.md);
cache budgets scale with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aicache.errors import BadInput
from aicache.traces.base import Phase
from aicache.units import DEFAULT_BLOCK_SIZE
from aicache.traces.workflows import (
    GiB,
    KiB,
    MiB,
    Dataset,
    PhaseRange,
    WorkflowSpec,
    WorkflowTrace,
    _check_scale,
    _expand,
    _hot_set,
    _items,
    build_dataset,
)


@dataclass(frozen=True, slots=True)
class Step:
    """One phase: ``kind`` over dataset ``part`` (``other``: the second dataset of an
    interleaved phase, read with ``other_kind``)."""

    name: str
    kind: str  # sequential | random | skewed | strided | drift | window
    part: int
    compute_ms: float
    passes: int = 1
    draws_per_item: float = 1.0
    hot_fraction: float = 0.1
    hot_share: float = 0.8
    stride: int = 4
    drift_steps: int = 8
    #: "window" phases: this many items, a contiguous slice (sequential) or a random one
    reads: int = 1200
    window_kind: str = "sequential"
    other: int = -1
    other_kind: str = "random"


@dataclass(frozen=True, slots=True)
class HeldOutSpec:
    id: str
    title: str
    parts: tuple[WorkflowSpec, ...]  # one dataset each; only the layout fields are used
    cache_gib: float
    steps: tuple[Step, ...]
    workers: int = 8


def _part(dataset: str, gib: float, mean: int, sigma: float, ext: str, *, block: bool = False,
          subdirs: int = 1) -> WorkflowSpec:
    return WorkflowSpec(dataset, dataset, dataset, gib, 0.0, mean, sigma, ext, (), item_is_block=block,
                        subdirs=subdirs)


SPECS: dict[str, HeldOutSpec] = {
    "H1": HeldOutSpec(
        "H1", "fine-tuning with checkpoint loads", (
            _part("ckpt", 1.0, 512 * MiB, 0.0, "safetensors", block=True),
            _part("frames", 1.2, 110 * KiB, 0.45, "jpg", subdirs=50)),
        0.8, (
            Step("load checkpoint", "sequential", 0, 2.0),
            Step("epoch", "random", 1, 4.0),
            Step("reload checkpoint", "sequential", 0, 2.0),
            Step("hard cases", "skewed", 1, 3.0, draws_per_item=1.5, hot_fraction=0.1),
            Step("final checkpoint", "sequential", 0, 2.0))),
    "H2": HeldOutSpec(
        "H2", "tokenize text while training on images", (
            _part("coco", 1.0, 160 * KiB, 0.4, "jpg", subdirs=40),
            _part("text", 4.0, 64 * MiB, 0.05, "json.gz", block=True)),
        1.0, (
            Step("tokenize + train", "sequential", 1, 6.0, other=0, other_kind="random"),
            Step("weighted sampling", "skewed", 0, 4.0, draws_per_item=2.0, hot_fraction=0.15))),
    "H3": HeldOutSpec(
        "H3", "index build, then retrieval with a drifting hot set", (
            _part("passages", 1.0, 24 * KiB, 0.6, "txt", subdirs=100),),
        0.3, (
            Step("index build", "sequential", 0, 3.0),
            Step("retrieval (drifting)", "drift", 0, 2.0, draws_per_item=1.6, hot_fraction=0.05,
                 hot_share=0.85))),
    "H4": HeldOutSpec(
        "H4", "strided shard reads by data-parallel ranks", (
            _part("shards", 12.0, 128 * MiB, 0.0, "bin", block=True),),
        6.0, (
            Step("rank-strided epoch", "strided", 0, 10.0, passes=4, stride=4),
            Step("shuffled epoch", "random", 0, 10.0),
            Step("strided evaluation", "strided", 0, 6.0, passes=1, stride=8)),
        workers=4),
    "H5": HeldOutSpec(
        "H5", "short phases near the window length", (
            _part("clips", 0.6, 64 * KiB, 0.2, "wav", subdirs=20),),
        0.2, tuple(
            Step(f"{k} #{i}", "window", 0, 3.0, window_kind=k, hot_fraction=0.05, draws_per_item=1.0)
            for i in (1, 2) for k in ("sequential", "random", "skewed"))),
}

_LABEL = {"sequential": "sequential", "strided": "sequential", "random": "random",
          "skewed": "skewed", "drift": "skewed"}


def _merge(datasets: list[Dataset]) -> tuple[Dataset, list[int]]:
    """One dataset from several (paths stay sorted: parts are ordered by name); returns it
    and each part's first block."""
    paths: list[str] = []
    sizes, firsts, offsets = [], [np.zeros(1, np.int64)], []
    base = 0
    for ds in datasets:
        paths.extend(ds.paths)
        sizes.append(ds.sizes)
        offsets.append(base)
        firsts.append(ds.first_block[1:] + base)
        base += ds.n_blocks
    merged = Dataset("+".join(d.name for d in datasets), paths, np.concatenate(sizes),
                     np.concatenate(firsts), datasets[0].block_size)
    return merged, offsets


def _order(step: Step, kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Item order of one phase (of ``kind``) over ``n`` items."""
    if kind == "sequential":
        return np.tile(np.arange(n, dtype=np.int64), step.passes)
    if kind == "random":
        return np.concatenate([rng.permutation(n) for _ in range(step.passes)])
    if kind == "strided":
        s = max(1, min(step.stride, n))
        return np.concatenate([np.arange(p % s, n, s, dtype=np.int64) for p in range(step.passes)])
    if kind in ("skewed", "drift"):
        draws = max(1, int(round(step.draws_per_item * n)))
        hot = _hot_set(n, step.hot_fraction, rng)
        if kind == "skewed":
            out = rng.integers(0, n, size=draws)
            mask = rng.random(draws) < step.hot_share
            out[mask] = hot[rng.integers(0, hot.size, size=int(mask.sum()))]
            return out.astype(np.int64)
        parts = []
        per = max(1, draws // step.drift_steps)
        for _ in range(step.drift_steps):
            out = rng.integers(0, n, size=per)
            mask = rng.random(per) < step.hot_share
            out[mask] = hot[rng.integers(0, hot.size, size=int(mask.sum()))]
            parts.append(out)
            # the next step keeps half of the hot items and replaces the other half with a
            # fresh run of neighbours: the popular region slides rather than jumps
            keep = rng.permutation(hot)[: max(1, hot.size // 2)]
            hot = np.union1d(keep, _hot_set(n, step.hot_fraction / 2, rng))
        return np.concatenate(parts).astype(np.int64)
    if kind == "window":
        m = min(n, step.reads)
        wk = step.window_kind
        if wk == "skewed":
            hot = _hot_set(n, step.hot_fraction, rng)
            out = rng.integers(0, n, size=m)
            mask = rng.random(m) < step.hot_share
            out[mask] = hot[rng.integers(0, hot.size, size=int(mask.sum()))]
            return out.astype(np.int64)
        start = int(rng.integers(0, n - m + 1))
        sl = np.arange(start, start + m, dtype=np.int64)
        return sl if wk == "sequential" else rng.permutation(sl)
    raise ValueError(f"unknown held-out phase kind {kind!r}")


def generate_heldout(name: str, scale: float = 1.0, seed: int = 0,
                     block_size: int = DEFAULT_BLOCK_SIZE) -> WorkflowTrace:
    """Held-out workflow ``name`` (H1..H5) as an in-memory block trace."""
    spec = SPECS.get(name.upper()) if isinstance(name, str) else None
    if spec is None:
        raise BadInput(f"unknown held-out workflow {name!r}; valid: {', '.join(SPECS)}")
    for p in spec.parts:
        _check_scale(scale, p, block_size)
    order = sorted(range(len(spec.parts)), key=lambda i: spec.parts[i].dataset)
    built = {i: build_dataset(spec.parts[i], scale, seed * 7 + i, block_size) for i in order}
    ds, offs = _merge([built[i] for i in order])
    off = {i: offs[k] for k, i in enumerate(order)}
    item_ranges = {}
    for i in order:
        s, e = _items(spec.parts[i], built[i])
        item_ranges[i] = (s + off[i], e + off[i])
    rng = np.random.default_rng([seed, 5])
    bsizes, bfiles = ds.block_sizes(), ds.block_files()
    ids, labels, ts, phases = [], [], [], []
    pos, clock = 0, 0.0
    for st in spec.steps:
        starts, ends = item_ranges[st.part]
        kind = st.kind
        blocks = _expand(_order(st, kind, starts.size, rng), starts, ends)
        label = _LABEL.get(st.window_kind if kind == "window" else kind, "sequential")
        lab = np.full(blocks.size, int(Phase[label.upper()]), np.int8)
        seg_label = label
        if st.other >= 0:  # a second loader on another dataset, interleaved read by read
            os_, oe = item_ranges[st.other]
            other = _expand(_order(st, st.other_kind, os_.size, rng), os_, oe)
            who = np.zeros(blocks.size + other.size, dtype=bool)
            who[rng.permutation(who.size)[: other.size]] = True
            merged = np.empty(who.size, np.int64)
            merged[~who], merged[who] = blocks, other
            lab2 = np.empty(who.size, np.int8)
            lab2[~who] = lab
            lab2[who] = int(Phase[_LABEL[st.other_kind].upper()])
            blocks, lab, seg_label = merged, lab2, "mixed"
        n = blocks.size
        dt = st.compute_ms / 1000.0 / spec.workers
        ids.append(blocks)
        labels.append(lab)
        ts.append(clock + dt * np.arange(n, dtype=np.float64))
        phases.append(PhaseRange(st.name, seg_label, pos, pos + n, st.compute_ms / 1000.0))
        pos += n
        clock += dt * n
    obj = np.concatenate(ids)
    return WorkflowTrace(
        workload=spec.id, spec=spec.parts[0], dataset=ds, obj_id=obj, obj_size=bsizes[obj],
        file=bfiles[obj], phase=np.concatenate(labels), timestamp=np.concatenate(ts), phases=phases,
        cache_bytes=int(round(spec.cache_gib * GiB * scale)), workers=spec.workers)


def _generator(name: str) -> Callable[..., WorkflowTrace]:
    def gen(scale: float = 1.0, seed: int = 0) -> WorkflowTrace:
        return generate_heldout(name, scale=scale, seed=seed)

    gen.__name__ = f"generate_{name.lower()}"
    gen.__doc__ = f"{SPECS[name].title} ({name}): see :data:`SPECS`."
    return gen


generate_h1, generate_h2, generate_h3, generate_h4, generate_h5 = (
    _generator(n) for n in ("H1", "H2", "H3", "H4", "H5"))
