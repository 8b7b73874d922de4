"""A folder's listing answers its files' metadata: after the first file of a folder is
looked at (one listing), its siblings' ``info`` (FUSE attributes) and ``stat`` (size,
version) ask the remote nothing for the metadata TTL — a mount's lookup of every file of a
dataset is not a HEAD per file (s3fs-fuse makes one or two per open)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from aicache.datacache.engine import CacheEngine, EngineParams


class CountingLocal(LocalFileSystem):
    """A local target that counts its metadata calls (``info`` = HEAD, ``ls`` = LIST)."""

    protocol = "counting-meta"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: dict[str, int] = {"info": 0, "ls": 0}
        self._mutex = threading.Lock()
        self._inside = threading.local()  # fsspec's local ls calls info per entry itself

    def _count(self, what: str) -> None:
        if not getattr(self._inside, "ls", False):
            with self._mutex:
                self.calls[what] += 1

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self._count("info")
        return super().info(path, **kwargs)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        self._count("ls")
        self._inside.ls = True
        try:
            return super().ls(path, detail=detail, **kwargs)
        finally:
            self._inside.ls = False


def test_siblings_metadata_comes_from_one_listing(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    for i in range(20):
        (folder / f"{i:02d}.bin").write_bytes(bytes([i]) * (100 + i))
    target = CountingLocal(skip_instance_cache=True)
    eng = CacheEngine(target, str(tmp_path / "cache"), 1 << 20,
                      params=EngineParams(block_size=4096, list_root=False, stats_interval_s=0))
    try:
        first = eng.info(str(folder / "00.bin"))
        assert first is not None and first["size"] == 100
        after_first = dict(target.calls)
        for i in range(1, 20):
            p = str(folder / f"{i:02d}.bin")
            info = eng.info(p)
            assert info is not None and info["size"] == 100 + i and info["type"] == "file"
            assert eng.stat(p).size == 100 + i
            assert eng.read(p) == bytes([i]) * (100 + i)
        assert target.calls == after_first, (after_first, target.calls)
        assert after_first["ls"] == 1 and after_first["info"] == 0
        assert eng.info(str(folder / "missing.bin")) is None  # not listed: asked, and absent
    finally:
        eng.close()
