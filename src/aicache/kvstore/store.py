"""``TieredKVStore``: real bytes in a DRAM slot pool and SSD slab files, driven by SARIA.

The store owns no policy. Every decision — which prefix is reusable and from which tier,
E/R admission and prewrite, DRAM eviction order, SSD capacity eviction, lazy partial
promotion, DRAM pacing while SSD reads run — comes from the *same* objects the simulator
drives (:class:`aicache.kv.saria.KVIndex`, ``b_pace``, ``TransferMode``). The index
returns :class:`~aicache.kv.saria.Moves`; the store reconciles physical copies with the
index's locations (``node.kv_loc``) and moves the bytes. Hence ``aicache sim kv`` and this
store agree block for block on the same call sequence (``tests/kvstore/test_kvstore_vs_sim.py``).

Request protocol (the shape of vLLM's KV connector / LMCache's engine)::

    plan = store.lookup(ns, block_hashes)          # ReloadPlan, path pinned, R_b counted
    res = store.load(plan, buffers)                # bytes → caller buffers, timed
    ... prefill the uncached suffix (blocks plan.hit_blocks..) ...
    out = store.finish_request(plan, block_hashes, payloads, RequestAttrs(session, turn, types))
    # or store.store(ns, hashes, payloads, attrs): a plain save (KVIndex.store)
    store.settle(out)   # optional: wait for the SSD writes; out.ssd says what each block got

A store call returns a :class:`StoreOutcome`: per block, what happened to its SSD copy
(:class:`SSDWrite`: written, already held, refused, failed) and the blocks whose SSD
copies the call evicted, by name — the caller never asks again with ``lookup``.

``now`` is optional everywhere: the wall clock (seconds since the store opened) by
default, or a logical clock injected by a replay. One owner thread calls the store;
SSD I/O runs in :class:`~aicache.kvstore.ssd.SlabStore`'s thread pool.

Accounting. A fixed-slot pool spends a whole slot on a partial last block, so the store
drives a :class:`SlotKVIndex` that charges every block a full slot (``KVIndex.size`` is
the only override). On block-aligned prompts this is exactly the simulator's accounting
and the two agree exactly on SSD bytes written, hits per tier and CHAR; with partial last
blocks the store is conservative (fewer blocks fit) and agrees exactly with a simulator
driving ``SlotKVIndex`` instead (``tests/kvstore/test_kvstore_vs_sim.py``). DRAM and SSD budgets
are byte budgets: slots are ``budget // slot size`` and the slab files never exceed the SSD
budget.

Restart. Opening a directory rebuilds the index from the slab headers: every recovered
chain that reaches a root is re-inserted with its SSD copy and its E/R counters; blocks
whose prefix was only in DRAM when the process died can never be looked up and are freed.
A block's identity is its whole chain (:func:`~aicache.kvstore.ssd.chain_id` of its path,
persisted in its header), not its hash: a hash repeated under another prefix is another
block, at recovery and on every SSD read, so block hashes need not be prefix-chained.
A failed open releases everything it took (the directory lock included).

Not held here: the HBM tier (the serving engine owns GPU pages) and hybrid models'
recurrent checkpoints (simulated only; a hybrid model is refused with ``BadInput``).

Thin adapters this shape allows (none shipped: none can be run here).
* vLLM ``OffloadingManager`` (scheduler side): ``lookup`` → ``store.lookup(..,
  begin=False).hit_blocks``; ``prepare_load`` → ``store.lookup(..)`` (pins the prefix;
  the plan is the load spec) and the worker's transfer → ``load`` into the KV pages (CUDA
  tensors); ``touch`` → counted by ``lookup``; ``complete_load`` → ``finish_request``;
  ``prepare_store``/``complete_store`` → ``store`` with page views as payloads, the
  evicted hashes/events from the returned :class:`StoreOutcome` (``ssd_evicted``).
* SGLang ``HiCacheStorage``: ``exists``/``batch_exists`` → ``lookup(begin=False)``;
  ``batch_get`` → ``load``; ``batch_set`` → ``store``.
* LMCache storage backend: ``contains`` → ``lookup(begin=False)``; ``get_blocking`` /
  ``batch_get_non_blocking`` → ``load``; ``submit_put_task`` → ``store``.
"""

from __future__ import annotations

import time
import warnings
import weakref
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from aicache.errors import BadInput
from aicache.kv.radix import KVObject, RadixNode, RadixTree, Tier
from aicache.kv.saria import KVIndex, KVIndexParams, Moves, ReloadPlan, RequestAttrs
from aicache.kv.transfer import GB, Bandwidths, TransferMode, b_pace
from aicache.kvstore.dram import DramPool
from aicache.kvstore.ssd import (
    BlockMeta, CorruptBlock, DiskFull, RecoveredBlock, SlabStore, chain_id, encode_key,
    encode_namespace, lifetime_days, root_id,
)

