"""The mount's metadata (``getattr``, ``readdir``) comes through the engine's metadata
cache: the remote's failures are retried as the engine retries them, a TTL bounds the age
of every answer, and a path the remote does not hold is remembered as such for the TTL."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from fsspec.implementations.local import LocalFileSystem
import pytest

from aicache.datacache.engine import CacheEngine, EngineParams
from aicache.datacache.fuse import CacheFuse, FuseOSError


class FlakyFS(LocalFileSystem):  # type: ignore[misc]
    """The local filesystem whose ``info``/``ls`` fail the first ``fail`` calls each, and
    which counts the calls that reach it (not the ``info`` calls its own ``ls`` makes)."""

    def __init__(self, fail: int) -> None:
        super().__init__(skip_instance_cache=True)
        self.fail = {"info": fail, "ls": fail}
        self.calls = {"info": 0, "ls": 0}
        self._listing = False

    def _ask(self, what: str) -> None:
        self.calls[what] += 1
        if self.fail[what] > 0:
            self.fail[what] -= 1
            raise ConnectionError(f"injected {what} failure")

    def info(self, path: str, **kw: Any) -> dict[str, Any]:
        if not self._listing:
            self._ask("info")
        return super().info(path, **kw)

    def ls(self, path: str, detail: bool = True, **kw: Any) -> Any:
        self._ask("ls")
        self._listing = True
        try:
            return super().ls(path, detail=detail, **kw)
        finally:
            self._listing = False


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def ops_over(tmp_path: Path, target: FlakyFS, clock: Clock, retries: int) -> CacheFuse:
    (tmp_path / "src" / "d").mkdir(parents=True, exist_ok=True)
    (tmp_path / "src" / "a.bin").write_bytes(b"x" * 1000)
    params = EngineParams(block_size=1 << 16, metadata_ttl_s=10.0, retries=retries, backoff_s=0.0)
    ops = CacheFuse(lambda: CacheEngine(target, str(tmp_path / "cache"), 1 << 24, policy="lru",
                                        params=params, clock=clock), str(tmp_path / "src"))
    ops.init("/")
    return ops


def test_getattr_and_readdir_are_retried_by_the_engine(tmp_path: Path) -> None:
    target, clock = FlakyFS(fail=2), Clock()
    ops = ops_over(tmp_path, target, clock, retries=3)
    try:
        assert ops.getattr("/a.bin")["st_size"] == 1000
        assert sorted(ops.readdir("/", 0)) == [".", "..", "a.bin", "d"]
        # the file's attributes come from its folder's listing (two failures, then the
        # answer), not a HEAD; readdir lists again
        assert target.calls == {"info": 0, "ls": 4}
        assert ops.engine is not None and ops.engine.metrics.value("remote_retries") == 2
    finally:
        ops.destroy("/")


def test_a_remote_that_keeps_failing_is_eio_not_a_hang(tmp_path: Path) -> None:
    target, clock = FlakyFS(fail=10), Clock()
    ops = ops_over(tmp_path, target, clock, retries=1)
    try:
        with pytest.raises(FuseOSError) as err:
            ops.getattr("/a.bin")
        assert err.value.errno == errno.EIO
        assert target.calls["info"] == 2  # the first try and one retry
    finally:
        ops.destroy("/")


def test_answers_and_absences_last_the_ttl_then_are_asked_again(tmp_path: Path) -> None:
    target, clock = FlakyFS(fail=0), Clock()
    ops = ops_over(tmp_path, target, clock, retries=0)
    try:
        assert sorted(ops.readdir("/", 0)) == [".", "..", "a.bin", "d"]
        assert ops.attr_fresh("/a.bin") and ops.getattr("/d")["st_nlink"] == 2
        with pytest.raises(FuseOSError):
            ops.getattr("/new.bin")
        (tmp_path / "src" / "new.bin").write_bytes(b"y")
        asked = dict(target.calls)
        clock.t += 9.9  # within the TTL: nothing reaches the remote
        assert ops.getattr("/a.bin")["st_size"] == 1000
        with pytest.raises(FuseOSError):
            ops.getattr("/new.bin")
        assert target.calls == asked
        clock.t += 0.1  # at the TTL: asked again
        assert not ops.attr_fresh("/new.bin")
        assert ops.getattr("/new.bin")["st_size"] == 1
        assert target.calls["info"] == asked["info"] + 1
    finally:
        ops.destroy("/")
