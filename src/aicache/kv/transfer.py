"""Bandwidth sharing of SARIA's multi-source reload: the links' bandwidths, how they are
shared (:class:`SharingModel`), the coordinated pacing rate ``B_pace`` and the fluid
model of concurrent reloads and the SSD write queue (:class:`TransferCoordinator`,
:func:`schedule`) that the simulator and the real tiered store drive beside the
:class:`~aicache.kv.saria.KVIndex` (``docs/design/saria.md``). Pure: told ``now``."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import Enum

GB = 1e9


@dataclass(frozen=True, slots=True)
class Bandwidths:
    """Bytes/s of the shared GPU ingress link, the GDS (SSD→GPU) path, DRAM→GPU, and the
    SSD's write path (DRAM→SSD). ``disk`` and ``disk_write`` are the whole SSD array's:
    an object striped over ``n`` drives moves at ``n`` times one drive's rate."""

    gpu: float = 48 * GB
    disk: float = 20 * GB
    dram: float = 48 * GB
    disk_write: float = 18.8 * GB


@dataclass(frozen=True, slots=True)
class SharingModel:
    """How the links are shared where the seed describes behaviour but gives no formula.

    * ``overlap_ssd_share``: under uncoordinated overlap a DRAM burst takes the GPU ingress
      link and SSD progress is "low" (docs/results/ssd-model.md), not zero: the SSD keeps
      this share of its rate and DRAM gets the rest of the link.
    * ``read_share``: reads and writes share one SSD's device time; while writes are queued,
      reads get at most this share of it (writes get the rest, and all of it when no read
      runs). A read stream at rate ``r`` uses ``r / disk`` of the device's time and leaves
      writes ``disk_write · (1 − r / disk)``.
    * ``coord_overhead_s_per_byte``: the coordinator's control work per paced SSD byte
      (bounding and spacing submissions): while it coordinates, the SSD path moves at
      ``1 / (1 / rate + overhead)``. ``0`` is the ideal coordinator.
    """

    overlap_ssd_share: float = 0.1
    read_share: float = 0.5
    coord_overhead_s_per_byte: float = 0.013 / GB


#: the ideal links: an uncoordinated DRAM burst starves the SSD completely and the
#: coordinator costs nothing (the formulas of the spec with nothing else)
IDEAL_SHARING = SharingModel(0.0, 0.5, 0.0)


def b_pace(bw: Bandwidths) -> float:
    """Aggregate DRAM rate while SSD work runs: ``min(B_DRAM, B_GPU − B_disk)``."""
    return min(bw.dram, max(0.0, bw.gpu - bw.disk))


class TransferMode(str, Enum):
    SERIAL = "serial"            #: each request reads DRAM first, then SSD
    OVERLAP = "overlap"          #: both at once, uncoordinated: DRAM bursts take the link
    COORDINATED = "coordinated"  #: DRAM paced to B_pace while SSD work is runnable


class _Job:
    __slots__ = ("key", "dram", "ssd")

    def __init__(self, key: Hashable, dram: float, ssd: float) -> None:
        self.key, self.dram, self.ssd = key, dram, ssd