_DRAM, _SSD = int(Tier.DRAM), int(Tier.SSD)
_KV = KVObject.KV


class SlotKVIndex(KVIndex):
    """The SARIA index with slot accounting: every block costs one whole slot."""

    def size(self, node: RadixNode) -> int:
        return self.p.model.block_bytes


@dataclass(frozen=True)
class TieredKVStoreParams:
    """A store. ``index.dram_bytes`` / ``index.ssd_bytes`` are the DRAM and on-disk byte
    budgets (0 disables a tier); the rest of ``index`` configures SARIA's policies.
    ``bandwidths`` are the coordinator's estimates (B_GPU, B_disk, B_DRAM) for pacing."""

    index: KVIndexParams
    directory: str | Path | None = None
    transfer: TransferMode = TransferMode.COORDINATED
    bandwidths: Bandwidths = field(default_factory=Bandwidths)
    io_threads: int = 4
    direct: bool | str = False
    pinned: bool | str = "auto"
    slab_bytes: int = 1 << 30
    verify_on_recovery: bool = True


@dataclass(slots=True)
class LoadResult:
    """What a :meth:`TieredKVStore.load` moved. ``valid_blocks`` < ``plan.hit_blocks``
    when an SSD block failed its checksum: the caller recomputes from that block on."""

    valid_blocks: int
    dram_bytes: int = 0
    ssd_bytes: int = 0
    seconds: float = 0.0
    dram_seconds: float = 0.0
    ssd_seconds: float = 0.0
    paced_sleep_s: float = 0.0

    @property
    def dram_gbps(self) -> float:
        return self.dram_bytes / self.dram_seconds / GB if self.dram_seconds > 0 else 0.0

    @property
    def ssd_gbps(self) -> float:
        return self.ssd_bytes / self.ssd_seconds / GB if self.ssd_seconds > 0 else 0.0


@dataclass(slots=True)
class StoreCounters:
    lookups: int = 0
    lookup_blocks: int = 0
    hit_blocks_dram: int = 0
    hit_blocks_ssd: int = 0
    loads: int = 0
    load_failures: int = 0
    stores: int = 0
    stored_blocks: int = 0
    admissions_stopped: bool = False


#: how a caller names a block: (namespace, block hash)
BlockName = tuple[str, Hashable]


class SSDWrite(str, Enum):
    """What one store call did about one block's SSD copy."""

    WRITTEN = "written"  #: the call wrote it (after :meth:`TieredKVStore.settle`: it completed)
    HELD = "held"        #: it was on the SSD before the call; nothing was written
    #: the call wrote no SSD copy: the admission declined it (with a DRAM tier it may
    #: still be written at its eviction), SSD admissions are stopped, or a later block of
    #: the same call took its room back
    REFUSED = "refused"
    FAILED = "failed"    #: the call's write failed (found by :meth:`TieredKVStore.settle`)


@dataclass(slots=True)
class StoreOutcome:
    """What a :meth:`TieredKVStore.store` or :meth:`~TieredKVStore.finish_request` did.

    ``blocks[i]`` is the node of the call's ``i``-th hash and ``ssd[i]`` what happened to
    its SSD copy; ``ssd_evicted`` names the blocks whose SSD copies the call evicted
    (SSD LRU, to make room), in eviction order — named from the store's own records, so
    a block whose metadata the same call reclaimed is still named. ``moves`` is the
    index's command the store applied."""

    blocks: list[RadixNode]
    ssd: list[SSDWrite]
    ssd_evicted: list[BlockName]
    moves: Moves
    #: the call's SSD writes, for :meth:`TieredKVStore.settle` (a failure may be collected
    #: by a later call's poll, so the outcome keeps its own futures)
    writes: dict[RadixNode, Future[Any]] = field(default_factory=dict, repr=False)

    def on_ssd(self, i: int) -> bool:
        """Block ``i`` has an SSD copy (written by the call or held before it)."""
        return self.ssd[i] is SSDWrite.WRITTEN or self.ssd[i] is SSDWrite.HELD


