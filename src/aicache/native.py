"""The compiled hot path: which modules are compiled, and the switch back to pure Python.

The install compiles a few pure-Python modules — the cache template, the policy core of
the libCacheSim policies LRU, FIFO, CLOCK, SIEVE, S3-FIFO and ARC
(:mod:`aicache.policies.slotcore`), the KV prefix-cache policies and SAECache
(:data:`COMPILED`) — into extension modules that sit beside their ``.py`` sources: mypyc
compiles most, Cython the policy core (:data:`CYTHON`: its state is typed arrays, which
mypyc cannot index without boxing). There is one source: the extension is that same file compiled, so the
simulator, the real engines and the tests run the same policy code either way, and the
results are identical (``tests/core/test_native.py`` replays traces on both paths and compares
every request). Where no compiler is present the install skips the compile and the ``.py``
files are used as before.

``AICACHE_PURE_PYTHON=1`` in the environment makes :mod:`aicache` import the ``.py``
sources even where the extensions exist (a finder put first on ``sys.meta_path`` when the
package is imported), so both paths can be tested and profiled on one install:
``make test-pure`` runs the lockstep tests that way. An editable install whose compiled
sources were edited after the build, or that has no extension for a module added to
:data:`COMPILED` since, does the same, with a warning (:func:`stale_sources`): the
extensions would run the old code, or mix with pure modules. All or none: a compiled class cannot mix with a
pure one of the same hierarchy.

:func:`mypyc_attr` is mypyc's class-attribute decorator when mypy_extensions is installed
(at compile time it is), and an identity decorator otherwise, so the pure path needs no
extra dependency.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

#: the modules the install compiles (setup.py reads this list); order does not matter
COMPILED: tuple[str, ...] = (
    "aicache.policies.base",
    "aicache.sim.cache",
    "aicache.traces.stackdist",
    "aicache.policies.slotcore",
    "aicache.policies.slotted",
    "aicache.kv.session_predictor",
    "aicache.kv.prefix_policies",
    "aicache.kv.saecache",
    "aicache.kv.saecache_reuse",
    "aicache.traces.formats._fastparse",
)
#: the modules of :data:`COMPILED` that Cython compiles (pure-Python mode, typed arrays);
#: mypyc compiles the others
CYTHON: tuple[str, ...] = (
    "aicache.policies.slotcore",
    "aicache.traces.stackdist",
    "aicache.traces.formats._fastparse",
)
#: modules an earlier install compiled and that now run as Python or live elsewhere: an
#: extension of theirs left in an editable tree belongs to an old build (its shim would load
#: a shared library that no longer holds it), so it is never imported (:func:`skip_retired`),
#: counts as stale, and the next build deletes it
RETIRED: tuple[str, ...] = (
    "aicache.policies.eviction.fifo",
    "aicache.policies.eviction.lru",
    "aicache.policies.eviction.reject",
    "aicache.policies.eviction.clock",
    "aicache.policies.eviction.sieve",
    "aicache.policies.eviction.s3fifo",
    "aicache.policies.eviction.arc",
    "aicache.sim.stackdist",  # now aicache.traces.stackdist
)
#: the environment variable that selects the pure-Python sources
PURE_ENV = "AICACHE_PURE_PYTHON"

#: seconds a source may be newer than its extension and still count as compiled
_MTIME_SLACK = 2.0

_T = TypeVar("_T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr  # re-exported for the policies
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:
        def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
            return lambda cls: cls


def pure_requested() -> bool:
    """Whether the environment asks for the pure-Python sources."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def stale_sources(root: str | None = None) -> list[str]:
    """The :data:`COMPILED` modules under ``root`` (the directory holding the ``aicache``
    package; default: this one's) that a build would change: a ``.py`` newer than its
    extension module by more than :data:`_MTIME_SLACK` (an installer may write the source
    just after it), or, where other modules have extensions, a ``.py`` without one (a
    module added to :data:`COMPILED` after the last build)."""
    base = root if root is not None else os.path.dirname(os.path.dirname(__file__))
    stale = [name for name in RETIRED if _extension(os.path.join(base, *name.split(".")))]
    unbuilt = []
    built = False
    for name in COMPILED:
        stem = os.path.join(base, *name.split("."))
        try:
            src = os.stat(stem + ".py").st_mtime
        except OSError:
            continue
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            try:
                if os.stat(stem + suffix).st_mtime + _MTIME_SLACK < src:
                    stale.append(name)
                built = True
                break
            except OSError:
                continue
        else:
            unbuilt.append(name)
    return stale + unbuilt if built else stale


def _extension(stem: str) -> str | None:
    """The extension module file beside ``stem`` (a path without suffix), if any."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(stem + suffix):
            return stem + suffix
    return None


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from an extension module rather than its source."""
    origin = getattr(module, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled_modules() -> list[str]:
    """The modules of :data:`COMPILED` that run compiled in this process (imports them)."""
    return [name for name in COMPILED if is_compiled(importlib.import_module(name))]


class _SourceFirst:
    """Finds the ``.py`` source of one of ``names``, skipping its extension. A meta path
    finder needs only ``find_spec``; not deriving from ``importlib.abc.MetaPathFinder``
    spares every command its import (importlib.resources, pathlib, tempfile: ~30 ms of
    CPU at each start)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:
            source = os.path.join(folder, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def use_pure_python() -> None:
    """Import the ``.py`` sources of :data:`COMPILED` from now on (idempotent). Must run
    before any of them is imported; :mod:`aicache` calls it when :func:`pure_requested`."""
    if not any(isinstance(f, _SourceFirst) and "aicache.sim.cache" in f.names
               for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst(COMPILED + RETIRED))


def skip_retired() -> None:
    """Import the :data:`RETIRED` modules from their sources whatever is beside them
    (idempotent); :mod:`aicache` calls it on import."""
    if not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst(RETIRED))
