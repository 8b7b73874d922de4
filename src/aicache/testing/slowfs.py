"""A latency/bandwidth/fault-injecting fsspec wrapper, for tests, benchmarks and the demo.

``SlowFileSystem`` (protocol ``slow``) wraps any fsspec filesystem so a laptop shows what a
250 ms object store does to a job: every request sleeps ``latency`` seconds plus
``bytes / bandwidth``; with probability ``error_rate`` it raises ``ConnectionError`` and
with probability ``timeout_rate`` it stalls ``timeout_s`` then raises ``TimeoutError`` —
the failures real S3 clients surface. Faults come from ``random.Random(seed)``, so a test's
fault sequence is reproducible (given the same request order).

Importing this module registers nothing; :func:`register_slow_protocol` makes ``slow://``
URLs resolve, for code that names the wrapper by protocol rather than constructing it.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import fsspec
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem


class SlowFileSystem(AbstractFileSystem):  # type: ignore[misc]  # fsspec is untyped (Any)
    """Read-only pass-through to ``fs`` (or ``target_protocol``) with injected delays/faults."""

    protocol = "slow"
    cachable = False

    def __init__(self, fs: AbstractFileSystem | None = None, target_protocol: str = "file",
                 target_options: dict[str, Any] | None = None, latency: float = 0.0,
                 bandwidth: float | None = None, error_rate: float = 0.0,
                 timeout_rate: float = 0.0, timeout_s: float = 1.0, seed: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fs = fs if fs is not None else fsspec.filesystem(target_protocol, **(target_options or {}))
        self.latency = float(latency)
        self.bandwidth = float(bandwidth) if bandwidth else None
        self.error_rate = float(error_rate)
        self.timeout_rate = float(timeout_rate)
        self.timeout_s = float(timeout_s)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self.requests = 0
        self.faults = 0

    def _request(self, nbytes: int = 0) -> None:
        with self._rng_lock:
            self.requests += 1
            u = self._rng.random()
        delay = self.latency + (nbytes / self.bandwidth if self.bandwidth else 0.0)
        if u < self.error_rate:
            with self._rng_lock:
                self.faults += 1
            time.sleep(self.latency)
            raise ConnectionError("injected remote error (SlowFileSystem error_rate)")
        if u < self.error_rate + self.timeout_rate:
            with self._rng_lock:
                self.faults += 1
            time.sleep(self.timeout_s)
            raise TimeoutError(f"injected remote timeout after {self.timeout_s}s")
        if delay > 0:
            time.sleep(delay)

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        path = str(path)
        return path[len("slow://"):] if path.startswith("slow://") else path

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        self._request()
        return self.fs.ls(path, detail=detail, **kwargs)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self._request()
        info: dict[str, Any] = self.fs.info(path, **kwargs)
        return info

    def invalidate_cache(self, path: str | None = None) -> None:
        self.fs.invalidate_cache(path)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        size = self.fs.info(path)["size"] if start is None or end is None else end - start
        self._request(max(0, int(size)))
        data: bytes = self.fs.cat_file(path, start=start, end=end, **kwargs)
        return data

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        if "r" not in mode:
            raise PermissionError(f"{path}: SlowFileSystem is read-only")
        return _SlowFile(self, path, mode=mode, block_size=block_size or "default", **kwargs)


class _SlowFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped (Any)
    def _fetch_range(self, start: int, end: int) -> bytes:
        data: bytes = self.fs.cat_file(self.path, start, end)
        return data


def register_slow_protocol() -> None:
    """Make fsspec resolve ``slow://`` (and ``slow::`` chains) to :class:`SlowFileSystem`."""
    fsspec.register_implementation(SlowFileSystem.protocol, SlowFileSystem, clobber=True)
