"""Counters that outlive the process: every engine's hits, misses and traffic, per cache dir.

Each engine on a real cache directory owns one small file, ``stats/<host>-<pid>-<n>.json``,
holding its own cumulative counters. A background thread rewrites it every
``interval_s`` seconds when a value changed (write a temp file, ``rename`` over the old one,
so a reader sees the previous or the next version, never half of one), and once more at
close and at interpreter exit. The read path pays nothing: the counters themselves are the
engine's in-memory Prometheus counters, read only at flush time — no syscall, no lock, no
file per read.

``aicache cache stats`` sums every file (:func:`read_totals`). Files of processes that are
gone (same host, pid no longer running) are folded into ``stats/retired.json`` when an
engine opens, so the directory holds one file per *live* engine plus one. Folding and
summing take ``stats/lock`` (exclusive, shared), so a sum never counts a folded file twice.

Invariant: for every counter, the sum over ``stats/*.json`` equals the total over every
engine that ever used the directory, up to what live engines did since their last flush.
A forked child never writes its parent's file (the writer is bound to the pid that made it).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import itertools
import json
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

#: the counters an engine persists (names of :class:`~aicache.datacache.metrics.EngineMetrics`)
PERSISTED = ("hits", "misses", "hit_bytes", "remote_bytes", "prefetch_issued", "prefetch_used",
             "prefetch_wasted", "prefetch_dropped", "evictions", "rejected", "corrupt_blocks",
             "misplaced_blocks", "enospc", "remote_retries", "remote_errors", "versions_gone",
             "shared_hits", "shared_hit_bytes", "shared_misses", "shared_rejects", "shared_errors",
             "shared_skipped", "shared_writes", "shared_write_drops")

RETIRED = "retired.json"
_seq = itertools.count()
_open: weakref.WeakSet[CounterFile] = weakref.WeakSet()


def stats_dir(cache_dir: str) -> str:
    return os.path.join(cache_dir, "stats")


@contextmanager
def _locked(cache_dir: str, kind: int, mode: int) -> Iterator[None]:
    fd = os.open(os.path.join(stats_dir(cache_dir), "lock"),
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, mode)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, mode)
        fcntl.flock(fd, kind)
        yield
    finally:
        os.close(fd)  # releases the lock


def _load(path: str) -> dict[str, float]:
    """A counter file's values; {} for one that is unreadable or not ours (never raises)."""
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: float(v) for k, v in raw.items()
            if k in PERSISTED and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _write(path: str, values: Mapping[str, float], mode: int) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    os.fchmod(fd, mode)  # the cache's mode, whatever the umask
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({k: values.get(k, 0.0) for k in PERSISTED}, f)
    os.replace(tmp, path)


def _counter_files(d: str) -> list[str]:
    try:
        names = os.listdir(d)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith(".json"))


@dataclass(frozen=True)
class Totals:
    """The summed counters of a cache directory; ``live``: engines whose process runs
    (another host's engines count as live: their pids say nothing here)."""

    values: dict[str, float]
    live: int

    @property
    def hit_ratio(self) -> float | None:
        n = self.values["hits"] + self.values["misses"]
        return self.values["hits"] / n if n else None


def read_totals(cache_dir: str) -> Totals:
    """Sum every engine's counters of ``cache_dir`` (zeros where none was ever written)."""
    d = stats_dir(cache_dir)
    total = dict.fromkeys(PERSISTED, 0.0)
    if not os.path.isdir(d):
        return Totals(total, 0)
    names = []
    try:
        with _locked(cache_dir, fcntl.LOCK_SH, 0o600):
            names = _counter_files(d)
            loaded = [_load(os.path.join(d, n)) for n in names]
    except OSError as exc:  # a read-only directory without a lock file yet: sum unlocked
        if exc.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise
        names = _counter_files(d)
        loaded = [_load(os.path.join(d, n)) for n in names]
    for vals in loaded:
        for k, v in vals.items():
            total[k] += v
    return Totals(total, sum(1 for n in names if n != RETIRED and not _dead_here(n)))


def _dead_here(name: str, host: str | None = None) -> bool:
    """Whether counter file ``name`` is of a process of this host that no longer runs."""
    parts = name[:-5].rsplit("-", 2)
    if len(parts) != 3 or parts[0] != (host or socket.gethostname()) or not parts[1].isdigit():
        return False
    return not pid_alive(int(parts[1]))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (one we may not signal still runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def retire_dead(cache_dir: str, mode: int = 0o600) -> int:
    """Fold the files of this host's processes that no longer run into ``retired.json``;
    returns how many were folded. A file of another host is left alone (its pid says
    nothing here)."""
    d = stats_dir(cache_dir)
    host = socket.gethostname()
    folded = 0
    with _locked(cache_dir, fcntl.LOCK_EX, mode):
        dead = [n for n in _counter_files(d) if n != RETIRED and _dead_here(n, host)]
        if not dead:
            return 0
        retired_path = os.path.join(d, RETIRED)
        total = dict.fromkeys(PERSISTED, 0.0)
        for name in (RETIRED, *dead):
            for k, v in _load(os.path.join(d, name)).items():
                total[k] += v
        _write(retired_path, total, mode)
        for name in dead:
            try:
                os.unlink(os.path.join(d, name))
                folded += 1
            except FileNotFoundError:
                pass
    return folded


class CounterFile:
    """This engine's counter file (see the module docstring). ``read`` returns the current
    cumulative values; ``wait(seconds)`` is the periodic thread's sleep (an
    ``Event.wait``, so :meth:`close` ends it at once; tests inject their own)."""

    def __init__(self, cache_dir: str, read: Callable[[], Mapping[str, float]], *,
                 interval_s: float = 1.0, mode: int = 0o600, start: bool = True) -> None:
        self.cache_dir = cache_dir
        self._read = read
        self._mode = mode
        self._pid = os.getpid()
        d = stats_dir(cache_dir)
        dmode = mode | ((mode & 0o444) >> 2)
        os.makedirs(d, mode=dmode, exist_ok=True)
        if os.stat(d).st_uid == os.geteuid() and (os.stat(d).st_mode & 0o7777) != dmode:
            os.chmod(d, dmode)  # the cache's mode, whatever the umask
        try:
            retire_dead(cache_dir, mode)
        except OSError:
            pass  # folding is housekeeping: a failure leaves files to fold next time
        self.path = os.path.join(d, f"{socket.gethostname()}-{self._pid}-{next(_seq)}.json")
        self._last: dict[str, float] | None = None
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval_s
        self._thread: threading.Thread | None = None
        _open.add(self)
        if start and interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="aicache-counters", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()

    def flush(self) -> bool:
        """Write the file if a value changed since the last write; never raises (a full or
        read-only disk loses only statistics). Returns whether it wrote."""
        if os.getpid() != self._pid:
            return False
        with self._flush_lock:
            values = {k: float(v) for k, v in self._read().items() if k in PERSISTED}
            if values == self._last:
                return False
            try:
                _write(self.path, values, self._mode)
            except OSError:
                return False
            self._last = values
            return True

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self.flush()
        _open.discard(self)


@atexit.register
def _flush_all() -> None:
    """Engines that nobody closed (fsspec keeps filesystems until exit) still count."""
    for w in list(_open):
        w.flush()