def _as_u8(buf: Any, writable: bool) -> np.ndarray:
    """A flat uint8 numpy view of bytes / bytearray / memoryview / numpy / CPU torch."""
    if isinstance(buf, np.ndarray):
        a = buf
    elif hasattr(buf, "numpy") and hasattr(buf, "is_cuda"):
        if buf.is_cuda:
            raise TypeError("CUDA tensor")
        a = buf.detach().numpy()
    else:
        a = np.frombuffer(buf, dtype=np.uint8)
    if not a.flags.c_contiguous:
        raise BadInput("KV buffers must be contiguous")
    a = a.reshape(-1).view(np.uint8)
    if writable and not a.flags.writeable:
        raise BadInput("load buffers must be writable (bytearray, numpy array or tensor)")
    return a


def _is_cuda(buf: Any) -> bool:
    return bool(getattr(buf, "is_cuda", False))


class TieredKVStore:
    """DRAM slot pool + SSD slab files under one :class:`SlotKVIndex`.

    Invariants (checked by :meth:`check`): a node has a DRAM slot iff the index says it is
    in DRAM, an SSD slot iff the index says SSD; slots in use never exceed the pools;
    the slab files never exceed the SSD budget. Only dense models (no recurrent
    checkpoints) are supported.
    """

    def __init__(self, params: TieredKVStoreParams) -> None:
        ip = params.index
        model = ip.model
        if model.hybrid:
            raise BadInput(f"model {model.name} is hybrid: the real store has one slot size and "
                           f"one payload per block, and a block ending at a recurrent checkpoint "
                           f"needs {model.checkpoint_bytes} bytes more (docs/results/kv-models.md); "
                           f"use a dense model, or simulate it with `aicache sim kv --model "
                           f"{model.name}`")
        self.params = params
        self.model = model
        self.block_bytes = model.block_bytes
        self.kv_bpt = model.kv_bytes_per_token
        n_dram = DramPool.slots_for(ip.dram_bytes, self.block_bytes)
        if ip.dram_bytes > 0 and n_dram == 0:
            raise BadInput(f"DRAM budget {ip.dram_bytes} B is smaller than one "
                           f"{self.block_bytes}-byte block; raise it or set 0 to disable DRAM")
        self.ssd: SlabStore | None = None
        if ip.ssd_bytes > 0 and params.directory is None:
            raise BadInput("an SSD budget needs a directory for the slab files")
        if ip.ssd_bytes > 0:
            assert params.directory is not None
            self.ssd = SlabStore(params.directory, self.block_bytes, ip.ssd_bytes,
                                 slab_bytes=params.slab_bytes, io_threads=params.io_threads,
                                 direct=params.direct,
                                 verify_on_recovery=params.verify_on_recovery)
        try:  # the slab store holds the directory lock: any failure below gives it back
            self._open_rest(params, n_dram)
        except BaseException:
            if self.ssd is not None:
                self.ssd.close()
            raise

    def _open_rest(self, params: TieredKVStoreParams, n_dram: int) -> None:
        ip = params.index
        n_ssd = 0
        if self.ssd is not None:
            n_ssd = self.ssd.n_slots
            if n_ssd == 0:
                raise BadInput(f"SSD budget {ip.ssd_bytes} B is smaller than one slot of "
                               f"{self.ssd.slot_disk_bytes} B; raise it or set 0 to disable SSD")
        self.dram = DramPool(self.block_bytes, n_dram, pinned=params.pinned)
        self.index = SlotKVIndex(replace(ip, dram_bytes=n_dram * self.block_bytes,
                                         ssd_bytes=n_ssd * self.block_bytes))
        self.transfer = TransferMode(params.transfer)
        self.bw = params.bandwidths
        self.counters = StoreCounters()
        self._dslot: dict[RadixNode, int] = {}
        self._sslot: dict[RadixNode, int] = {}
        self._fence: dict[int, Future[Any]] = {}
        self._writes: list[tuple[RadixNode, int, Future[Any]]] = []
        self._open: dict[int, ReloadPlan] = {}
        #: node -> (namespace, chain identity); weak, so reclaimed nodes leave it. Every
        #: node with an SSD slot is in it (written or recovered), so an evicted block can
        #: be named even after its metadata left the tree
        self._ids: weakref.WeakKeyDictionary[RadixNode, tuple[str, bytes]] = (
            weakref.WeakKeyDictionary())
        self._t0 = time.monotonic()
        self.recovered_blocks = self.orphans_dropped = 0
        if self.ssd is not None:
            self._recover()

    # ------------------------------------------------------------------ clock & ns
    def now(self) -> float:
        """Wall-clock seconds since the store opened (the default logical time)."""
        return time.monotonic() - self._t0

    def _t(self, now: float | None) -> float:
        return self.now() if now is None else float(now)

    def _ident(self, node: RadixNode) -> tuple[str, bytes]:
        """``node``'s namespace and chain identity (what its slab header records). Walks
        up only to the nearest ancestor already known, so a prompt's blocks cost one digest
        each, however deep."""
        ids = self._ids
        got = ids.get(node)
        if got is not None:
            return got
        path: list[RadixNode] = []
        n = node
        while (got := ids.get(n)) is None:
            if n.parent is None:  # a namespace root: its key is the namespace
                ns = str(n.key)
                got = ids[n] = (ns, root_id(ns))
                break
            path.append(n)
            n = n.parent
        ns, ident = got
        for m in reversed(path):
            ident = chain_id(ident, m.key)
            ids[m] = (ns, ident)
        return ns, ident

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        """Rebuild the radix index from the slab headers. A block hangs under the block
        whose chain identity is its parent id (the namespace root for a first block), so
        a hash repeated under several prefixes goes back under each of them, and only
        chains that reach a root are inserted; orphans (their prefix was only in DRAM
        when the process died) cannot be looked up and are freed. Copies are adopted in
        write order, which restores the SSD LRU order."""
        assert self.ssd is not None
        recs = self.ssd.recovered
        kids: dict[tuple[str, bytes], list[RecoveredBlock]] = {}
        for rb in recs:
            kids.setdefault((rb.meta.namespace, rb.meta.parent_id), []).append(rb)
        bt = self.model.block_tokens
        found: dict[int, tuple[RecoveredBlock, RadixNode]] = {}
        for ns in sorted({rb.meta.namespace for rb in recs}):
            # depth-first from the root; a leaf inserts its whole path (the inner blocks'
            # nodes with it), so each path is walked once per leaf
            stack = [(rb, 0) for rb in kids.get((ns, root_id(ns)), [])]
            path: list[RecoveredBlock] = []
            while stack:
                rb, depth = stack.pop()
                del path[depth:]
                path.append(rb)
                below = kids.get((ns, rb.ident), [])
                if rb.meta.tokens < bt:
                    below = []  # a partial block ends its prompt: nothing can extend it
                if below:
                    stack.extend((c, depth + 1) for c in below)
                    continue
                nodes = self.index.recovered_path(ns, [c.meta.key for c in path],
                                                  [c.meta.tokens for c in path])
                for c, node in zip(path, nodes):
                    found.setdefault(c.slot, (c, node))
        kept: set[int] = set()
        for c, node in sorted(found.values(), key=lambda x: x[0].seq):
            if node.tokens == c.meta.tokens and self.index.adopt_ssd(node, E=c.meta.E,
                                                                     R=c.meta.R):
                self._sslot[node] = c.slot
                self._ids[node] = (c.meta.namespace, c.ident)
                kept.add(c.slot)
        orphans = [rb.slot for rb in recs if rb.slot not in kept]
        for slot in orphans:
            self.ssd.free(slot)
        self.recovered_blocks = len(kept)
        self.orphans_dropped = len(orphans)

    # ------------------------------------------------------------------ read path
    def lookup(self, namespace: str, block_hashes: Sequence[Hashable], now: float | None = None,
               *, begin: bool = True, count_reuse: bool = True) -> ReloadPlan:
        """The reload plan for a prompt (a source per block of the longest reusable prefix,
        DRAM and SSD interleaving). With ``begin`` (default) the request starts: the path
        is pinned until :meth:`finish_request`, R_b counted (unless ``count_reuse`` is
        False: the caller counts reuse on these nodes itself), prewrites issued."""
        encode_namespace(namespace)
        self._poll_writes()
        t = self._t(now)
        plan = self.index.lookup(namespace, block_hashes, t)
        c = self.counters
        c.lookups += 1
        c.lookup_blocks += len(block_hashes)
        if begin:
            c.hit_blocks_dram += plan.dram_blocks
            c.hit_blocks_ssd += plan.ssd_blocks
            moves = self.index.begin(plan, t, count_reuse=count_reuse)
            self._open[id(plan)] = plan
            self._apply(moves, {})
        return plan

    def load(self, plan: ReloadPlan, buffers: Sequence[Any]) -> LoadResult:
        """Copy the plan's blocks into ``buffers`` (one per block, in order; bytearray,
        numpy, torch CPU or CUDA tensors), timed. SSD reads run in the I/O pool; DRAM
        copies run here, paced to ``B_pace`` while SSD reads are runnable in
        ``coordinated`` mode, after them in ``serial`` mode, unpaced in ``overlap``."""
        if id(plan) not in self._open:
            raise BadInput("load needs a plan from lookup(begin=True): only a begun plan is "
                           "pinned against eviction")
        if len(buffers) < plan.hit_blocks:
            raise BadInput(f"load got {len(buffers)} buffers for {plan.hit_blocks} blocks")
        kv = self.kv_bpt
        dram_jobs: list[tuple[int, int, Any]] = []
        ssd_jobs: list[tuple[int, RadixNode, Any]] = []
        for i, (n, src) in enumerate(zip(plan.nodes, plan.sources)):
            if src is Tier.DRAM:
                dram_jobs.append((i, self._dslot[n], buffers[i]))
            elif src is Tier.SSD:
                ssd_jobs.append((i, n, buffers[i]))
            else:
                raise RuntimeError(f"block {i}: source {src!r} is not held by this store")
        res = LoadResult(plan.hit_blocks)
        t0 = time.perf_counter()
        futs: list[tuple[int, RadixNode, Future[Any], Any]] = []

        def submit_ssd() -> float:
            ts = time.perf_counter()
            if not ssd_jobs:
                return ts
            assert self.ssd is not None
            for i, n, buf in ssd_jobs:
                length = n.tokens * kv
                if _is_cuda(buf):
                    stage: Any = np.empty(length, dtype=np.uint8)
                else:
                    stage = _as_u8(buf, True)
                    if stage.shape[0] < length:
                        raise BadInput(f"buffer {i} holds {stage.shape[0]} B, block needs {length}")
                fut = self.ssd.read_async(self._sslot[n], length, stage, self._ident(n)[1])
                futs.append((i, n, fut, (buf, stage)))
                res.ssd_bytes += length
            return ts

        def run_dram(paced: bool) -> None:
            ts = time.perf_counter()
            done = 0
            rate = b_pace(self.bw)
            stream = None  # asynchronous H2D copies (pinned source) go on this stream
            for i, slot, buf in dram_jobs:
                n = plan.nodes[i]
                length = n.tokens * kv
                src = self.dram.view(slot, length)
                if _is_cuda(buf):
                    import torch  # noqa: PLC0415
                    buf.view(torch.uint8).reshape(-1)[:length].copy_(
                        torch.from_numpy(src), non_blocking=self.dram.pinned)
                    if self.dram.pinned:
                        stream = torch.cuda.current_stream(buf.device)
                else:
                    dst = _as_u8(buf, True)
                    if dst.shape[0] < length:
                        raise BadInput(f"buffer {i} holds {dst.shape[0]} B, block needs {length}")
                    np.copyto(dst[:length], src)
                done += length
                if paced and rate > 0 and any(not f.done() for _, _, f, _ in futs):
                    if stream is not None:
                        # pace what has *arrived*: an asynchronous copy returns when it is
                        # queued, so without this the pace would count queued bytes and the
                        # link would still run at full speed
                        stream.synchronize()
                    lag = ts + done / rate - time.perf_counter()
                    if lag > 0:
                        time.sleep(lag)
                        res.paced_sleep_s += lag
            if stream is not None:
                stream.synchronize()  # the DRAM path's time is its transfers', not their queueing
            res.dram_bytes = done
            res.dram_seconds = time.perf_counter() - ts

        mode = self.transfer
        if mode is TransferMode.SERIAL:
            run_dram(False)
            ts = submit_ssd()
        else:
            ts = submit_ssd()
            run_dram(mode is TransferMode.COORDINATED)
        bad = plan.hit_blocks
        for i, n, fut, (buf, stage) in futs:
            try:
                fut.result()
            except CorruptBlock:
                bad = min(bad, i)
                self._lose(n, Tier.SSD)
                continue
            if _is_cuda(buf):
                import torch  # noqa: PLC0415
                buf.view(torch.uint8).reshape(-1)[: stage.shape[0]].copy_(torch.from_numpy(stage))
        if any(_is_cuda(b) for b in buffers[: plan.hit_blocks]):
            import torch  # noqa: PLC0415
            torch.cuda.synchronize()  # the copies are done (and timed) when load returns
        end = time.perf_counter()
        if futs:
            res.ssd_seconds = end - ts
        res.seconds = end - t0
        res.valid_blocks = bad
        c = self.counters
        c.loads += 1
        if bad < plan.hit_blocks:
            c.load_failures += 1
        return res

    # ------------------------------------------------------------------ write path
    def finish_request(self, plan: ReloadPlan, block_hashes: Sequence[Hashable],
                       payloads: Sequence[Any | None], metadata: RequestAttrs | None = None,
                       now: float | None = None) -> StoreOutcome:
        """Prefill is done: store the request's blocks (``payloads[i]`` = block i's KV
        bytes; may be None for blocks that came from the plan), apply SARIA's admission
        and promotion, and move the bytes. Returns what the call did."""
        if id(plan) not in self._open:
            raise BadInput("finish_request needs a plan from lookup(begin=True) not yet finished")
        keys = list(block_hashes)
        hit = plan.hit_blocks
        if [n.key for n in plan.nodes] != keys[:hit]:
            raise BadInput("block_hashes do not extend the plan's prefix")
        tokens, views = self._payload_views(keys, payloads, plan.nodes)
        t = self._t(now)
        del self._open[id(plan)]
        self._poll_writes()
        # the plan's nodes are the match of keys[:hit] (checked above; pinned since lookup)
        moves = self.index.finish(plan, keys, t, tokens=tokens, attrs=metadata,
                                  known=plan.nodes)
        return self._after_store(views, moves, len(keys) - hit)

    def store(self, namespace: str, block_hashes: Sequence[Hashable],
              payloads: Sequence[Any | None], metadata: RequestAttrs | None = None,
              now: float | None = None) -> StoreOutcome:
        """Save blocks outside a request (LMCache ``put`` / HiCache ``batch_set``): SARIA's
        ``KVIndex.store`` — DRAM copy, write-through or prewrite per admission — without
        counting a reuse. ``payloads[i]`` may be None only for a block already held.
        Returns what the call did; the path is walked once (the match that finds the
        held blocks is where the index's insert resumes)."""
        encode_namespace(namespace)
        keys = list(block_hashes)
        known = self.index.tree.match(namespace, keys)
        held = []
        for n in known:
            if not n.kv_loc & (_DRAM | _SSD):
                break
            held.append(n)
        tokens, views = self._payload_views(keys, payloads, held)
        t = self._t(now)
        self._poll_writes()  # may lose copies, never changes the tree: ``known`` holds
        moves = self.index.put(namespace, keys, t, tokens=tokens, attrs=metadata, known=known)
        return self._after_store(views, moves, len(keys))

    def _payload_views(self, keys: list[Hashable], payloads: Sequence[Any | None],
                       held: Sequence[RadixNode]) -> tuple[list[int], list[np.ndarray | None]]:
        """Token counts and flat uint8 views of the payloads; blocks ``< len(held)`` may
        omit theirs (their bytes are in the store)."""
        if len(payloads) != len(keys):
            raise BadInput(f"{len(payloads)} payloads for {len(keys)} block hashes")
        kv, bt = self.kv_bpt, self.model.block_tokens
        tokens: list[int] = []
        views: list[np.ndarray | None] = []
        for i, p in enumerate(payloads):
            v = None if p is None else (_stage_cuda(p) if _is_cuda(p) else _as_u8(p, False))
            views.append(v)
            if i < len(held):
                tokens.append(held[i].tokens)
                continue
            if v is None:
                raise BadInput(f"payload {i} is missing: block {i} is not held by the store")
            if self.ssd is not None:
                encode_key(keys[i])  # a hash the slab header cannot hold fails here, not later
            nb = v.shape[0]
            if nb == 0 or nb % kv or nb // kv > bt or (nb // kv < bt and i != len(keys) - 1):
                raise BadInput(f"payload {i} has {nb} B; a block is {bt} tokens × {kv} B "
                               f"(only the last block may be shorter)")
            tokens.append(nb // kv)
        return tokens, views

    def _after_store(self, views: list[np.ndarray | None], moves: Moves,
                     new_blocks: int) -> StoreOutcome:
        path = moves.stored
        first = len(self._writes)  # _apply only appends: the call's writes follow
        self._apply(moves, {n: v for n, v in zip(path, views) if v is not None})
        writes = {n: fut for n, _, fut in self._writes[first:]}
        c = self.counters
        c.stores += 1
        c.stored_blocks += new_blocks
        written = set(moves.ssd_writes)
        fates = [SSDWrite.WRITTEN if n in written and n.kv_loc & _SSD
                 else SSDWrite.HELD if n.kv_loc & _SSD else SSDWrite.REFUSED for n in path]
        return StoreOutcome(path, fates, [self._name(n) for n in moves.ssd_drops], moves, writes)

    def _name(self, n: RadixNode) -> BlockName:
        """A block's (namespace, hash); the store recorded the namespace of every block
        it gave an SSD slot, so this holds for a block the tree has since reclaimed."""
        got = self._ids.get(n)
        ns = got[0] if got is not None else RadixTree.namespace_of(n)
        assert ns is not None, f"{n!r}: a block named after its metadata left the tree"
        return str(ns), n.key

    def settle(self, *outcomes: StoreOutcome) -> None:
        """Wait for every SSD write issued so far (a failed one's copy is forgotten, as
        every call does on its way in) and mark the blocks of ``outcomes`` whose write
        failed :attr:`SSDWrite.FAILED`."""
        if self.ssd is not None:
            self.ssd.drain()
        self._poll_writes(wait=True)
        for out in outcomes:
            for i, n in enumerate(out.blocks):
                fut = out.writes.get(n) if out.ssd[i] is SSDWrite.WRITTEN else None
                if fut is not None and fut.exception() is not None:
                    out.ssd[i] = SSDWrite.FAILED

    def release(self, plan: ReloadPlan) -> None:
        """Abort a begun request (unpin without storing anything)."""
        if self._open.pop(id(plan), None) is not None:
            self.index.release(plan)

    # ------------------------------------------------------------------ reconciliation
    def _apply(self, moves: Moves, payload_of: dict[RadixNode, np.ndarray]) -> None:
        """Make physical copies match the index for every node a call touched."""
        touched = dict.fromkeys([*moves.ssd_drops, *moves.dram_drops, *moves.ssd_writes,
                                 *moves.dram_inserts])
        if not touched:
            return
        dslot, sslot = self._dslot, self._sslot
        staged: dict[RadixNode, np.ndarray] = {}
        for n in touched:  # bytes that only the SSD holds: read before any slot is freed
            if n.kv_loc & _DRAM and n not in dslot and n not in payload_of:
                if n in sslot and self.ssd is not None:
                    buf = np.empty(n.tokens * self.kv_bpt, dtype=np.uint8)
                    try:
                        self.ssd.read(sslot[n], buf.shape[0], buf, self._ident(n)[1])
                        staged[n] = buf
                    except CorruptBlock:  # both copies are gone
                        self._forget(n, Tier.DRAM)
                        self._forget(n, Tier.SSD)
                else:  # e.g. a promotion of a block whose SSD copy failed its checksum
                    self._forget(n, Tier.DRAM)
        for n in touched:
            if n in sslot and not n.kv_loc & _SSD:
                assert self.ssd is not None
                self.ssd.free(sslot.pop(n))
        later: list[RadixNode] = []
        for n in touched:
            if n.kv_loc & _SSD and n not in sslot:
                if n in dslot:
                    self._ssd_write(n, dslot[n])
                else:
                    later.append(n)
        for n in touched:
            if n in dslot and not n.kv_loc & _DRAM:
                slot = dslot.pop(n)
                self.dram.release(slot, after=self._fence.pop(slot, None))
        for n in touched:
            if n.kv_loc & _DRAM and n not in dslot:
                src = payload_of.get(n)
                if src is None:
                    src = staged[n]
                slot = self.dram.alloc()
                self._fence.pop(slot, None)
                self.dram.write(slot, src[: n.tokens * self.kv_bpt])
                dslot[n] = slot
        for n in later:
            if n.kv_loc & _SSD and n not in sslot:
                if n in dslot:
                    self._ssd_write(n, dslot[n])
                else:
                    src = payload_of.get(n)
                    if src is None:
                        src = staged[n]
                    self._ssd_write(n, None, np.array(src[: n.tokens * self.kv_bpt]))

    def _ssd_write(self, n: RadixNode, dram_slot: int | None, data: np.ndarray | None = None) -> None:
        ssd = self.ssd
        assert ssd is not None  # the index has no SSD capacity without slab files
        length = n.tokens * self.kv_bpt
        src = self.dram.view(dram_slot, length) if dram_slot is not None else data
        assert src is not None
        assert n.parent is not None
        ns, _ = self._ident(n)  # records n's name too (see ``_ids``)
        parent_id = self._ids[n.parent][1]
        meta = BlockMeta(ns, n.key, parent_id, n.tokens, length, n.E, n.R)
        slot = ssd.alloc()
        fut = ssd.write_async(slot, meta, src)
        self._sslot[n] = slot
        if dram_slot is not None:
            self._fence[dram_slot] = fut
        self._writes.append((n, slot, fut))

    def _poll_writes(self, wait: bool = False) -> None:
        """Collect finished SSD writes; a full disk stops admissions (with a warning)."""
        keep: list[tuple[RadixNode, int, Future[Any]]] = []
        for n, slot, fut in self._writes:
            if not wait and not fut.done():
                keep.append((n, slot, fut))
                continue
            err = fut.exception()
            if err is None:
                continue
            if isinstance(err, DiskFull):
                self._stop_admissions(str(err))
            else:
                warnings.warn(f"SSD write failed ({err}); block dropped from the SSD tier",
                              RuntimeWarning, stacklevel=3)
            if self._sslot.get(n) == slot:
                self._lose(n, Tier.SSD)
        self._writes = keep

    def _stop_admissions(self, why: str) -> None:
        if not self.counters.admissions_stopped:
            self.counters.admissions_stopped = True
            self.index.stop_ssd_admissions()
            warnings.warn(f"SSD tier is full ({why}): SSD admissions stopped; lookups and "
                          f"loads of stored blocks keep working", RuntimeWarning, stacklevel=4)

    def _forget(self, n: RadixNode, tier: Tier) -> None:
        """Inside :meth:`_apply`: the index forgets a copy of ``n``, a node the current
        Moves touched. The drops it returns can only name ``n`` itself, whose slots the
        rest of :meth:`_apply` frees (it frees every touched node's slot the index no
        longer lists)."""
        lost = self.index.lose_copy(n, tier)
        assert all(m is n for m in (*lost.ssd_drops, *lost.dram_drops))

    def _lose(self, n: RadixNode, tier: Tier) -> None:
        """A copy the store could not keep (failed write, corrupt block): the index
        forgets it and the slot is freed by applying the index's Moves."""
        self._apply(self.index.lose_copy(n, tier), {})

    # ------------------------------------------------------------------ lifecycle
    def flush(self) -> None:
        """Wait for every SSD write and fsync the slab files."""
        if self.ssd is not None:
            self.ssd.flush()
        self._poll_writes(wait=True)
        self.dram.drain()
        self._fence.clear()

    def close(self) -> None:
        if self.ssd is not None:
            self.ssd.drain()
            self._poll_writes(wait=True)
            self.ssd.close()

    def __enter__(self) -> TieredKVStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self) -> None:
        """Assert the invariants (tests call this after every step)."""
        idx = self.index
        for n in self._dslot:
            assert n.kv_loc & _DRAM, f"{n!r} has a DRAM slot the index does not know"
        for n in self._sslot:
            assert n.kv_loc & _SSD, f"{n!r} has an SSD slot the index does not know"
        assert len(self._dslot) == idx.dram_used // self.block_bytes
        assert len(self._sslot) == idx.ssd_used // self.block_bytes == len(idx.ssd_lru)
        assert self.dram.used == len(self._dslot) <= self.dram.n_slots
        if self.ssd is not None:
            assert self.ssd.used_slots == len(self._sslot)
            assert self.ssd.files_size() <= self.ssd.budget_bytes

    def stats(self) -> dict[str, Any]:
        """Counters as a JSON-able dict (hits per tier, SSD writes, lifetime)."""
        c, st = self.counters, self.index.stats
        out: dict[str, Any] = {
            "lookups": c.lookups, "lookup_blocks": c.lookup_blocks,
            "hit_blocks_dram": c.hit_blocks_dram, "hit_blocks_ssd": c.hit_blocks_ssd,
            "loads": c.loads, "load_failures": c.load_failures, "stores": c.stores,
            "stored_blocks": c.stored_blocks, "dram_slots": self.dram.n_slots,
            "dram_slots_used": len(self._dslot), "dram_evictions": st.dram_evictions,
            "promotions": st.promotions, "prewrites": st.prewrites,
            "admissions_stopped": c.admissions_stopped,
            "ssd_keeps": st.ssd_keeps, "ssd_keep_bytes": st.ssd_keep_bytes,
        }
        if self.ssd is not None:
            s = self.ssd.stats
            elapsed = time.monotonic() - s.started
            out.update({
                "ssd_slots": self.ssd.n_slots, "ssd_slots_used": len(self._sslot),
                "ssd_blocks_written": s.blocks_written,
                "ssd_payload_bytes_written": s.payload_bytes_written,
                "ssd_bytes_written": s.bytes_written, "ssd_blocks_read": s.blocks_read,
                "ssd_payload_bytes_read": s.payload_bytes_read,
                "ssd_checksum_failures": s.checksum_failures,
                "ssd_identity_mismatches": s.identity_mismatches,
                "ssd_budget_bytes": self.ssd.budget_bytes,
                "ssd_files_bytes": self.ssd.files_size(),
                "ssd_lifetime_days_1dwpd": lifetime_days(s.bytes_written, elapsed,
                                                         self.ssd.budget_bytes),
                "recovered_blocks": self.recovered_blocks,
                "o_direct": self.ssd.direct,
            })
        return out


def _stage_cuda(t: Any) -> np.ndarray:
    """A host copy of a CUDA payload (SSD writes and DRAM inserts read host memory)."""
    host: np.ndarray = t.detach().reshape(-1).view(__import__("torch").uint8).cpu().numpy()
    return host


__all__ = ["BlockName", "LoadResult", "SSDWrite", "SlotKVIndex", "StoreOutcome", "TieredKVStore",
           "TieredKVStoreParams", "encode_key"]
