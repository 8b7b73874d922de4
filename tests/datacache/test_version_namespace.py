"""A generic target's versions are namespaced by the target, alike in every process: two
DataLoader workers (or a worker and the policy daemon's other clients) that build the same
target key the same blocks, even when its options hold objects whose identity is each
process's own (a shared counter, a wrapped filesystem instance)."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from aicache.datacache.version import scheme_for, version_namespace
from aicache.testing.slowfs import SlowFileSystem


def _child(counter: Any, q: Any) -> None:
    fs = SlowFileSystem(latency=0.0, skip_instance_cache=True, tag=counter)
    q.put((version_namespace(fs), scheme_for(fs).identify({"size": 3, "mtime": 1.5}).version))


def test_the_namespace_is_the_same_in_another_process() -> None:
    ctx = mp.get_context("spawn")
    counter = ctx.Value("i", 0)  # an object whose identity is each process's own
    fs = SlowFileSystem(latency=0.0, skip_instance_cache=True, tag=counter)
    here = (version_namespace(fs), scheme_for(fs).identify({"size": 3, "mtime": 1.5}).version)
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(counter, q))
    p.start()
    there = q.get(timeout=120)
    p.join(60)
    assert here == there
    assert here[1].startswith(here[0] + "|")


def test_targets_with_other_options_get_other_namespaces() -> None:
    a = SlowFileSystem(latency=0.0, skip_instance_cache=True)
    b = SlowFileSystem(latency=0.5, skip_instance_cache=True)
    assert version_namespace(a) != version_namespace(b)