class TransferCoordinator:
    """Fluid (processor-sharing) model of concurrent reloads over one GPU ingress link,
    and of the SSD write queue sharing the SSD with them.

    Rates are piecewise constant between events (a job's DRAM or SSD part finishing, a
    write finishing, a submission). With jobs ``A_d`` having runnable DRAM work and
    ``A_s`` SSD work, and ``D`` = the SSD's read rate (``disk``, or ``read_share · disk``
    while writes are queued):

    * serial / overlap (uncoordinated): SSD gets ``max(φ·D, min(D, B_GPU − min(B_DRAM,
      B_GPU)))`` (φ = ``overlap_ssd_share``) and DRAM the rest of the link, at most
      ``B_DRAM``: the DRAM burst leaves the SSD little (docs/results/ssd-model.md). In
      ``serial`` a job's SSD part is runnable only after its DRAM part.
    * coordinated: while any SSD work is runnable DRAM is paced to ``min(B_DRAM, B_GPU,
      est.B_GPU − est.B_disk)`` and the SSD gets ``min(D', B_GPU − rate_DRAM)`` with
      ``D' = 1 / (1/D + overhead)``; with no SSD work DRAM runs unthrottled.
    * writes (FIFO; each a ``size`` in bytes, DRAM→SSD, not over the GPU link) get
      ``disk_write · (1 − rate_SSD_read / disk)``.

    Each read class's rate is split equally among its jobs. ``estimates`` (the
    coordinator's configured bandwidths) may differ from ``actual`` ones: pacing uses the
    estimate of B_disk while the SSD delivers at most the actual rate.
    """

    __slots__ = ("mode", "bw", "est", "share", "now", "_jobs", "_writes", "_writes_done")

    def __init__(self, mode: TransferMode | str = TransferMode.COORDINATED,
                 bandwidths: Bandwidths | None = None,
                 estimates: Bandwidths | None = None,
                 sharing: SharingModel | None = None) -> None:
        self.mode = TransferMode(mode)
        self.bw = bandwidths or Bandwidths()
        self.est = estimates or self.bw
        self.share = sharing or SharingModel()
        self.now = 0.0
        self._jobs: dict[Hashable, _Job] = {}
        #: queued writes, FIFO: key -> bytes left
        self._writes: OrderedDict[Hashable, float] = OrderedDict()
        self._writes_done: list[Hashable] = []

    def __len__(self) -> int:
        return len(self._jobs) + len(self._writes)

    @property
    def reads(self) -> int:
        """Reload jobs still running."""
        return len(self._jobs)

    @property
    def write_backlog_bytes(self) -> float:
        """Bytes of queued writes not yet on the SSD."""
        return float(sum(self._writes.values()))

    def submit(self, key: Hashable, dram_bytes: float, ssd_bytes: float, now: float) -> None:
        """Add a request's reload (call :meth:`advance` to ``now`` first)."""
        if now < self.now - 1e-9:
            raise ValueError("time went backwards")
        self.advance(now)
        if key in self._jobs:
            raise ValueError(f"transfer {key!r} already submitted")
        self._jobs[key] = _Job(key, float(dram_bytes), float(ssd_bytes))

    def submit_write(self, key: Hashable, nbytes: float, now: float) -> None:
        """Queue an SSD write of ``nbytes`` (it completes in FIFO order)."""
        if now < self.now - 1e-9:
            raise ValueError("time went backwards")
        self.advance(now)
        if key in self._writes:
            raise ValueError(f"write {key!r} already queued")
        self._writes[key] = float(nbytes)

    def cancel_write(self, key: Hashable) -> bool:
        """Drop a queued write (its source is gone); False when it is not queued."""
        return self._writes.pop(key, None) is not None

    def take_writes_done(self) -> list[Hashable]:
        """Writes completed since the last call, in completion order."""
        out, self._writes_done = self._writes_done, []
        return out

    def _rates(self) -> tuple[float, float, float]:
        """(per-job DRAM rate, per-job SSD rate, write rate of the queue's head)."""
        mode = self.mode
        nd = ns = 0
        for j in self._jobs.values():
            if j.dram > 0:
                nd += 1
            if j.ssd > 0 and (mode is not TransferMode.SERIAL or j.dram <= 0):
                ns += 1
        bw, sh = self.bw, self.share
        writing = bool(self._writes)
        disk = bw.disk * (sh.read_share if writing else 1.0)
        if mode is TransferMode.COORDINATED and ns:
            if sh.coord_overhead_s_per_byte > 0 and disk > 0:
                disk = 1.0 / (1.0 / disk + sh.coord_overhead_s_per_byte)
            rd = min(bw.dram, bw.gpu, max(0.0, self.est.gpu - self.est.disk)) if nd else 0.0
            rs = min(disk, bw.gpu - rd)
        elif ns and nd:
            rs = min(disk, max(sh.overlap_ssd_share * disk, bw.gpu - min(bw.dram, bw.gpu)))
            rd = min(bw.dram, bw.gpu - rs)
        else:
            rd = min(bw.dram, bw.gpu) if nd else 0.0
            rs = min(disk, bw.gpu) if ns else 0.0
        rw = bw.disk_write * max(0.0, 1.0 - rs / bw.disk) if writing and bw.disk > 0 else (
            bw.disk_write if writing else 0.0)
        return (rd / nd if nd else 0.0), (rs / ns if ns else 0.0), rw

    def next_event(self) -> float:
        """Time of the next part or write completion (``inf`` when idle or stalled)."""
        if not self._jobs and not self._writes:
            return math.inf
        pd, ps, rw = self._rates()
        dt = math.inf
        serial = self.mode is TransferMode.SERIAL
        for j in self._jobs.values():
            if j.dram <= 0 and j.ssd <= 0:
                return self.now
            if j.dram > 0 and pd > 0:
                dt = min(dt, j.dram / pd)
            if j.ssd > 0 and ps > 0 and (not serial or j.dram <= 0):
                dt = min(dt, j.ssd / ps)
        if self._writes and rw > 0:
            head = next(iter(self._writes.values()))
            dt = min(dt, max(0.0, head) / rw)
        return self.now + dt

    def advance(self, t: float) -> list[Hashable]:
        """Move the fluid model to time ``t``; returns the reload jobs that completed by
        then (completed writes are collected for :meth:`take_writes_done`)."""
        done: list[Hashable] = []
        serial = self.mode is TransferMode.SERIAL
        writes = self._writes
        while True:
            finished = [k for k, j in self._jobs.items() if j.dram <= 0 and j.ssd <= 0]
            for key in finished:
                del self._jobs[key]
                done.append(key)
            while writes:
                k, left = next(iter(writes.items()))
                if left > 0:
                    break
                del writes[k]
                self._writes_done.append(k)
            if (not self._jobs and not writes) or t <= self.now:
                break
            nxt = self.next_event()
            step_to = min(t, nxt)
            dt = step_to - self.now
            if dt > 0:
                pd, ps, rw = self._rates()  # constant during the step
                # less than a nanosecond of work left counts as done (float time
                # resolution at large ``now`` would otherwise stall the model)
                eps_d, eps_s = max(1e-3, pd * 1e-9), max(1e-3, ps * 1e-9)
                for j in self._jobs.values():
                    ssd_runs = j.ssd > 0 and (not serial or j.dram <= 0)
                    if j.dram > 0:
                        j.dram -= pd * dt
                        if j.dram <= eps_d:
                            j.dram = 0.0
                    if ssd_runs:
                        j.ssd -= ps * dt
                        if j.ssd <= eps_s:
                            j.ssd = 0.0
                if writes and rw > 0:
                    k = next(iter(writes))
                    left = writes[k] - rw * dt
                    writes[k] = 0.0 if left <= max(1e-3, rw * 1e-9) else left
            self.now = step_to
            if nxt > t:
                break
        self.now = max(self.now, t)
        return done

    def run_until_idle(self) -> dict[Hashable, float]:
        """Completion time of every outstanding job and write (for micro-benchmarks and
        tests)."""
        out: dict[Hashable, float] = {}
        while self._jobs or self._writes:
            t = self.next_event()
            if math.isinf(t):
                raise RuntimeError("transfer stalled: a bandwidth is zero")
            for k in self.advance(t):
                out[k] = self.now
            for k in self.take_writes_done():
                out[k] = self.now
        return out


def schedule(jobs: Sequence[tuple[float, float]], mode: TransferMode | str,
             bandwidths: Bandwidths | None = None,
             estimates: Bandwidths | None = None,
             sharing: SharingModel | None = None) -> list[float]:
    """Completion times of jobs ``(dram_bytes, ssd_bytes)`` all submitted at time 0."""
    c = TransferCoordinator(mode, bandwidths, estimates, sharing)
    for i, (d, s) in enumerate(jobs):
        c.submit(i, d, s, 0.0)
    done = c.run_until_idle()
    return [done[i] for i in range(len(jobs))]
