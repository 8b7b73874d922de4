"""With ``list_root=True``, block ids follow the sorted path order of the whole dataset,
whatever order folders are first read in, so a sorted traversal is one stride and
readahead crosses folder boundaries (docs/design/chiron.md: "Files sorted by path get
consecutive block ranges"). By default (off) a root is never listed whole: the first read
in a folder lists that folder only, not recursively."""

from __future__ import annotations

import time
from pathlib import Path

import fsspec
import pytest

from aicache.datacache.engine import CacheEngine, EngineParams

BLOCK = 4096


def _dataset(root: Path) -> list[str]:
    paths = []
    for folder in ("a", "b", "c"):
        (root / folder).mkdir(parents=True)
        for i in range(3):
            p = root / folder / f"{i}.bin"
            p.write_bytes(bytes([i]) * BLOCK)  # one block each
            paths.append(str(p))
    return sorted(paths)


@pytest.mark.parametrize("first", ["c", "b"])
def test_ids_follow_sorted_paths_across_folders(tmp_path: Path, first: str) -> None:
    paths = _dataset(tmp_path / "data")
    e = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 20, policy="alluxio",
                    params=EngineParams(block_size=BLOCK, list_root=True), root=str(tmp_path / "data"))
    try:
        # meet a later folder first: ids must not depend on the order folders are read in
        e.stat(next(p for p in paths if f"/{first}/" in p))
        ids = [e.block_id(e.stat(p).path, 0) for p in paths]
        assert ids == list(range(ids[0], ids[0] + len(paths)))
    finally:
        e.close()


def test_without_root_listing_ids_follow_first_read_order(tmp_path: Path) -> None:
    """The reference behaviour the root listing fixes: folder by folder, in the order met."""
    paths = _dataset(tmp_path / "data")
    e = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 20, policy="alluxio",
                    params=EngineParams(block_size=BLOCK, list_root=False),
                    root=str(tmp_path / "data"))
    try:
        e.stat(paths[-1])  # folder c first
        ids = [e.block_id(e.stat(p).path, 0) for p in paths]
        assert ids != sorted(ids)
    finally:
        e.close()


def test_readahead_crosses_a_folder_boundary(tmp_path: Path) -> None:
    """juicefs (sequential readahead) reading a/ in order prefetches b/0.bin before it is
    asked for, so the first read of the next folder is a hit."""
    paths = _dataset(tmp_path / "data")
    e = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 20, policy="juicefs",
                    params=EngineParams(block_size=BLOCK, list_root=True), root=str(tmp_path / "data"))
    try:
        for p in paths[:3]:  # a/0, a/1, a/2
            assert e.read(p) == Path(p).read_bytes()
        e.wait_prefetches()
        hits = e.stats()["hits"]
        assert e.read(paths[3]) == Path(paths[3]).read_bytes()  # b/0.bin
        assert e.stats()["hits"] == hits + 1, "b/0.bin was not prefetched across the boundary"
    finally:
        e.close()


def test_by_default_a_first_read_lists_only_its_own_folder(tmp_path: Path) -> None:
    """A mount of a bucket's root listed the whole bucket (``find``) before the first byte;
    now a first read lists nothing, and the second file read in a folder lists that folder,
    not recursively."""
    paths = _dataset(tmp_path / "data")
    target = fsspec.filesystem("file", skip_instance_cache=True)
    asked: list[tuple[str, str]] = []
    for name in ("ls", "find", "walk", "glob"):
        inner = getattr(target, name)

        def spy(path: str, *a: object, _inner=inner, _name=name, **kw: object) -> object:
            asked.append((_name, str(path)))
            return _inner(path, *a, **kw)

        setattr(target, name, spy)
    e = CacheEngine(target, str(tmp_path / "cache"), 1 << 20, policy="chiron",
                    params=EngineParams(block_size=BLOCK, stats_interval_s=0),
                    root=str(tmp_path / "data"))
    try:
        b = [p for p in paths if "/b/" in p]
        assert e.read(b[0]) == Path(b[0]).read_bytes()
        assert asked == []  # one file read: its stat, no listing
        assert e.read(b[1]) == Path(b[1]).read_bytes()  # a second one: its folder, once
        assert e.read(b[2]) == Path(b[2]).read_bytes()
        assert asked == [("ls", str(tmp_path / "data" / "b"))]
        ids = [e.block_id(p, 0) for p in b]
        assert ids == sorted(ids)  # the folder's files, sorted, after the first one's range
    finally:
        e.close()


def test_files_directly_under_the_root_share_the_roots_unit(tmp_path: Path) -> None:
    """Files at the top of the mounted/dataset root form one cache unit ("."), as a
    folder's files form that folder's: the policy reviews and adapts per unit, and one
    unit per top-level file would never gather a window to diagnose (and made every read
    walk all of them)."""
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    paths = []
    for name in ("x.bin", "y.bin", "z.bin", "sub/w.bin"):
        (root / name).write_bytes(b"\1" * BLOCK)
        paths.append(str(root / name))
    e = CacheEngine(fsspec.filesystem("file"), str(tmp_path / "cache"), 1 << 20, policy="chiron",
                    params=EngineParams(block_size=BLOCK), root=str(root))
    try:
        for p in paths:
            assert e.read(p) == b"\1" * BLOCK
        assert e.unit_of(paths[0]) == "./x.bin" and e.unit_of(paths[3]) == "sub/w.bin"
        assert set(e.system.units) == {".", "sub"}  # type: ignore[attr-defined]
    finally:
        e.close()
