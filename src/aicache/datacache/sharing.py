"""One :class:`~aicache.datacache.engine.CacheEngine` per cache directory per process.

Why: fsspec builds a filesystem instance per (options, thread), and every caller that skips
its instance cache builds another; an engine owns threads (prefetch pool, the policy's
advisor), descriptors (the index, its lock file) and a policy, so one engine per instance
grows with every thread and loop that opens files. The filesystems of one process that
name one cache directory therefore lease one engine from :data:`ENGINES`.

The rule (stated, not guessed): a filesystem asking for a cache directory that is already
open in this process shares its engine when it asks for the *same* engine — an equal
:class:`EngineSpec` (target and its options, budget, block size, policy, advisor, daemon,
root, every engine knob). Another *target* (another store, or the same store reached with
other options: libraries such as HuggingFace ``datasets`` build a second filesystem with
options of their own) gets an engine of its own on the same directory, so one default
cache directory serves every target of a process; its blocks cannot be mistaken for
another target's because a block key is the remote path *and* its version, and the
version scheme of a target whose versions do not name the bytes on their own (the generic
mtime + size) carries the target's identity (:func:`~aicache.datacache.version.scheme_for`).
Two engines of one directory in one process share it as two processes do (the store's
locks are per open file, the budget is the store's). Any other difference is a
:class:`~aicache.errors.BadInput` naming the options that differ: one process cannot serve
two budgets, block sizes or policies from one cache directory without one of them being
silently ignored. ``share=False`` (what fsspec's ``skip_instance_cache=True`` means here)
gives a private engine instead.

Lifetime: a lease is taken per filesystem and given back when it is closed or garbage
collected (a :func:`weakref.finalize`, which also runs at interpreter exit); the engine
is closed when its last lease goes.

Fork (DataLoader workers): the child starts with no engines. Those inherited belong to the
parent and are never used, closed or freed in the child (their index connection and lock
state are the parent's); :attr:`SharedEngines.generation` changes in the child, so an
inherited filesystem takes a fresh engine on its next use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from aicache.datacache.engine import CacheEngine, DaemonMode, EngineParams
from aicache.policies.system import DataCacheSystem
from aicache.datacache.shared import SharedTierSpec
from aicache.errors import BadInput

if TYPE_CHECKING:
    from aicache.adaptive.advisor.base import AdvisorSpec

#: EngineParams fields under the names the filesystem takes them by
_OPTION_NAMES = {"request_timeout_s": "request_timeout", "metadata_ttl_s": "metadata_ttl",
                 "verify": "verify_checksum"}


@dataclass(frozen=True, slots=True, eq=False)
class EngineSpec:
    """Everything an engine is built from; two filesystems share an engine iff equal."""

    cache_dir: str  #: absolute, symlinks resolved: the key
    target: str  #: a token of the target filesystem's class and options
    cache_size: int
    policy: str | DataCacheSystem
    advisor: AdvisorSpec | None
    params: EngineParams
    root: str
    daemon: DaemonMode
    #: the shared tier under the local store (None: none)
    shared: SharedTierSpec | None = None

    @property
    def key(self) -> tuple[str, str]:
        """The engine this spec names in a process: one per (cache directory, target)."""
        return (self.cache_dir, self.target)

    def differences(self, other: EngineSpec, *, target: bool = True) -> list[str]:
        """``option=this (open: other)`` per option that differs (empty: the same engine);
        ``target=False`` leaves the target out (may two engines share the directory?)."""
        out = []
        for f in fields(self):
            if f.name in ("cache_dir", "params") or (f.name == "target" and not target):
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out.append("another target (protocol or options)" if f.name == "target"
                           else f"{f.name}={a!r} (open: {b!r})")
        for f in fields(EngineParams):
            a, b = getattr(self.params, f.name), getattr(other.params, f.name)
            if a != b:
                out.append(f"{_OPTION_NAMES.get(f.name, f.name)}={a!r} (open: {b!r})")
        return out


@dataclass(slots=True)
class _Lease:
    spec: EngineSpec
    engine: CacheEngine
    refs: int


class SharedEngines:
    """The process's engines by (cache directory, target), reference-counted (see the
    module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], _Lease] = {}
        #: changes in a forked child: an engine taken in another generation is the parent's
        self.generation = 0
        self._inherited: list[CacheEngine] = []  # kept alive, never closed (see module doc)

    def acquire(self, spec: EngineSpec, build: Callable[[], CacheEngine]) -> CacheEngine:
        """The engine of ``spec``'s cache dir and target: the open one (if ``spec`` equals
        its spec) or a new one from ``build``; raises :class:`BadInput` when the directory
        is open with other options (a target aside)."""
        with self._lock:  # held while building: a racing thread shares, never builds twice
            lease = self._open.get(spec.key)
            if lease is not None:
                diff = spec.differences(lease.spec)
            else:  # the directory's engines (of other targets) all have one spec but the target
                same_dir = (o.spec for o in self._open.values() if o.spec.cache_dir == spec.cache_dir)
                first = next(same_dir, None)
                diff = spec.differences(first, target=False) if first is not None else []
            if diff:
                raise BadInput(
                    f"cache dir {spec.cache_dir} is already open in this process with other "
                    f"options ({', '.join(diff)}); pass the same options, "
                    "another cache_dir, or skip_instance_cache=True for a private engine")
            if lease is None:
                lease = self._open[spec.key] = _Lease(spec, build(), 0)
            lease.refs += 1
            return lease.engine

    def release(self, key: tuple[str, str], engine: CacheEngine, generation: int) -> None:
        """Give back one lease of ``engine`` (or close it, if it was private); ``key`` is
        its spec's :attr:`EngineSpec.key`. An engine of an earlier generation (inherited
        over fork) is left alone."""
        if generation != self.generation:
            return
        with self._lock:
            lease = self._open.get(key)
            if lease is not None and lease.engine is engine:
                lease.refs -= 1
                if lease.refs > 0:
                    return
                del self._open[key]
        engine.close()

    def inherited(self, engine: CacheEngine) -> None:
        """Keep an engine of the parent's alive in this child (freeing it would close the
        parent's index connection from here)."""
        self._inherited.append(engine)

    def open_dirs(self) -> dict[str, int]:
        """Cache directory → leases (of all its targets), of this process's shared engines
        (tests, diagnostics)."""
        out: dict[str, int] = {}
        with self._lock:
            for (d, _t), lease in self._open.items():
                out[d] = out.get(d, 0) + lease.refs
        return out

    def engines_of(self, cache_dir: str) -> int:
        """How many engines (targets) this process has open on ``cache_dir``."""
        with self._lock:
            return sum(1 for d, _t in self._open if d == cache_dir)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._inherited.extend(lease.engine for lease in self._open.values())
        self._open.clear()
        self.generation += 1


ENGINES = SharedEngines()
os.register_at_fork(after_in_child=ENGINES._after_fork_in_child)
