"""A policy daemon that answers wrongly never fails or hangs a reader.

A real daemon socket (the project's PolicyDaemon serving a real SystemDriver) whose replies
to one method are replaced by bad ones: a negative or foreign block index, wrong types,
unknown admissions, missing ranges. Every read must return the file's bytes, every answer
must be counted and treated as none, and a second reader of the block the first one was
reading must not wait forever on a fetch nobody finishes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import fsspec
import pytest

from aicache.datacache.daemon import PolicyDaemon
from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.keys import BlockKey
from aicache.datacache.policy.driver import SystemDriver, make_engine_system
from aicache.datacache.store import HEADER_SIZE

BLOCK = 4096
HANG_S = 60.0  # only a reader blocked for good gets near this
FOREIGN_BID = 10**6  # a block id no file of this test has


def _read_bad_prefetch(ids: list[Any]) -> Callable[[PolicyDaemon, list[Any]], Any]:
    def read(d: PolicyDaemon, a: list[Any]) -> Any:
        hit, _prefetch, used = PolicyDaemon._read(d, a)
        return [hit, ids, used]
    return read


def _locate_negative(d: PolicyDaemon, a: list[Any]) -> Any:
    path = sorted(d.policy.map.ranges())[0]
    return [path, -1, d.policy.base(path)]


def _locate_elsewhere(d: PolicyDaemon, a: list[Any]) -> Any:
    path = sorted(d.policy.map.ranges())[0]
    return [path, 1 << 40, d.policy.base(path)]


# each case: the methods whose replies are replaced, by what
BAD: dict[str, dict[str, Callable[[PolicyDaemon, list[Any]], Any]]] = {
    # the reader's prefetch asks the daemon where a foreign block lives: -1 of a file
    "locate-negative-index": {"read": _read_bad_prefetch([FOREIGN_BID]), "locate": _locate_negative},
    "locate-past-the-file": {"read": _read_bad_prefetch([FOREIGN_BID]), "locate": _locate_elsewhere},
    "locate-wrong-types": {"read": _read_bad_prefetch([FOREIGN_BID]),
                           "locate": lambda d, a: ["x", "0", None]},
    "read-negative-prefetch": {"read": _read_bad_prefetch([-3])},
    "read-string-prefetch": {"read": _read_bad_prefetch(["0"])},
    "read-not-a-list": {"read": lambda d, a: {"hit": True}},
    "insert-unknown-admission": {"insert": lambda d, a: ["evil", []]},
    "insert-bad-victim": {"insert": lambda d, a: ["stored", [[-1, ["p", "v", -2], False]]]},
    "register-missing-path": {"register": lambda d, a: {}},
    "register-negative-range": {"register": lambda d, a: {f: [-5, 1] for f, _s in a[0]}},
}


class FakeDaemon(PolicyDaemon):
    """A PolicyDaemon whose answers to some methods are replaced."""

    def __init__(self, cache_dir: str, bad: dict[str, Callable[[PolicyDaemon, list[Any]], Any]]) -> None:
        driver = SystemDriver[BlockKey](make_engine_system("juicefs", 1 << 26, BLOCK, None, 0),
                                        BLOCK, capacity=1 << 26, overhead=HEADER_SIZE)
        super().__init__(cache_dir, driver, idle_exit_s=600)
        self._methods = {**PolicyDaemon._methods, **bad}


@pytest.fixture
def dataset(tmp_path: Any) -> tuple[str, dict[str, bytes]]:
    src = tmp_path / "src"
    src.mkdir()
    truth = {}
    for i in range(3):
        data = os.urandom(3 * BLOCK + 100 * i)
        p = src / f"f{i}.bin"
        p.write_bytes(data)
        truth[str(p)] = data
    return str(src), truth


def _run(fn: Callable[[], bytes]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def go() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out.append(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_daemon_answer_is_counted_and_no_reader_fails_or_hangs(tmp_path: Any, dataset: Any,
                                                                     case: str) -> None:
    src, truth = dataset
    cache = str(tmp_path / "cache")
    os.makedirs(cache)
    daemon = FakeDaemon(cache, BAD[case])
    daemon.start_thread()
    eng = CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="juicefs", daemon="connect",
                      params=EngineParams(block_size=BLOCK, daemon_timeout_s=5.0, max_prefetch=2))
    try:
        for path, data in sorted(truth.items()):
            # two readers of the same first block: the second may wait on the first's fetch
            first = _run(lambda p=path: eng.read(p, 0, BLOCK))
            second = _run(lambda p=path: eng.read(p, 0, BLOCK))
            for t, out in (first, second):
                t.join(HANG_S)
                assert not t.is_alive(), f"{case}: a reader of {path} never returned"
                assert out == [data[:BLOCK]], f"{case}: {out[0]!r:.200}"
            assert eng.read(path) == data
        eng.wait_prefetches()
        assert eng.policy.bad_answers >= 1, case
        assert eng.stats()["misses"] >= 1
        assert eng.flights.pending() == 0, "a flight was left unresolved"
    finally:
        eng.close()
        daemon.stop()


@pytest.mark.parametrize("write_behind", [False, True])
def test_a_reader_does_not_wait_without_bound_on_a_stuck_fetch(tmp_path: Any, dataset: Any,
                                                               write_behind: bool) -> None:
    """The block a reader fetched is stuck being stored (a hung disk). Without
    write-behind that reader is stuck in the store: a second reader of the block waits at
    most the flight bound, then reads the remote itself. With it (the default) the writer
    thread is stuck, and neither reader waits: both have the bytes from the flight."""
    src, truth = dataset
    path, data = sorted(truth.items())[0]
    eng = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 26, policy="lru",
                      params=EngineParams(block_size=BLOCK, max_prefetch=0, flight_wait_s=0.2,
                                          write_behind=write_behind))
    entered, release = threading.Event(), threading.Event()
    put = eng.store.put_evicting

    def stuck_put(key: BlockKey, blob: bytes, evict: Any) -> Any:
        entered.set()
        assert release.wait(HANG_S)
        return put(key, blob, evict)

    eng.store.put_evicting = stuck_put  # type: ignore[method-assign]
    try:
        first = _run(lambda: eng.read(path, 0, BLOCK))
        assert entered.wait(HANG_S)
        second = _run(lambda: eng.read(path, 0, BLOCK))
        second[0].join(HANG_S)
        assert not second[0].is_alive(), "the second reader waited on the stuck fetch"
        assert second[1] == [data[:BLOCK]]
        if write_behind:  # only the writer is stuck
            first[0].join(HANG_S)
            assert not first[0].is_alive() and first[1] == [data[:BLOCK]]
        else:
            assert first[0].is_alive()  # the first is still stuck: the second did not wait on it
        release.set()
        first[0].join(HANG_S)
        assert first[1] == [data[:BLOCK]]
    finally:
        release.set()
        eng.close()


def test_the_flight_bound_follows_the_retry_rules() -> None:
    p = EngineParams(request_timeout_s=2.0, retries=2, backoff_s=0.5)
    # every attempt times out (3 x 2 s) and both backoffs are slept (0.5 + 1 s), twice over
    assert p.flight_wait_bound() == pytest.approx(2 * (3 * 2.0 + 1.5))
    assert EngineParams(flight_wait_s=7.0).flight_wait_bound() == 7.0
    assert EngineParams(request_timeout_s=None).flight_wait_bound() > 0


def test_an_open_reaches_the_daemons_system(tmp_path: Any, dataset: Any) -> None:
    """``CacheEngine.opened`` (a mount's open) goes through the daemon's socket to the
    system the daemon drives, with the file's unit and first block."""
    src, truth = dataset
    cache = str(tmp_path / "cache")
    os.makedirs(cache)
    daemon = FakeDaemon(cache, {})
    opened: list[tuple[str, int]] = []
    system = daemon.policy.system
    system.on_open = lambda unit, block, now: opened.append((unit, block))  # type: ignore[method-assign]
    daemon.start_thread()
    eng = CacheEngine(fsspec.filesystem("file"), cache, 1 << 26, policy="juicefs", daemon="connect",
                      params=EngineParams(block_size=BLOCK, daemon_timeout_s=5.0))
    try:
        path = sorted(truth)[1]
        meta = eng.stat(path)
        eng.opened(meta)
        assert eng.read(path) == truth[path]
        base = eng.layout.file_blocks(meta).base
        assert opened == [(eng.layout.file_blocks(meta).unit, base)]
        assert eng.policy.bad_answers == 0
    finally:
        eng.close()
        daemon.stop()
